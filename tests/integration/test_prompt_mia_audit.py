"""RL-prompt membership (harness/audit/prompt_mia.py) on the smoke run's RLFT.1 (tests/integration/conftest.py `smoke`:
no new training): on a copy of its data and its RLFT.1, FT.1 and RM.1 models, the held-out prompts are the pd_3_val
split; `prompt_mia` samples one RLFT.1 point and FT.1 (the stage's initial model, from provenance.json) on the same
prompts, and for DIBA RM.1 scores both models' samples and both models score the point's. Each row's Min-kNN is its
samples' own and its reward gain its two mean rewards' difference, the samples are the model's seeded draws and a
second ask reads them from the cache, the report's table opens with the blind baseline, and what the run had stays
byte for byte. And through `memlens run` on a copy of the whole run: every RL stage of the smoke plan is scored,
RLFT.4 on its SD RL prompts against the held-out twin that the late data builds in PT's tokenizer."""

from __future__ import annotations

import hashlib

import pytest

from memlens.harness.audit.prompt_mia import PromptMiaSettings, audit_run_prompt_mia, report_rows
from memlens.harness.cli import compose
from memlens.harness.core.io import read_json, read_jsonl
from memlens.harness.measures.blind_mia import BLIND_LABEL
from memlens.harness.measures.prompt_mia import DIBA, PROMPT_ATTACKS, min_knn_distance
from memlens.synthetic_data.build import build_datasets
from tests.integration.run_helpers import copy_run, memlens, status_lines

pytestmark = pytest.mark.slow
POINT = "RLFT.1/beta=0.1"            # one sweep point, its final model: ~7 s beside the shared smoke run
PLAN = f"audit_plan=[{{models:['{POINT}'],control:FT.2,datasets:[sd_base],checkpoints:final}}]"
SMALL = ["audit.prompt_mia_samples=4", "audit.prompt_mia_k=2", "audit.prompt_mia_max_new_tokens=8",
         "audit.prompt_mia_prompts=8"]


def _digests(root) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_prompt_membership_of_the_smoke_rlft1(smoke, tmp_path):
    from memlens.harness.model.load import load_causal_lm, model_sentinels
    from memlens.harness.model.sampling import SAMPLES_SUBDIR, cached_samples, sample_prompts

    run_dir, _ = smoke
    dest = copy_run(run_dir, tmp_path / "run", ["data/pd_3", "data/sd_base", "models/RLFT.1", "models/FT.1",
                                                "models/FT.2", "models/RM.1"])
    before = _digests(dest)
    cfg = compose(["experiment=smoke", f"run_dir={dest}", "device=cpu", PLAN, "audit.measures=[prompt_mia]",
                   "audit.mia_bootstrap=50", "audit.progress=false", *SMALL])
    built = build_datasets(cfg, names=["pd_3_val"], log=lambda *_: None)
    logged: list[str] = []
    audit_run_prompt_mia(cfg, PromptMiaSettings.from_config(cfg.audit), log=logged.append)

    after = _digests(dest)
    assert {k: after[k] for k in before} == before          # the run's data and models: byte for byte
    summary = read_json(dest / "audit" / "prompt_mia" / POINT / "summary.json")
    assert summary["initial"].endswith("models/FT.1") and summary["checkpoints"] == ["final"]
    entry = summary["results"]["final"]["pd_3"]
    assert read_jsonl(built["pd_3_val"] / "rows.jsonl") and (entry["n_members"], entry["n_nonmembers"]) == (8, 8)
    assert set(entry["attacks"]) == {*PROMPT_ATTACKS, DIBA}           # RLFT.1 has a reward model: DIBA's features too
    assert summary["reward_model"].endswith("models/RM.1")
    assert all("vs_blind" in m for m in entry["attacks"].values())

    rows = read_jsonl(dest / "audit" / "prompt_mia" / POINT / "final" / "pd_3.jsonl")
    assert [r["member"] for r in rows] == [1] * entry["n_members"] + [0] * entry["n_nonmembers"]
    cached = {}
    for path in (dest / "audit" / "cache" / SAMPLES_SUBDIR).glob("*.jsonl"):
        cached[path] = {r["id"]: r["completions"] for r in read_jsonl(path)}
    assert len(cached) == 2                                  # FT.1 (the initial model) and the point, once each
    policy_dir = dest / "models" / POINT
    for r in rows:
        samples = [c[r["id"]] for c in cached.values() if r["id"] in c]
        assert all(len(s) == 4 for s in samples)
        assert r["min_knn"]["policy"] in [pytest.approx(min_knn_distance(s, 2)) for s in samples]
        assert r["score"]["min_knn"] == -r["min_knn"]["policy"]
        assert r["score"]["reward_gain"] == pytest.approx(r["reward"]["policy"] - r["reward"]["initial"])

    # The cached samples are the model's seeded draws: drawn again, they are the same texts; asked again, the cache
    # answers without loading the model
    from memlens.harness.audit.prompt_mia import load_prompts, rl_models

    (m,) = rl_models(cfg, log=lambda *_: None)
    data = load_prompts(m, 8, 0)[0]
    prompts = data["pd_3:members"][:2]
    model, tok = load_causal_lm(policy_dir, "cpu")
    sentinels = model_sentinels(policy_dir, None)
    again = sample_prompts(model, tok, [sentinels.prompt(p["prefix"], p["suffix"]) for p in prompts],
                           [p["id"] for p in prompts], sentinels, samples=4, temperature=1.0, max_new_tokens=8, seed=0)
    assert any(all(c.get(p["id"]) == s for p, s in zip(prompts, again)) for c in cached.values())
    _, cache = cached_samples(policy_dir, [r for v in data.values() for r in v], sentinels,
                              dest / "audit" / "cache", samples=4, temperature=1.0, max_new_tokens=8, seed=0)
    assert (cache.n_computed, cache.n_cached) == (0, 16)
    assert any(f"{POINT} final: 16 prompt(s) sampled, 0 cached" in line for line in logged)

    columns, table = report_rows(dest / "audit")
    assert table[0]["attack"] == BLIND_LABEL and table[0]["rank"] is None
    assert len(table) == 2 + len(PROMPT_ATTACKS)              # the blind baseline, each attack, DIBA's combination
    assert "TPR at 1 % FPR" in columns
    from memlens.harness.report.sections import membership_section

    section = membership_section({}, [], {dest: dest / "audit"}, dest / "fig")
    assert ("RL prompts, what an RL stage samples its completions for (Membership of RL prompts (Min-kNN distance); "
            "audit.measures: prompt_mia)") in [b.text for b in section.blocks if type(b).__name__ == "Heading"]
    assert section.filed["measures"]["prompt_mia"] == table


def test_every_rl_stage_gets_prompt_membership_against_its_own_held_out_twin(smoke, tmp_path):
    """audit.measures=[prompt_mia] on a copy: the late data now builds sd_rl_prompts_heldout in PT's tokenizer, and both
    RL stages are scored on their own prompts against held-out prompts (RLFT.1: pd_3 vs pd_3_val; RLFT.4: its SD RL
    prompts vs the held-out programs' RL prompts), no model trained again."""
    from memlens.harness.core.layout import prompt_mia_dir

    run_dir = copy_run(smoke[0], tmp_path / "run", ["data", "models"])
    result = memlens("run", "experiment=smoke", f"run_dir={run_dir}", "device=cpu", "after_training=[audit]",
                     "audit.measures=[prompt_mia]", "audit.prompt_mia_checkpoints=final", *SMALL)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert set(status_lines(result.stdout).values()) == {"skipped"}
    held = {r["id"] for r in read_jsonl(run_dir / "data" / "sd_rl_prompts_heldout" / "rows.jsonl")}
    members = {r["id"] for r in read_jsonl(run_dir / "data" / "sd_rl_prompts" / "rows.jsonl")}
    assert held and not held & members
    rows = read_jsonl(next((prompt_mia_dir(run_dir / "audit", "RLFT.4")).glob("*/sd_rl_prompts.jsonl")))
    assert {r["id"] for r in rows if r["member"] == 0} <= held and {r["id"] for r in rows if r["member"] == 1} <= members
    assert {r["member"] for r in rows} == {0, 1}
    scored = read_json(prompt_mia_dir(run_dir / "audit") / "summary.json")
    assert {"RLFT.1/beta=0.1", "RLFT.1/beta=0.5", "RLFT.4"} <= set(scored["results"]), scored.keys()


def test_the_launchers_data_step_builds_the_held_out_twin_once_pt_exists_and_an_audit_asks(smoke, tmp_path):
    """The SLURM driver's last step (recipes/orchestration/launcher.py build_level_data, once every job has ended, as
    after a run whose every model had finished before it): the held-out RL prompts are built once PT's tokenizer
    exists and prompt_mia (or mia) asks for them, and not otherwise."""
    from memlens.recipes.orchestration.launcher import build_level_data
    from memlens.recipes.orchestration.stage_plan import plan

    run_dir = copy_run(smoke[0], tmp_path / "run", ["data"])
    twin = run_dir / "data" / "sd_rl_prompts_heldout" / "manifest.json"
    loss, prompts = (compose(["experiment=smoke", f"run_dir={run_dir}", "device=cpu", f"audit.measures={m}"])
                     for m in ("[ned,loss]", "[ned,prompt_mia]"))
    assert build_level_data(prompts, run_dir, plan(prompts)) == {"sd_rl_prompts", "sd_rl_prompts_heldout"}
    assert not twin.exists()                                          # PT's tokenizer is not there yet
    copy_run(smoke[0], run_dir, ["models/PT"])
    build_level_data(loss, run_dir, plan(loss))                       # no audit reads the twin
    assert not twin.exists()
    build_level_data(prompts, run_dir, plan(prompts))
    assert read_json(twin)["heldout_of"] == "sd_rl_prompts"


def test_memlens_train_builds_the_twin_beside_the_rl_prompts_when_the_audit_asks(smoke, tmp_path):
    """`memlens train stage=RLFT.4` (a cluster's per-model job, docs/cluster.md) builds the late data its stage reads
    and, when prompt_mia is asked for, the held-out twin beside it, so a later `memlens audit` scores RLFT.4."""
    run_dir = copy_run(smoke[0], tmp_path / "run", ["data", "models"])
    result = memlens("train", "stage=RLFT.4", "experiment=smoke", f"run_dir={run_dir}", "device=cpu",
                     "audit.measures=[ned,prompt_mia]")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert status_lines(result.stdout) == {"RLFT.4": "skipped"}
    assert read_json(run_dir / "data" / "sd_rl_prompts_heldout" / "manifest.json")["heldout_of"] == "sd_rl_prompts"
