"""Membership inference for preference pairs: was this (prompt, chosen, rejected) pair in a preference stage's data?

The attacks of memlens.harness.measures.mia score one fixed text; an IPO/DPO stage learns *pairs*, and what it changes
is the policy's likelihood of each completion relative to where it started. PREMIA (Feng, Kasa, Kasa, Yun, Teo,
Bodapati, "Exposing privacy gaps: membership inference attack on preference data for LLM alignment", arXiv
2407.06443, Sec. 4 "PREMIA") scores a preference tuple (x, y_w, y_l) by the target model's conditional likelihoods
calibrated by a reference model's:

    r(x, y) = log π(y | x) - log π_ref(y | x)                         (each summed over the tokens of y)
    pair:    r(x, y_w) - r(x, y_l)       the DPO implicit-reward margin over β (Rafailov et al. 2023, Sec. 5)
    chosen:  r(x, y_w)                   the preferred response alone, the variant that needs no rejected text

Higher = member: a preference stage raises the chosen completion's likelihood relative to the rejected one's (and
to the initial model's) on the pairs it trained on. The reference here is the stage's own initial model (the
checkpoint it started from, provenance.json `init_model`), the reference DPO/IPO regularise towards; the paper's
reference model is a model of the same family the attacker holds (docs/methods.md says where memlens departs).

Beside them, `policy_margin` = log π(y_w | x) - log π(y_l | x) (no reference): the same margin without the
calibration, so the table shows what the reference adds. Every pair attack is one function of `PairLogprobs`,
registered in PAIR_ATTACKS; its metrics are the target MIA's (attack_metrics: AUC and TPR at low FPR with
bootstrap intervals and the n/m rule; degenerate_reasons).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from memlens.harness.core.registry import Registry


def sequence_logprob(values: Mapping) -> float:
    """log π(y | x) of one completion: its per-token log-probs (memlens.harness.model.cache.cached_token_logprobs,
    span "target": the completion given its PSM prompt) summed, as DPO's and PREMIA's sequence likelihoods are."""
    logp = np.asarray(values["logp"], dtype=np.float64)
    if logp.ndim != 1 or logp.size == 0:
        raise ValueError(f"per-token logp must be a non-empty 1-D list; got shape {logp.shape}")
    return float(logp.sum())


@dataclass(frozen=True)
class PairLogprobs:
    """One pair's summed completion log-probs: under the audited model (`chosen`, `rejected`) and under the
    reference, the stage's initial model (`ref_chosen`, `ref_rejected`)."""

    chosen: float
    rejected: float
    ref_chosen: float
    ref_rejected: float

    @classmethod
    def of(cls, chosen: Mapping, rejected: Mapping, ref_chosen: Mapping, ref_rejected: Mapping) -> PairLogprobs:
        """From the four per-token passes (`sequence_logprob` of each); the reference scores the same tokens."""
        for what, own, ref in (("chosen", chosen, ref_chosen), ("rejected", rejected, ref_rejected)):
            if len(own["logp"]) != len(ref["logp"]):
                raise ValueError(f"{what}: {len(ref['logp'])} reference token values for {len(own['logp'])} of the "
                                 "audited model; both score the same tokens (one tokenizer)")
        return cls(sequence_logprob(chosen), sequence_logprob(rejected), sequence_logprob(ref_chosen),
                   sequence_logprob(ref_rejected))


def chosen_log_ratio(p: PairLogprobs) -> float:
    """r(x, y_w) = log π(y_w | x) / π_ref(y_w | x) (PREMIA Sec. 4; DPO's implicit reward of y_w over β)."""
    return p.chosen - p.ref_chosen


def rejected_log_ratio(p: PairLogprobs) -> float:
    """r(x, y_l) = log π(y_l | x) / π_ref(y_l | x)."""
    return p.rejected - p.ref_rejected


def premia_pair_score(p: PairLogprobs) -> float:
    """PREMIA on the whole tuple (Sec. 4): r(x, y_w) - r(x, y_l), the DPO implicit-reward margin (over β)."""
    return chosen_log_ratio(p) - rejected_log_ratio(p)


def premia_chosen_score(p: PairLogprobs) -> float:
    """PREMIA on the preferred response alone (Sec. 4): r(x, y_w)."""
    return chosen_log_ratio(p)


def policy_margin_score(p: PairLogprobs) -> float:
    """No reference: log π(y_w | x) - log π(y_l | x) (memlens's ablation of PREMIA's calibration, not the paper's)."""
    return p.chosen - p.rejected


@dataclass(frozen=True)
class PairAttack:
    """One pair attack: its label in tables, `score(PairLogprobs) -> float` (higher = member), and whether it reads
    the reference model (an audit without one leaves it out)."""

    label: str
    score: Callable[[PairLogprobs], float]
    reference: bool = True


# The pair attacks every pair audit runs, in table order. A new one: a function of PairLogprobs plus a registration.
PAIR_ATTACKS: Registry[PairAttack] = Registry("preference-pair MIA attack", "pair attack")
PAIR_ATTACKS.register("premia_pair", PairAttack("PREMIA (pair margin)", premia_pair_score))
PAIR_ATTACKS.register("premia_chosen", PairAttack("PREMIA (chosen only)", premia_chosen_score))
PAIR_ATTACKS.register("policy_margin", PairAttack("policy margin (no reference)", policy_margin_score,
                                                  reference=False))
PRIMARY_PAIR_ATTACK = "premia_pair"     # the paper's attack on the whole tuple: fixed before any run, never picked


def pair_attack_label(name: str) -> str:
    return PAIR_ATTACKS[name].label if name in PAIR_ATTACKS else name


def pair_scores(p: PairLogprobs) -> dict[str, float]:
    """Every registered pair attack's score of one pair."""
    return {name: float(attack.score(p)) for name, attack in PAIR_ATTACKS.items()}


PAIR_TEXT_RULE = "prefix, chosen, rejected and suffix joined by newlines (the whole tuple the stage trained on)"


def pair_text(row: Mapping) -> str:
    """The text of one pair as the blind baseline reads it (PAIR_TEXT_RULE): everything the tuple holds."""
    return "\n".join((row["prefix"], row["chosen"], row["rejected"], row["suffix"]))
