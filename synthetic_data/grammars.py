"""Paper 004's formal languages (Appendix E): hierarchical probabilistic context-free grammars, sampled and scored.

Each grammar is a shipped file, `resources/grammar_<NAME>.txt`, one rule per line (`A16 -> A15 A14 A13 [0.50]`),
every rule and probability as the paper's Figures 7-10 print them (the file's header cites the figure). A symbol
is a non-terminal when some rule rewrites it, a terminal (a token of the language) otherwise.

- `sample(grammar, rng)`: the paper's sampler (App. E, "Sampling Strings from a Formal Language"): start from S,
  rewrite the leftmost non-terminal by a rule drawn from its probabilities, until only terminals remain.
- `log_prob(grammar, tokens)`: the exact log P_L(s), summed over every derivation of s (the inside algorithm:
  a string the grammar derives two ways, as G3's repeated rules allow, gets both derivations' probability).
- `entropy_per_token`: H(L) / E[tokens], estimated by sampling: E[-log P_L(s)] over i.i.d. samples, divided by
  the mean number of tokens a language model predicts per string (the string's tokens and its end).

G6 and G8 are not shipped: the text of paper 004 this project reads (../shared/papers/004) keeps only their
top rules (Figure 9 right: S5, B4, T1_i, C1_i; Figure 10 right: S5, T1_i, C1_i); their other rules did not
survive extraction, and this module does not invent them.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources

from memlens.harness.core.errors import UserError

SHIPPED_GRAMMARS = ("G1", "G2", "G3", "G4", "G5", "G7")
UNSHIPPED_GRAMMARS = {
    "G6": "Figure 9 (right) of the paper text this project reads keeps only the S5, B4, T1_i and C1_i rules",
    "G8": "Figure 10 (right) of the paper text this project reads keeps only the S5, T1_i and C1_i rules",
}
START = "S"
PROBABILITY_TOLERANCE = 1e-3     # printed probabilities are rounded (3 x 0.3333); each symbol's rules renormalise
_RULE = re.compile(r"^(\S+)\s*->\s*(.+?)\s*\[\s*([0-9.]+)\s*\]$")


@dataclass(frozen=True)
class Grammar:
    """A probabilistic context-free grammar: {non-terminal: ((right-hand side, probability), ...)}."""

    name: str
    rules: dict[str, tuple[tuple[tuple[str, ...], float], ...]]

    @property
    def terminals(self) -> tuple[str, ...]:
        used = {symbol for options in self.rules.values() for rhs, _ in options for symbol in rhs}
        return tuple(sorted(used - set(self.rules)))

    def __hash__(self) -> int:
        return hash(self.name)


def parse_grammar(name: str, text: str, where: str) -> Grammar:
    """Rules from `text` (comments start with #); errors name the file's line and the fix."""
    rules: dict[str, list[tuple[tuple[str, ...], float]]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = _RULE.match(line)
        if not match:
            raise UserError(f"{where}:{lineno}: {line!r} is not a rule; write `LHS -> SYMBOL ... [probability]`")
        lhs, rhs, prob = match.group(1), tuple(match.group(2).split()), float(match.group(3))
        if not 0 < prob <= 1:
            raise UserError(f"{where}:{lineno}: probability {prob} of {lhs} is not in (0, 1]")
        rules.setdefault(lhs, []).append((rhs, prob))
    if START not in rules:
        raise UserError(f"{where}: no rule rewrites the start symbol {START}; add `{START} -> ... [1]`")
    normalised = {}
    for lhs, options in rules.items():
        total = sum(p for _, p in options)
        if abs(total - 1) > PROBABILITY_TOLERANCE:
            raise UserError(f"{where}: the rules of {lhs} sum to {total:.4f}, not 1; fix their probabilities")
        normalised[lhs] = tuple((rhs, p / total) for rhs, p in options)
    grammar = Grammar(name, normalised)
    _check_terminates(grammar, where)
    return grammar


def _check_terminates(grammar: Grammar, where: str) -> None:
    """Every non-terminal reaches terminals (the sampler and the inside algorithm would loop otherwise); these
    grammars are hierarchical, so recursion is refused outright."""
    state: dict[str, str] = {}

    def visit(symbol: str, path: tuple[str, ...]) -> None:
        if symbol not in grammar.rules or state.get(symbol) == "done":
            return
        if state.get(symbol) == "open":
            raise UserError(f"{where}: {' -> '.join(path + (symbol,))} is recursive; the study's grammars are "
                            "hierarchical (each level rewrites into the one below)")
        state[symbol] = "open"
        for rhs, _ in grammar.rules[symbol]:
            for child in rhs:
                visit(child, path + (symbol,))
        state[symbol] = "done"

    visit(START, ())


@cache
def load_grammar(name: str) -> Grammar:
    """A shipped grammar by name (G1-G5, G7)."""
    if name in UNSHIPPED_GRAMMARS:
        raise UserError(f"grammar {name!r} is not shipped: {UNSHIPPED_GRAMMARS[name]}; its other rules are not "
                        f"printed there, and memlens does not invent them. Use one of {', '.join(SHIPPED_GRAMMARS)}")
    if name not in SHIPPED_GRAMMARS:
        raise UserError(f"unknown grammar {name!r}; use one of {', '.join(SHIPPED_GRAMMARS)}")
    file = f"grammar_{name}.txt"
    text = resources.files("memlens.synthetic_data").joinpath("resources", file).read_text(encoding="utf-8")
    return parse_grammar(name, text, f"synthetic_data/resources/{file}")


def sample(grammar: Grammar, rng: random.Random) -> tuple[str, ...]:
    """One string of L(grammar): the leftmost non-terminal rewritten by a rule drawn from its probabilities."""
    out: list[str] = []
    stack = [START]
    while stack:
        symbol = stack.pop()
        options = grammar.rules.get(symbol)
        if options is None:
            out.append(symbol)
            continue
        rhs = rng.choices([r for r, _ in options], weights=[p for _, p in options])[0]
        stack.extend(reversed(rhs))
    return tuple(out)


def log_prob(grammar: Grammar, tokens: Sequence[str]) -> float:
    """log P_L(tokens): the inside probability of the whole string from S, over every derivation (natural log).
    -inf when the grammar cannot derive it."""
    tokens = tuple(tokens)
    n = len(tokens)

    @cache
    def spans(symbol: str, start: int) -> dict[int, float]:
        """{end: P(symbol derives tokens[start:end])} for every end it can reach."""
        if symbol not in grammar.rules:
            return {start + 1: 1.0} if start < n and tokens[start] == symbol else {}
        ends: dict[int, float] = {}
        for rhs, p in grammar.rules[symbol]:
            for end, q in sequence(rhs, start).items():
                ends[end] = ends.get(end, 0.0) + p * q
        return ends

    def sequence(rhs: tuple[str, ...], start: int) -> dict[int, float]:
        frontier = {start: 1.0}
        for symbol in rhs:
            nxt: dict[int, float] = {}
            for mid, p in frontier.items():
                for end, q in spans(symbol, mid).items():
                    nxt[end] = nxt.get(end, 0.0) + p * q
            frontier = nxt
            if not frontier:
                break
        return frontier

    p = spans(START, 0).get(n, 0.0)
    return math.log(p) if p > 0 else float("-inf")


def predicted_tokens(tokens: Sequence[str]) -> int:
    """Tokens a language model predicts for a string: each of its tokens, then its end."""
    return len(tokens) + 1


def entropy_per_token(grammar: Grammar, n_samples: int, seed: int) -> dict[str, float]:
    """H(L) per predicted token, estimated from `n_samples` i.i.d. strings: E[-log P_L(s)] / E[tokens(s) + 1]
    (nats), with the string entropy's standard error; the paper orders its languages by H(L) (Sec. 2)."""
    rng = random.Random(f"entropy:{grammar.name}:{seed}")
    nll, lengths = [], []
    for _ in range(n_samples):
        s = sample(grammar, rng)
        nll.append(-log_prob(grammar, s))
        lengths.append(predicted_tokens(s))
    mean_nll = sum(nll) / n_samples
    var = sum((x - mean_nll) ** 2 for x in nll) / max(n_samples - 1, 1)
    mean_len = sum(lengths) / n_samples
    return {"string_entropy_nats": mean_nll, "string_entropy_se": math.sqrt(var / n_samples),
            "mean_predicted_tokens": mean_len, "nats_per_token": mean_nll / mean_len, "n_samples": n_samples}


def entropy_table(n_samples: int = 4000, seed: int = 0) -> str:
    """Every shipped language's entropy, as a markdown table (`python -m memlens.synthetic_data.grammars`)."""
    lines = ["| language | tokens | mean length | H(L) per string (nats) | H(L) per token (nats) |",
             "|---|---|---|---|---|"]
    for name in SHIPPED_GRAMMARS:
        grammar = load_grammar(name)
        e = entropy_per_token(grammar, n_samples, seed)
        lines.append(f"| {name} | {''.join(grammar.terminals)} | {e['mean_predicted_tokens'] - 1:.1f} | "
                     f"{e['string_entropy_nats']:.2f} ± {e['string_entropy_se']:.2f} | {e['nats_per_token']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(entropy_table())
