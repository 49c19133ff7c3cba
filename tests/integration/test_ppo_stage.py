"""RLFT stage with `algorithm: ppo` (recipes/stages/ppo.py) end to end on the micro Llama of alignment_world."""

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from alignment_world import PPO_SETTINGS, run_stage_given, trained_rm, trainer_log, world  # noqa: F401 (fixtures)

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_json
from memlens.recipes.stages import rl
from memlens.recipes.stages.contract import StageContext

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ppo_run(world, trained_rm):
    ctx = StageContext(world["run_dir"], "RLFT.ppo")
    run_stage_given(rl, PPO_SETTINGS, ctx)
    return ctx.out_dir


def test_first_step_policy_is_its_reference(ppo_run):
    log = trainer_log(ppo_run / "checkpoint-3")
    assert [e["step"] for e in log] == [1, 2, 3]
    first = log[0]
    # Step 1 samples from the init model, which is also the reference: KL 0. With one PPO epoch of one
    # minibatch the update is computed at the sampling policy: ratio 1, nothing clipped.
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)
    assert first["ppo/clipfrac"] == 0.0 and first["ppo/approx_kl"] == pytest.approx(0.0, abs=1e-10)
    assert max(abs(e["kl"]) for e in log[1:]) > 1e-6         # the policy moved, the reference did not
    for e in log:
        for key in ("reward", "reward_std", "kl", "loss", "ppo/clipfrac", "ppo/approx_kl", "ppo/value_loss",
                    "ppo/policy_loss", "ppo/entropy"):
            assert math.isfinite(e[key]), (key, e)


def test_checkpoints_load_with_their_value_model_and_evidence_reads_the_log(world, ppo_run):
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from memlens.harness.report.evidence import log_history, rl_evidence

    assert sorted(p.name for p in ppo_run.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]
    for ckpt in (ppo_run / "checkpoint-2", ppo_run):
        AutoModelForCausalLM.from_pretrained(str(ckpt))
        AutoTokenizer.from_pretrained(str(ckpt))
        AutoModelForSequenceClassification.from_pretrained(str(ckpt / "value"))
    prov = read_json(ppo_run / "provenance.json")
    assert prov["stage"] == "rl" and prov["reward_model"].endswith("models/RM.1")
    assert prov["hyperparameters"]["algorithm"] == "ppo" and prov["hyperparameters"]["gae_lambda"] == 0.95
    evidence = rl_evidence(log_history(ppo_run))
    assert evidence["steps_logged"] == 3 and evidence["kl_final"] is not None


def toy_run(world, alpha: float, steps: int):
    """PPO on the micro model with a toy reward: +1 per completion token in the upper half of the vocabulary
    (about half of an untrained model's samples, so the signal is dense). Returns the mean reward per step."""
    recipe = rl.RLRecipe(rl.load_settings({**PPO_SETTINGS, "beta": alpha, "lr": 1e-2, "ppo_epochs": 4,
                                            "max_steps": steps, "num_generations": 4, "save_steps": 10_000,
                                            "max_completion_length": 8}, "RLFT.toy"),
                         StageContext(world["run_dir"], f"RLFT.toy/alpha={alpha}"))
    recipe.setup()
    tokenizer = recipe.tokenizer
    upper = len(tokenizer) // 2

    def upper_half_tokens(completions, **_):
        return [float(sum(i >= upper for i in tokenizer(c, add_special_tokens=False)["input_ids"]))
                for c in completions]

    recipe.reward = upper_half_tokens
    recipe.train_ppo()
    return [e["reward"] for e in recipe.trainer.log_history]


def test_toy_reward_rises_and_a_large_alpha_holds_it_back(world, trained_rm):
    from tiny import torch_threads

    with torch_threads(1):
        free = toy_run(world, alpha=0.0, steps=TOY_STEPS)
        held = toy_run(world, alpha=TOY_LARGE_ALPHA, steps=TOY_STEPS)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    # Rewards are token counts of the re-encoded text (measured: ~3.4 -> ~11 at α = 0, ~3.6 at α = 2).
    assert mean(free[-5:]) > mean(free[:5]) + 2.0, free
    assert mean(free[-5:]) > mean(held[-5:]) + 2.0, (free, held)


TOY_STEPS, TOY_LARGE_ALPHA = 40, 2.0


# --- SIGKILL mid-stage, rerun: the same weights as a run that was never interrupted --------------------------

RESUME_SETTINGS = {**PPO_SETTINGS, "max_steps": 12, "save_steps": 2, "ppo_epochs": 2}
STAGE_SCRIPT = """
import sys
sys.path[:0] = [{repo!r}]
from memlens.recipes.stages import rl
from memlens.recipes.stages.contract import StageContext
from pathlib import Path
rl.run_stage(rl.load_settings({settings!r}, {name!r}.split("/")[0]), StageContext(Path({run_dir!r}), {name!r}))
"""


def stage_process(run_dir: Path, name: str) -> subprocess.Popen:
    # One thread in every run: the reference and the resumed run must do the same float arithmetic.
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    code = STAGE_SCRIPT.format(repo=str(REPO), settings=RESUME_SETTINGS, run_dir=str(run_dir), name=name)
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)


def complete_checkpoints(out_dir: Path) -> list[int]:
    return sorted(int(p.parent.name.split("-")[1]) for p in out_dir.glob("checkpoint-*/trainer_state.json"))


def weights(directory: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(directory / "model.safetensors"))


def test_killed_ppo_stage_resumes_to_the_uninterrupted_weights(world, trained_rm):
    import torch

    run_dir = world["run_dir"]
    whole = stage_process(run_dir, "RLFT.whole")
    killed = stage_process(run_dir, "RLFT.killed")
    killed_dir = run_dir / "models" / "RLFT.killed"
    try:
        deadline = time.time() + 300
        while not complete_checkpoints(killed_dir) and killed.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert killed.poll() is None, f"the stage exited before it could be killed: {killed.stderr.read()[-2000:]}"
        os.killpg(killed.pid, signal.SIGKILL)   # our own child's process group only
    finally:
        if killed.poll() is None:
            os.killpg(killed.pid, signal.SIGKILL)
        killed.wait()
        assert whole.wait(timeout=300) == 0, whole.stderr.read()[-3000:]
    assert not (killed_dir / "provenance.json").exists(), "the stage finished before it was killed"
    before = complete_checkpoints(killed_dir)
    assert before and before[-1] < 12

    rerun = stage_process(run_dir, "RLFT.killed")
    assert rerun.wait(timeout=300) == 0, rerun.stderr.read()[-3000:]
    killed.stderr.close(), whole.stderr.close(), rerun.stderr.close()
    whole_dir = run_dir / "models" / "RLFT.whole"
    assert complete_checkpoints(killed_dir) == complete_checkpoints(whole_dir) == [2, 4, 6, 8, 10, 12]
    for sub in ("", "value", "checkpoint-6", "checkpoint-6/value"):
        a, b = weights(killed_dir / sub), weights(whole_dir / sub)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), sub
    assert trainer_log(killed_dir) == trainer_log(whole_dir)
    embeddings = "model.embed_tokens.weight"      # and training did move the policy
    assert not torch.equal(weights(killed_dir)[embeddings], weights(world["init_dir"])[embeddings])


@pytest.mark.parametrize("change, key, hint", [
    ({"gae_lambda": 1.5}, "gae_lambda", r"\[0, 1\]"), ({"clip_range": 0}, "clip_range", "> 0"),
    ({"ppo_epochs": 0}, "ppo_epochs", "positive"), ({"target_kl": -1.0}, "target_kl", "null for a fixed"),
    ({"num_generations": 0}, "num_generations", "1..64"), ({"ppo_minibatches": 5}, "ppo_minibatches", "= 4"),
    ({"algorithm": "rloo", "gae_lambda": 0.9}, "gae_lambda", "set algorithm: ppo")])
def test_bad_ppo_settings_name_the_stage_key(world, change, key, hint):
    with pytest.raises(UserError, match=rf"stages\.RLFT\.3\.{key}\b.*{hint}"):
        run_stage_given(rl, {**PPO_SETTINGS, **change}, StageContext(world["run_dir"], "RLFT.3/beta=0.5"))
