"""The checkpoint a preempted stage saves off its schedule is set aside as `preempted-<step>/` (outside the Trainer's
checkpoint-* rotation and the audit's sight), resumed from when it is the latest, and removed once the stage
finished; one saved on the schedule stays the stage's own `checkpoint-<step>`. The signals only listen in a job."""

from __future__ import annotations

import signal

from memlens.recipes.stages import preemption
from memlens.recipes.stages.contract import latest_checkpoint


def checkpoint(out_dir, name):
    directory = out_dir / name
    directory.mkdir(parents=True)
    (directory / "trainer_state.json").write_text("{}")
    return directory


def test_an_off_schedule_checkpoint_is_set_aside_resumed_from_and_removed_at_the_end(tmp_path):
    checkpoint(tmp_path, "checkpoint-80")
    checkpoint(tmp_path, "checkpoint-101")
    kept = preemption.set_aside(tmp_path, 101, on_schedule=False)
    assert kept == tmp_path / "preempted-101" and not (tmp_path / "checkpoint-101").exists()
    assert latest_checkpoint(tmp_path) == kept                     # later than checkpoint-80: resume there
    checkpoint(tmp_path, "checkpoint-160")
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-160"
    preemption.discard_preemption_checkpoints(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-160", "checkpoint-80"]


def test_a_checkpoint_the_schedule_saves_anyway_stays_where_it_is(tmp_path):
    checkpoint(tmp_path, "checkpoint-80")
    assert preemption.set_aside(tmp_path, 80, on_schedule=True) == tmp_path / "checkpoint-80"
    assert (tmp_path / "checkpoint-80").is_dir() and not list(tmp_path.glob("preempted-*"))


def test_a_torn_preemption_checkpoint_is_not_resumed_from(tmp_path):
    checkpoint(tmp_path, "checkpoint-80")
    (tmp_path / "preempted-101").mkdir()                          # no trainer_state.json: cut short
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-80"


def test_signals_listen_only_in_a_launchers_job(monkeypatch):
    monkeypatch.delenv(preemption.ENVIRONMENT, raising=False)
    assert preemption.listen() is False
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
    monkeypatch.setenv(preemption.ENVIRONMENT, "1")
    previous = {s: signal.getsignal(s) for s in preemption.SIGNALS}
    try:
        assert preemption.listen() is True
        signal.raise_signal(signal.SIGUSR2)
        assert preemption.requested()
        error = preemption.stop("FT.2", tmp := __import__("pathlib").Path("/x/preempted-7"))
        assert error.exit_code == 75 and "SIGUSR2" in str(error) and str(tmp) in str(error)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        preemption._requested.clear()
