"""A stage whose recipe and settings equal an earlier finished stage's is given that model, not retrained.

Same settings + same seed + same upstream models give the same model, so the run links the finished files
and records where they came from. The stage names below only label two stages with equal settings (the
experiments' FT.3 trains on PD.2 + SD, FT.1 on PD.1 + SD: they are not twins there).
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from memlens.harness.core.io import atomic_write_json, read_json
from memlens.recipes.orchestration.pipeline import train_stage
from memlens.recipes.orchestration.stage_plan import PlannedStage
from memlens.recipes.stages.registry import recipe_module

SETTINGS = {"init": "PT", "datasets": ["pd_1", "sd_base"], "epochs": 2, "lr": 1e-3}


def planned(name: str, recipe: str, settings: dict) -> PlannedStage:
    """A stage as the plan gives it: its settings parsed by its recipe."""
    return PlannedStage(name, name, recipe, recipe_module(recipe, name).load_settings(settings, name))


def finished_stage(run_dir, name: str, settings: dict) -> None:
    """A real saved micro model with a checkpoint and the provenance.json that marks a stage finished."""
    out = run_dir / "models" / name
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=32, max_position_embeddings=32))
    model.save_pretrained(out)
    model.save_pretrained(out / "checkpoint-2")
    (out / "checkpoint-2" / "trainer_state.json").write_text("{}")
    atomic_write_json(out / "provenance.json", {"model_name": name, "settings": settings, "datasets": {}, "seed": 0})


def test_identical_stage_reuses_the_finished_model_and_says_so(tmp_path, capsys):
    finished_stage(tmp_path, "FT.1", SETTINGS)
    ft1 = planned("FT.1", "sft", dict(SETTINGS))
    ft3 = planned("FT.3", "sft", dict(SETTINGS))

    result = train_stage(ft3, tmp_path, seed=0, device="cpu", done=[ft1])

    assert result["status"] == "reused"
    src, dst = tmp_path / "models" / "FT.1", tmp_path / "models" / "FT.3"
    for rel in ("model.safetensors", "config.json", "checkpoint-2/model.safetensors", "checkpoint-2/trainer_state.json"):
        assert (dst / rel).read_bytes() == (src / rel).read_bytes()
    prov = read_json(dst / "provenance.json")
    assert prov["reused_from"] == "FT.1" and prov["model_name"] == "FT.3" and prov["settings"] == SETTINGS
    assert not (dst / "pending_settings.json").exists()
    assert read_json(src / "provenance.json")["model_name"] == "FT.1"      # the source is untouched
    assert "FT.3" in capsys.readouterr().out

    again = train_stage(ft3, tmp_path, seed=0, device="cpu", done=[ft1])   # finished now: skipped
    assert again["status"] == "skipped"


def test_a_stage_with_other_settings_is_not_reused(tmp_path):
    from memlens.recipes.orchestration.pipeline import identical_finished_stage

    finished_stage(tmp_path, "FT.1", SETTINGS)
    ft1 = planned("FT.1", "sft", dict(SETTINGS))
    other = planned("FT.3", "sft", dict(SETTINGS, lr=2e-3))
    other_recipe = planned("RM.1", "reward", dict(SETTINGS))
    assert identical_finished_stage(tmp_path, other, [ft1]) is None
    assert identical_finished_stage(tmp_path, other_recipe, [ft1]) is None
    assert identical_finished_stage(tmp_path, planned("FT.3", "sft", dict(SETTINGS)), [ft1]) == ft1


def test_a_reuse_killed_mid_copy_is_redone_on_rerun(tmp_path):
    finished_stage(tmp_path, "FT.1", SETTINGS)
    ft1 = planned("FT.1", "sft", dict(SETTINGS))
    ft3 = planned("FT.3", "sft", dict(SETTINGS))
    torn = tmp_path / "models" / "FT.3"
    (torn / "checkpoint-2").mkdir(parents=True)              # the copy stopped after one whole checkpoint
    (torn / "checkpoint-2" / "trainer_state.json").write_text("{}")
    (torn / "checkpoint-2" / "model.safetensors").write_bytes(b"partial")
    result = train_stage(ft3, tmp_path, seed=0, device="cpu", done=[ft1])
    assert result["status"] == "reused"
    src = tmp_path / "models" / "FT.1"
    assert (torn / "checkpoint-2" / "model.safetensors").read_bytes() == (src / "checkpoint-2" / "model.safetensors").read_bytes()
    assert read_json(torn / "provenance.json")["reused_from"] == "FT.1"
