"""RLFT stage end to end: RLOO (and GRPO) on a micro Llama, rewarded by the session's pointwise RM."""

import math
import shutil

import pytest
from alignment_world import RL_SETTINGS, run_stage_given, trained_rm, trainer_log, world  # noqa: F401 (fixtures)

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_json, read_jsonl
from memlens.recipes.stages import rl
from memlens.recipes.stages.contract import StageContext


@pytest.fixture(scope="module")
def rloo_run(world, trained_rm):
    ctx = StageContext(world["run_dir"], "RLFT.1/beta=0.1")
    run_stage_given(rl, RL_SETTINGS, ctx)
    return ctx.out_dir


def test_rloo_runs_with_finite_loss_and_zero_kl_at_the_start(rloo_run):
    log = [e for e in trainer_log(rloo_run / "checkpoint-3") if "kl" in e]
    assert [e["step"] for e in log] == [1, 2, 3]
    assert all(math.isfinite(e["loss"]) and math.isfinite(e["kl"]) and math.isfinite(e["reward"]) for e in log)
    # Step 1 samples before any update: the policy *is* its reference (the init model), so KL is 0.
    assert log[0]["kl"] == pytest.approx(0.0, abs=1e-6)
    # Later the policy has moved and the reference has not: the KL is measured against a fixed init model.
    assert max(abs(e["kl"]) for e in log[1:]) > 1e-6


def test_reference_model_is_the_init_model(world, trained_rm):
    import torch
    from trl import RLOOConfig, RLOOTrainer

    recipe = rl.RLRecipe(rl.load_settings(RL_SETTINGS, "RLFT.1"), StageContext(world["run_dir"], "RLFT.ref"))
    recipe.setup()
    assert recipe.policy.config._name_or_path == str(world["init_dir"])
    args = RLOOConfig(output_dir=str(recipe.ctx.out_dir), beta=0.1, num_generations=4,
                      per_device_train_batch_size=4, use_cpu=True, bf16=False, report_to="none")
    trainer = RLOOTrainer(model=recipe.policy, reward_funcs=[recipe.reward], args=args,
                          train_dataset=recipe.dataset(), processing_class=recipe.tokenizer)
    ref, init = trainer.ref_model.state_dict(), recipe.policy.state_dict()
    assert trainer.ref_model is not trainer.model and ref.keys() == init.keys()
    assert all(torch.equal(ref[k], init[k]) for k in init)


def test_checkpoints_load_and_provenance_names_init_and_rm(world, rloo_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert sorted(p.name for p in rloo_run.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    for ckpt in (rloo_run / "checkpoint-2", rloo_run):
        AutoModelForCausalLM.from_pretrained(str(ckpt))
        AutoTokenizer.from_pretrained(str(ckpt))
    prov = read_json(rloo_run / "provenance.json")
    assert prov["init_model"].endswith("models/FT") and prov["reward_model"].endswith("models/RM.1")
    assert set(prov["datasets"]) == {"sd_prompts", "pd_code"} and prov["hyperparameters"]["beta"] == 0.1


def test_reward_evaluation_pairs_the_init_and_trained_policy_on_fixed_prompts(world, rloo_run):
    from transformers import AutoModelForCausalLM

    from memlens.recipes.stages import rl_eval
    from memlens.recipes.stages.models import stop_generation_at_family_stops

    record = read_json(rloo_run / rl_eval.EVAL_FILE)
    recipe = rl.RLRecipe(rl.load_settings(RL_SETTINGS, "RLFT.1"), StageContext(world["run_dir"], "RLFT.eval"))
    recipe.setup()
    examples = rl.training_examples(recipe.rows, recipe.sentinels)
    n = recipe.cfg.eval_prompts
    assert record["n_prompts"] == min(n, len(examples)) == len(record["initial"]) == len(record["final"])
    assert record["prompt_ids"] == [e["id"] for e in rl_eval.eval_examples(examples, n, 0)]
    # "initial" is the init model's reward, reproducibly: the same seed draws the same completions.
    init = AutoModelForCausalLM.from_pretrained(str(world["init_dir"]))
    stop_generation_at_family_stops(init, recipe.tokenizer, recipe.sentinels)    # as the recipe loads it
    chosen = rl_eval.eval_examples(examples, n, 0)
    kwargs = dict(samples=4, max_new_tokens=16, temperature=1.0, seed=0)
    again = rl_eval.prompt_rewards(init, recipe.tokenizer, recipe.reward, chosen, **kwargs)
    assert again == pytest.approx(record["initial"], abs=1e-5)
    # A policy compared with itself changes by exactly 0 on every prompt (common random numbers).
    same = rl_eval.evaluate(lambda: init, init, recipe.tokenizer, recipe.reward, examples, n_prompts=6,
                            out_dir=recipe.ctx.out_dir, **kwargs)
    assert same["change"] == 0.0 and (same["up"], same["down"]) == (0, 0)
    # The stage stored the initial policy's rewards for the next sweep point with the same init, RM and
    # sampling settings (other RL stages of this module's world store theirs beside it, under other identities).
    from memlens.harness.model.load import model_fingerprint

    identity = {"init_model": model_fingerprint(world["init_dir"]), "reward_model": model_fingerprint(recipe.rm_dir),
                "prompt_ids": record["prompt_ids"],
                **{k: record[k] for k in ("samples", "max_new_tokens", "temperature", "seed")}}
    stored = [read_json(p) for p in (world["run_dir"] / rl_eval.CACHE_SUBDIR).glob("*.json")]
    assert [r["initial"] for r in stored if all(r.get(k) == v for k, v in identity.items())] == [record["initial"]]
    # The trained policy's reward was measured, not copied: it differs on some prompt.
    assert record["final"] != pytest.approx(record["initial"], abs=1e-6)


def test_reward_is_the_rm_score_of_the_psm_text_it_was_trained_on(world, trained_rm):
    """The RL reward of (prefix, completion, suffix) equals the RM stage's own score of that example."""
    recipe = rl.RLRecipe(rl.load_settings(RL_SETTINGS, "RLFT.1"), StageContext(world["run_dir"], "RLFT.x"))
    recipe.setup()
    rows = world["datasets"]["rm_easy"][:6]
    texts = recipe.reward.texts([r["completion"] for r in rows], [r["prefix"] for r in rows],
                                [r["suffix"] for r in rows])
    assert all(t.startswith("<fim_prefix>") and t.endswith("<eos>") for t in texts)
    assert recipe.reward.max_length == 512                   # the RM's own truncation budget, from its provenance
    rewards = recipe.reward(prompts=[""] * 6, completions=[r["completion"] for r in rows],
                            prefix=[r["prefix"] for r in rows], suffix=[r["suffix"] for r in rows])
    stored = {r["id"]: r["score"] for r in read_jsonl(trained_rm / "scores" / "rm_easy.jsonl")}
    assert rewards == pytest.approx([stored[r["id"]] for r in rows], abs=1e-4)


def test_killed_rl_stage_resumes_from_its_checkpoint(world, rloo_run):
    copy = world["run_dir"] / "models" / "RLFT.resume"
    shutil.copytree(rloo_run, copy)
    shutil.rmtree(copy / "checkpoint-3")
    for name in ("model.safetensors", "provenance.json"):
        (copy / name).unlink()
    kept = (copy / "checkpoint-2" / "model.safetensors").stat().st_mtime_ns
    run_stage_given(rl, RL_SETTINGS, StageContext(world["run_dir"], "RLFT.resume"))
    assert (copy / "checkpoint-2" / "model.safetensors").stat().st_mtime_ns == kept
    state = read_json(copy / "checkpoint-3" / "trainer_state.json")
    assert state["global_step"] == 3 and (copy / "provenance.json").is_file()


def test_grpo_alternative_runs_with_a_reference(world, trained_rm):
    ctx = StageContext(world["run_dir"], "RLFT.grpo")
    run_stage_given(rl, {**RL_SETTINGS, "algorithm": "grpo", "max_steps": 2}, ctx)
    log = [e for e in trainer_log(ctx.out_dir / "checkpoint-2") if "kl" in e]
    assert len(log) == 2 and log[0]["kl"] == pytest.approx(0.0, abs=1e-6)
    assert all(math.isfinite(e["loss"]) for e in log)


@pytest.mark.parametrize("change, message", [
    ({"bogus": 1}, r"stages\.RLFT\.3: unknown key\(s\) \['bogus'\]; valid keys are"),
    ({"algorithm": "a2c"}, r"stages\.RLFT\.3\.algorithm\b.*rloo, grpo, ppo"),
    ({"algorithm": "grpo", "beta": 0.0}, r"stages\.RLFT\.3\.beta\b.*beta > 0"),
    ({"num_generations": 1}, r"stages\.RLFT\.3\.num_generations\b"),
    ({"reward_model": ""}, r"stages\.RLFT\.3\.reward_model\b"), ({"prompts": []}, r"stages\.RLFT\.3\.prompts\b")])
def test_bad_settings_name_the_stage_key(world, change, message):
    with pytest.raises(UserError, match=message):
        run_stage_given(rl, {**RL_SETTINGS, **change}, StageContext(world["run_dir"], "RLFT.3/beta=0.5"))


def test_reward_evaluation_reuses_the_initial_policys_rewards_only_for_the_same_models(world, tmp_path):
    """A second sweep point of a stage (same init, RM, prompts, settings) does not load or sample the
    initial policy again; another RM (or any other setting) computes afresh."""
    from transformers import AutoModelForCausalLM

    from memlens.recipes.stages import rl_eval

    recipe = rl.RLRecipe(rl.load_settings(RL_SETTINGS, "RLFT.1"), StageContext(world["run_dir"], "RLFT.cache"))
    recipe.setup()
    init = AutoModelForCausalLM.from_pretrained(str(world["init_dir"]))
    examples = rl.training_examples(recipe.rows, recipe.sentinels)
    loads = []

    def load_initial():
        loads.append(1)
        return init

    common = dict(n_prompts=5, samples=2, max_new_tokens=8, temperature=1.0, seed=3, cache_dir=tmp_path)
    first = rl_eval.evaluate(load_initial, init, recipe.tokenizer, recipe.reward, examples,
                             out_dir=tmp_path / "a", cache_models={"init_model": "x", "reward_model": "r1"}, **common)
    second = rl_eval.evaluate(load_initial, init, recipe.tokenizer, recipe.reward, examples,
                              out_dir=tmp_path / "b", cache_models={"init_model": "x", "reward_model": "r1"}, **common)
    assert len(loads) == 1 and second["initial_from_cache"] and not first["initial_from_cache"]
    assert second["initial"] == first["initial"] and second["change"] == 0.0
    other = rl_eval.evaluate(load_initial, init, recipe.tokenizer, recipe.reward, examples,
                             out_dir=tmp_path / "c", cache_models={"init_model": "x", "reward_model": "r2"}, **common)
    assert len(loads) == 2 and not other["initial_from_cache"]
    reseeded = rl_eval.evaluate(load_initial, init, recipe.tokenizer, recipe.reward, examples, out_dir=tmp_path / "d",
                                cache_models={"init_model": "x", "reward_model": "r1"}, **{**common, "seed": 4})
    assert len(loads) == 3 and not reseeded["initial_from_cache"]
