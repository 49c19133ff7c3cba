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
    """One prompt's sampled completions: from the audited model (`policy`) and from the stage's initial model."""

    policy: tuple[str, ...]
    initial: tuple[str, ...]


@dataclass(frozen=True)
class PromptAttack:
    """One prompt attack: its label in tables, `score(samples, k) -> float` (higher = member), whether it reads the
    initial model's samples."""

    label: str
    score: Callable[[PromptSamples, int], float]
    initial: bool = False


def min_knn_score(s: PromptSamples, k: int) -> float:
    return -min_knn_distance(s.policy, k)


def mean_nn_score(s: PromptSamples, k: int) -> float:
    return -min_knn_distance(s.policy, len(s.policy))


def min_knn_vs_initial_score(s: PromptSamples, k: int) -> float:
    return min_knn_distance(s.initial, k) - min_knn_distance(s.policy, k)


# The prompt attacks every prompt audit runs, in table order. A new one: a function of PromptSamples + a registration.
PROMPT_ATTACKS: Registry[PromptAttack] = Registry("RL-prompt MIA attack", "prompt attack")
PROMPT_ATTACKS.register("min_knn", PromptAttack("Min-kNN distance (Zhang et al.)", min_knn_score))
PROMPT_ATTACKS.register("mean_nn", PromptAttack("mean NN distance (k = m)", mean_nn_score))
PROMPT_ATTACKS.register("min_knn_vs_initial", PromptAttack("Min-kNN drop from the initial model",
                                                           min_knn_vs_initial_score, initial=True))
PRIMARY_PROMPT_ATTACK = "min_knn"     # the paper's detector: fixed before any run, never picked


def prompt_attack_label(name: str) -> str:
    return PROMPT_ATTACKS[name].label if name in PROMPT_ATTACKS else name


def prompt_scores(s: PromptSamples, k: int) -> dict[str, float]:
    """Every registered prompt attack's score of one prompt."""
    return {name: float(attack.score(s, k)) for name, attack in PROMPT_ATTACKS.items()}


PROMPT_TEXT_RULE = "prefix and suffix joined by a newline (the context the policy completes)"


def prompt_text(row) -> str:
    """The text of one prompt as the blind baseline reads it (PROMPT_TEXT_RULE)."""
    return "\n".join((row["prefix"], row["suffix"]))
