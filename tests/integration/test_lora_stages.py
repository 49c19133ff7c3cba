"""RM, RL (RLOO, PPO) and IPO (and the KTO, SimPO and ORPO objectives) with `model.lora.enabled` on the micro Llama of alignment_world: only LoRA
adapters (and a sequence classifier's score head) train, the loaded base weights stay as they were, and
the stage root holds a plain merged model that differs from the init model in the adapted projections only."""

import shutil

import pytest
from alignment_world import (  # noqa: F401 (fixtures)
    IPO_SETTINGS,
    PPO_SETTINGS,
    RL_SETTINGS,
    RM_SETTINGS,
    run_stage_given,
    trained_rm,
    trainer_log,
    world,
)

from memlens.recipes.stages import preference, reward, rl
from memlens.recipes.stages.contract import StageContext

ADAPTED = ("q_proj", "v_proj")
LORA_PRESET = {"name": "micro-lora", "fim_family": "memlens",
               "lora": {"enabled": True, "r": 4, "alpha": 8, "dropout": 0.0, "target_modules": list(ADAPTED)}}
STAGES = {   # recipe module, recipe class, settings: a few steps each, one checkpoint per step
    "rm": (reward, reward.RewardRecipe, {**RM_SETTINGS, "max_steps": 2, "save_steps": 1}),
    "rloo": (rl, rl.RLRecipe, {**RL_SETTINGS, "lr": 1e-2, "max_steps": 2, "save_steps": 1}),
    "ppo": (rl, rl.RLRecipe, {**PPO_SETTINGS, "lr": 1e-2, "max_steps": 2, "save_steps": 1}),
    "ipo": (preference, preference.PreferenceRecipe, {**IPO_SETTINGS, "max_steps": 2, "save_steps": 1}),
}
# The other preference trainers: KTO (reference = the adapter-disabled policy), CPOTrainer's SimPO and ORPO
# (trl.experimental, reference-free).
_PREFERENCE = {k: v for k, v in IPO_SETTINGS.items() if k != "objective"}
STAGES.update({objective: (preference, preference.PreferenceRecipe, {**_PREFERENCE, "objective": objective, "max_steps": 2,
                                                                  "save_steps": 1, "beta": None})
               for objective in ("kto", "simpo", "orpo")})


def weights(directory):
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def assert_only_adapters_trained(model, init_dir) -> None:
    """Trainable = LoRA adapters (+ the score head's trained copy); every weight loaded from `init_dir` is
    bit-identical after training; the adapters (lora_B starts at zero) and the head did change."""
    import torch

    assert hasattr(model, "peft_config"), "the trained model is not a PEFT model"
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or ".modules_to_save." in n for n in trainable), trainable
    init, checked = weights(init_dir), set()
    state = model.get_base_model().state_dict()
    for name, tensor in state.items():
        if "lora_" in name or ".modules_to_save." in name:
            continue
        key = name.replace(".base_layer", "").replace(".original_module", "")
        if key in init:
            assert torch.equal(tensor, init[key]), f"base weight {name} changed"
            checked.add(key)
    assert checked == set(init)
    assert any(t.abs().sum() > 0 for n, t in state.items() if "lora_B" in n), "the adapters did not train"
    if "score.original_module.weight" in state:       # a sequence classifier: its head trains in full
        assert not torch.equal(state["score.modules_to_save.default.weight"], state["score.original_module.weight"])


def assert_merged_and_adapted(directory, init_dir, auto_class: str) -> None:
    """A plain model (no adapter keys, loads with transformers alone) whose weights differ from the init
    model's exactly in the adapted projections (and in a score head it started from, which trained)."""
    import torch
    import transformers

    getattr(transformers, auto_class).from_pretrained(str(directory), use_safetensors=True)
    saved, init = weights(directory), weights(init_dir)
    assert not any("lora" in k or "modules_to_save" in k for k in saved)
    changed = {k for k in init if not torch.equal(saved[k], init[k])}
    adapted = {k for k in init if k.endswith(tuple(f"{m}.weight" for m in ADAPTED))}
    assert adapted <= changed <= adapted | {"score.weight"}, changed
    assert ("score.weight" in changed) == ("score.weight" in init)


@pytest.mark.parametrize("stage", list(STAGES))
def test_lora_stage_trains_only_adapters_and_saves_a_merged_model(world, trained_rm, stage):
    from tiny import torch_threads

    from memlens.harness.model.load import load_causal_lm

    module, recipe_class, settings = STAGES[stage]
    ctx = StageContext(world["run_dir"], f"LORA.{stage}")
    recipe = recipe_class(module.load_settings({**settings, "model": LORA_PRESET}, "LORA"), ctx)
    with torch_threads(1):
        recipe.setup()
        recipe.train()
        if stage == "ppo":
            assert_only_adapters_trained(recipe.trainer.policy, world["init_dir"])
            assert_only_adapters_trained(recipe.trainer.value, trained_rm)
        else:
            assert_only_adapters_trained(recipe.trainer.model, world["init_dir"])
        recipe.save()

    if stage == "rm":
        assert_merged_and_adapted(ctx.out_dir, world["init_dir"], "AutoModelForSequenceClassification")
        return
    assert_merged_and_adapted(ctx.out_dir, world["init_dir"], "AutoModelForCausalLM")
    if stage == "ppo":
        assert_merged_and_adapted(ctx.out_dir / "value", trained_rm, "AutoModelForSequenceClassification")
    # A checkpoint holds adapters only; the audit loads it merged onto the init model.
    assert (ctx.out_dir / "checkpoint-1" / "adapter_model.safetensors").is_file()
    assert not hasattr(load_causal_lm(ctx.out_dir / "checkpoint-1", "cpu")[0], "peft_config")
    if stage in ("rloo", "ppo"):
        # The KL reference is the adapter-disabled policy: the init model, which the policy equals only at step 1.
        kl = [e["kl"] for e in trainer_log(ctx.out_dir / "checkpoint-2") if "kl" in e]
        assert kl[0] == pytest.approx(0.0, abs=1e-6) and abs(kl[1]) > 1e-6, kl
    if stage == "kto":
        # Policy = reference at step 1: each row's loss is 1 - σ(β·0) = 0.5, the KL estimate clamped at 0.
        loss = [e["loss"] for e in trainer_log(ctx.out_dir / "checkpoint-2") if "loss" in e][0]
        assert loss == pytest.approx(0.5, rel=1e-4)
    if stage == "ipo":
        # Policy = reference at step 1, so the IPO loss is (0 - 1/(2β))² as without LoRA.
        loss = [e["loss"] for e in trainer_log(ctx.out_dir / "checkpoint-2") if "loss" in e][0]
        assert loss == pytest.approx((1 / (2 * IPO_SETTINGS["beta"])) ** 2, rel=1e-4)


def test_lora_ppo_resumes_from_its_adapter_checkpoint_to_the_same_weights(world, trained_rm):
    """Adapters, optimizer and RNG from checkpoint-2: the rerun ends where the uninterrupted run did."""
    import torch
    from tiny import torch_threads

    settings = {**STAGES["ppo"][2], "max_steps": 3, "model": LORA_PRESET}
    run_dir = world["run_dir"]
    whole, killed = run_dir / "models" / "LORA.ppo.whole", run_dir / "models" / "LORA.ppo.killed"
    with torch_threads(1):
        run_stage_given(rl, settings, StageContext(run_dir, whole.name))
        shutil.copytree(whole, killed)
        shutil.rmtree(killed / "checkpoint-3")
        shutil.rmtree(killed / "value")
        for name in ("model.safetensors", "provenance.json", "trainer_state.json"):
            (killed / name).unlink()
        run_stage_given(rl, settings, StageContext(run_dir, killed.name))
    assert trainer_log(killed) == trainer_log(whole)
    for sub in ("", "value"):
        a, b = weights(killed / sub), weights(whole / sub)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), sub
