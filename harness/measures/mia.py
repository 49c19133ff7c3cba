"""Membership inference: how well the attacks of the field tell trained-on canaries from never-seen ones.

memlens's extraction audit asks whether a model *reproduces* a training example (paper 003's counterfactual
NED test); membership inference asks the weaker question an auditor asks first, whether an attacker can tell
*that* an example was trained on (the attacks of the mimir suite, Duan et al. 2024, "Do membership inference
attacks work on large language models?", and those since). Each attack below is defined once, here, as a function of
`AttackInputs`: the per-token values the model layer computes in one teacher-forced pass
(memlens.harness.model.logprobs.token_logprob_stats_batched: the token `ids`, `logp` of each, `mu`/`var` of the
next-token log-prob and its `top1` under the model), plus whatever extra input the attack names in `needs` (the audit
computes each once per model). Every score follows one convention: **higher = more likely a member**, so
memlens.harness.core.stats.roc_auc / tpr_at_fpr read them directly (members labelled 1).

- loss: minus the mean token NLL (Yeom et al. 2018; mimir's LOSS).
- zlib: minus the ratio of the mean token NLL to the zlib-compressed length of the text in bytes (Carlini et
  al. 2021, "Extracting training data from large language models", Sec. 5.2 "zlib": perplexity calibrated by
  a model-free entropy estimate; mimir's zlib attack divides the loss by len(zlib.compress(text)) the same way).
- min_k: the mean log-prob of the k % least likely tokens (Shi et al. 2024, "Detecting pretraining data from
  large language models", Sec. 3, Min-K % Prob; k = 20 % as their default).
- min_k_plus_plus: the same over (logp - mu) / sigma per token, mu and sigma^2 the mean and variance of
  log p(z | x_<t) under z ~ p(. | x_<t) (Zhang et al. 2024, "Min-K%++", Sec. 3; k = 20 %).
- reference: the control's mean NLL minus the audited model's (difficulty calibration with a reference model:
  Carlini et al. 2021 Sec. 5.2 "comparing to other neural language models", Watson et al. 2022). memlens's
  control never trained on the canaries, so this is the counterfactual version of the loss attack.
- recall, con_recall: the likelihood after a non-member prefix relative to without it (Xie et al. 2024, ReCaLL),
  and its contrast with a member prefix (Wang et al. 2024, Con-ReCall).
- dc_pdd: token probabilities calibrated by a reference corpus's token frequencies (Zhang et al. 2024, DC-PDD).
- ez_mia: the gain over a reference model at the positions the model gets wrong (Ilic et al. 2026, EZ-MIA).
- sequence_loss, sequence_reference: an attack's score averaged over the stage's checkpoints (after SeMI*).
- rmia: the share of population texts z (held-out, the scored text left out) that x beats in the relative likelihood
  ratio [Pr(x|θ)/Pr(x)] / [Pr(z|θ)/Pr(z)] > γ, Pr(·) the offline approximation from the control (Zarifzadeh, Liu and
  Shokri, ICML 2024, "Low-cost high-power membership inference attacks", RMIA; the authors' ml_privacy_meter).

Where a text has fewer tokens than 1 / k, min_k uses its one least likely token (never an empty mean). Every
attack is held to its authors' code or a hand-derived case (docs/methods.md, "Membership inference").
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from memlens.harness.core.registry import Registry
from memlens.harness.core.stats import bootstrap_mia_metrics
from memlens.harness.model.cache import program_text

MIN_K_FRACTION = 0.2          # k = 20 %: the default of Shi et al. 2024 and of Zhang et al. 2024 (and mimir's)
VAR_FLOOR = 1e-12             # a next-token distribution with all its mass on one token has variance 0


def _logp(values: Mapping) -> np.ndarray:
    logp = np.asarray(values["logp"], dtype=np.float64)
    if logp.ndim != 1 or logp.size == 0:
        raise ValueError(f"per-token logp must be a non-empty 1-D list; got shape {logp.shape}")
    return logp


def mean_nll(values: Mapping) -> float:
    """The mean token negative log-likelihood (the loss of paper 004 Sec. 3 on the same tokens)."""
    return float(-_logp(values).mean())


def _lowest_k_mean(x: np.ndarray, k: float) -> float:
    if not 0 < k <= 1:
        raise ValueError(f"k={k}: the share of tokens must be in (0, 1]")
    n = max(1, int(len(x) * k))
    return float(np.sort(x)[:n].mean())


def loss_score(values: Mapping) -> float:
    """LOSS attack: -mean NLL (a member has a low loss)."""
    return -mean_nll(values)


def zlib_score(values: Mapping, text: str) -> float:
    """zlib attack (Carlini et al. 2021 Sec. 5.2): -(mean NLL / zlib-compressed bytes of the text)."""
    compressed = len(zlib.compress(text.encode("utf-8")))
    return -mean_nll(values) / compressed


def min_k_score(values: Mapping, k: float = MIN_K_FRACTION) -> float:
    """Min-K % Prob (Shi et al. 2024 Sec. 3): mean log-prob of the k % least likely tokens."""
    return _lowest_k_mean(_logp(values), k)


def min_k_plus_plus_score(values: Mapping, k: float = MIN_K_FRACTION) -> float:
    """Min-K %++ (Zhang et al. 2024 Sec. 3): mean of the k % lowest (logp - mu) / sigma."""
    logp = _logp(values)
    mu = np.asarray(values["mu"], dtype=np.float64)
    var = np.asarray(values["var"], dtype=np.float64)
    if mu.shape != logp.shape or var.shape != logp.shape:
        raise ValueError(f"mu {mu.shape} and var {var.shape} must match logp {logp.shape}")
    z = (logp - mu) / np.sqrt(np.maximum(var, VAR_FLOOR))
    return _lowest_k_mean(z, k)


def reference_score(values: Mapping, control_values: Mapping) -> float:
    """Reference-calibrated loss: control mean NLL - audited mean NLL (on the same tokens)."""
    return mean_nll(control_values) - mean_nll(values)


PREFIX_SHOTS = 3              # texts of each side that make the ReCaLL / Con-ReCall prefixes (below)
MIN_SCORED = 2                # a side keeps at least this many scored texts after its shots are taken out
PREFIX_RULE = (f"the first {PREFIX_SHOTS} rows by id of the members and of the non-members are the prefix shots: in no "
               "attack's metrics (scored, flagged, by the attacks that read no prefix); a prefix is their whole "
               "programs, joined by a blank line, before each other text's own tokens (one prefix per set, cut from "
               "its start to fit beside the longest text in the model's context)")


def split_shots(rows: Sequence[dict], n: int = PREFIX_SHOTS) -> tuple[list[dict], list[dict]] | None:
    """(the prefix shots, the other rows) of one side (PREFIX_RULE), or None when fewer than n + MIN_SCORED rows.
    The shots are known members / non-members: counting them would test an attack on its own prompt."""
    if len(rows) < n + MIN_SCORED:
        return None
    shot_ids = {r["id"] for r in sorted(rows, key=lambda r: str(r["id"]))[:n]}
    return ([r for r in sorted(rows, key=lambda r: str(r["id"])) if r["id"] in shot_ids],
            [r for r in rows if r["id"] not in shot_ids])


def prefix_text(shots: Sequence[dict]) -> str:
    """The prefix the conditioned passes put before a text: the shots' whole programs, joined by a blank line."""
    return "\n\n".join(program_text(r) for r in shots) + "\n\n"


@dataclass(frozen=True)
class TokenFrequency:
    """A reference distribution of token ids: `counts` of each id over a corpus of `total` tokens, from a vocabulary
    of `vocab_size` ids. `probability` is Laplace-smoothed (add one), so an id the corpus lacks is rare, not
    impossible (DC-PDD, Zhang et al. 2024 Sec. 3.2)."""

    counts: Mapping[int, int]
    total: int
    vocab_size: int

    @classmethod
    def of(cls, token_ids: Sequence[Sequence[int]], vocab_size: int) -> TokenFrequency:
        counts: dict[int, int] = {}
        for ids in token_ids:
            for t in ids:
                counts[int(t)] = counts.get(int(t), 0) + 1
        return cls(counts, sum(counts.values()), int(vocab_size))

    def probability(self, token_id: int) -> float:
        return (self.counts.get(int(token_id), 0) + 1) / (self.total + self.vocab_size)


# What an attack may ask for beyond the audited model's one teacher-forced pass over the text. The audit computes
# each asked-for input once per model and checkpoint (memlens.harness.audit.mia), cached, and every attack shares it.
CONTROL = "control"                     # the same pass under the fixed control model (reference-model calibration)
NONMEMBER_PREFIX = "nonmember_prefix"   # the same tokens scored after a prefix of non-member text (ReCaLL)
MEMBER_PREFIX = "member_prefix"         # ... after a prefix of member text (Con-ReCall)
TOKEN_FREQUENCY = "token_frequency"     # a reference token-frequency distribution of the run's own data (DC-PDD)
TRAJECTORY = "trajectory"               # this text's scores at every earlier checkpoint of the same model (sequence)
POPULATION = "population"               # held-out texts' likelihoods under the model and the control (RMIA's z)
INPUTS = (CONTROL, NONMEMBER_PREFIX, MEMBER_PREFIX, TOKEN_FREQUENCY, TRAJECTORY, POPULATION)


CON_RECALL_GAMMA = 0.5        # Con-ReCall's weight of the member prefix (one value of the authors' grid, fixed)


def mean_ll(values: Mapping) -> float:
    """The mean token log-likelihood LL(x) (= -mean_nll), the quantity ReCaLL and Con-ReCall take ratios of."""
    return float(_logp(values).mean())


def _same_tokens(values: Mapping, other: Mapping, what: str) -> None:
    if len(other["logp"]) != len(values["logp"]):
        raise ValueError(f"{what}: {len(other['logp'])} token values for a text of {len(values['logp'])} tokens; "
                         "the conditioned pass scores the same tokens as the plain one")


def recall_score(values: Mapping, nonmember_prefixed: Mapping) -> float:
    """ReCaLL (Xie et al. 2024 Sec. 3, Eq. 1): LL(x | P) / LL(x), P a prefix of non-member text. A non-member prefix
    lowers a member's likelihood relatively more, so the ratio is higher for members (both LL are negative; the
    authors' code reads it with label 1 = member, higher = member)."""
    _same_tokens(values, nonmember_prefixed, "ReCaLL")
    return mean_ll(nonmember_prefixed) / mean_ll(values)


def con_recall_score(values: Mapping, nonmember_prefixed: Mapping, member_prefixed: Mapping,
                     gamma: float = CON_RECALL_GAMMA) -> float:
    """Con-ReCall (Wang et al. 2024 Sec. 3, Eq. 3): (LL(x | P_non) - gamma LL(x | P_mem)) / LL(x), the contrast of
    a non-member and a member prefix; higher = member, as the authors' code reads it."""
    _same_tokens(values, nonmember_prefixed, "Con-ReCall")
    _same_tokens(values, member_prefixed, "Con-ReCall")
    return (mean_ll(nonmember_prefixed) - gamma * mean_ll(member_prefixed)) / mean_ll(values)


DC_PDD_CAP = 0.01             # DC-PDD's cap `a` on each token's score (the authors' and mimir's default)
EZ_MIN_ERRORS = 2             # EZ-MIA scores 0 with fewer error-zone tokens than this (the authors' min_tokens)


def dc_pdd_score(values: Mapping, frequency: TokenFrequency, cap: float = DC_PDD_CAP) -> float:
    """DC-PDD (Zhang et al. 2024 Sec. 3.2-3.3, Eqs. 4-6): over the first occurrence of each token id in the text,
    alpha_i = p(x_i | x_<i) * log(1 / f(x_i)), f the Laplace-smoothed reference frequency of the id, each alpha capped
    at `cap`; the score is their mean (the authors compute -mean and read it negated: higher = member). A member's
    rare tokens are likelier under the model than their frequency says."""
    logp = _logp(values)
    ids = [int(t) for t in values["ids"]]
    if len(ids) != len(logp):
        raise ValueError(f"DC-PDD: {len(ids)} token ids for {len(logp)} log-probs")
    seen: set[int] = set()
    alphas = []
    for token, lp in zip(ids, logp):
        if token in seen:
            continue
        seen.add(token)
        alphas.append(min(math.exp(lp) * -math.log(frequency.probability(token)), cap))
    return float(np.mean(alphas))


def _ez_mia_deltas(values: Mapping, reference: Mapping) -> np.ndarray:
    """EZ-MIA's deltas d_t = log p(x_t) - log p_ref(x_t) at the audited model's error positions (its most likely token
    is not the text's), the first scored position left out (the authors' `ignore_bos`)."""
    logp, ref = _logp(values), np.asarray(reference["logp"], dtype=np.float64)
    ids, top1 = np.asarray(values["ids"]), np.asarray(values["top1"])
    if not (ref.shape == logp.shape == ids.shape == top1.shape):
        raise ValueError(f"EZ-MIA: per-token values of different lengths ({logp.shape}, {ref.shape}, {ids.shape}, "
                         f"{top1.shape}); the reference scores the same tokens")
    errors = top1 != ids
    errors[0] = False
    return (logp - ref)[errors]


def ez_mia_fallback(values: Mapping, reference: Mapping, min_errors: int = EZ_MIN_ERRORS) -> str | None:
    """Why EZ-MIA's score of this text is the authors' fallback 0 rather than a ratio (None where it is a ratio): fewer
    than `min_errors` error positions, or no negative delta. A model that has memorized a text makes no errors on it,
    so on a strongly memorized set the fallback, not the statistic, scores the members (harness/audit/mia.py counts
    it; an attack scored mostly by its fallback is reported as degenerate, `degenerate_reasons`)."""
    deltas = _ez_mia_deltas(values, reference)
    if len(deltas) < min_errors:
        return f"fewer than {min_errors} error positions"
    if not (deltas < 0).any():
        return "no negative delta"
    return None


def ez_mia_score(values: Mapping, reference: Mapping, min_errors: int = EZ_MIN_ERRORS) -> float:
    """EZ-MIA (Ilic et al. 2026, "error zone"; the authors' `error_zone_pos_neg_sum_ratio`): at the positions where
    the audited model's most likely token is not the text's (its errors), the deltas d_t = log p(x_t) - log p_ref(x_t)
    against a reference model that never saw the text (memlens's control); the score is the sum of the positive
    deltas over the sum of the negative ones' magnitudes (higher = member: training raises the true token's
    probability even where it is not yet the top one). As the authors' code: the first scored position is left out
    (their `ignore_bos`), and fewer than `min_errors` error positions or no negative delta score 0
    (`ez_mia_fallback` says which)."""
    if ez_mia_fallback(values, reference, min_errors) is not None:
        return 0.0
    deltas = _ez_mia_deltas(values, reference)
    negative = float(np.abs(deltas[deltas < 0]).sum())
    return float(deltas[deltas > 0].sum() / (negative + 1e-12))


def sequence_score(current: float, trajectory: Sequence[Mapping], attack: str) -> float | None:
    """The checkpoint-sequence attack: the mean of one attack's score over every checkpoint of the stage up to this
    one (the earlier ones' scores as `trajectory` recorded them, then `current`). SeMI* (arXiv 2602.16596) derives
    the optimal test over a sequence of checkpoints; its own statistic reads gradients and parameters, which the
    audit does not keep, so this is the closest variant defined on what it does keep, stated as such
    (docs/methods.md): if a text's per-checkpoint scores are its membership shift plus independent Gaussian noise of
    one variance, the Neyman-Pearson test of "shift > 0" thresholds their mean (a matched filter). None where an
    earlier checkpoint lacks that attack's score."""
    earlier = [t.get(attack) for t in trajectory]
    if any(e is None for e in earlier):
        return None
    return float(np.mean([*earlier, current]))


# RMIA (Zarifzadeh, Liu and Shokri, ICML 2024), offline, as the authors' ml_privacy_meter computes it
# (modules/mia/attacks/rmia.py `run_rmia`, get_signals.py `get_softmax`, at e384af8). Both constants are the authors'
# defaults, fixed before any run and never tuned (docs/methods.md, "RMIA"):
RMIA_OFFLINE_A = 0.3    # `offline_a`: get_out_ref_signals' default and most of the paper code's configs (their tuning over
                        # a paired model's AUC needs a second trained target, which a run does not have)
RMIA_GAMMA = 1.0        # γ: run_rmia's threshold (`ratios > 1.0`), the code with the authors' language-model path


def text_probability(mean_log_likelihood):
    """Pr(x | θ) of a text for RMIA: exp(mean token log-likelihood), the geometric mean of its token probabilities,
    as the authors' language-model signal (get_softmax for a PreTrainedModel: exp of the masked mean of the true
    tokens' log-probs). Works elementwise on arrays."""
    return np.exp(np.asarray(mean_log_likelihood, dtype=np.float64))


def offline_probability(reference_probability, a: float = RMIA_OFFLINE_A):
    """RMIA's offline Pr(x) = ½((1 + a) Pr(x | θ_out) + (1 − a)) from one OUT reference model (the authors' offline
    approximation: run_rmia's `mean_x`). a = 1 takes the OUT model's probability as it is."""
    if not 0 <= a <= 1:
        raise ValueError(f"offline a={a}: must be in [0, 1] (the authors' range)")
    return (1 + a) / 2 * np.asarray(reference_probability, dtype=np.float64) + (1 - a) / 2


def rmia_ratio(model_ll, reference_ll, a: float = RMIA_OFFLINE_A):
    """Pr(x | θ) / Pr(x) of texts given their mean token log-likelihoods under the audited model and the reference."""
    return text_probability(model_ll) / offline_probability(text_probability(reference_ll), a)


@dataclass(frozen=True)
class Population:
    """RMIA's population z: held-out texts (`ids`) with their mean token log-likelihoods under the audited model
    (`model_ll`) and under the reference model (`reference_ll`, the control), on the span being scored."""

    ids: tuple
    model_ll: np.ndarray
    reference_ll: np.ndarray

    @classmethod
    def of(cls, values: Mapping, reference: Mapping) -> Population:
        """From {id: per-token values} of the same texts under the audited model and the reference."""
        missing = set(values) ^ set(reference)
        if missing:
            raise ValueError(f"RMIA population: ids {sorted(map(str, missing))[:3]} have values under one model only")
        ids = tuple(values)
        return cls(ids, np.array([mean_ll(values[i]) for i in ids]), np.array([mean_ll(reference[i]) for i in ids]))

    def without(self, text_id) -> Population:
        """The population with the text `text_id` left out: x is never its own z."""
        keep = np.array([i != text_id for i in self.ids], dtype=bool)
        return Population(tuple(i for i in self.ids if i != text_id), self.model_ll[keep], self.reference_ll[keep])


def rmia_score(values: Mapping, reference: Mapping, population: Population, text_id,
               a: float = RMIA_OFFLINE_A, gamma: float = RMIA_GAMMA) -> float:
    """RMIA (Zarifzadeh et al. 2024, offline; the authors' run_rmia): the share of population texts z, `text_id` left
    out, with LR(x, z) = [Pr(x|θ)/Pr(x)] / [Pr(z|θ)/Pr(z)] > γ (higher = member)."""
    pool = population.without(text_id)
    if not pool.ids:
        raise ValueError(f"RMIA: no population text besides {text_id!r}; the population needs at least two held-out "
                         "texts")
    x = rmia_ratio(mean_ll(values), mean_ll(reference), a)
    z = rmia_ratio(pool.model_ll, pool.reference_ll, a)
    return float(np.mean(x / z > gamma))


@dataclass(frozen=True)
class AttackInputs:
    """Everything an attack may read of one text. `values`: the audited model's per-token values on it (`ids`,
    `logp`, `mu`, `var`: memlens.harness.model.logprobs.token_logprob_stats_batched); `text`: the scored text; `k`: the
    Min-K% share. Each other field is the input of INPUTS of the same name, None where the audit has none (no
    control, no earlier checkpoint): an attack that needs it is then not scored."""

    values: Mapping
    text: str
    k: float = MIN_K_FRACTION
    control: Mapping | None = None
    nonmember_prefix: Mapping | None = None
    member_prefix: Mapping | None = None
    token_frequency: TokenFrequency | None = None
    trajectory: Sequence[Mapping] | None = None     # {attack: score} of each earlier checkpoint, oldest first
    population: Population | None = None            # RMIA's held-out z on this span (may hold the text itself)
    text_id: object = None                          # the scored text's id: what `population` leaves out


@dataclass(frozen=True)
class Attack:
    """One membership-inference attack: its label in tables and figures, `score(inputs: AttackInputs) -> float`
    (higher = member), and the extra inputs (names of INPUTS) it needs; where one of them is missing the attack
    scores None and is left out of the metrics there."""

    label: str
    score: Callable[[AttackInputs], float]
    needs: frozenset[str] = frozenset()
    # Where the authors' code scores a text by a fallback branch rather than the statistic: why it did for these
    # inputs, else None (EZ-MIA's `ez_mia_fallback`). Reported, never changing the score (`degenerate_reasons`).
    fallback: Callable[[AttackInputs], str | None] | None = None
    # False for an attack registered after findings M1-M4's rules were committed (RMIA, issue #68): the audit, the
    # table and the figures show it, but M1-M4 neither pick it nor count it, so each reads the attacks it read when
    # its rule was fixed (harness/report/findings/membership.py).
    read_by_findings: bool = True

    def __post_init__(self):
        unknown = set(self.needs) - set(INPUTS)
        if unknown:
            raise ValueError(f"attack {self.label!r} needs {sorted(unknown)}: an attack's inputs are {list(INPUTS)}")

    def scores(self, inputs: AttackInputs) -> float | None:
        """Its score of `inputs`, or None where an input it needs is missing."""
        if any(getattr(inputs, need) is None for need in self.needs):
            return None
        return self.score(inputs)

    def fallback_reason(self, inputs: AttackInputs) -> str | None:
        """Why its score of `inputs` is its fallback branch's (None where the statistic scored it, or it has none)."""
        if self.fallback is None or any(getattr(inputs, need) is None for need in self.needs):
            return None
        return self.fallback(inputs)


# The attacks every MIA audit runs, in the order tables list them and best_attack breaks ties. A new attack is
# one function of AttackInputs plus `ATTACKS.register(name, Attack(label, score, needs))`: the audit computes what
# it needs and scores it, the summary, report table and figure show it under its label, findings M1-M4 consider it
# unless it says `read_by_findings=False` (docs/architecture.md, "Add a membership-inference attack"). New attacks are
# appended: a figure's look of an attack follows its place here (harness/report/figures.py attack_style).
ATTACKS: Registry[Attack] = Registry("MIA attack", "attack")
ATTACKS.register("loss", Attack("LOSS", lambda x: loss_score(x.values)))
ATTACKS.register("zlib", Attack("zlib", lambda x: zlib_score(x.values, x.text)))
ATTACKS.register("min_k", Attack("Min-K%", lambda x: min_k_score(x.values, x.k)))
ATTACKS.register("min_k_plus_plus", Attack("Min-K%++", lambda x: min_k_plus_plus_score(x.values, x.k)))
ATTACKS.register("reference", Attack("ref. loss (control)", lambda x: reference_score(x.values, x.control),
                                     needs=frozenset({CONTROL})))
ATTACKS.register("recall", Attack("ReCaLL", lambda x: recall_score(x.values, x.nonmember_prefix),
                                  needs=frozenset({NONMEMBER_PREFIX})))
ATTACKS.register("con_recall", Attack("Con-ReCall", lambda x: con_recall_score(x.values, x.nonmember_prefix,
                                                                               x.member_prefix),
                                      needs=frozenset({NONMEMBER_PREFIX, MEMBER_PREFIX})))
ATTACKS.register("sequence_loss", Attack("sequence (LOSS)", lambda x: sequence_score(
    loss_score(x.values), x.trajectory, "loss"), needs=frozenset({TRAJECTORY})))
ATTACKS.register("sequence_reference", Attack("sequence (ref. loss)", lambda x: sequence_score(
    reference_score(x.values, x.control), x.trajectory, "reference"), needs=frozenset({TRAJECTORY, CONTROL})))
ATTACKS.register("dc_pdd", Attack("DC-PDD", lambda x: dc_pdd_score(x.values, x.token_frequency),
                                  needs=frozenset({TOKEN_FREQUENCY})))
ATTACKS.register("ez_mia", Attack("EZ-MIA", lambda x: ez_mia_score(x.values, x.control), needs=frozenset({CONTROL}),
                                  fallback=lambda x: ez_mia_fallback(x.values, x.control)))
ATTACKS.register("rmia", Attack("RMIA (control)", lambda x: rmia_score(x.values, x.control, x.population, x.text_id),
                                needs=frozenset({CONTROL, POPULATION}), read_by_findings=False))

BASELINE_ATTACK = "loss"      # what every other attack is compared with, on the same texts (`vs_loss`)
CLASSIC_ATTACKS = ("loss", "zlib", "min_k", "min_k_plus_plus", "reference")   # mimir's set; the rest are newer


def attack_label(name: str) -> str:
    """An attack's label (its name when it is not registered in this process, e.g. a summary from elsewhere)."""
    return ATTACKS[name].label if name in ATTACKS else name


def inputs_needed() -> frozenset[str]:
    """The extra inputs the registered attacks need together (each computed once per model)."""
    return frozenset().union(*(attack.needs for attack in ATTACKS.values()))


def attack_scores(inputs: AttackInputs) -> dict[str, float | None]:
    """Every registered attack's score of one text ({attack: score}; None where an input it needs is missing)."""
    return {name: attack.scores(inputs) for name, attack in ATTACKS.items()}


def attack_fallbacks(inputs: AttackInputs) -> dict[str, str]:
    """{attack: why} of every registered attack that scored this text by its fallback branch (`Attack.fallback`)."""
    reasons = {name: attack.fallback_reason(inputs) for name, attack in ATTACKS.items()}
    return {name: why for name, why in reasons.items() if why is not None}


def attack_metrics(member_scores: Sequence[float], nonmember_scores: Sequence[float], n_boot: int, seed: int
                   ) -> dict:
    """ROC AUC and TPR at FPR < 1 % and < 0.1 % of one attack (members labelled 1), each with its bootstrap 95 %
    interval (memlens.harness.core.stats.bootstrap_mia_metrics)."""
    return bootstrap_mia_metrics(list(member_scores), list(nonmember_scores), n_boot=n_boot, seed=seed)


# When an attack's numbers say nothing about the model, it is reported as degenerate, with the reason, and not ranked
# (memlens's rule, no paper's: each attack below equals its authors' code, and each misleads when ranked beside LOSS
# in these regimes). A score is never flipped or rescued: an AUC below 0.5 stays below 0.5.
FALLBACK_SHARE = 0.5          # degenerate where the fallback scored at least this share of the members or non-members
SPREAD_RTOL = 1e-9            # degenerate where every score equals every other within this relative tolerance


def degenerate_reasons(members: Sequence[float], nonmembers: Sequence[float], metrics: Mapping,
                       fallback_members: int = 0, fallback_nonmembers: int = 0) -> list[str]:
    """Why one attack's metrics (`attack_metrics` of these scores) are degenerate here, [] where they are not:
    its fallback branch scored at least FALLBACK_SHARE of the members or of the non-members (the counts are how many
    took it); its scores have no spread (all equal within SPREAD_RTOL relative); its AUC's 95 % interval lies
    entirely below 0.5 (it ranks members *below* non-members: the statistic reads this model backwards, and
    1 - AUC would be an attack chosen after seeing the labels)."""
    reasons = []
    n_m, n_n = len(members), len(nonmembers)
    if fallback_members >= FALLBACK_SHARE * n_m or fallback_nonmembers >= FALLBACK_SHARE * n_n:
        reasons.append(f"{fallback_members} of {n_m} members and {fallback_nonmembers} of {n_n} non-members took "
                       "the authors' fallback")
    scores = np.asarray([*members, *nonmembers], dtype=np.float64)
    low, high = float(scores.min()), float(scores.max())
    if high - low <= SPREAD_RTOL * max(abs(low), abs(high)):
        reasons.append(f"all {len(scores)} scores equal ({low:.6g})")
    auc = metrics["auc"]
    if auc["ci95"][1] < 0.5:
        reasons.append(f"AUC {auc['value']:.2f} with its 95 % interval [{auc['ci95'][0]:.2f}, {auc['ci95'][1]:.2f}] "
                       "below 0.5 (not flipped)")
    return reasons


def is_degenerate(metrics: Mapping) -> bool:
    """Whether an attack's stored metrics carry a degenerate reason (`degenerate_reasons`; a summary written before
    memlens checked carries none)."""
    return bool(metrics.get("degenerate"))


def best_attack(metrics_by_attack: Mapping[str, dict]) -> tuple[str, dict] | None:
    """(attack, its metrics) with the highest point AUC among the attacks not degenerate here (`is_degenerate`), ties
    broken by ATTACKS' order; None when none is left. Picking the best of several attacks after the fact is a multiple
    comparison: a test of it divides its level by the number of attacks compared (Bonferroni;
    harness/report/findings/membership.py)."""
    scored = [(a, metrics_by_attack[a]) for a in ATTACKS if a in metrics_by_attack
              and not is_degenerate(metrics_by_attack[a])]
    return max(scored, key=lambda am: am[1]["auc"]["value"]) if scored else None
