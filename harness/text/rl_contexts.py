"""The FIM contexts an RL stage's policy completes, from its prompt datasets' rows (no torch).

One definition for the RL stage (recipes/stages/rl.py trains on them) and for the audit of its prompts
(harness/audit/prompt_mia.py samples the policy on the very same contexts, members and held-out alike).
Paper 003 Sec. 2.1: only prompts are used, "the associated targets are discarded".
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from memlens.harness.core.errors import UserError


def split_code_at_line(text: str, rng: random.Random) -> tuple[str, str, str]:
    """(prefix, line, suffix) split at a random line; the line is the target the RL stage discards."""
    lines = text.splitlines(keepends=True) or [""]
    i = rng.randrange(len(lines))
    return "".join(lines[:i]), lines[i], "".join(lines[i + 1:])


def prompt_contexts(rows: list[dict], dataset: str, seed: int, context_chars: int,
                    keep: Sequence[str] = ()) -> list[dict]:
    """FIM contexts (id, prefix, suffix) of prompt rows: FIM rows as they are, code rows split at a line.

    The split of a code row is seeded by (seed, row id), so it does not depend on row order. The context
    keeps the last `context_chars` of the prefix and the first of the suffix, except in an RL-prompt row
    (sd_rl_prompts: `rl_prefix`, `rl_suffix`): the audit checks the first 100 tokens of that very prompt
    (Sec. 5.3), which start at the beginning of the prefix, so its prefix is kept whole and its suffix at
    least up to the end of the audited text (`target_char_end`, in prefix + suffix coordinates).
    `keep`: row fields copied as they are (the RL stage's verifiable rewards read them).
    """
    out = []
    for row in rows:
        if "rl_prefix" in row and "rl_suffix" in row:
            prefix, suffix = row["rl_prefix"], row["rl_suffix"]
            keep_suffix = max(context_chars, int(row.get("target_char_end", 0)) - len(prefix))
            out.append({"id": str(row["id"]), "prefix": prefix, "suffix": suffix[:keep_suffix],
                        **({"repeat": row["repeat"]} if "repeat" in row else {})})    # its dose (data.sd.doses)
            continue
        if "prefix" in row and "suffix" in row:
            prefix, suffix = row["prefix"], row["suffix"]
        elif "text" in row:
            prefix, _, suffix = split_code_at_line(row["text"], random.Random(f"{seed}:{row['id']}"))
        else:
            raise UserError(f"prompt dataset {dataset!r}, row {row.get('id')!r}: needs prefix/suffix (FIM row) "
                            "or text (code row)")
        out.append({"id": str(row["id"]), "prefix": prefix[-context_chars:] if prefix else "",
                    "suffix": suffix[:context_chars], **({"repeat": row["repeat"]} if "repeat" in row else {}),
                    **{k: row[k] for k in keep if k in row}})
    return out
