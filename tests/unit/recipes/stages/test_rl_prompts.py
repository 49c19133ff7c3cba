"""RL prompts: FIM rows keep their context; code rows split at a seeded line whose target is discarded."""

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlens.harness.core.errors import UserError
from memlens.recipes.stages.rl import prompt_rows, split_code_at_line


def test_split_hand_example():
    rng = random.Random(0)
    i = random.Random(0).randrange(3)
    lines = ["a = 1\n", "b = 2\n", "c = 3\n"]
    assert split_code_at_line("".join(lines), rng) == ("".join(lines[:i]), lines[i], "".join(lines[i + 1:]))


@given(st.text(alphabet="ab \n", max_size=60), st.integers(0, 10 ** 6))
def test_split_reassembles_the_text_and_the_middle_is_one_line(text, seed):
    prefix, line, suffix = split_code_at_line(text, random.Random(seed))
    assert prefix + line + suffix == text
    assert line.count("\n") <= 1 and (not line.count("\n") or line.endswith("\n"))


def test_prompt_rows_fim_and_code_rows():
    fim = {"id": "s1", "prefix": "P" * 10, "target": "T", "suffix": "S" * 10}
    code = {"id": "c1", "text": "x = 1\ny = 2\nz = 3\n", "source_file": "a.py"}
    out = prompt_rows([fim, code], "mix", seed=3, context_chars=4)
    assert out[0] == {"id": "s1", "prefix": "PPPP", "suffix": "SSSS"}   # last/first 4 chars kept
    again = prompt_rows([code], "mix", seed=3, context_chars=100)[0]
    assert again == prompt_rows([code], "mix", seed=3, context_chars=100)[0]  # seeded by (seed, id)
    assert "T" not in out[0]["prefix"] + out[0]["suffix"]
    with pytest.raises(UserError, match="row 'bad'"):
        prompt_rows([{"id": "bad", "code": "x"}], "mix", seed=0, context_chars=10)
