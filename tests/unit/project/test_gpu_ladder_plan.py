"""The GPU ladder's plan (benchmarks/gpu_ladder.py): how the 9-minute budget is split, derived by hand. The chain's
estimate is its token passes over the measured throughput; it keeps the 175-program settings when it fits its 35 %,
else every count is scaled by one factor; PT gets what is left after 75 s of fixed costs and the audit's 15 %, at
80 % of the throughput."""

from __future__ import annotations

import pytest

from tests.scripts import load_script

PASSES = {"FT.2": 1e6, "FT.3": 3e6, "RM.3": 1e6, "RLFT.2": 1.5e6, "IPO": 2e6}       # 8.5 M token passes


@pytest.fixture(scope="module")
def ladder():
    return load_script("gpu_ladder")


def test_a_chain_that_fits_keeps_its_counts_and_pt_takes_the_rest(ladder):
    # 8.5e6 / 150,000 = 56.7 s <= 0.35 x 540 = 189 s; PT: (540 - 75 - 81 - 56.67) s x 150,000 x 0.8 = 39,280,000
    counts = ladder.choose_counts(150_000, PASSES, 540, toy=False)
    assert counts["chain_scale"] == 1.0 and counts["chain_seconds_estimate"] == 56.7
    assert counts["pt_tokens"] == pytest.approx(39_280_000, abs=2)
    assert counts["pt_save_steps"] == 1918                     # ceil(39.28e6 / 4096) // 5
    assert ladder.scaled(ladder.CHAIN, 1.0) == ladder.CHAIN


def test_a_chain_that_does_not_fit_is_scaled_by_one_factor(ladder):
    # 8.5e6 / 20,000 = 425 s > 189 s: scale 189 / 425 = 0.445; PT: (540 - 75 - 81 - 189) x 20,000 x 0.8 = 3,120,000
    counts = ladder.choose_counts(20_000, PASSES, 540, toy=False)
    assert counts["chain_scale"] == 0.445 and counts["pt_tokens"] == 3_120_000
    half = ladder.scaled(ladder.CHAIN, 0.5)
    assert (half["stages.RM.3.max_steps"], half["stages.IPO.max_steps"], half["stages.FT.3.epochs"]) == (75, 87, 7)
    assert half["data.sd.size"] == 175                           # the data stay at the 175-program settings


def test_the_scale_never_falls_below_the_floor_and_toy_pt_stays_small(ladder):
    assert ladder.choose_counts(100, PASSES, 540, toy=False)["chain_scale"] == ladder.CHAIN_FLOOR
    assert 16_384 <= ladder.choose_counts(11_000, PASSES, 100, toy=True)["pt_tokens"] <= 32_768


def test_the_gpu_runs_commands_compose_as_memlens_would_run_them(ladder, tmp_path):
    """The GPU run's base and chain commands (not its toy ones) through the CLI's own composition and checks, with
    nothing run: a key the GPU run names wrongly fails here, not on a lent machine."""
    from memlens.harness.cli import compose_only
    from memlens.recipes.orchestration.stage_plan import plan

    counts = ladder.choose_counts(150_000, PASSES, 540, toy=False)
    run_plan = {"toy": False, "device": "cuda", "seed": 0, "model": ladder.model_preset(False), "counts": counts,
                "chain_overrides": ladder.as_overrides(ladder.scaled(ladder.CHAIN, 0.5))}
    (base_cfg,) = compose_only(ladder.base_command(tmp_path, run_plan))
    pt = {s.name: s for s in plan(base_cfg)}["PT"]
    assert pt.given["max_tokens"] == counts["pt_tokens"] and pt.given["save_steps"] == counts["pt_save_steps"]
    assert pt.given["tokenizer"] == "assets/base_tiny" and base_cfg.model.hidden_size == 768
    (chain_cfg,) = compose_only(ladder.chain_command(tmp_path, run_plan))
    stages = {s.model_name: s.given for s in plan(chain_cfg)}
    assert set(stages) == {"PT", "FT.2", "FT.3", "RM.3", "RLFT.2", "IPO"}
    assert stages["RM.3"]["max_steps"] == 75 and stages["IPO"]["max_steps"] == 87 and stages["FT.3"]["epochs"] == 7
    assert chain_cfg.data.sd.size == 175 and list(chain_cfg.audit.measures) == ["ned", "mia"]
    assert chain_cfg.report.nmt_summary is None and chain_cfg.model.pretrained == str(tmp_path / "base" / "models" / "PT")


def test_every_learning_rate_shrinks_with_the_width_as_committed_before_the_second_gpu_run(ladder, tmp_path):
    """768 wide against the shipped 256: every stage's rate x 1/3 (PT and FT 2e-3 -> 6.67e-4, RM 1e-3 -> 3.33e-4, RL
    and IPO 3e-4 -> 1e-4); a model no wider than the shipped one keeps every rate. The overrides compose into the
    stages' settings as the GPU run passes them, the base's and the chain's."""
    from memlens.harness.cli import compose_only
    from memlens.recipes.orchestration.stage_plan import plan

    stages = ladder.chain_stages(tmp_path, ladder.as_overrides(ladder.CHAIN))
    assert ladder.width_scaled_lrs(stages, 768) == {
        "stages.PT.lr": 6.67e-4, "stages.FT.2.lr": 6.67e-4, "stages.FT.3.lr": 6.67e-4, "stages.RM.3.lr": 3.33e-4,
        "stages.RLFT.2.lr": 1e-4, "stages.IPO.lr": 1e-4}
    assert ladder.width_scaled_lrs(stages, 256) == ladder.width_scaled_lrs(stages, 64) == {
        "stages.PT.lr": 2e-3, "stages.FT.2.lr": 2e-3, "stages.FT.3.lr": 2e-3, "stages.RM.3.lr": 1e-3,
        "stages.RLFT.2.lr": 3e-4, "stages.IPO.lr": 3e-4}
    base_lrs = ladder.width_scaled_lrs(ladder.base_stages(tmp_path), 768)
    assert base_lrs == {"stages.PT.lr": 6.67e-4}
    counts = ladder.choose_counts(150_000, PASSES, 540, toy=False)
    run_plan = {"toy": False, "device": "cuda", "seed": 0, "model": ladder.model_preset(False), "counts": counts,
                "chain_overrides": ladder.as_overrides({**ladder.CHAIN, "stages.FT.3.lr": 6.67e-4,
                                                        "stages.IPO.lr": 1e-4}),
                "base_overrides": ladder.as_overrides(base_lrs)}
    (base_cfg,) = compose_only(ladder.base_command(tmp_path, run_plan))
    assert {s.name: s for s in plan(base_cfg)}["PT"].given["lr"] == 6.67e-4
    (chain_cfg,) = compose_only(ladder.chain_command(tmp_path, run_plan))
    given = {s.model_name: s.given for s in plan(chain_cfg)}
    assert given["FT.3"]["lr"] == 6.67e-4 and given["IPO"]["lr"] == 1e-4
