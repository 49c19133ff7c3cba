"""RM stage end to end on a micro Llama: pointwise (our BCE trainer) and pairwise (TRL RewardTrainer)."""

import math
import shutil

import pytest
from alignment_world import RM_SETTINGS, run_stage_given, trained_rm, trainer_log, world  # noqa: F401 (fixtures)

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_json, read_jsonl
from memlens.recipes.stages import reward
from memlens.recipes.stages.contract import StageContext


def test_pointwise_rm_separates_labels_on_its_training_data(world, trained_rm):
    summary = read_json(trained_rm / "scores" / "summary.json")
    train = summary["rm_easy"]
    assert train["split"] == "train" and summary["rm_easy_val"]["split"] == "eval"
    assert train["by_label"]["1"]["mean"] > train["by_label"]["0"]["mean"]
    assert train["auc"] > 0.8
    rows = read_jsonl(trained_rm / "scores" / "rm_easy.jsonl", required=("id", "label", "score", "source"))
    expected = {r["id"]: r["label"] for r in world["datasets"]["rm_easy"]}
    assert {r["id"]: r["label"] for r in rows} == expected
    assert len(rows) == len(expected)


def test_rm_checkpoints_load_and_score_like_the_scores_file(world, trained_rm):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    assert sorted(p.name for p in trained_rm.glob("checkpoint-*")) == ["checkpoint-10", "checkpoint-20"]
    for ckpt in trained_rm.glob("checkpoint-*"):
        assert (ckpt / "model.safetensors").is_file() and (ckpt / "tokenizer.json").is_file()
        AutoModelForSequenceClassification.from_pretrained(str(ckpt), num_labels=1)
    model = AutoModelForSequenceClassification.from_pretrained(str(trained_rm), num_labels=1)
    tok = AutoTokenizer.from_pretrained(str(trained_rm))
    assert model.config.pad_token_id == tok.pad_token_id == 0
    recipe = reward.RewardRecipe(reward.load_settings(RM_SETTINGS, "RM.1"), StageContext(world["run_dir"], "RM.1"))
    recipe.tokenizer = tok
    from memlens.harness.text import fim
    recipe.sentinels = fim.detect_sentinels(tok)
    row = world["datasets"]["rm_easy"][0]
    text = recipe.psm_text(row, row["completion"])
    assert text == f"<fim_prefix>{row['prefix']}<fim_suffix>{row['suffix']}<fim_middle>{row['completion']}<eos>"
    stored = {r["id"]: r["score"] for r in read_jsonl(trained_rm / "scores" / "rm_easy.jsonl")}
    assert reward.score_texts(model, tok, [text])[0] == pytest.approx(stored[row["id"]], abs=1e-4)


def test_provenance_records_datasets_init_and_settings(world, trained_rm):
    prov = read_json(trained_rm / "provenance.json")
    manifest = read_json(world["run_dir"] / "data" / "rm_easy" / "manifest.json")
    assert prov["datasets"]["rm_easy"] == manifest["sha256"]
    assert set(prov["datasets"]) == {"rm_easy", "rm_easy_val"}
    assert prov["settings"] == RM_SETTINGS and prov["hyperparameters"]["objective"] == "pointwise"
    assert prov["init_model"].endswith("models/FT") and prov["seed"] == 0


def test_finished_stage_with_same_settings_is_skipped(world, trained_rm):
    before = (trained_rm / "provenance.json").stat().st_mtime_ns
    run_stage_given(reward, RM_SETTINGS, StageContext(world["run_dir"], "RM.1"))
    assert (trained_rm / "provenance.json").stat().st_mtime_ns == before


def test_killed_stage_resumes_from_its_checkpoint(world, trained_rm):
    """Delete the final model, provenance and the last checkpoint: the rerun continues from checkpoint-10."""
    import torch
    from safetensors.torch import load_file

    copy = world["run_dir"] / "models" / "RM.resume"
    shutil.copytree(trained_rm, copy)
    shutil.rmtree(copy / "checkpoint-20")
    for name in ("model.safetensors", "config.json", "provenance.json"):
        (copy / name).unlink()
    kept = (copy / "checkpoint-10" / "model.safetensors").stat().st_mtime_ns
    run_stage_given(reward, RM_SETTINGS, StageContext(world["run_dir"], "RM.resume"))
    assert (copy / "checkpoint-10" / "model.safetensors").stat().st_mtime_ns == kept  # not retrained
    assert read_json(copy / "checkpoint-20" / "trainer_state.json")["global_step"] == 20
    assert (copy / "provenance.json").is_file()
    resumed, original = load_file(copy / "model.safetensors"), load_file(trained_rm / "model.safetensors")
    # Same seed, data order and restored optimizer/RNG state: the resumed run ends where the uninterrupted one did.
    assert all(torch.allclose(resumed[k], original[k], atol=1e-5) for k in original)


def test_pairwise_rm_trains_with_reward_trainer(world):
    ctx = StageContext(world["run_dir"], "RM.pairs")
    run_stage_given(reward, {"init": "FT", "objective": "pairwise", "datasets": ["pairs_easy"], "lr": 3e-3,
                      "max_steps": 4, "batch_size": 4, "save_steps": 4, "logging_steps": 1,
                      "score_datasets": ["rm_easy_val"]}, ctx)
    losses = [e["loss"] for e in trainer_log(ctx.out_dir / "checkpoint-4") if "loss" in e]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    rows = read_jsonl(ctx.out_dir / "scores" / "pairs_easy.jsonl")
    assert sorted({r["side"] for r in rows}) == ["chosen", "rejected"] and len(rows) == 16
    assert {r["label"] for r in rows if r["side"] == "chosen"} == {1}
    # A scored-only pointwise set (the Fig. 2 view of an RM that never trained on it): one row per example.
    scored = read_jsonl(ctx.out_dir / "scores" / "rm_easy_val.jsonl")
    assert [(r["id"], r["label"]) for r in scored] == [(r["id"], r["label"]) for r in world["datasets"]["rm_easy_val"]]
    summary = read_json(ctx.out_dir / "scores" / "summary.json")
    assert summary["rm_easy_val"]["split"] == "scored" and summary["pairs_easy"]["split"] == "train"


@pytest.mark.parametrize("change, key", [({"bogus": 1}, "bogus"), ({"objective": "listwise"}, "objective"),
                                         ({"datasets": []}, "datasets"), ({"lr": 0}, "lr"),
                                         ({"init": ""}, "init"), ({"deepspeed": "/nonexistent.json"}, "deepspeed")])
def test_bad_settings_name_the_stage_key(world, change, key):
    with pytest.raises(UserError, match=rf"stages\.RM\.7(\.{key}\b|: unknown key\(s\) \['{key}'\])"):
        run_stage_given(reward, {**RM_SETTINGS, **change}, StageContext(world["run_dir"], "RM.7"))
