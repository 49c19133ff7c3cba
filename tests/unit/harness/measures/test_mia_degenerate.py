"""Attacks whose statistic degenerates say so instead of being ranked (memlens.harness.measures.mia.degenerate_reasons):
their fallback branch scored most texts, their scores have no spread, or their AUC's interval lies below 0.5; no score
is changed and no AUC is flipped. The audit marks them (harness/audit/mia.py `_metrics_of`), best_attack skips them."""

from __future__ import annotations

import pytest

from memlens.harness.measures import mia
from memlens.harness.measures.mia import AttackInputs, attack_fallbacks, attack_metrics, attack_scores

N_TOKENS = 6


def _member(i: int) -> AttackInputs:
    """A strongly memorized text: the model's top token is the text's at every position (no error) and each token's
    log-prob is near 0; the control (never trained on it) finds it hard."""
    ids = list(range(10, 10 + N_TOKENS))
    values = {"ids": ids, "top1": ids, "logp": [-1e-3 * (1 + i)] * N_TOKENS, "mu": [-1e-3] * N_TOKENS,
              "var": [1e-4] * N_TOKENS}
    control = {"ids": ids, "top1": ids, "logp": [-4.0] * N_TOKENS}
    return AttackInputs(values=values, text=f"member {i}", control=control)


def _nonmember(i: int) -> AttackInputs:
    """A held-out text: the model gets every token wrong (top1 0), log-prob about -3, and the control's deltas
    alternate +0.3 / -(0.1 + 0.05 i) (a positive and a negative delta at the error positions)."""
    ids = list(range(10, 10 + N_TOKENS))
    logp = [-3.0 - 0.01 * i] * N_TOKENS
    ref = [lp - 0.3 if t % 2 else lp + 0.1 + 0.05 * i for t, lp in enumerate(logp)]
    values = {"ids": ids, "top1": [0] * N_TOKENS, "logp": logp, "mu": [-2.0] * N_TOKENS, "var": [1.0] * N_TOKENS}
    return AttackInputs(values=values, text=f"held out {i}", control={"ids": ids, "top1": [0] * N_TOKENS, "logp": ref})


def test_ez_mia_on_a_strongly_memorized_toy_is_degenerate_not_ranked():
    """8 members with no error position: EZ-MIA's fallback (fewer than 2 error positions) scores each 0.0, exactly
    the authors' value. Non-member i, errors at positions 1..5 (the first is left out): deltas +0.3 at 1, 3, 5 and
    -(0.1 + 0.05 i) at 2, 4, so its score is 0.9 / (2 (0.1 + 0.05 i)) > 0: every member is below every non-member,
    AUC 0.00. The fallback count (8 of 8 members) and the interval below 0.5 mark it degenerate; its AUC stays 0.00
    (not flipped to 1), and best_attack picks LOSS (members' loss ~1e-3 against ~3: AUC 1), never EZ-MIA."""
    members, nonmembers = [_member(i) for i in range(8)], [_nonmember(i) for i in range(8)]
    scores = {name: ([attack_scores(x)[name] for x in members], [attack_scores(x)[name] for x in nonmembers])
              for name in ("loss", "ez_mia")}
    assert scores["ez_mia"][0] == [0.0] * 8
    assert scores["ez_mia"][1] == pytest.approx([0.9 / (2 * (0.1 + 0.05 * i)) for i in range(8)], rel=1e-9)
    assert [attack_fallbacks(x) for x in members] == [{"ez_mia": "fewer than 2 error positions"}] * 8
    assert [attack_fallbacks(x) for x in nonmembers] == [{}] * 8

    metrics = {name: attack_metrics(*s, n_boot=200, seed=0) for name, s in scores.items()}
    ez = metrics["ez_mia"]
    ez["degenerate"] = mia.degenerate_reasons(*scores["ez_mia"], ez, fallback_members=8, fallback_nonmembers=0)
    metrics["loss"]["degenerate"] = mia.degenerate_reasons(*scores["loss"], metrics["loss"])
    assert ez["degenerate"] == ["8 of 8 members and 0 of 8 non-members took the authors' fallback",
                                "AUC 0.00 with its 95 % interval [0.00, 0.00] below 0.5 (not flipped)"]
    assert ez["auc"]["value"] == 0.0 and metrics["loss"]["degenerate"] == [] and metrics["loss"]["auc"]["value"] == 1
    assert mia.best_attack(metrics)[0] == "loss"


def test_a_degenerate_attack_is_never_the_best_even_at_the_highest_auc():
    """best_attack ranks only attacks without a degenerate reason: EZ-MIA at AUC 0.9 but marked loses to zlib at
    0.7; with every attack marked there is no best; a summary written before the check (no key) is ranked as before."""
    def m(auc: float, why: list[str] | None) -> dict:
        return {"auc": {"value": auc, "ci95": [auc - 0.1, auc + 0.1]}, **({} if why is None else {"degenerate": why})}
    assert mia.best_attack({"zlib": m(0.7, []), "ez_mia": m(0.9, ["fallback"])})[0] == "zlib"
    assert mia.best_attack({"ez_mia": m(0.9, ["fallback"])}) is None
    assert mia.best_attack({"zlib": m(0.7, None), "ez_mia": m(0.9, None)})[0] == "ez_mia"


def test_an_auc_whose_interval_lies_below_chance_is_marked_not_flipped():
    """Members 0..9 against non-members 10..19: AUC 0 by hand (every member below every non-member), interval [0, 0].
    Marked, and the stored AUC stays 0 (an attacker who flips it chose the direction after seeing the labels).
    Members 0..9 against 5..14: AUC 12.5 / 100 (counted below), interval below 0.5: marked too. Chance (same values)
    is not below 0.5 and has spread: not marked."""
    low = attack_metrics([float(i) for i in range(10)], [float(i) for i in range(10, 20)], n_boot=200, seed=0)
    reasons = mia.degenerate_reasons([float(i) for i in range(10)], [float(i) for i in range(10, 20)], low)
    assert low["auc"]["value"] == 0.0 and reasons == ["AUC 0.00 with its 95 % interval [0.00, 0.00] below 0.5 (not flipped)"]
    members, nonmembers = [float(i) for i in range(10)], [float(i) for i in range(5, 15)]
    overlap = attack_metrics(members, nonmembers, n_boot=400, seed=0)
    # pairs member > non-member: member 6 beats 5, 7 beats 5-6, 8 beats 5-7, 9 beats 5-8 -> 10; ties 5..9 -> 5 halves
    assert overlap["auc"]["value"] == pytest.approx((10 + 2.5) / 100)
    assert overlap["auc"]["ci95"][1] < 0.5 and mia.degenerate_reasons(members, nonmembers, overlap)
    chance = attack_metrics(members, members, n_boot=200, seed=0)
    assert mia.degenerate_reasons(members, members, chance) == []


def test_scores_without_spread_are_degenerate():
    """All scores equal within 1e-9 relative (0 and 0 included) is no ranking at all; 1e-6 apart is a ranking."""
    flat = [1.0, 1.0 + 1e-12, 1.0]
    assert mia.degenerate_reasons(flat, [1.0, 1.0], attack_metrics(flat, [1.0, 1.0], n_boot=50, seed=0)) == \
        ["all 5 scores equal (1)"]
    zeros = [0.0] * 4
    assert mia.degenerate_reasons(zeros, zeros, attack_metrics(zeros, zeros, n_boot=50, seed=0)) == \
        ["all 8 scores equal (0)"]
    apart = [1.0, 1.0 + 1e-6]
    assert mia.degenerate_reasons(apart, [1.0, 1.0 + 1e-6], attack_metrics(apart, apart, n_boot=50, seed=0)) == []


def test_the_fallback_share_rule():
    """Fallback at half the members or more (or half the non-members) marks the attack; below half it does not."""
    metrics = attack_metrics([1.0, 2.0, 3.0, 4.0], [0.5, 1.5, 2.5, 3.5], n_boot=50, seed=0)
    members, nonmembers = [1.0, 2.0, 3.0, 4.0], [0.5, 1.5, 2.5, 3.5]
    assert mia.degenerate_reasons(members, nonmembers, metrics, fallback_members=1) == []
    assert mia.degenerate_reasons(members, nonmembers, metrics, fallback_members=2) == [
        "2 of 4 members and 0 of 4 non-members took the authors' fallback"]
    assert mia.degenerate_reasons(members, nonmembers, metrics, fallback_nonmembers=3)
