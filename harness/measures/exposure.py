"""Canary exposure of SD.Links PII paths (Carlini et al. 2019, "The Secret Sharer", Sec. 4, rank-based).

For an SD.Links positive, the target line `with open(<pii_path>, ...)` holds one of the 100 fictitious
PII paths of paper 003 Appendix J, Listing 7 (synthetic_data/resources/pii_paths.txt). We substitute
every candidate path into the target (prefix and suffix fixed), score each variant by the model's loss,
and rank the true path among them:

    exposure = log2(|candidates|) - log2(rank),   rank 1 = lowest loss.

Choices (documented, as the task asks):
* Score = the *summed* token negative log-likelihood of the target line (Carlini et al.'s
  log-perplexity of the whole sequence), not the per-token mean: candidate paths differ in length,
  and a per-token mean would rank by how easy the *average* token is, rewarding long paths.
* Ties count against the canary: rank = number of candidates whose loss is <= the true path's loss
  (the true path included). A model that cannot tell the paths apart (all losses equal) then has
  exposure 0, never the maximum; exposure log2(100) needs a strictly lowest true-path loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memlens.harness.core.errors import UserError

PII_PATHS_FILE = Path(__file__).resolve().parents[2] / "synthetic_data" / "resources" / "pii_paths.txt"


def load_candidates(path: str | Path = PII_PATHS_FILE) -> list[str]:
    """The candidate paths, one per line (blank lines ignored); duplicates are an error (ranks need a set)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: PII candidate list not found; pass the file of candidate paths (one per line)")
    paths = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    dupes = sorted({p for p in paths if paths.count(p) > 1})
    if dupes:
        raise UserError(f"{path}: duplicate candidate path(s) {dupes[:3]}; each candidate must appear once")
    if len(paths) < 2:
        raise UserError(f"{path}: needs at least 2 candidate paths to rank, found {len(paths)}")
    return paths


def rank_of_true(true_loss: float, candidate_losses: Sequence[float]) -> int:
    """1-based rank of the true candidate; ties count against it (see module note)."""
    losses = np.asarray(candidate_losses, dtype=np.float64)
    if not np.all(np.isfinite(losses)) or not np.isfinite(true_loss):
        raise ValueError("candidate losses must be finite")
    rank = int(np.sum(losses <= true_loss))
    if rank < 1:
        raise ValueError("the true candidate's loss must be one of candidate_losses")
    return rank


def exposure_from_rank(rank: int, n_candidates: int) -> float:
    """Carlini et al. 2019 Def. 4 (rank form): log2(n) - log2(rank), in [0, log2(n)]."""
    if not 1 <= rank <= n_candidates:
        raise ValueError(f"rank {rank} outside 1..{n_candidates}")
    return float(np.log2(n_candidates) - np.log2(rank))


def exposure_from_losses(candidate_losses: Sequence[float], true_index: int) -> tuple[int, float]:
    """(rank, exposure) of candidate `true_index` among `candidate_losses` (lower loss = more likely)."""
    losses = np.asarray(candidate_losses, dtype=np.float64)
    rank = rank_of_true(float(losses[true_index]), losses)
    return rank, exposure_from_rank(rank, len(losses))


def substituted_targets(target: str, pii_path: str, candidates: Sequence[str], row_id: str = "?") -> list[str]:
    """The target line with the true path replaced by each candidate (all occurrences)."""
    if pii_path not in target:
        raise UserError(f"row {row_id}: pii_path {pii_path!r} does not occur in its target; the exposure "
                        "test substitutes candidates for it there (check the SD.Links builder)")
    return [target.replace(pii_path, c) for c in candidates]


def exposure_rows(rows: Sequence[dict]) -> list[dict]:
    """The rows exposure applies to: SD.Links positives (have `pii_path`, and label 1 when labelled)."""
    return [r for r in rows if r.get("pii_path") and r.get("label", 1) in (1, True, "1")]


def candidate_losses(scorer, rows: Sequence[dict], candidates: Sequence[str], sentinels) -> np.ndarray:
    """(rows, candidates) summed target NLL with each candidate path substituted (memlens.harness.model's scorer); a
    row's candidates share its prompt's forward pass."""
    out = []
    for r in rows:
        if r["pii_path"] not in candidates:
            raise UserError(f"row {r.get('id')}: pii_path {r['pii_path']!r} is not among the {len(candidates)} "
                            "candidates; use the candidate list SD.Links was built from")
        targets = substituted_targets(r["target"], r["pii_path"], candidates, r.get("id", "?"))
        out.append(scorer.candidate_losses(r, targets, sentinels))
    return np.asarray(out, dtype=np.float64).reshape(len(rows), len(candidates))


def exposures(losses: np.ndarray, rows: Sequence[dict], candidates: Sequence[str]) -> list[dict]:
    """Per row: rank and exposure of its true path, from a (rows, candidates) loss matrix."""
    out = []
    for r, row_losses in zip(rows, np.asarray(losses)):
        rank, exp = exposure_from_losses(row_losses, list(candidates).index(r["pii_path"]))
        out.append({"id": r["id"], "pii_path": r["pii_path"], "rank": rank, "exposure": exp})
    return out


def exposure_summary(values: Sequence[float], n_candidates: int) -> dict:
    """Distribution of exposures at one checkpoint: count, mean, median, share at max exposure."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"count": 0, "mean": None, "median": None, "share_max": None,
                "max_exposure": float(np.log2(n_candidates))}
    top = float(np.log2(n_candidates))
    return {"count": int(v.size), "mean": float(v.mean()), "median": float(np.median(v)),
            "share_max": float(np.mean(np.isclose(v, top))), "max_exposure": top}
