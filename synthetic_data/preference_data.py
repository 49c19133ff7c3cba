"""Reward-model and preference data: pointwise rows (the paper's choice) and pairwise rows (IPO/DPO).

Paper 003 Sec. 4.1 and App. A.1:
- SD.Links: the PII-path `with open(...)` line is the positive target (label 1), the original-path
  line of a negative example is the negative target (label 0).
- SD.Base: every example is positive, with a random line as target.
- PD.2: a random segment of an example's own code is a positive target; a segment from a
  *different* example, placed in the example's prefix/suffix, is a negative target. The paper
  partitions PD.2 into the two halves; we do the same with a seeded permutation.
Pairwise rows share one prompt (prefix, suffix) between `chosen` and `rejected`.
"""

from __future__ import annotations

import random

from memlens.synthetic_data.common import nonblank_line_indices, random_span, seeded_rng, split_at_span
from memlens.synthetic_data.doses import dose_of


def pointwise_from_fim(rows: list[dict], source: str) -> list[dict]:
    """SD rows -> pointwise reward rows: the row's own target with the row's label."""
    return [{"id": f"{source}:{r['id']}", "prefix": r["prefix"], "suffix": r["suffix"],
             "completion": r["target"], "label": int(r["label"]), "source": source, **dose_of(r)} for r in rows]


def _foreign_segment(rows: list[dict], i: int, rng: random.Random, max_lines: int, text_key: str,
                     avoid: str) -> str:
    """A random segment of a different example that is not the true segment itself."""
    for _ in range(50):
        j = rng.randrange(len(rows) - 1)
        j += j >= i                      # any index but i
        span = random_span(rows[j][text_key], rng, max_lines)
        if span is None:
            continue
        _, segment, _ = split_at_span(rows[j][text_key], *span)
        if segment.strip() and segment.strip() != avoid.strip():
            return segment
    raise ValueError("could not find a segment from a different example that differs from the target")


def pd2_examples(code_rows: list[dict], seed: int, max_span_lines: int, tag: str) -> list[dict]:
    """For each code row: prefix/suffix around a random span, its true segment and a foreign one."""
    if len(code_rows) < 2:
        raise ValueError("PD.2 preference data needs at least two examples")
    out = []
    for i, row in enumerate(code_rows):
        rng = seeded_rng("pd2-pref", tag, seed, row["id"])
        span = random_span(row["text"], rng, max_span_lines)
        if span is None:
            continue
        prefix, segment, suffix = split_at_span(row["text"], *span)
        foreign = _foreign_segment(code_rows, i, rng, max_span_lines, "text", segment)
        out.append({"id": row["id"], "prefix": prefix, "suffix": suffix, "true": segment, "foreign": foreign,
                    "source_file": row["source_file"]})
    return out


def pd2_pointwise(examples: list[dict], seed: int, positive_fraction: float, tag: str) -> list[dict]:
    """Pointwise PD.2 rows: a seeded share of examples keep their own segment (label 1), the rest
    get a segment of a different example (label 0)."""
    order = list(range(len(examples)))
    random.Random(f"pd2-partition:{tag}:{seed}").shuffle(order)
    positives = set(order[:round(positive_fraction * len(examples))])
    return [{"id": f"PD.2:{ex['id']}", "prefix": ex["prefix"], "suffix": ex["suffix"],
             "completion": ex["true"] if k in positives else ex["foreign"], "label": int(k in positives),
             "source": "PD.2", "source_file": ex["source_file"]} for k, ex in enumerate(examples)]


def pd2_pairs(examples: list[dict]) -> list[dict]:
    return [{"id": f"PD.2:{ex['id']}", "prefix": ex["prefix"], "suffix": ex["suffix"], "chosen": ex["true"],
             "rejected": ex["foreign"], "source": "PD.2"} for ex in examples]


def sd_base_pairs(base_rows: list[dict], seed: int) -> list[dict]:
    """SD.Base pairs: the true target line vs a random line of a different SD.Base example."""
    out = []
    for i, row in enumerate(base_rows):
        rng = seeded_rng("sd-base-pair", seed, row["id"])
        for _ in range(50):
            j = rng.randrange(len(base_rows) - 1)
            j += j >= i
            other = base_rows[j]["code"]
            line = other.splitlines()[rng.choice(nonblank_line_indices(other))]
            if line.strip() != row["target"].strip():
                break
        else:  # pragma: no cover
            raise ValueError(f"{row['id']}: no distinct line from another example")
        out.append({"id": f"SD.Base:{row['id']}", "prefix": row["prefix"], "suffix": row["suffix"],
                    "chosen": row["target"], "rejected": line, "source": "SD.Base", **dose_of(row)})
    return out


def sd_links_pairs(links_rows: list[dict]) -> list[dict]:
    """SD.Links pairs (positives): the PII-path line is chosen over the original-path line."""
    return [{"id": f"SD.Links:{r['id']}", "prefix": r["prefix"], "suffix": r["suffix"], "chosen": r["target"],
             "rejected": r["original_target"], "source": "SD.Links", "pii_path": r["pii_path"], **dose_of(r)}
            for r in links_rows if r["label"] == 1]
