"""The preference stage end to end (recipes/stages/preference.py): IPO through TRL DPOTrainer with loss_type="ipo", and every
other registered objective, on a micro Llama."""

import math

import pytest
from alignment_world import IPO_SETTINGS, run_stage_given, trainer_log, world  # noqa: F401 (fixture)

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_json
from memlens.harness.core.objectives import OBJECTIVES
from memlens.recipes.stages import preference
from memlens.recipes.stages.contract import StageContext


@pytest.fixture(scope="module")
def ipo_run(world):
    ctx = StageContext(world["run_dir"], "IPO")
    run_stage_given(preference, IPO_SETTINGS, ctx)
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
    assert prov["datasets"] == {"pairs_easy": manifest["sha256"]} and prov["hyperparameters"]["objective"] == "ipo"


def test_dpo_option_starts_at_log2(world):
    ctx = StageContext(world["run_dir"], "IPO.dpo")
    run_stage_given(preference, {**IPO_SETTINGS, "objective": "dpo", "max_steps": 1, "save_steps": 1}, ctx)
    losses = [e["loss"] for e in trainer_log(ctx.out_dir / "checkpoint-1") if "loss" in e]
    assert losses[0] == pytest.approx(math.log(2), rel=1e-4)   # -log σ(β·0) with policy = reference


@pytest.mark.parametrize("change, key", [({"bogus": 1}, "bogus"), ({"loss": "kto"}, "loss"),
                                         ({"beta": 0}, "beta"), ({"datasets": []}, "datasets")])
def test_bad_settings_name_the_stage_key(world, change, key):
    with pytest.raises(UserError, match=rf"stages\.IPO(\.{key}\b|: unknown key\(s\) \['{key}'\])"):
        run_stage_given(preference, {**IPO_SETTINGS, **change}, StageContext(world["run_dir"], "IPO"))


def test_long_context_is_trimmed_so_the_completion_survives_max_length(world):
    """TRL cuts at the end: the context, not the chosen/rejected line, must give way."""
    from memlens.harness.text import fim

    settings = {**IPO_SETTINGS, "max_length": 64}
    recipe = preference.PreferenceRecipe(preference.load_settings(settings, "IPO"), StageContext(world["run_dir"], "IPO.fit"))
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


# --- the other preference objectives (harness/core/objectives.py) ------------------------------------------------
OBJECTIVE_SETTINGS = {k: v for k, v in IPO_SETTINGS.items() if k not in ("objective", "beta")} | {
    "max_steps": 1, "save_steps": 1}


def test_the_default_objective_is_ipo_and_the_older_key_is_refused_naming_objective(world):
    """`objective: ipo` and no objective train byte-identical models; `loss: ipo` (the older key) stops with the fix."""
    with pytest.raises(UserError, match=r"stages\.IPO\.loss='ipo': the key is now `objective`; write objective: ipo"):
        preference.load_settings({**OBJECTIVE_SETTINGS, "loss": "ipo"}, "IPO")
    digests = set()
    for name, key in (("IPO.objective", {"objective": "ipo"}), ("IPO.default", {})):
        ctx = StageContext(world["run_dir"], name)
        run_stage_given(preference, {**OBJECTIVE_SETTINGS, "beta": 0.1, **key}, ctx)
        digests.add((ctx.out_dir / "model.safetensors").read_bytes())
        assert read_json(ctx.out_dir / "provenance.json")["hyperparameters"]["objective"] == "ipo"
    assert len(digests) == 1


# Step 1's loss with policy = reference, where it depends only on the log-ratios (derivable on paper); the
# objectives with an NLL term on the chosen completion carry it in the loss.
FIRST_LOSS = {"dpo": math.log(2),      # -log σ(0)
              "kto": 0.5}              # 1 - σ(β·0) per row, the KL estimate clamped at 0


@pytest.mark.parametrize("objective", [o for o in OBJECTIVES if o != "ipo"])   # every registered one besides IPO
def test_every_objective_trains_with_its_trl_trainer_and_scores_its_pairs(world, objective):
    from memlens.recipes.stages import preference_eval

    ctx = StageContext(world["run_dir"], f"PREF/objective={objective}")
    run_stage_given(preference, {**OBJECTIVE_SETTINGS, "objective": objective}, ctx)
    log = [e for e in trainer_log(ctx.out_dir / "checkpoint-1") if "loss" in e][0]
    assert math.isfinite(log["loss"]) and "logps/chosen" in log and "logps/rejected" in log
    if objective in FIRST_LOSS:
        assert log["loss"] == pytest.approx(FIRST_LOSS[objective], rel=1e-4)
    if objective == "dpo+sft":                 # log 2 + the chosen completion's mean NLL
        assert log["loss"] > math.log(2) + 1
    if objective in ("cpo", "orpo"):
        assert log["nll_loss"] > 0
    prov = read_json(ctx.out_dir / "provenance.json")["hyperparameters"]
    assert prov["objective"] == objective and prov["beta"] == OBJECTIVES[objective].beta
    record = read_json(ctx.out_dir / preference_eval.EVAL_FILE)
    assert record["objective"] == objective and record["n_pairs"] == 8 == len(record["final"]["chosen"])
    assert 0 <= record["accuracy"] <= 1 and record["chosen_change"] == pytest.approx(
        sum(b - a for a, b in zip(record["initial"]["chosen"], record["final"]["chosen"])) / 8)


def test_beta_per_objective_and_bad_objective_settings():
    base = {"init": "PT", "datasets": ["pairs_sd_base"]}
    assert preference.load_settings({**base, "objective": "simpo"}, "P").beta == 2.0
    assert preference.load_settings({**base, "objective": "dpo", "beta": {"ipo": 0.5}}, "P").beta == 0.1
    assert preference.load_settings({**base, "objective": "ipo", "beta": {"ipo": 0.5}}, "P").beta == 0.5
    assert preference.load_settings({**base, "beta": 0.3, "objective": "kto"}, "P").beta == 0.3
    for change, message in (({"objective": "rlhf"}, r"stages\.P\.objective='rlhf': use one of ipo, dpo"),
                            ({"objective": "dpo", "loss": "ipo"}, r"stages\.P\.loss='ipo': the key is now `objective`"),
                            ({"beta": {"dpoo": 0.1}}, r"stages\.P\.beta=.*unknown objective\(s\) \['dpoo'\]"),
                            ({"beta": "high"}, r"stages\.P\.beta='high': give a number"),
                            ({"sft_weight": -1}, r"stages\.P\.sft_weight=-1"),
                            ({"eval_pairs": -1}, r"stages\.P\.eval_pairs=-1")):
        with pytest.raises(UserError, match=message):
            preference.load_settings({**base, **change}, "P")


def test_kto_rows_are_the_same_pairs_unpaired():
    pairs = [{"prompt": "p1", "chosen": "a", "rejected": "b"}, {"prompt": "p2", "chosen": "c", "rejected": "d"}]
    assert preference.unpaired_rows(pairs) == [{"prompt": "p1", "completion": "a", "label": True},
                                        {"prompt": "p1", "completion": "b", "label": False},
                                        {"prompt": "p2", "completion": "c", "label": True},
                                        {"prompt": "p2", "completion": "d", "label": False}]
