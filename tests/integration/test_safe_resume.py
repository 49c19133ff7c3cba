"""A checkpoint folder is data, never code: resuming PPO from a checkpoint whose optimizer state was
replaced by a pickle that runs code is refused (exit-2 message naming the file), and the code never runs.
Real PPO (recipes/stages/ppo.py) on the micro world of the RL tests: two steps, a checkpoint after the first."""

from __future__ import annotations

import shutil

import pytest
from alignment_world import run_stage_given, trained_rm, world  # noqa: F401 (fixtures)

from memlens.harness.core.errors import UserError
from memlens.recipes.stages import rl
from memlens.recipes.stages.contract import StageContext

pytestmark = pytest.mark.slow
SETTINGS = {"init": "FT", "reward_model": "RM.1", "prompts": ["sd_prompts", "pd_code"], "algorithm": "ppo",
            "beta": 0.1, "lr": 1e-3, "max_steps": 2, "num_generations": 2, "prompts_per_step": 2,
            "max_completion_length": 8, "save_steps": 1, "ppo_epochs": 1}


class RunsCode:
    """Unpickling this calls exec: what a tampered optimizer.pt could hold."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


@pytest.mark.parametrize("file", ["optimizer.pt", "rng_state.pth"])
def test_resume_from_a_tampered_checkpoint_is_refused_without_running_its_code(world, trained_rm, tmp_path,  # noqa: F811
                                                                            file):
    import torch

    run_dir = world["run_dir"]
    source = StageContext(run_dir, "RLFT.safe_src")
    if not (source.out_dir / "checkpoint-1" / "trainer_state.json").is_file():
        run_stage_given(rl, SETTINGS, source)
    tampered = run_dir / "models" / f"RLFT.tampered_{file.split('.')[0]}"
    shutil.rmtree(tampered, ignore_errors=True)
    shutil.copytree(source.out_dir / "checkpoint-1", tampered / "checkpoint-1")
    marker = tmp_path / "code_ran"
    torch.save({"policy": RunsCode(marker), "value": {}, "torch": RunsCode(marker)}, tampered / "checkpoint-1" / file)

    with pytest.raises(UserError, match=rf"{tampered}/checkpoint-1/{file}: .*refused.*delete .*checkpoint-1"):
        run_stage_given(rl, SETTINGS, StageContext(run_dir, tampered.name))
    assert not marker.exists()
