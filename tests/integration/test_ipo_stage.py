"""IPO stage end to end: TRL DPOTrainer with loss_type="ipo" (and the dpo option) on a micro Llama."""

import math

import pytest
from alignment_world import trainer_log, world  # noqa: F401 (fixture)

from harness.errors import UserError
from harness.io import read_json
from recipes import ipo
from recipes.common import StageContext

IPO_SETTINGS = {"init": "FT", "datasets": ["pairs_easy"], "loss": "ipo", "beta": 0.1, "lr": 1e-3,
                "max_steps": 4, "batch_size": 8, "save_steps": 2, "logging_steps": 1}


@pytest.fixture(scope="module")
def ipo_run(world):
    ctx = StageContext(world["run_dir"], "IPO")
    ipo.run_stage(dict(IPO_SETTINGS), ctx)
    return ctx.out_dir


def test_ipo_loss_starts_at_the_margin_term_and_falls(ipo_run):
    losses = [e["loss"] for e in trainer_log(ipo_run / "checkpoint-4") if "loss" in e]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    # Policy = reference (the init model) at step 1, so Δ = 0 and the IPO loss is (0 - 1/(2β))² = 25.
    assert losses[0] == pytest.approx((1 / (2 * 0.1)) ** 2, rel=1e-4)
    assert losses[-1] < losses[0]


def test_ipo_checkpoints_load_and_provenance(world, ipo_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert sorted(p.name for p in ipo_run.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    for d in (ipo_run / "checkpoint-2", ipo_run):
        AutoModelForCausalLM.from_pretrained(str(d))
        AutoTokenizer.from_pretrained(str(d))
    prov = read_json(ipo_run / "provenance.json")
    manifest = read_json(world["run_dir"] / "data" / "pairs_easy" / "manifest.json")
    assert prov["datasets"] == {"pairs_easy": manifest["sha256"]} and prov["hyperparameters"]["loss"] == "ipo"


def test_dpo_option_starts_at_log2(world):
    ctx = StageContext(world["run_dir"], "IPO.dpo")
    ipo.run_stage({**IPO_SETTINGS, "loss": "dpo", "max_steps": 1, "save_steps": 1}, ctx)
    losses = [e["loss"] for e in trainer_log(ctx.out_dir / "checkpoint-1") if "loss" in e]
    assert losses[0] == pytest.approx(math.log(2), rel=1e-4)   # -log σ(β·0) with policy = reference


@pytest.mark.parametrize("change, key", [({"bogus": 1}, "bogus"), ({"loss": "kto"}, "loss"),
                                         ({"beta": 0}, "beta"), ({"datasets": []}, "datasets")])
def test_bad_settings_name_the_stage_key(world, change, key):
    with pytest.raises(UserError, match=rf"stages\.IPO\.{key}\b"):
        ipo.run_stage({**IPO_SETTINGS, **change}, StageContext(world["run_dir"], "IPO"))
