"""The newer attacks (ReCaLL, Con-ReCall, DC-PDD, EZ-MIA) against their authors' code on the same inputs, and by hand.

tests/authors_code/ holds transcriptions of the authors' scoring functions, each with its repository, file, commit
and licence in its header (ReCaLL and Con-ReCall: Apache-2.0; mimir: MIT). The DC-PDD and EZ-MIA repositories carry
no licence, so their code is not copied here: benchmarks/crosscheck_mia_authors.py runs them where a reader has them,
and docs/methods.md records that run; here they are checked on cases derived by hand from the formula.

Token alignment, a difference of definition (docs/methods.md): the authors' conditional pass also scores a text's
first token (conditioned on the prefix), which the unconditioned pass cannot. memlens scores the same tokens in both
passes, so both are fed the same token set below.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlens.harness.measures import mia
from tests.authors_code import con_recall_authors, dc_pdd_mimir, recall_authors, recall_mimir

LOGP = st.lists(st.floats(-12.0, -1e-3), min_size=2, max_size=40)


def _values(logp, ids=None, top1=None):
    n = len(logp)
    return {"logp": list(logp), "mu": [0.0] * n, "var": [1.0] * n,
            "ids": list(ids if ids is not None else range(n)), "top1": list(top1 if top1 is not None else range(n))}


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_recall_is_the_authors_and_mimirs_score(data):
    plain = data.draw(LOGP)
    cond = data.draw(st.lists(st.floats(-12.0, -1e-3), min_size=len(plain), max_size=len(plain)))
    ours = mia.recall_score(_values(plain), _values(cond))
    assert ours == pytest.approx(recall_authors.inference(plain, cond, num_shots=3)["recall"], rel=1e-12)
    # mimir returns LL(x | P) / NLL(x) and reads lower = member: the negation of the authors' score.
    assert ours == pytest.approx(-recall_mimir._attack(np.array(plain), [(np.array(cond), len(cond))]), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_con_recall_is_the_authors_score_at_every_gamma_of_their_grid(data):
    plain = data.draw(LOGP)
    n = len(plain)
    nonmember = data.draw(st.lists(st.floats(-12.0, -1e-3), min_size=n, max_size=n))
    member = data.draw(st.lists(st.floats(-12.0, -1e-3), min_size=n, max_size=n))
    theirs = con_recall_authors.inference(plain, nonmember, member, num_shots=3)
    for gamma in con_recall_authors.GAMMAS:
        ours = mia.con_recall_score(_values(plain), _values(nonmember), _values(member), gamma=gamma)
        assert ours == pytest.approx(theirs[f"con-recall_{gamma}"], rel=1e-12, abs=1e-12)
    assert mia.CON_RECALL_GAMMA in con_recall_authors.GAMMAS


def test_recall_and_con_recall_by_hand():
    # LL(x) = -2, LL(x | non-member prefix) = -3, LL(x | member prefix) = -1
    plain, nonmember, member = _values([-1.0, -3.0]), _values([-3.0, -3.0]), _values([-0.5, -1.5])
    assert mia.recall_score(plain, nonmember) == pytest.approx(1.5)
    assert mia.con_recall_score(plain, nonmember, member, gamma=0.5) == pytest.approx((-3 + 0.5) / -2)
    with pytest.raises(ValueError, match="same tokens"):
        mia.recall_score(plain, _values([-1.0]))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_dc_pdd_is_mimirs_score_on_the_same_frequencies(data):
    """mimir counts a token once per reference document; the authors count every occurrence (memlens does as the
    authors). Given one frequency table, the scores are the same."""
    vocab = 12
    docs = data.draw(st.lists(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=8), min_size=1, max_size=6))
    ids = data.draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=20))
    logp = data.draw(st.lists(st.floats(-8.0, 0.0), min_size=len(ids), max_size=len(ids)))
    frequency = mia.TokenFrequency.of(docs, vocab)
    table = np.array([frequency.probability(t) for t in range(vocab)])
    theirs = -dc_pdd_mimir._attack(np.array(logp), ids, table)        # mimir's beta is -mean: lower = member
    assert mia.dc_pdd_score(_values(logp, ids=ids), frequency) == pytest.approx(theirs, rel=1e-12, abs=1e-15)


def test_dc_pdd_by_hand():
    """Vocabulary 4, reference tokens [0, 0, 1] -> add-one frequencies (3, 2, 1, 1) / 7. Text ids [2, 0, 2]: the
    second 2 is not a first occurrence. alpha = p * ln(1 / f): token 2 at p = 0.5 -> 0.5 ln 7 = 0.973, capped at
    0.01; token 0 at p = e^-8 -> e^-8 ln(7/3) = 2.84e-4 (under the cap)."""
    frequency = mia.TokenFrequency.of([[0, 0, 1]], vocab_size=4)
    assert [frequency.probability(t) for t in range(4)] == pytest.approx([3 / 7, 2 / 7, 1 / 7, 1 / 7])
    values = _values([math.log(0.5), -8.0, 0.0], ids=[2, 0, 2])
    expected = (0.01 + math.exp(-8.0) * math.log(7 / 3)) / 2
    assert mia.dc_pdd_score(values, frequency) == pytest.approx(expected)
    assert mia.dc_pdd_score(values, frequency, cap=10.0) == pytest.approx((0.5 * math.log(7) + math.exp(-8.0) *
                                                                           math.log(7 / 3)) / 2)


def test_ez_mia_by_hand():
    """Five tokens; the model's top-1 is wrong at positions 0, 2, 3, 4 (position 0 is left out, as the authors'
    ignore_bos). Deltas against the reference there: +1.0, -0.5, +0.25 -> (1.0 + 0.25) / 0.5 = 2.5."""
    audited = _values([-1.0, -0.1, -2.0, -3.0, -1.0], ids=[5, 6, 7, 8, 9], top1=[0, 6, 0, 0, 0])
    reference = _values([-9.0, -9.0, -3.0, -2.5, -1.25])
    assert mia.ez_mia_score(audited, reference) == pytest.approx(2.5)
    # no negative delta: 0; fewer than two error positions: 0
    assert mia.ez_mia_score(audited, _values([-9.0] * 5)) == 0.0
    one_error = _values([-1.0, -0.1, -2.0, -3.0, -1.0], ids=[5, 6, 7, 8, 9], top1=[0, 6, 7, 8, 0])
    assert mia.ez_mia_score(one_error, reference) == 0.0


def test_an_attack_missing_an_input_scores_none_and_the_registry_lists_what_each_needs():
    plain = _values([-1.0, -2.0, -0.5])
    scores = mia.attack_scores(mia.AttackInputs(plain, "abc"))
    assert scores["loss"] == pytest.approx(-3.5 / 3)
    for name in ("reference", "recall", "con_recall", "dc_pdd", "ez_mia"):
        assert scores[name] is None, name
    assert mia.inputs_needed() >= {mia.CONTROL, mia.NONMEMBER_PREFIX, mia.MEMBER_PREFIX, mia.TOKEN_FREQUENCY}
    with pytest.raises(ValueError, match="inputs are"):
        mia.Attack("bad", lambda x: 0.0, needs=frozenset({"gradients"}))


def test_prefix_shots_are_the_first_rows_by_id_and_a_small_side_has_none():
    rows = [{"id": f"r{i}", "prefix": "a", "target": "b", "suffix": "c"} for i in (3, 1, 0, 2, 4)]
    shots, rest = mia.split_shots(rows, n=3)
    assert [r["id"] for r in shots] == ["r0", "r1", "r2"] and [r["id"] for r in rest] == ["r3", "r4"]
    assert mia.split_shots(rows[:4], n=3) is None                 # 4 < 3 shots + 2 scored
    assert mia.prefix_text(shots) == "abc\n\nabc\n\nabc\n\n"


def test_the_architecture_docs_attack_example_runs_as_written():
    """docs/architecture.md's "How to add a membership-inference attack" code, executed as it stands: it registers,
    scores from AttackInputs, and is None without the input it names."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[4] / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = doc.split("### How to add a membership-inference attack", 1)[1].split("\n### ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    try:
        exec(compile(code, "docs/architecture.md", "exec"), {})
        plain, control = _values([-1.0, -3.0]), _values([-2.0, -4.0])
        assert mia.ATTACKS["my_attack"].scores(mia.AttackInputs(plain, "ab", control=control)) == pytest.approx(1.0)
        assert mia.attack_scores(mia.AttackInputs(plain, "ab"))["my_attack"] is None
    finally:
        mia.ATTACKS.unregister("my_attack")
