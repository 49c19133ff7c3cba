"""Canaries designed to be found (Panda, Tang, Nasr, Choquette-Choo and Mittal, "Privacy auditing of large language
models", ICLR 2025, arXiv 2503.06808): a registry of secret designs, each a way of choosing a canary's secret tokens
so that membership inference detects it at a dose where a random or a natural secret stays on the floor.

A design chooses, for each canary, the token ids of its secret; `designed_canaries` writes them as the canary's
target (decoded text) and keeps the canary's own prefix and suffix (the host: the authors' "prompt", which they draw
at random or from validation data; ours is whatever host the user or the builder gives). The held-out twins are
designed the same way and held out by their coins (memlens.inject), so MIA and the one-run ε bound apply unchanged.

The built-in designs follow the authors' code (github.com/kiddyboots216/privacy-auditing-of-llms, create_datasets.py,
its `--mode`s), read 2026-11-28; where ours departs, the entry's comment says so:

    random     `random`:  k tokens drawn uniformly among the tokens the fine-tuning data contains (count > 0)
    unigram    `unigram`: k tokens drawn among the n*k token types the fine-tuning data contains least often
    bigram     `bigram`:  a pair (x, y), x among the n rarest types, y the type least likely to follow x under the
               data's bigram model, repeated to k tokens: x y x y ...
    new_token  `new`:     k tokens that did not exist: random strings of non-zero digits added to the vocabulary
               (a string the tokenizer already holds as one token is refused; theirs skips it);
               the model's embeddings must be resized and trainable (harness/audit/preflight.py refuses otherwise)

and two that read a model, through a `sampler` the caller builds from it (memlens.harness.model.canary_sampling.
ModelSampler, since this layer never imports torch; the manifest records it):

    rare       `rare`:    y drawn at random among the tokens the data contains, then x = argmin_v P(y | prefix + v)
               under the model, the token after which y is least likely, no x used twice; the secret is x y. Ours
               departs: (1) the argmin runs over the whole vocabulary (theirs stops at the first batch holding a
               probability below 1e-3, a shortcut that changes which x wins); (2) it takes the least likely x whose
               pair re-tokenizes as itself (theirs trains on ids, ours on text); (3) no token is shared by two
               secrets (theirs draws y with replacement); (4) k > 2 repeats x y, as bigram does (theirs is 2 tokens)
    sampled    k tokens sampled at high temperature from a model, after each canary's host prefix (Mitchell, Andrew et
               al. 2026, arXiv 2606.10481, from its abstract)
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memlens.harness.core.errors import UserError
from memlens.harness.core.registry import Registry
from memlens.harness.core.shipped import shipped_path

AS_GIVEN = "as_given"          # the canaries' own targets (no design): memlens.inject's default
NEW_TOKEN_DIGITS = 6           # characters of one new token (the authors' secrets are strings of non-zero digits)
ROUND_TRIP_TRIES = 200         # draws per canary before a design gives up on a secret that re-tokenizes as itself


@dataclass(frozen=True)
class TokenStatistics:
    """What the model-free designs read of the fine-tuning data: unigram and bigram counts of its token ids (the
    authors' build_unigram_matrix / build_bigram_matrix, kept sparse so a 150k vocabulary costs nothing), and the
    ids no secret may use (the tokenizer's special tokens)."""

    unigrams: Counter
    bigrams: Counter
    excluded: frozenset[int]

    @classmethod
    def of(cls, token_ids: Iterable[Sequence[int]], excluded: Iterable[int] = ()) -> TokenStatistics:
        unigrams: Counter = Counter()
        bigrams: Counter = Counter()
        for ids in token_ids:
            unigrams.update(ids)
            bigrams.update(zip(ids, ids[1:]))
        return cls(unigrams, bigrams, frozenset(excluded))

    def seen(self) -> list[int]:
        """Token ids the data contains (the authors' count > canary_lower_threshold, with the threshold 0)."""
        return sorted(t for t, c in self.unigrams.items() if c > 0 and t not in self.excluded)

    def rarest(self, n: int, rng: random.Random) -> list[int]:
        """The n seen types the data contains least often; types of equal count in a seeded order. The authors take
        every type below a count threshold that covers n types, so at the threshold they take a few more."""
        seen = self.seen()
        rng.shuffle(seen)                                  # ties: seeded, not by id
        return sorted(seen, key=lambda t: self.unigrams[t])[:n]


@dataclass(frozen=True)
class DesignRequest:
    """One design's job: `n` secrets of `k` tokens each, from these statistics, by this seeded generator; a design
    that reads a model also gets each canary's host prefix (`prompts`) and the caller's `sampler(prompt, k, seed) ->
    k token ids`."""

    n: int
    k: int
    stats: TokenStatistics
    rng: random.Random
    prompts: tuple[str, ...] = ()
    sampler: Callable[[str, int, int], list[int]] | None = None
    accept: Callable[[list[int]], bool] = lambda ids: True     # whether a secret's ids survive as text (round trip)


@dataclass(frozen=True)
class CanaryDesign:
    """A registered design: `secrets(request)` returns n lists of k token ids (or, for a design that adds tokens,
    n lists of k new token strings, `adds_tokens=True`)."""

    label: str
    source: str
    secrets: Callable[[DesignRequest], list[list]]
    adds_tokens: bool = False
    reads_model: bool = False     # needs `sampler` (and the hosts' prefixes)
    reads_data: bool = True       # needs the token statistics of the fine-tuning data


DESIGNS: Registry[CanaryDesign] = Registry("canary design", "design")


def _enough(pool: list[int], needed: int, design: str) -> None:
    if len(pool) < needed:
        raise UserError(f"design={design!r}: the fine-tuning data has {len(pool)} usable token types, and {needed} are "
                        "needed (n canaries x k tokens, no token reused); give fewer or shorter canaries, or more data")


def random_secrets(req: DesignRequest) -> list[list[int]]:
    """The authors' `random` baseline: tokens drawn uniformly among those the data contains. Without reuse (their
    `no_canary_reuse`), so no two canaries share a token and one canary's training cannot lower another's loss."""
    pool = req.stats.seen()
    _enough(pool, req.n * req.k, "random")
    drawn = req.rng.sample(pool, req.n * req.k)
    return [drawn[i * req.k:(i + 1) * req.k] for i in range(req.n)]


def unigram_secrets(req: DesignRequest) -> list[list[int]]:
    """The authors' `unigram`: tokens drawn among the n*k types the data contains least often (but at least once):
    the tokens the fine-tuned model least expects, so a secret's loss drops most when it is trained on."""
    pool = req.stats.rarest(req.n * req.k, req.rng)
    _enough(pool, req.n * req.k, "unigram")
    req.rng.shuffle(pool)
    return [pool[i * req.k:(i + 1) * req.k] for i in range(req.n)]


def bigram_secrets(req: DesignRequest) -> list[list[int]]:
    """The authors' `bigram`: for each of the n rarest types x (rarest first), the type y least likely to follow x
    under the data's bigram model P(y | x) = count(x, y) / count(x, .), among the 3n rarest types, no y used twice
    (their `no_canary_reuse`) and, unlike theirs, no y that is another canary's x, so no two secrets share a token;
    the secret is x y repeated to k tokens (their `[x, y] * (mask_len // 2)`; an odd k ends on x). Ties in P(y | x)
    (most pairs never occur: P = 0) go to the rarer y, then in a seeded order."""
    xs = req.stats.rarest(req.n, req.rng)
    _enough(xs, req.n, "bigram")
    ys = [y for y in req.stats.rarest(3 * req.n, req.rng) if y not in xs]
    row_total = Counter()
    for (x, _), c in req.stats.bigrams.items():
        row_total[x] += c
    used: set[int] = set()
    secrets = []
    for x in xs:
        def p_given_x(y: int, x: int = x) -> float:
            return req.stats.bigrams[(x, y)] / row_total[x] if row_total[x] else 0.0
        free = [y for y in ys if y not in used]
        if not free:
            raise UserError(f"design='bigram': no unused rare type left to follow token {x}; give fewer canaries")
        y = min(free, key=lambda t: (p_given_x(t), req.stats.unigrams[t]))
        used.add(y)
        secrets.append(([x, y] * ((req.k + 1) // 2))[:req.k])
    return secrets


def new_token_secrets(req: DesignRequest) -> list[list[str]]:
    """The authors' `new`: strings of random non-zero digits, each to be added to the vocabulary as one token (they
    skip a string the tokenizer already holds as one token; design_secrets refuses it). k new tokens per canary, none
    shared."""
    made: set[str] = set()
    secrets = []
    for _ in range(req.n):
        secret = []
        while len(secret) < req.k:
            token = "".join(req.rng.choice("123456789") for _ in range(NEW_TOKEN_DIGITS))
            if token not in made:
                made.add(token)
                secret.append(token)
        secrets.append(secret)
    return secrets


def sampled_secrets(req: DesignRequest) -> list[list[int]]:
    """Mitchell and Andrew's high-temperature samples: each canary's k tokens sampled by the caller's model after its
    host prefix, from a seed drawn from this design's generator (so the same seed gives the same secrets)."""
    return [list(req.sampler(prompt, req.k, req.rng.randrange(2 ** 62))) for prompt in req.prompts[:req.n]]


def rare_secrets(req: DesignRequest) -> list[list[int]]:
    """The authors' `rare`: for each canary a target y drawn among the tokens the data contains, then the token x
    that makes y least likely after the canary's host prefix under the model, argmin over v of P(y | prefix + v)
    (the sampler's `after_each_token`), the first such x in ascending probability (ties: the lower id) that is no
    other secret's token and whose pair survives as text; secret x y, repeated to k tokens."""
    if req.k < 2:
        raise UserError(f"design='rare': secret_tokens={req.k}; its secret is a pair (x, y), so give 2 or more")
    if not callable(getattr(req.sampler, "after_each_token", None)):
        raise UserError("design='rare': pass sampler=memlens.ModelSampler(model, tokenizer), which scores every "
                        "token before the target (its after_each_token)")
    never = set(req.stats.excluded) | set(getattr(req.sampler, "excluded", ()))    # special ids, the caller's
    pool = [t for t in req.stats.seen() if t not in never]
    _enough(pool, req.n, "rare")
    ys = req.rng.sample(pool, req.n)
    taken = set(ys) | never
    secrets = []
    for prompt, y in zip(req.prompts[:req.n], ys):
        probability = req.sampler.after_each_token(prompt, y)
        order = sorted((v for v in range(len(probability)) if v not in taken), key=lambda v: (probability[v], v))
        if not order:
            raise UserError("design='rare': no token is left to put before a target; give fewer canaries")
        x = next((v for v in order if req.accept(([v, y] * ((req.k + 1) // 2))[:req.k])), order[0])
        taken.add(x)
        secrets.append(([x, y] * ((req.k + 1) // 2))[:req.k])
    return secrets


DESIGNS.register("random", CanaryDesign("random tokens", "Panda et al. 2025, code mode `random`", random_secrets))
DESIGNS.register("unigram", CanaryDesign("rarest tokens (unigram)", "Panda et al. 2025, code mode `unigram`",
                                         unigram_secrets))
DESIGNS.register("bigram", CanaryDesign("least likely bigrams", "Panda et al. 2025, code mode `bigram`",
                                        bigram_secrets))
DESIGNS.register("new_token", CanaryDesign("new tokens", "Panda et al. 2025, code mode `new`", new_token_secrets,
                                           adds_tokens=True))
DESIGNS.register("rare", CanaryDesign("least likely after a chosen token (model)",
                                      "Panda et al. 2025, code mode `rare`", rare_secrets, reads_model=True))
DESIGNS.register("sampled", CanaryDesign("samples of the model (high temperature)",
                                         "Mitchell, Andrew et al. 2026 (arXiv 2606.10481)", sampled_secrets,
                                         reads_model=True, reads_data=False))


# ------------------------------------------------------------------------------------------------ into canaries
def token_statistics(tokenizer, texts: Iterable[str]) -> TokenStatistics:
    """Counts of the fine-tuning data's tokens in `tokenizer` (a transformers tokenizer), special tokens excluded."""
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    return TokenStatistics.of(ids, tokenizer.all_special_ids)


def _round_trips(tokenizer, ids: list[int]) -> bool:
    """Whether the secret's text tokenizes back to exactly its ids: the audit scores the text, so a secret that
    re-tokenizes into other (common) tokens would not be the designed secret the model saw."""
    text = tokenizer.decode(ids)
    return bool(text.strip()) and tokenizer(text, add_special_tokens=False)["input_ids"] == list(ids)


def _overlaps(tokenizer, ids: list, earlier: list[list]) -> bool:
    """Whether a secret's text equals, holds or sits inside an earlier canary's: one would then be trained by the
    other's copies (a held-out twin's secret inside a planted one's would be a member). Checked for the designs that
    read a model: the model-free ones never share a token (and their secrets stay what they were before the check)."""
    text = tokenizer.decode(ids)
    return any(text in other or other in text for other in (tokenizer.decode(e) for e in earlier))


def design_secrets(design: str, tokenizer, texts: Iterable[str], n: int, k: int, seed: int,
                   prompts: Sequence[str] = (), sampler=None) -> tuple[list[str], dict]:
    """n secret texts of `design` for a model with `tokenizer`, fine-tuned on `texts`; and what the manifest records
    (the design, k, how many draws were redrawn, and for `new_token` the tokens to add, which `add_new_tokens` adds:
    `tokenizer` itself is never changed here, so a refusal later leaves it as it was). A drawn secret that does not
    re-tokenize as itself (or, for a design that reads a model, whose text equals, holds or sits inside an earlier
    canary's) is drawn again (seeded), up to ROUND_TRIP_TRIES times per canary (a redrawn `rare` secret draws a new
    y). A design that reads a model (`rare`, `sampled`) takes the canaries' host `prompts` and the caller's
    `sampler`."""
    check_design(design)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise UserError(f"secret_tokens={k!r}: a positive number of tokens per designed secret")
    entry = DESIGNS[design]
    rng = random.Random(f"canary-design:{design}:{seed}")
    if entry.adds_tokens:
        return _new_token_secrets(entry, tokenizer, DesignRequest(n, k, TokenStatistics.of([]), rng))
    if entry.reads_model and sampler is None:
        raise UserError(f"design={design!r}: pass sampler=memlens.ModelSampler(model, tokenizer, temperature=1.0), "
                        "the model the secrets are drawn from (e.g. the one you fine-tune)")
    if entry.reads_model and getattr(sampler, "tokenizer", tokenizer).get_vocab() != tokenizer.get_vocab():
        raise UserError(f"design={design!r}: the sampler's tokenizer is not `tokenizer` (their vocabularies differ), "
                        "so its ids would be read in the wrong vocabulary; build the sampler with the same tokenizer")
    stats = token_statistics(tokenizer, texts) if entry.reads_data else TokenStatistics.of([])
    prompts = tuple(prompts)
    if entry.reads_model and len(prompts) != n:
        raise ValueError(f"design={design!r}: {len(prompts)} host prompts for {n} canaries")
    def accept(ids: list[int]) -> bool:
        return _round_trips(tokenizer, ids)

    secrets = entry.secrets(DesignRequest(n, k, stats, rng, prompts, sampler, accept))
    refused: set[int] = set()
    redrawn: list[int] = []
    for i in range(n):
        tries = 0
        while not _round_trips(tokenizer, secrets[i]) or (entry.reads_model
                                                           and _overlaps(tokenizer, secrets[i], secrets[:i])):
            if tries == ROUND_TRIP_TRIES:
                why = (f"no secret of {k} tokens that re-tokenizes as itself; give a shorter secret_tokens"
                       if not _round_trips(tokenizer, secrets[i]) else
                       "every draw equals or overlaps an earlier canary's secret; raise the sampler's temperature or "
                       "give the canaries distinct prefixes")
                raise UserError(f"design={design!r}: {why} ({ROUND_TRIP_TRIES} redraws for canary {i})")
            # Redraw this canary alone, from tokens no other canary holds and no refused draw used, so one redraw
            # moves no other canary's secret and never repeats itself. Drawn alone (n = 1), a redrawn unigram secret
            # takes the rarest types left, a bigram one its y among the 3 rarest left: the manifest lists them.
            refused.update(secrets[i])
            held = {t for j, s in enumerate(secrets) if j != i for t in s}
            pool = TokenStatistics(stats.unigrams, stats.bigrams, stats.excluded | held | refused)
            secrets[i] = entry.secrets(DesignRequest(1, k, pool, rng, prompts[i:i + 1], sampler, accept))[0]
            tries += 1
        if tries:
            redrawn.append(i)
    record = {"design": design, "secret_tokens": k, "redrawn": redrawn}
    if entry.reads_model and hasattr(sampler, "describe"):
        record["sampler"] = sampler.describe()
    return [tokenizer.decode(ids) for ids in secrets], record


def _new_token_secrets(entry: CanaryDesign, tokenizer, req: DesignRequest) -> tuple[list[str], dict]:
    """new_token's secrets, checked on a copy of `tokenizer` with the tokens added: each string is new to it, and
    each secret (the strings concatenated, the authors' digit string) tokenizes as exactly its new tokens."""
    secrets = entry.secrets(req)
    added = [t for s in secrets for t in s]
    clash = [t for t in added if len(tokenizer(t, add_special_tokens=False)["input_ids"]) == 1]
    if clash:
        raise UserError(f"design='new_token': {clash[0]!r} is already one token of this tokenizer (refused, not "
                        "redrawn); use a tokenizer without earlier new-token canaries, or another seed")
    extended = copy.deepcopy(tokenizer)
    extended.add_tokens(added)
    texts = ["".join(s) for s in secrets]
    for text, secret in zip(texts, secrets):
        if extended(text, add_special_tokens=False)["input_ids"] != extended.convert_tokens_to_ids(secret):
            raise UserError(f"design='new_token': {text!r} does not tokenize as its {req.k} new tokens in this "
                            "tokenizer; report it with the tokenizer's name")
    return texts, {"design": "new_token", "secret_tokens": req.k, "new_tokens": added}


def add_new_tokens(tokenizer, record: dict) -> None:
    """Add a design's new tokens (its record's `new_tokens`, none for the other designs) to `tokenizer`."""
    if record.get("new_tokens"):
        tokenizer.add_tokens(record["new_tokens"])


def design_tokenizer_folder(path: str) -> Path:
    """data.sd.design_tokenizer as a folder: a local directory, or one the project ships (`assets/base_tiny`, the
    shipped base's, as model=tiny_base names it); never the hub."""
    folder = Path(path) if Path(path).is_dir() else shipped_path(path)
    if folder is None:
        raise UserError(f"data.sd.design_tokenizer={path!r}: not a tokenizer directory here; give the model's "
                        "tokenizer folder (e.g. assets/base_tiny)")
    return folder


def design_tokenizer(path: str):
    """The tokenizer data.sd.design chooses SD's secrets in (design_tokenizer_folder)."""
    from transformers import AutoTokenizer  # heavy: only when a design is asked for

    folder = design_tokenizer_folder(path)

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except (OSError, ValueError) as e:
        raise UserError(f"data.sd.design_tokenizer={path!r}: cannot load a tokenizer from {folder}: {e}") from None


def check_design(design: str) -> None:
    if design != AS_GIVEN and design not in DESIGNS:
        raise UserError(f"design={design!r}: one of {', '.join([AS_GIVEN, *DESIGNS.names()])}")
