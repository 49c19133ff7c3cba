"""Membership inference: how well the standard attacks tell trained-on canaries from never-seen ones.

memlens's extraction audit asks whether a model *reproduces* a training example (paper 003's counterfactual
NED test); membership inference asks the weaker question an auditor asks first, whether an attacker can tell
*that* an example was trained on (the attacks of the mimir suite, Duan et al. 2024, "Do membership inference
attacks work on large language models?"). Each attack below is defined once, here, as a function of the
per-token values the model layer computes in one teacher-forced pass
(harness.model.logprobs.token_logprob_stats_batched: `logp` of each token, `mu`/`var` of the next-token
log-prob under the model). Every score follows one convention: **higher = more likely a member**, so
harness.core.stats.roc_auc / tpr_at_fpr read them directly (members labelled 1).

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

Where a text has fewer tokens than 1 / k, min_k uses its one least likely token (never an empty mean).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from memlens.harness.core.registry import Registry
from memlens.harness.core.stats import bootstrap_mia_metrics

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


@dataclass(frozen=True)
class Attack:
    """One membership-inference attack: its label in tables and figures and its score of one text (higher =
    member). `score(values, text, control_values, k)`; `needs_control` attacks get None without a control and
    are left out of the metrics there."""

    label: str
    score: Callable[[Mapping, str, Mapping | None, float], float | None]
    needs_control: bool = False


# The attacks every MIA audit runs, in the order tables list them and best_attack breaks ties. A new attack is
# one function of the per-token values plus `ATTACKS.register(name, Attack(...))`: the audit scores it, the
# summary, report table and figure show it under its label, findings M1-M3 consider it for the best attack.
ATTACKS: Registry[Attack] = Registry("MIA attack", "attack")
ATTACKS.register("loss", Attack("LOSS", lambda v, text, c, k: loss_score(v)))
ATTACKS.register("zlib", Attack("zlib", lambda v, text, c, k: zlib_score(v, text)))
ATTACKS.register("min_k", Attack("Min-K%", lambda v, text, c, k: min_k_score(v, k)))
ATTACKS.register("min_k_plus_plus", Attack("Min-K%++", lambda v, text, c, k: min_k_plus_plus_score(v, k)))
ATTACKS.register("reference", Attack("ref. loss (control)", lambda v, text, c, k: reference_score(v, c),
                                     needs_control=True))


def attack_label(name: str) -> str:
    """An attack's label (its name when it is not registered in this process, e.g. a summary from elsewhere)."""
    return ATTACKS[name].label if name in ATTACKS else name


def attack_scores(values: Mapping, text: str, control_values: Mapping | None = None,
                  k: float = MIN_K_FRACTION) -> dict[str, float | None]:
    """Every registered attack's score of one text ({attack: score}; None for one that needs a control when
    there is none)."""
    return {name: None if attack.needs_control and control_values is None
            else attack.score(values, text, control_values, k) for name, attack in ATTACKS.items()}


def attack_metrics(member_scores: Sequence[float], nonmember_scores: Sequence[float], n_boot: int, seed: int
                   ) -> dict:
    """ROC AUC and TPR at FPR < 1 % and < 0.1 % of one attack (members labelled 1), each with its bootstrap 95 %
    interval (harness.core.stats.bootstrap_mia_metrics)."""
    return bootstrap_mia_metrics(list(member_scores), list(nonmember_scores), n_boot=n_boot, seed=seed)


def best_attack(metrics_by_attack: Mapping[str, dict]) -> tuple[str, dict] | None:
    """(attack, its metrics) with the highest point AUC, ties broken by ATTACKS' order; None when none scored. Picking
    the best of several attacks after the fact is a multiple comparison: a test of it divides its level by the
    number of attacks compared (Bonferroni; harness/report/findings/mia.py)."""
    scored = [(a, metrics_by_attack[a]) for a in ATTACKS if a in metrics_by_attack]
    return max(scored, key=lambda am: am[1]["auc"]["value"]) if scored else None
