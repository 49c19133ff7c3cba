"""The run layout's rules (harness/core/layout.py): checkpoint names, whole checkpoints, where the audit is."""

import json

from memlens.harness.core import layout


def test_checkpoint_names_parse_to_their_step_and_nothing_else_does():
    assert layout.checkpoint_step("checkpoint-40") == 40
    assert layout.checkpoint_step(layout.checkpoint_name(7)) == 7
    for other in ("checkpoint-", "checkpoint-12-torn", "checkpoint-x", "final", "checkpoints-3", "ckpt-3"):
        assert layout.checkpoint_step(other) is None, other


def test_checkpoint_dirs_are_directories_in_numeric_step_order(tmp_path):
    for name in ("checkpoint-100", "checkpoint-20", "checkpoint-3", "checkpoint-9-torn", "final"):
        (tmp_path / name).mkdir()
    (tmp_path / "checkpoint-5").write_text("a file, not a checkpoint")
    assert list(layout.checkpoint_dirs(tmp_path)) == [3, 20, 100]          # not the string order 100, 20, 3
    assert layout.checkpoint_dirs(tmp_path / "missing") == {}
    (tmp_path / "checkpoint-20" / layout.TRAINER_STATE).write_text("{}")
    assert list(layout.whole_checkpoints(tmp_path)) == [20]


def test_audit_dir_follows_the_config_then_the_runs_record_then_the_default(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert layout.audit_dir(run) == run / "audit"
    assert layout.audit_dir(run, {"audit": {"out_dir": str(tmp_path / "a")}}) == tmp_path / "a"
    record = {"config": {"run_dir": str(run), "audit": {"out_dir": str(run / "audit")}}}
    (run / layout.RUN_RECORD).write_text(json.dumps(record))
    assert layout.audit_dir(run) == run / "audit"
    record["config"]["audit"]["out_dir"] = str(tmp_path / "moved")
    (run / layout.RUN_RECORD).write_text(json.dumps(record))
    assert layout.audit_dir(run) == tmp_path / "moved"
