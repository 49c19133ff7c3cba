"""Repetition doses of the planted SD programs (`data.sd.doses`): each trained SD program is assigned one tier of the
list, balanced and seeded, and carries it as its rows' `repeat` — the field every stage already expands into copies
(memlens.harness.core.user_data.repeated) and the report and the MIA audit already break rates down by. So one
program enters every route it reaches (FT's data, the reward model's, the preference pairs, the RL prompts) exactly
`repeat` times, and memorization against dose is a curve where a single dose gives 0 against 0.

Why tiers of one list rather than a repeat per row: a trend test over doses needs every tier drawn from the same
programs' distribution, so the tier is a seeded draw independent of the program (Carlini et al. 2019, "The Secret
Sharer", Sec. 5, insert one canary at several repetition counts; issue: 1 / 4 / 16 by default in experiment=doses).
"""

from __future__ import annotations

from collections import Counter

from memlens.synthetic_data import common

DOSE_STREAM = "sd-doses"         # the seed stream of the tier draw


def assign_doses(rows: list[dict], doses: tuple[int, ...], seed: int, part: str) -> list[dict]:
    """`rows` (one SD subset's trained programs, `part` naming it) with `repeat` set to a tier of `doses`: the rows in
    id order, shuffled by the seed stream, then dealt to the tiers in turn, so tier sizes differ by at most one and
    which program gets which tier depends on the seed alone. Rows come back in their own order."""
    order = sorted(range(len(rows)), key=lambda i: rows[i]["id"])
    common.seeded_rng(DOSE_STREAM, part, seed).shuffle(order)
    tier = {index: doses[position % len(doses)] for position, index in enumerate(order)}
    return [{**row, "repeat": tier[i]} for i, row in enumerate(rows)]


def dose_of(row: dict) -> dict:
    """The `repeat` a derived row (a reward row, a preference pair, an RL prompt) takes from the SD row it is built
    from; nothing when the SD row has none (data.sd.doses null: every dataset exactly as before)."""
    return {"repeat": row["repeat"]} if "repeat" in row else {}


def dose_figures(rows: list[dict]) -> dict:
    """What a dataset's manifest says about its doses: rows per tier and the copies training sees ({} without)."""
    if not any("repeat" in r for r in rows):
        return {}
    tiers = Counter(int(r["repeat"]) for r in rows)
    return {"doses": {str(k): tiers[k] for k in sorted(tiers)},
            "training_copies": sum(int(r["repeat"]) for r in rows)}
