"""Membership inference for RL prompts: did an RL stage train on this prompt? (no target string, no torch)

An RL stage (RLFT.*, RLVR.*) learns from prompts whose completions it samples itself, so the extraction and
target-MIA measures have nothing to score. Min-NN distance (Zhang, Yue, Yan, Bao, Zhang, Zhang, "Detecting RLVR
training data via structural convergence of reasoning", arXiv 2602.11792, abstract and method section on the
kNN-distance detector) reads only samples: RL collapses the diversity of the policy's completions on the prompts it
trained on, so m completions sampled at a fixed temperature lie closer together on a member prompt. Per prompt:

    d_i      = min_{j != i} NED(c_i, c_j)     each completion's nearest-neighbour distance among the m samples
    Min-kNN  = mean of the k smallest d_i     ("the average of the k smallest nearest-neighbour edit distances")
    score    = -Min-kNN                       higher = member (closer completions)

NED is memlens's one normalized edit distance (memlens.harness.text.distance.normalized_edit_distance: Levenshtein /
the longer length, characters). The paper's k and m were not readable here (only its abstract); memlens's k is a
setting (audit.prompt_mia_k), fixed before any run. Beside it:
- `mean_nn`: k = m, every completion's NN distance averaged (the ablation of "smallest k");
- `min_knn_vs_initial`: the same statistic's *drop* from the stage's initial model to the audited one on the same
  prompt (Min-kNN(initial) - Min-kNN(policy)): calibrated by the prompt's own starting diversity, as DIBA (Liu et
  al., arXiv 2511.14045) calibrates by the pre-RL checkpoint; memlens's variant, not either paper's attack.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memlens.harness.core.registry import Registry
from memlens.harness.text.distance import normalized_edit_distance


def nn_distances(completions: Sequence[str]) -> list[float]:
    """Each completion's nearest-neighbour NED among the others (at least 2 completions)."""
    m = len(completions)
    if m < 2:
        raise ValueError(f"nn_distances: {m} completion(s); a nearest neighbour needs at least 2")
    pair = {}
    for i in range(m):
        for j in range(i + 1, m):
            pair[i, j] = normalized_edit_distance(completions[i], completions[j])
    return [min(pair[min(i, j), max(i, j)] for j in range(m) if j != i) for i in range(m)]


def min_knn_distance(completions: Sequence[str], k: int) -> float:
    """The mean of the k smallest nearest-neighbour distances (Zhang et al. 2026's Min-kNN distance); k is capped at
    the number of completions."""
    if k < 1:
        raise ValueError(f"min_knn_distance: k={k}; must be at least 1")
    d = sorted(nn_distances(completions))
    k = min(k, len(d))
    return sum(d[:k]) / k


@dataclass(frozen=True)
class PromptSamples:
    """One prompt's sampled completions: from the audited model (`policy`) and from the stage's initial model; for
    DIBA, the reward of each (`policy_rewards`, `initial_rewards`: the stage's reward model) and each policy sample's
    log-ratio log π(o | q) - log π_init(o | q) (`drift`), None where not computed."""

    policy: tuple[str, ...]
    initial: tuple[str, ...]
    policy_rewards: tuple[float, ...] | None = None
    initial_rewards: tuple[float, ...] | None = None
    drift: tuple[float, ...] | None = None


@dataclass(frozen=True)
class PromptAttack:
    """One prompt attack: its label in tables, `score(samples, k) -> float` (higher = member), whether it reads the
    initial model's samples, and the DIBA inputs it needs ("rewards", "drift"; left out where they were not computed)."""

    label: str
    score: Callable[[PromptSamples, int], float]
    initial: bool = False
    needs: tuple[str, ...] = ()


def min_knn_score(s: PromptSamples, k: int) -> float:
    return -min_knn_distance(s.policy, k)


def mean_nn_score(s: PromptSamples, k: int) -> float:
    return -min_knn_distance(s.policy, len(s.policy))


def min_knn_vs_initial_score(s: PromptSamples, k: int) -> float:
    return min_knn_distance(s.initial, k) - min_knn_distance(s.policy, k)


def reward_gain_score(s: PromptSamples, k: int) -> float:
    """DIBA's reward-side evidence (Liu et al. 2025, arXiv 2511.14045, "advantage-side improvement"): the mean reward of
    the audited model's samples minus the mean reward of the initial model's, on the same prompt."""
    return _mean(s.policy_rewards) - _mean(s.initial_rewards)


def policy_drift_score(s: PromptSamples, k: int) -> float:
    """DIBA's policy-side evidence ("logit-side divergence"), as memlens reads it: the mean over the audited model's
    samples of log π(o | q) - log π_init(o | q), each summed over the sample's tokens (a Monte-Carlo KL(π || π_init)
    on the prompt); empty samples (no token) are left out."""
    return _mean(s.drift) if s.drift else 0.0


def _mean(values) -> float:
    if not values:
        raise ValueError("no values: the attack's input was not computed for this prompt")
    return sum(values) / len(values)


# The prompt attacks every prompt audit runs, in table order. A new one: a function of PromptSamples + a registration.
PROMPT_ATTACKS: Registry[PromptAttack] = Registry("RL-prompt MIA attack", "prompt attack")
PROMPT_ATTACKS.register("min_knn", PromptAttack("Min-kNN distance (Zhang et al.)", min_knn_score))
PROMPT_ATTACKS.register("mean_nn", PromptAttack("mean NN distance (k = m)", mean_nn_score))
PROMPT_ATTACKS.register("min_knn_vs_initial", PromptAttack("Min-kNN drop from the initial model",
                                                           min_knn_vs_initial_score, initial=True))
PROMPT_ATTACKS.register("reward_gain", PromptAttack("DIBA reward gain", reward_gain_score, initial=True,
                                                    needs=("rewards",)))
PROMPT_ATTACKS.register("policy_drift", PromptAttack("DIBA policy drift", policy_drift_score, initial=True,
                                                     needs=("drift",)))
DIBA = "diba"                         # the two DIBA features combined over the pooled prompts (diba_combined)
DIBA_LABEL = "DIBA (reward gain + drift, z-scored)"
PRIMARY_PROMPT_ATTACK = "min_knn"     # the paper's detector: fixed before any run, never picked


def prompt_attack_label(name: str) -> str:
    return DIBA_LABEL if name == DIBA else PROMPT_ATTACKS[name].label if name in PROMPT_ATTACKS else name


def available(s: PromptSamples) -> set[str]:
    """The DIBA inputs computed for this prompt."""
    have = {"rewards"} if s.policy_rewards is not None and s.initial_rewards is not None else set()
    return have | ({"drift"} if s.drift is not None else set())


def prompt_scores(s: PromptSamples, k: int) -> dict[str, float]:
    """Every registered prompt attack's score of one prompt (those whose inputs were computed)."""
    have = available(s)
    return {name: float(attack.score(s, k)) for name, attack in PROMPT_ATTACKS.items() if set(attack.needs) <= have}


def diba_combined(reward_gain: list[float], drift: list[float]) -> list[float]:
    """DIBA's two features combined without labels: each standardised over the pooled prompts (members and held-out
    alike: the auditor's query set), then summed. Liu et al. combine them with a classifier fitted on shadow data; this
    label-free sum is memlens's stand-in (docs/methods.md)."""
    def z(values: list[float]) -> list[float]:
        mean = sum(values) / len(values)
        sd = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
        return [(v - mean) / sd if sd > 0 else 0.0 for v in values]

    return [a + b for a, b in zip(z(reward_gain), z(drift))]


PROMPT_TEXT_RULE = "prefix and suffix joined by a newline (the context the policy completes)"


def prompt_text(row) -> str:
    """The text of one prompt as the blind baseline reads it (PROMPT_TEXT_RULE)."""
    return "\n".join((row["prefix"], row["suffix"]))
