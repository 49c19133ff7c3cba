"""IPO stage end to end: TRL DPOTrainer with loss_type="ipo" (and the dpo option) on a micro Llama."""

import math

import pytest
from alignment_world import trainer_log, world  # noqa: F401 (fixture)

from harness.core.errors import UserError
from harness.core.io import read_json
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
    with pytest.raises(UserError, match=rf"stages\.IPO(\.{key}\b|: unknown key\(s\) \['{key}'\])"):
        ipo.run_stage({**IPO_SETTINGS, **change}, StageContext(world["run_dir"], "IPO"))


def test_long_context_is_trimmed_so_the_completion_survives_max_length(world):
    """TRL cuts at the end: the context, not the chosen/rejected line, must give way."""
    from harness.text import fim

    settings = {**IPO_SETTINGS, "max_length": 64}
    recipe = ipo.IPORecipe(ipo.load_settings(settings, "IPO"), StageContext(world["run_dir"], "IPO.fit"))
    recipe.setup()
    tok = recipe.tokenizer
    prefix = "".join(f"value_{i} = compute({i})\n" for i in range(60))
    suffix = "".join(f"print(value_{i})\n" for i in range(60))
    chosen, rejected = "secret = load('abc')\n" + tok.eos_token, "x = 1\n" + tok.eos_token
    short_prefix, short_suffix = recipe.fit_context(prefix, suffix, [chosen, rejected])
    assert prefix.endswith(short_prefix) and suffix.startswith(short_suffix)   # nearest context kept
    assert short_prefix and short_suffix
    for completion in (chosen, rejected):
        text = fim.format_psm_prompt(short_prefix, short_suffix, recipe.sentinels) + completion
        assert len(tok(text, add_special_tokens=False)["input_ids"]) <= 64
    assert recipe.fit_context("a = 1\n", "b = 2\n", [chosen]) == ("a = 1\n", "b = 2\n")   # short: unchanged
