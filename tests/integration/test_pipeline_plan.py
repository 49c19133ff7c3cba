"""Planning without training: stage order, sweep expansion and names, references, errors (in-process)."""

from __future__ import annotations

import re

import pytest

from memlens.harness.cli import compose, expand_sweep
from memlens.harness.core.errors import UserError
from memlens.recipes.orchestration.pipeline import train_main
from memlens.recipes.orchestration.stage_plan import (
    flatten_stages,
    order_stages,
    plan,
    run_directory,
    sweep_assignments,
)


def compose_point(overrides: list[str], multirun: bool = False):
    if not multirun:
        return [compose(overrides)]
    return [compose(o, p) for o, p in expand_sweep(overrides)]


def test_nested_and_flat_stage_names_flatten_to_dotted_names():
    stages = flatten_stages({"PT": {"recipe": "pretrain"}, "FT": {"1": {"recipe": "sft"}, "2": {"recipe": "sft"}},
                             "RM.1": {"recipe": "reward"}})
    assert list(stages) == ["PT", "FT.1", "FT.2", "RM.1"]
    with pytest.raises(UserError, match=r"stages\.FT\.3 is empty"):
        flatten_stages({"FT": {"3": {}}})


def test_order_follows_init_and_reward_model_references():
    stages = {"RLFT.1": {"init": "FT.1", "reward_model": "RM.1"}, "RM.1": {"init": "FT.2"},
              "FT.1": {"init": "PT"}, "FT.2": {"init": "PT"}, "PT": {}, "IPO": {"init": "PT"}}
    order = order_stages(stages)
    for before, after in [("PT", "FT.1"), ("FT.1", "RLFT.1"), ("RM.1", "RLFT.1"), ("FT.2", "RM.1"), ("PT", "IPO")]:
        assert order.index(before) < order.index(after)
    with pytest.raises(UserError, match="cycle"):
        order_stages({"A": {"init": "B"}, "B": {"init": "A"}})


def test_sweep_grid_and_explicit_points():
    assert sweep_assignments("X", {"beta": [1, 2], "lr": [3]}, []) == [{"beta": 1, "lr": 3}, {"beta": 2, "lr": 3}]
    assert sweep_assignments("X", [{"beta": 1, "lr": 3}, {"beta": 2}], []) == [{"beta": 1, "lr": 3}, {"beta": 2}]
    assert sweep_assignments("X", {"beta": [1, 2]}, ["beta"]) == [{}]          # the CLI's sweep wins
    with pytest.raises(UserError, match=r"stages\.X\.sweep\.beta"):
        sweep_assignments("X", {"beta": []}, [])


def test_smoke_plan_expands_the_file_sweep_and_injects_the_model_preset():
    planned = plan(compose(["experiment=smoke"]))
    assert [s.model_name for s in planned] == ["PT", "FT.1", "FT.2", "RM.1", "RLFT.1/beta=0.1",
                                               "RLFT.1/beta=0.5", "RLFT.4", "IPO"]
    by_name = {s.model_name: s for s in planned}
    assert by_name["PT"].given["model"]["name"] == "micro"                  # smoke selects model=micro
    assert "recipe" not in by_name["FT.1"].given and "sweep" not in by_name["RLFT.1/beta=0.1"].given
    assert by_name["RLFT.1/beta=0.5"].given["beta"] == 0.5
    # Every later stage gets the whole preset too: the dtype/LoRA it loads its models with, the FIM family.
    for name in ("RM.1", "RLFT.4", "IPO"):
        assert by_name[name].given["model"] == by_name["PT"].given["model"], name
    assert by_name["RM.1"].given["model"]["fim_family"] == "memlens"


def test_cli_multirun_names_model_dirs_by_the_swept_keys():
    points = compose_point(["experiment=rl_prompts", "stages.RLFT.4.beta=0.005,0.5", "stages.RLFT.4.lr=3e-6,3e-5"],
                           multirun=True)
    names = [[s.model_name for s in plan(cfg) if s.name == "RLFT.4"] for cfg in points]
    assert names == [["RLFT.4/beta=0.005,lr=3e-06"], ["RLFT.4/beta=0.005,lr=3e-05"],
                     ["RLFT.4/beta=0.5,lr=3e-06"], ["RLFT.4/beta=0.5,lr=3e-05"]]
    # Upstream stages are the same models in every point (so they are trained once, then skipped).
    upstream = [{s.model_name: s.given for s in plan(cfg) if s.name != "RLFT.4"} for cfg in points]
    assert all(u == upstream[0] for u in upstream)


def test_non_stage_sweep_keys_get_their_own_run_directory():
    [a, b] = compose_point(["experiment=smoke", "seed=0,1"], multirun=True)
    assert run_directory(a).name == "seed=0" and run_directory(b).name == "seed=1"


def test_a_reference_to_a_swept_stage_must_pick_a_point():
    cfg = compose(["experiment=smoke", "+stages.X={recipe: sft, init: RLFT.1, datasets: [pd_1]}"])
    with pytest.raises(UserError, match=re.escape("stages.X.init=RLFT.1: that stage is swept")):
        plan(cfg)


def test_bad_stage_settings_fail_before_any_training():
    with pytest.raises(UserError, match=re.escape("stages.FT.1: unknown key(s) ['epoch']")):
        plan(compose(["experiment=smoke", "+stages.FT.1.epoch=3"]))
    with pytest.raises(UserError, match=re.escape("stages.PT.recipe='pretrian': use one of pretrain, sft, reward, "
                                                  "rl, preference")):
        plan(compose(["experiment=smoke", "stages.PT.recipe=pretrian"]))


def test_the_preference_stage_answers_to_its_older_recipe_name():
    """`recipe: ipo` (experiments written before the stage trained seven objectives) plans the preference stage
    with the same settings as `recipe: preference`; the older `loss` key stops naming `objective`."""
    [new] = [s for s in plan(compose(["experiment=smoke"])) if s.name == "IPO"]
    [old] = [s for s in plan(compose(["experiment=smoke", "stages.IPO.recipe=ipo"])) if s.name == "IPO"]
    assert new.recipe == old.recipe == "preference" and new.given == old.given
    with pytest.raises(UserError, match=re.escape("stages.IPO.loss='ipo': the key is now `objective`")):
        plan(compose(["experiment=smoke", "~stages.IPO.objective", "+stages.IPO.loss=ipo"]))


def test_train_one_stage_needs_its_upstream(tmp_path):
    cfg = compose(["experiment=smoke", "stage=FT.1", f"run_dir={tmp_path}", "build_data=false", "device=cpu"])
    with pytest.raises(UserError, match="'PT'"):
        train_main(cfg)
    with pytest.raises(UserError, match=re.escape("stage='FT.9' is not a stage")):
        train_main(compose(["experiment=smoke", "stage=FT.9", f"run_dir={tmp_path}"]))


def test_a_sweep_points_run_directory_carries_its_audit_report_and_cache_paths(tmp_path):
    """The point's directory is set before ${run_dir} is resolved: every path built from it follows, and a
    path set outright stays where the user put it."""
    [a, b] = compose_point(["experiment=smoke", "seed=0,1", f"run_dir={tmp_path}",
                            f"audit.cache_dir={tmp_path / 'shared_cache'}"], multirun=True)
    assert b.run_dir == str(tmp_path / "seed=1") and run_directory(b) == tmp_path / "seed=1"
    assert b.report.out_dir == str(tmp_path / "seed=1" / "report")
    assert b.audit.out_dir == str(tmp_path / "seed=1" / "audit")
    assert a.audit.cache_dir == b.audit.cache_dir == str(tmp_path / "shared_cache")
    [c] = compose_point(["experiment=smoke", f"run_dir={tmp_path}"])
    assert c.run_dir == str(tmp_path) and c.audit.out_dir == str(tmp_path / "audit")


def _given(lr: float) -> dict:
    return {"init": "PT", "datasets": ["pd_1"], "lr": lr}


def _stage(settings, name: str = "FT.1"):
    """A stage as the plan gives it: its settings parsed by its recipe."""
    from memlens.recipes.orchestration.stage_plan import PlannedStage
    from memlens.recipes.stages import sft

    return PlannedStage(name, name, "sft", sft.load_settings(settings, name))


def test_a_checkpoint_torn_by_a_kill_is_moved_aside_before_resuming(tmp_path):
    from memlens.harness.core.io import atomic_write_json
    from memlens.recipes.orchestration.pipeline import prepare_out_dir

    out = tmp_path / "models" / "FT.1"
    (out / "checkpoint-4").mkdir(parents=True)
    atomic_write_json(out / "checkpoint-4" / "trainer_state.json", {"global_step": 4})
    (out / "checkpoint-8").mkdir()                                   # killed mid-save: no trainer_state.json
    atomic_write_json(out / "pending_settings.json", _given(0.1))
    assert prepare_out_dir(tmp_path, _stage(_given(0.1))) == "resumed"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-4"]
    assert [p.name.split("-torn-")[0] for p in (tmp_path / "stale" / "FT.1").iterdir()] == ["checkpoint-8"]


def test_changed_settings_move_the_old_stage_aside_instead_of_mixing_a_resume(tmp_path):
    from memlens.harness.core.io import atomic_write_json, read_json
    from memlens.recipes.orchestration.pipeline import prepare_out_dir

    out = tmp_path / "models" / "FT.1"
    (out / "checkpoint-4").mkdir(parents=True)
    atomic_write_json(out / "checkpoint-4" / "trainer_state.json", {"global_step": 4})
    atomic_write_json(out / "pending_settings.json", _given(0.1))   # killed while training with lr 0.1
    assert prepare_out_dir(tmp_path, _stage(_given(0.2))) == "trained"
    assert not (out / "checkpoint-4").exists()
    assert read_json(out / "pending_settings.json") == _given(0.2)
    [old] = (tmp_path / "stale").iterdir()
    assert (old / "checkpoint-4" / "trainer_state.json").is_file()
    # A finished stage with the same settings is skipped and left alone.
    atomic_write_json(out / "provenance.json", {"settings": _given(0.2)})
    assert prepare_out_dir(tmp_path, _stage(_given(0.2))) == "skipped"


def test_a_reference_to_nothing_fails_at_planning():
    with pytest.raises(UserError, match=re.escape("stages.FT.1.init='FT.0': neither a stage")):
        plan(compose(["experiment=smoke", "stages.FT.1.init=FT.0"]))


def test_a_finished_stage_is_retrained_when_its_data_or_upstream_changed(tmp_path):
    import os

    from memlens.harness.core.io import atomic_write_json
    from memlens.recipes.orchestration.pipeline import prepare_out_dir

    def finish(name, settings, datasets):
        atomic_write_json(tmp_path / "models" / name / "provenance.json", {"settings": settings, "datasets": datasets})

    atomic_write_json(tmp_path / "data" / "pd_1" / "manifest.json", {"sha256": "aaa"})
    stage = _stage({"init": "PT", "datasets": ["pd_1"]}, "FT.2")
    finish("PT", {}, {})
    finish("FT.2", stage.given, {"pd_1": "aaa"})
    assert prepare_out_dir(tmp_path, stage) == "skipped"
    atomic_write_json(tmp_path / "data" / "pd_1" / "manifest.json", {"sha256": "bbb"})   # data rebuilt
    assert prepare_out_dir(tmp_path, stage) == "trained"
    finish("FT.2", stage.given, {"pd_1": "bbb"})
    assert prepare_out_dir(tmp_path, stage) == "skipped"
    later = (tmp_path / "models" / "FT.2" / "provenance.json").stat().st_mtime_ns + 10**9
    os.utime(tmp_path / "models" / "PT" / "provenance.json", ns=(later, later))           # PT retrained since
    assert prepare_out_dir(tmp_path, stage) == "trained"
    assert len(list((tmp_path / "stale").iterdir())) == 2


def test_a_finished_stage_of_another_seed_is_retrained_not_skipped(tmp_path):
    from memlens.harness.core.io import atomic_write_json
    from memlens.recipes.orchestration.pipeline import prepare_out_dir

    atomic_write_json(tmp_path / "models" / "FT.1" / "provenance.json", {"settings": _given(0.2), "seed": 0})
    assert prepare_out_dir(tmp_path, _stage(_given(0.2)), seed=0) == "skipped"
    assert prepare_out_dir(tmp_path, _stage(_given(0.2)), seed=1) == "trained"     # same settings, seed 1
    [old] = (tmp_path / "stale").iterdir()
    assert (old / "provenance.json").is_file()
