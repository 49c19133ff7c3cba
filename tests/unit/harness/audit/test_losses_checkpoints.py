"""Pairing audited and control checkpoints by step, else by the epoch the Trainer recorded."""

import json

import pytest

from memlens.harness.audit.losses import _match_checkpoints, checkpoint_steps
from memlens.harness.core.errors import UserError


def _run(root, steps_epochs):
    for step, epoch in steps_epochs:
        d = root / f"checkpoint-{step}"
        d.mkdir(parents=True)
        if epoch is not None:
            (d / "trainer_state.json").write_text(json.dumps({"epoch": epoch, "global_step": step}))
    (root / "checkpoint-notastep").mkdir()      # ignored: not checkpoint-<int>
    return root


def test_checkpoint_steps_sorted_numerically(tmp_path):
    run = _run(tmp_path / "a", [(100, None), (20, None), (3, None)])
    assert list(checkpoint_steps(run)) == [3, 20, 100]
    with pytest.raises(UserError, match="not found"):
        checkpoint_steps(tmp_path / "missing")


def test_pairs_by_step_when_steps_match(tmp_path):
    a = _run(tmp_path / "a", [(4, 1.0), (8, 2.0)])
    c = _run(tmp_path / "c", [(4, 1.5), (8, 3.0)])
    pairs = _match_checkpoints(a, c)
    assert [(p["step"], p["control_step"], p["epoch"]) for p in pairs] == [(4, 4, 1.0), (8, 8, 2.0)]


def test_pairs_by_epoch_when_control_has_fewer_steps_per_epoch(tmp_path):
    a = _run(tmp_path / "a", [(10, 1.0), (20, 2.0), (30, 3.0)])
    c = _run(tmp_path / "c", [(7, 1.0), (14, 2.0), (21, 3.0)])
    pairs = _match_checkpoints(a, c)
    assert [(p["step"], p["control_step"]) for p in pairs] == [(10, 7), (20, 14), (30, 21)]
    assert pairs[1]["control"] == c / "checkpoint-14"


@pytest.mark.parametrize("control", [
    [(7, 1.0), (14, 2.5), (21, 3.0)],      # epochs disagree
    [(7, None), (14, None), (21, None)],   # no epochs recorded
    [(7, 1.0), (14, 2.0)],                 # fewer checkpoints
])
def test_unmatched_schedules_are_user_errors(tmp_path, control):
    a = _run(tmp_path / "a", [(10, 1.0), (20, 2.0), (30, 3.0)])
    c = _run(tmp_path / "c", control)
    with pytest.raises(UserError, match="do not line up"):
        _match_checkpoints(a, c)


def test_no_checkpoints_is_a_user_error(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(UserError, match="no checkpoint"):
        _match_checkpoints(tmp_path / "a", None)
