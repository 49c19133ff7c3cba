"""A stage stops at its first NaN or infinite loss or gradient norm (memlens.recipes.stages.divergence): the row is
logged, checkpoints saved after the last finite logged step are removed, and the error names the stage, the step,
the value and the override that fixes it. A model whose weights are not finite is refused by the loader."""

from __future__ import annotations

import json
import math

import pytest

from memlens.harness.core.errors import UserError
from memlens.recipes.stages.divergence import DivergenceWatch, TrainingDiverged, non_finite
from memlens.recipes.stages.training_log import TrainLog


def test_only_the_watched_values_that_are_not_finite_count():
    assert non_finite({"loss": 3.2, "grad_norm": 4.0, "reward": math.nan}) == {}      # a reward is a measurement
    assert non_finite({"loss": 0.0, "grad_norm": math.nan}) == {"grad_norm": pytest.approx(math.nan, nan_ok=True)}
    assert set(non_finite({"loss": math.inf, "grad_norm": -math.inf})) == {"loss", "grad_norm"}
    assert non_finite({"loss": True, "grad_norm": "nan"}) == {}                     # not numbers: not judged


def test_the_first_nan_stops_the_stage_and_removes_checkpoints_after_the_last_finite_step(tmp_path):
    model_dir = tmp_path / "models" / "FT.3"
    for step in (10, 20, 30):
        (model_dir / f"checkpoint-{step}").mkdir(parents=True)
    watch = DivergenceWatch(model_dir)
    watch.start(0)
    watch.observe(10, {"loss": 4.1, "grad_norm": 5.9, "learning_rate": 1e-3})
    watch.observe(15, {"loss": 3.9, "grad_norm": 6.0})
    with pytest.raises(TrainingDiverged) as caught:
        watch.observe(25, {"loss": 3.7, "grad_norm": math.nan, "learning_rate": 1.58e-3})
    message = str(caught.value)
    assert "stage FT.3 diverged: at step 25 its grad_norm nan at learning rate 0.00158" in message
    assert "`stages.FT.3.lr=...`" in message and "checkpoints after step 15 were removed (20, 30)" in message
    assert isinstance(caught.value, UserError)              # the CLI prints it without a traceback, exit 2
    assert sorted(p.name for p in model_dir.iterdir()) == ["checkpoint-10"]


def test_a_resumed_stage_counts_from_the_checkpoint_it_resumed_from(tmp_path):
    model_dir = tmp_path / "IPO"
    (model_dir / "checkpoint-40").mkdir(parents=True)
    watch = DivergenceWatch(model_dir)
    watch.start(40)
    with pytest.raises(TrainingDiverged, match="no checkpoint was saved after step 40"):
        watch.observe(50, {"loss": math.nan})
    assert (model_dir / "checkpoint-40").is_dir()


def test_a_sweep_point_is_named_as_the_run_names_it(tmp_path):
    point = tmp_path / "run" / "models" / "RLFT.4" / "beta=0.005"
    point.mkdir(parents=True)
    with pytest.raises(TrainingDiverged, match=r"stage RLFT\.4/beta=0\.005 diverged: .*`stages\.RLFT\.4\.lr=\.\.\.`"):
        DivergenceWatch(point).observe(3, {"loss": math.nan})
    assert DivergenceWatch(tmp_path / "run" / "models" / "FT.3").name == "FT.3"


def test_a_process_other_than_the_first_raises_too_but_removes_nothing(tmp_path):
    (tmp_path / "checkpoint-20").mkdir()
    watch = DivergenceWatch(tmp_path)
    with pytest.raises(TrainingDiverged):
        watch.observe(20, {"loss": math.nan}, main_process=False)
    assert (tmp_path / "checkpoint-20").is_dir()


def test_the_train_log_keeps_the_nan_row_it_stops_at(tmp_path):
    log = TrainLog(tmp_path / "FT.2")
    log.start(0)
    log.append(10, {"loss": 2.5, "grad_norm": 1.0})
    with pytest.raises(TrainingDiverged, match="stage FT.2 diverged: at step 20 its loss nan"):
        log.append(20, {"loss": math.nan, "grad_norm": 1.0})
    rows = [json.loads(line) for line in (tmp_path / "FT.2" / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20] and math.isnan(rows[1]["loss"])


def test_the_loader_refuses_a_model_whose_weights_are_not_finite(tmp_path):
    import torch

    from memlens.harness.model.load import load_causal_lm
    from tests.tiny import tiny_llama, tiny_tokenizer

    tokenizer = tiny_tokenizer(["def f(x):\n    return x + 1\n"] * 20, vocab_size=300)
    model = tiny_llama(tokenizer, hidden=32, layers=1, heads=2)
    model.save_pretrained(tmp_path / "ok")
    tokenizer.save_pretrained(tmp_path / "ok")
    load_causal_lm(tmp_path / "ok", device="cpu")                       # finite: loads
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight[0, 0] = math.nan
    model.save_pretrained(tmp_path / "nan")
    tokenizer.save_pretrained(tmp_path / "nan")
    with pytest.raises(UserError, match=r"1 weight tensor\(s\) hold NaN .*mlp\.up_proj\.weight.*diverged"):
        load_causal_lm(tmp_path / "nan", device="cpu")
