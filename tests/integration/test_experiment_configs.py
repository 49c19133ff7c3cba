"""Every conf/experiment/*.yaml composes with the real CLI composer and every stage's settings validate.

As lightning-hydra-template tests its experiment configs: a typo in a stage key, an unknown recipe, a
reference to a missing stage or an audit plan naming an untrained model fails here, not hours into a run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memlens.harness.cli import compose
from memlens.recipes.orchestration.stage_plan import audit_plan, flatten_stages, needed_datasets, plan
from memlens.recipes.stages.registry import STAGES
from tests.integration.run_helpers import CONF, EXPERIMENTS

DATASETS = {"sd_base", "sd_links", "sd_links_pos", "sd_base_heldout", "sd_links_heldout", "sd_links_pos_heldout",
            "sd_rl_prompts", "sd_rl_prompts_heldout", "pd_pt", "pd_1", "pd_2", "pd_2_val", "pd_3",
            "pd_3_val", "pd_eval", "rm_pd2", "rm_pd2_val", "rm_sd", "rm_sd_links", "pairs_sd_base",
            "pairs_sd_links", "pairs_pd2", "pairs_sd_base_heldout", "pairs_sd_links_heldout", "humaneval_infill",
            # from the user's files (data.canaries.file, data.preference.file; synthetic_data/user_data.py)
            "canaries", "rm_canaries", "pairs_canaries", "preference_chosen", "rm_preference", "pairs_preference"}


def test_the_task_experiments_exist():
    assert set(EXPERIMENTS) >= {"smoke", "quickstart", "findings", "ft_persistence", "rm_injection", "rl_prompts",
                                "ipo"}


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_and_every_stage_validates(name):
    path = CONF / "experiment" / f"{name}.yaml"
    lines = path.read_text().splitlines()
    assert lines[0] == "# @package _global_"        # Hydra reads the package only from the first line(s)
    assert lines[1].startswith("#   memlens "), "the file must open with the command that runs it"
    cfg = compose([f"experiment={name}"])
    assert cfg.experiment_name == name
    planned = plan(cfg)                       # runs each recipe's load_settings (dataclass validation)
    assert {s.recipe for s in planned} <= set(STAGES)
    trained = {s.name for s in planned}
    for entry in audit_plan(cfg):             # the audit's models and control are stages of this experiment
        assert entry["control"] in trained, entry
        assert set(entry["models"]) <= trained, entry
        assert set(entry["datasets"]) <= DATASETS, entry
    assert set(needed_datasets(planned, cfg)) <= DATASETS
    for stage in planned:
        if stage.recipe == "rl" or stage.recipe == "reward":   # RLHF models are audited against FT.2
            assert any(e["control"] == "FT.2" for e in audit_plan(cfg)), name


def test_paper_table1_provenance():
    """Table 1 of paper 003 (as the task states it): each model's data, initial model and reward model."""
    stages = {}
    for name in ("ft_persistence", "rm_injection", "rl_prompts", "ipo"):
        cfg = compose([f"experiment={name}"])
        stages.update({(name, s.model_name): s.given for s in plan(cfg)})

    def get(exp, model):
        return stages[(exp, model)]

    assert get("ft_persistence", "FT.1")["datasets"] == ["pd_1", "sd_base", "sd_links"]
    assert get("ft_persistence", "RM.1")["datasets"] == ["rm_pd2"]
    for beta in (0.005, 0.1, 0.5):
        s = get("ft_persistence", f"RLFT.1/beta={beta}")
        assert (s["init"], s["reward_model"], s["prompts"]) == ("FT.1", "RM.1", ["pd_3"])
    assert get("rm_injection", "FT.2")["datasets"] == ["pd_1"]
    assert get("rm_injection", "FT.3")["datasets"] == ["pd_2", "sd_base", "sd_links"]     # Table 1: PD.2 + SD
    assert get("rm_injection", "RM.2")["datasets"] == ["rm_sd"]
    assert get("rm_injection", "RM.3")["datasets"] == ["rm_pd2", "rm_sd"]
    assert get("rm_injection", "RM.4")["datasets"] == ["rm_sd_links"]
    assert (get("rm_injection", "RLFT.2")["init"], get("rm_injection", "RLFT.2")["reward_model"]) == ("FT.2", "RM.3")
    assert (get("rm_injection", "RLFT.3")["init"], get("rm_injection", "RLFT.3")["reward_model"]) == ("FT.2", "RM.4")
    rl4 = [k for (e, k) in stages if e == "rl_prompts" and k.startswith("RLFT.4/")]
    assert len(rl4) == 6                                  # α x LR grid
    assert all(stages[("rl_prompts", k)]["reward_model"] == "RM.1" for k in rl4)
    assert get("ipo", "IPO")["init"] == "PT" and get("ipo", "IPO")["objective"] == "ipo"


def test_stage_names_are_overridable_from_the_command_line():
    from omegaconf import OmegaConf

    cfg = compose(["experiment=ft_persistence", "stages.FT.1.lr=0.01", "stages.RLFT.1.sweep.beta=[0.2]"])
    stages = flatten_stages(OmegaConf.to_container(cfg.stages))
    assert stages["FT.1"]["lr"] == 0.01
    assert [s.model_name for s in plan(cfg) if s.name == "RLFT.1"] == ["RLFT.1/beta=0.2"]


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_ft3_is_table1_ft3_and_trained_on_its_own(name):
    """Paper 003 Table 1: FT.3 = PD.2 + SD (RM.3's data), not FT.1's PD.1 + SD; so it is never FT.1's twin.
    The own_* experiments put the user's data in SD's place (docs/own-data.md)."""
    from memlens.recipes.orchestration.pipeline import identical_finished_stage

    planned = {s.model_name: s for s in plan(compose([f"experiment={name}"]))}
    if "FT.3" not in planned:
        pytest.skip(f"{name} has no FT.3")
    ft3 = planned["FT.3"]
    users = {"own_canaries": {"canaries"}, "own_preference": {"preference_chosen"}}.get(name)
    assert set(ft3.given["datasets"]) == {"pd_2", *(users or {"sd_base", "sd_links"})}
    if "FT.1" in planned:
        assert identical_finished_stage(Path("/nonexistent"), ft3, [planned["FT.1"]]) is None
        assert ft3.given != planned["FT.1"].given


def test_findings_is_the_quickstart_plus_the_stages_of_f4_to_f7():
    """experiment=findings extends the quickstart (Hydra defaults): every quickstart stage is trained there
    with the same settings, except FT.3, which takes FT.1's epochs (paper 003 Table 2); the stages it adds are
    the ones F4-F7 need (FT.1 -> RLFT.1, RM.1 -> RLFT.4)."""
    quick = {s.model_name: s.given for s in plan(compose(["experiment=quickstart"]))}
    full = {s.model_name: s.given for s in plan(compose(["experiment=findings"]))}
    assert set(quick) == {"PT", "FT.2", "FT.3", "RM.3", "RLFT.2", "IPO"}
    assert {name.split("/")[0] for name in set(full) - set(quick)} == {"FT.1", "RM.1", "RLFT.1", "RLFT.4"}
    for name, settings in quick.items():
        if name != "FT.3":
            assert full[name] == settings, name
    assert {k: v for k, v in full["FT.3"].items() if k != "epochs"} == \
        {k: v for k, v in quick["FT.3"].items() if k != "epochs"}
    assert full["FT.3"]["epochs"] == full["FT.1"]["epochs"] > quick["FT.3"]["epochs"]


def test_mia_in_the_measures_builds_the_held_out_partners_of_the_planned_sd_sets():
    findings = compose(["experiment=findings"])
    assert "mia" in list(findings.audit.measures)
    # and RLFT.4's RL-prompt split's, which harness/audit/mia.py pairs with sd_rl_prompts by name
    assert {"sd_base_heldout", "sd_links_pos_heldout", "sd_rl_prompts_heldout"} <= set(
        needed_datasets(plan(findings), findings))
    # the quickstart's own measures build the held-out SD programs its prompt audit reads (sd_base_heldout,
    # sd_links_heldout), not the PII positives' twin; without prompt_mia, none
    quickstart = compose(["experiment=quickstart"])
    held = {n for n in needed_datasets(plan(quickstart), quickstart) if n.startswith("sd_") and n.endswith("_heldout")}
    assert held == {"sd_base_heldout", "sd_links_heldout"}
    quickstart = compose(["experiment=quickstart", "audit.measures=[ned,pair_mia]"])
    assert not any(n.startswith("sd_") and n.endswith("_heldout") for n in needed_datasets(plan(quickstart), quickstart))
    switched = compose(["experiment=quickstart", "audit.measures=[ned,mia]"])
    assert {"sd_base_heldout", "sd_links_pos_heldout"} <= set(needed_datasets(plan(switched), switched))


def test_the_quickstarts_membership_measures_change_no_stage_and_add_only_their_held_out_sets():
    """experiment=quickstart asks for pair_mia (IPO's preference pairs) and prompt_mia (RLFT.2's prompts): against the
    same experiment without each, every stage has the same settings, the datasets differ only by the held-out pair
    sets or the held-out SD programs the prompt audit turns into prompts (no stage reads them), and both measures run
    after ned (registration order), so the quickstart's training data, weights, rows and findings stay as they were."""
    from memlens.harness.audit.measure_registry import MEASURES

    assert list(compose(["experiment=quickstart"]).audit.measures) == ["ned", "pair_mia", "prompt_mia"]
    without = compose(["experiment=quickstart", "audit.measures=[ned]"])
    for measures, held_out in (("[ned,pair_mia]", {"pairs_sd_base_heldout", "pairs_sd_links_heldout"}),
                               ("[ned,prompt_mia]", {"sd_base_heldout", "sd_links_heldout"})):
        with_it = compose(["experiment=quickstart", f"audit.measures={measures}"])
        assert [(s.model_name, s.given) for s in plan(with_it)] == [(s.model_name, s.given) for s in plan(without)]
        added = set(needed_datasets(plan(with_it), with_it)) - set(needed_datasets(plan(without), without))
        assert added == held_out, measures
        assert not added & {d for s in plan(with_it) for d in s.given.get("datasets") or []}
    assert MEASURES.names().index("ned") < MEASURES.names().index("pair_mia") < MEASURES.names().index("prompt_mia")
