"""The job driver's plan (recipes/launcher.py): dependency levels from the stage graph, each job's command line, and
the `launcher:` settings refused with the key."""

from __future__ import annotations

import sys

import pytest
from omegaconf import OmegaConf

from memlens.harness.cli import compose
from memlens.harness.core.errors import UserError
from memlens.recipes.launcher import check_launcher, dependency_levels, train_command
from memlens.recipes.plan import plan


def test_the_smoke_stages_fall_into_their_dependency_levels():
    levels = dependency_levels(plan(compose(["experiment=smoke"])))
    names = [sorted(s.model_name for s in level) for level in levels]
    # PT; FT.1, FT.2 and IPO start from PT; RM.1 from FT.2; the RL points from FT.1 with RM.1's reward
    assert names == [["PT"], ["FT.1", "FT.2", "IPO"], ["RM.1"], ["RLFT.1/beta=0.1", "RLFT.1/beta=0.5", "RLFT.4"]]


def test_a_job_is_memlens_train_of_its_model_with_the_runs_overrides():
    command = train_command(["experiment=smoke", "run_dir=/r"], {}, "RLFT.1/beta=0.1", has_stage_key=True)
    assert command == [sys.executable, "-m", "memlens", "train", "experiment=smoke", "run_dir=/r",
                       "stage='RLFT.1/beta=0.1'", "build_data=false"]
    swept = train_command(["experiment=rl_prompts", "stages.RLFT.4.beta=0.1"], {"stages.RLFT.4.beta": "0.1"},
                          "RLFT.4/beta=0.1", has_stage_key=False)
    assert swept[4:] == ["-m", "experiment=rl_prompts", "stages.RLFT.4.beta=choice(0.1)",
                         "+stage='RLFT.4/beta=0.1'", "build_data=false"]


@pytest.mark.parametrize("section, message", [
    ({"kind": "slurm"}, "launcher.kind='slurm'.*SLURM is not built yet"),
    ({"kind": "local", "parallel": 0}, "launcher.parallel=0"),
])
def test_bad_launcher_settings_name_the_key(section, message):
    with pytest.raises(UserError, match=message):
        check_launcher(OmegaConf.create({"launcher": section}))
    assert check_launcher(OmegaConf.create({"launcher": {"kind": None}})) is None
