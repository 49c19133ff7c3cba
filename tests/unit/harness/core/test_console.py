"""The console rules (harness/core/console.py) and the training log (recipes/stages/contract.py TrainLog)."""

from __future__ import annotations

import importlib.util
import io
import json
import logging

import pytest

from memlens.harness.cli import main as cli_main
from memlens.harness.core.console import PROGRESS_LINE_PERCENT, ExpectedRecords, StageProgress, _is_expected_load_report
from memlens.recipes.stages.training_log import TrainLog

SCORE_ONLY = ("\x1b[1mLlamaForSequenceClassification LOAD REPORT\x1b[0m from: runs/x/models/FT.2\n"
              "Key          | Status  | \n-------------+---------+-\nscore.weight | MISSING | \n\n"
              "Notes:\n- MISSING:\tthose params were newly initialized because missing from the checkpoint.")
OTHER_KEY = SCORE_ONLY.replace("score.weight | MISSING | \n",
                               "score.weight | MISSING | \nmodel.layers.0.mlp.up_proj.weight | UNEXPECTED | \n")


def test_off_a_terminal_a_stage_prints_one_line_per_quarter_and_never_redraws():
    out = io.StringIO()
    progress = StageProgress("FT.3", total=8, terminal=False, out=out)
    for step in range(1, 9):
        progress.update(step, loss=1.0)
    progress.close()
    lines = out.getvalue().splitlines()
    assert PROGRESS_LINE_PERCENT == 25
    assert [line.split(",")[0] for line in lines] == ["[FT.3] step 2/8 (25 %)", "[FT.3] step 4/8 (50 %)",
                                                      "[FT.3] step 6/8 (75 %)"]   # 100 %: the status line says it
    assert "\r" not in out.getvalue()


def test_a_short_stage_prints_once_per_share_it_crosses_and_a_resumed_one_starts_where_it_was():
    out = io.StringIO()
    progress = StageProgress("RLFT.1", total=2, terminal=False, out=out)
    progress.update(1)
    progress.update(2)
    assert out.getvalue().splitlines()[0].startswith("[RLFT.1] step 1/2 (50 %)")
    assert len(out.getvalue().splitlines()) == 1
    resumed = io.StringIO()
    progress = StageProgress("PT", total=100, initial=60, terminal=False, out=resumed)
    for step in range(61, 101):
        progress.update(step)
    assert [line.split(",")[0] for line in resumed.getvalue().splitlines()] == ["[PT] step 75/100 (75 %)"]


def test_other_processes_show_nothing():
    out = io.StringIO()
    progress = StageProgress("FT.1", total=4, enabled=False, terminal=False, out=out)
    for step in range(1, 5):
        progress.update(step)
    assert out.getvalue() == ""


def test_only_a_load_report_of_a_new_score_head_is_filtered():
    assert _is_expected_load_report(SCORE_ONLY)
    assert not _is_expected_load_report(OTHER_KEY)
    assert not _is_expected_load_report("some other warning | with a bar")
    records = ExpectedRecords()

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("transformers.modeling_utils", logging.WARNING, __file__, 1, message, None, None)

    assert not records.filter(record(SCORE_ONLY))
    assert records.filter(record(OTHER_KEY))
    assert not records.filter(record("mtime may not be reliable on this filesystem, falling back to numerical "
                                     "ordering"))
    assert records.filter(record("The attention mask is not set"))


def test_train_log_keeps_each_step_once_when_a_stage_resumes(tmp_path):
    log = TrainLog(tmp_path)
    log.start(0)
    for step in (2, 4, 6, 8):                         # killed after step 8, last checkpoint at step 4
        log.append(step, {"loss": 1.0 / step, "epoch": step / 8})
    resumed = TrainLog(tmp_path)
    resumed.start(4)
    for step in (6, 8, 10):
        resumed.append(step, {"loss": 0.1})
    rows = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 6, 8, 10]
    assert list(rows[0]) == ["step", "loss", "epoch"] and rows[0]["loss"] == 0.5


def test_train_log_stores_tensors_as_numbers(tmp_path):
    import torch

    log = TrainLog(tmp_path)
    log.start(0)
    log.append(1, {"loss": torch.tensor(0.25), "note": object.__new__(object)})
    row = json.loads((tmp_path / "train_log.jsonl").read_text())
    assert row["loss"] == 0.25 and isinstance(row["note"], str)


def test_tensorboard_without_the_package_is_refused_before_anything_is_written(tmp_path, capsys):
    if importlib.util.find_spec("tensorboard") is not None:
        pytest.skip("tensorboard is installed here")
    with pytest.raises(SystemExit) as e:
        cli_main(["run", "experiment=smoke", f"run_dir={tmp_path / 'run'}", "tensorboard=true"])
    assert e.value.code == 2
    assert "tensorboard=true: the tensorboard package is not installed; `pip install tensorboard`" in \
        capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit) as e:
        cli_main(["run", "experiment=smoke", f"run_dir={tmp_path / 'run'}", "tensorboard=yes"])
    assert e.value.code == 2 and "tensorboard='yes': must be true or false" in capsys.readouterr().err
