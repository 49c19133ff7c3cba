"""`memlens run experiment=smoke` end to end through the real CLI: data -> PT -> FT -> RM -> RLFT -> IPO.

One sequential run (the `smoke` fixture, tests/integration/conftest.py: built once per session, shared by both
pytest-xdist workers) is inspected by several tests and is the reference the other ways of running it (another CPU
kernel level, local jobs, SLURM jobs) must reproduce; a sweep from the command line on a copy of it must skip every
finished stage and train only the new point.
Also here: FT under `accelerate launch --cpu --num_processes 2`, and LoRA through PEFT on the micro model.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlens.harness.core.io import read_json, read_jsonl
from memlens.harness.core.kernels import LEVEL_PINS, PINNED_VARIABLES
from tests.integration.run_helpers import REPO, copy_run, memlens, status_lines, two_processes

pytestmark = pytest.mark.slow

MODELS = ["PT", "FT.1", "FT.2", "RM.1", "RLFT.1/beta=0.1", "RLFT.1/beta=0.5", "RLFT.4", "IPO"]


def loss_history(model_dir: Path) -> list[float]:
    """Logged training losses: the stage's trainer_state.json, else its last checkpoint's."""
    state = model_dir / "trainer_state.json"
    if not state.is_file():
        ckpts = sorted(model_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name[11:]))
        state = ckpts[-1]
    return [h["loss"] for h in read_json(state)["log_history"] if "loss" in h]


def test_every_stage_trained_in_dependency_order(smoke):
    run_dir, result = smoke
    statuses = status_lines(result.stdout)
    assert list(statuses) == MODELS                  # PT before FT before RM before RLFT; IPO after PT
    # sd_rl_prompts is built only once PT exists: its 50-token split uses PT's tokenizer.
    assert result.stdout.index("sd_rl_prompts:") > result.stdout.index("[memlens] PT ")
    assert set(statuses.values()) == {"trained"}


def test_every_stage_has_final_model_checkpoints_and_provenance(smoke):
    run_dir, _ = smoke
    for name in MODELS:
        out = run_dir / "models" / name
        assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file(), name
        ckpts = list(out.glob("checkpoint-*"))
        assert ckpts, name
        for ckpt in ckpts:
            assert (ckpt / "model.safetensors").is_file() and (ckpt / "tokenizer.json").is_file(), ckpt
        prov = read_json(out / "provenance.json")
        assert prov["model_name"] == name and prov["seed"] == 0 and prov.get("git_commit") is not None
        for dataset, sha in prov["datasets"].items():      # hashes are the built datasets' manifests
            assert sha == read_json(run_dir / "data" / dataset / "manifest.json")["sha256"]
        assert not (out / "pending_settings.json").exists()
    assert read_json(run_dir / "models" / "FT.1" / "provenance.json")["init_model"].endswith("models/PT")
    assert read_json(run_dir / "models" / "RLFT.1/beta=0.5" / "provenance.json")["settings"]["beta"] == 0.5


def test_ft_records_how_many_fim_contexts_it_trimmed(smoke):
    """A FIM row longer than max_seq_len loses its context, not its middle; provenance counts them."""
    from transformers import AutoTokenizer

    from memlens.harness.text.fim import FAMILIES, format_psm_training

    run_dir, result = smoke
    prov = read_json(run_dir / "models" / "FT.1" / "provenance.json")
    rows = [r for d in ("sd_base", "sd_links") for r in read_jsonl(run_dir / "data" / d / "rows.jsonl")]
    tok = AutoTokenizer.from_pretrained(str(run_dir / "models" / "PT"))
    too_long = sum(len(tok(format_psm_training(r["prefix"], r["target"], r["suffix"], FAMILIES["memlens"]),
                           add_special_tokens=False)["input_ids"]) > prov["settings"]["max_seq_len"] for r in rows)
    assert prov["fim_examples"] == len(rows)
    assert prov["fim_context_trimmed"] == too_long
    assert f"[FT.1] FIM context trimmed in {too_long} of {len(rows)} FIM examples" in result.stdout
    assert read_json(run_dir / "models" / "FT.2" / "provenance.json")["fim_examples"] == 0   # PD.1 only


def test_losses_are_finite_and_fall(smoke):
    run_dir, _ = smoke
    for name in MODELS:
        losses = loss_history(run_dir / "models" / name)
        assert losses and all(math.isfinite(x) for x in losses), (name, losses)
    for name in ("PT", "FT.1", "FT.2"):               # enough logged steps to see learning
        losses = loss_history(run_dir / "models" / name)
        half = len(losses) // 2
        assert sum(losses[half:]) / (len(losses) - half) < sum(losses[:half]) / half, (name, losses)


def logged_steps(model_dir: Path) -> list[int]:
    """Steps of the logged losses in the stage's trainer_state.json (else its last checkpoint's)."""
    state = model_dir / "trainer_state.json"
    if not state.is_file():
        state = sorted(model_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name[11:]))[-1]
    return [h["step"] for h in read_json(state)["log_history"] if "loss" in h]


def test_every_stage_logs_its_steps_to_train_log_jsonl_not_to_the_console(smoke):
    """The trainers' per-step dictionaries go to models/<NAME>/train_log.jsonl; the console, which is not a
    terminal here, carries no dictionary, no progress-bar redraw, no library deprecation notice."""
    run_dir, result = smoke
    for name in MODELS:
        rows = read_jsonl(run_dir / "models" / name / "train_log.jsonl")
        assert [r["step"] for r in rows if "loss" in r] == logged_steps(run_dir / "models" / name), name
        assert all(math.isfinite(r["loss"]) for r in rows if "loss" in r), name
    console = result.stdout + result.stderr
    assert "{'" not in console and "'loss'" not in console          # no trainer dictionary
    assert "\r" not in console                                      # no bar redrawn into the log
    assert "Warning" not in console and "LOAD REPORT" not in console
    assert "[FT.1] step 4/8 (50 %)" in result.stdout                 # a line per quarter of a stage instead
    # 258 lines at 4727080 (2026-11-25): dictionaries, bars, warnings, a line per audited checkpoint
    assert len(console.splitlines()) < 100, console


def test_reward_model_separates_its_training_labels(smoke):
    run_dir, _ = smoke
    summary = read_json(run_dir / "models" / "RM.1" / "scores" / "summary.json")["rm_pd2"]
    assert summary["auc"] > 0.5
    assert summary["by_label"]["1"]["mean"] > summary["by_label"]["0"]["mean"]


def test_run_record_has_config_commit_and_stage_statuses(smoke):
    run_dir, _ = smoke
    record = read_json(run_dir / "run.json")
    assert record["config"]["experiment_name"] == "smoke"
    assert record["config"]["audit_plan"][0]["control"] == "FT.2"
    assert [s["model"] for s in record["stages"]] == MODELS
    assert "git_commit" in record and record["packages"]
    assert record["git_commit_at_start"] == record["git_commit"]     # the checkout did not move during the run
    assert record["wall_seconds"] >= sum(s["seconds"] for s in record["stages"])
    # Where it was computed: the processor, torch's kernel level (pinned by memlens, with MKL and oneDNN) and threads.
    compute = record["compute"]
    assert compute["torch"]["cpu_capability"] == compute["variables"]["ATEN_CPU_CAPABILITY"].upper()
    assert compute["torch"]["kernels"]["onednn_max_isa"] == compute["variables"]["ONEDNN_MAX_CPU_ISA"]
    assert compute["cpu"]["logical_cores"] == os.cpu_count() and compute["torch"]["threads"] >= 1
    prov = read_json(run_dir / "models" / "FT.1" / "provenance.json")
    assert prov["compute"]["torch"]["cpu_capability"] == compute["torch"]["cpu_capability"]


def test_the_smoke_run_on_the_other_cpu_kernel_level(smoke, tmp_path):
    """The same run with torch on another kernel level: datasets byte-identical, every finding's status the same.
    The weights' last bits may differ (docs/methods.md, "What reproduces where"); a verdict that followed them would
    fail here. Beside the pinned AVX2 kernels the other level is AVX512 where the processor has it (a reader's
    machine that computes with `MEMLENS_CPU_KERNELS=native`; as fast as AVX2, where torch's scalar kernels take
    twice as long), else the scalar kernels; beside the scalar ones, AVX2."""
    from memlens.harness.core.provenance import cpu_description

    run_dir, _ = smoke
    here = read_json(run_dir / "run.json")["compute"]
    if here["torch"]["cpu_capability"] == "DEFAULT":
        other_level = "avx2"
    else:
        other_level = "avx512" if "avx512f" in cpu_description()["isa"] and \
            here["torch"]["cpu_capability"] != "AVX512" else "default"
    env = {k: v for k, v in os.environ.items() if k not in PINNED_VARIABLES}
    other = tmp_path / "run"
    # Its report's tables are what is compared: its figures are not drawn (report.figures=false, ~20 s).
    result = subprocess.run([sys.executable, "-m", "memlens", "run", "experiment=smoke", f"run_dir={other}",
                             "device=cpu", "report.figures=false"], cwd=REPO, env={**env, "MEMLENS_CPU_KERNELS": other_level},
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    there = read_json(other / "run.json")["compute"]
    assert {k: there["variables"].get(k) for k in PINNED_VARIABLES} == LEVEL_PINS[other_level]   # all three moved
    rows = sorted(p.relative_to(run_dir) for p in (run_dir / "data").rglob("rows.jsonl"))
    assert rows and rows == sorted(p.relative_to(other) for p in (other / "data").rglob("rows.jsonl"))
    for path in rows:
        assert (run_dir / path).read_bytes() == (other / path).read_bytes(), path
    status = {f["id"]: f["status"] for f in read_json(run_dir / "report" / "findings.json")["findings"]}
    assert status == {f["id"]: f["status"] for f in read_json(other / "report" / "findings.json")["findings"]}


def same_models_and_findings(run_dir: Path, other: Path, models: list[str]) -> None:
    """`models`' weights byte for byte, and every finding's status, as the sequential run's."""
    for model in models:
        weights = sorted((run_dir / "models" / model).glob("*.safetensors"))
        assert weights, model
        for path in weights:
            assert path.read_bytes() == (other / "models" / model / path.name).read_bytes(), (model, path)
    status = {f["id"]: f["status"] for f in read_json(run_dir / "report" / "findings.json")["findings"]}
    assert status == {f["id"]: f["status"] for f in read_json(other / "report" / "findings.json")["findings"]}


def with_the_audit_cache_of(run_dir: Path, other: Path) -> Path:
    """`other` starting from `run_dir`'s audit cache. A cached completion or loss is keyed by the model's fingerprint
    (its weights, config and tokenizer files: harness/model/load.py model_fingerprint), so it is read only for a model
    byte-identical to the sequential run's, which is what these runs must train (asserted); a model that differed
    would be scored afresh. It saves each run most of its audit (~35 s of ~45 s on 2 cores)."""
    return copy_run(run_dir, other, ["audit/cache"])


def test_the_smoke_run_as_local_jobs_trains_the_rest_as_the_sequential_run(smoke, tmp_path):
    """`launcher.kind=local`: a run whose first two levels finished (the sequential run's data and PT, FT.1, FT.2,
    IPO, copied: what a killed driver leaves) goes on as `memlens train` jobs (submitit, 2 at a time, level by
    level): the finished models kept, the rest trained to the same weights, byte for byte, and the same findings."""
    run_dir, _ = smoke
    other = tmp_path / "jobs"
    kept = ["PT", "FT.1", "FT.2", "IPO"]
    copy_run(run_dir, other, ["data", *(f"models/{m}" for m in kept)])
    with_the_audit_cache_of(run_dir, other)
    stamps = {p: p.stat().st_mtime_ns for p in (other / "models").rglob("*.safetensors")}
    result = memlens("run", "experiment=smoke", f"run_dir={other}", "device=cpu", "launcher.kind=local",
                     "launcher.parallel=2", "report.figures=false")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "8 model(s) as jobs (local, 2 at a time)" in result.stdout
    assert stamps and all(p.stat().st_mtime_ns == t for p, t in stamps.items())     # kept, not retrained
    same_models_and_findings(run_dir, other, MODELS)
    for model in MODELS:          # the finished ones are not even submitted
        assert f"[memlens] {model:<28} job       {'skipped' if model in kept else 'done'}" in result.stdout, model
    assert len(list((other / "jobs").glob("*_log.out"))) == len(MODELS) - len(kept)


def test_the_smoke_run_as_slurm_jobs_trains_the_same_models(smoke, tmp_path):
    """`launcher.kind=slurm` on a real one-node SLURM cluster (slurm-wlm, tests/slurm_cluster.py): every model an
    sbatch job with `afterok` on its upstream jobs, sd_rl_prompts built once PT's job ended; the sequential run's
    weights byte for byte and its findings. Then a `-m` sweep of two new RLFT.4 points, one of them held by another
    process: both points planned before any job, their shared finished models not submitted, the two points' jobs
    queued together; the free one trains, the held one's job fails (its lock refusal in its log) and the driver exits
    naming that log."""
    from memlens.harness.core.layout import model_lock_dir
    from memlens.harness.core.lock import hold_directories
    from tests.slurm_cluster import missing, one_node_slurm

    if why := missing():
        pytest.skip(why)
    run_dir, _ = smoke
    other = tmp_path / "slurm"
    args = ["run", "experiment=smoke", f"run_dir={other}", "device=cpu", "launcher.kind=slurm",
            "launcher.slurm.cpus_per_task=1", "launcher.slurm.time_min=30"]
    with_the_audit_cache_of(run_dir, other)
    with one_node_slurm(tmp_path / "cluster") as env:
        result = memlens(*args, "report.figures=false", env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "8 model(s) as jobs (slurm, afterok dependencies)" in result.stdout
        queued = {line.split()[1]: line.split()[4:] for line in result.stdout.splitlines() if " queued " in line}
        job_id = {model: ids[0] for model, ids in queued.items()}
        assert queued["PT"] == [job_id["PT"]]
        assert queued["FT.2"] == [job_id["FT.2"], f"(afterok:{job_id['PT']})"]
        assert queued["RLFT.1/beta=0.5"] == [job_id["RLFT.1/beta=0.5"],
                                             f"(afterok:{job_id['FT.1']}:{job_id['RM.1']})"]
        out = result.stdout   # the late data: built after PT's job, before RLFT.4 (its reader) is queued
        assert out.index(f"[memlens] {'PT':<28} job") < out.index("sd_rl_prompts:") < out.index(f"[memlens] {'RLFT.4':<28} job")
        same_models_and_findings(run_dir, other, MODELS)

        stamps = {p: p.stat().st_mtime_ns for p in (other / "models").rglob("*.safetensors")}
        held = "RLFT.4/beta=0.3"
        with hold_directories([("stage", model_lock_dir(other, held))], f"a test holding {held}"):
            again = memlens("run", "-m", *args[1:], "stages.RLFT.4.beta=0.1,0.3", "after_training=[]", env=env)
        assert again.returncode == 2, again.stdout[-3000:] + again.stderr[-3000:]
        lines = again.stdout.splitlines()
        first_job = next(i for i, line in enumerate(lines) if " queued " in line)
        assert sum("model(s) as jobs (slurm" in line for line in lines[:first_job]) == 2   # both points, then jobs
        assert [line.split()[1] for line in lines if " queued " in line] == ["RLFT.4/beta=0.1", held]
        assert again.stdout.count("(finished)") == 2 * (len(MODELS) - 1)   # each point's shared models: no job
        assert f"[memlens] {'RLFT.4/beta=0.1':<28} job       done" in again.stdout, again.stdout[-3000:] + again.stderr[-3000:]
        log = re.search(rf"the job training {re.escape(held)} failed \(log: (\S+)\)", again.stderr)
        assert log and f"a test holding {held}" in Path(log[1]).read_text(), again.stderr[-3000:]
        assert stamps and all(p.stat().st_mtime_ns == t for p, t in stamps.items())


def test_run_ends_saying_how_long_it_took_and_where_the_report_is(smoke):
    run_dir, result = smoke
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("[memlens] run smoke finished in ") and "training, audit, report" in last
    assert last.endswith(f"report: {run_dir / 'report' / 'report.html'}") and (run_dir / "report" / "report.html").is_file()


def test_cli_sweep_skips_finished_stages_and_trains_only_the_new_point(smoke, tmp_path):
    run_dir = copy_run(smoke[0], tmp_path / "run")    # the shared run stays as the fixture left it
    before = (run_dir / "models" / "FT.1" / "model.safetensors").stat().st_mtime_ns
    # What is asserted is which stages trained: the sweep's points run no audit or report (the fixture's run did).
    result = memlens("run", "-m", "experiment=smoke", f"run_dir={run_dir}", "device=cpu",
                      "stages.RLFT.1.beta=0.1,0.3", "after_training=[]")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [status_lines(chunk) for chunk in result.stdout.split("sweep point")[1:]]
    # Point beta=0.1 is the file sweep's model: same settings -> skipped like every upstream stage.
    assert lines[0] == {m: "skipped" for m in ["PT", "FT.1", "FT.2", "RM.1", "RLFT.1/beta=0.1", "RLFT.4", "IPO"]}
    assert lines[1]["RLFT.1/beta=0.3"] == "trained"
    assert {k: v for k, v in lines[1].items() if k != "RLFT.1/beta=0.3"} == {
        m: "skipped" for m in ["PT", "FT.1", "FT.2", "RM.1", "RLFT.4", "IPO"]}
    assert (run_dir / "models" / "FT.1" / "model.safetensors").stat().st_mtime_ns == before
    assert read_json(run_dir / "models" / "RLFT.1/beta=0.3" / "provenance.json")["settings"]["beta"] == 0.3


def test_ft_under_accelerate_launch_with_two_cpu_processes(smoke, tmp_path):
    """The multi-process path: FT.2 trained by 2 gloo processes (DDP) loads and records world size 2.

    `accelerate launch --cpu --num_processes 2` starts ONE process in accelerate 1.15 (its multi-CPU
    launcher needs mpirun); the torchrun-based launcher behind the config file starts two, and
    device=cpu (use_cpu=True) makes them join over gloo.
    """
    run_dir, _ = smoke
    launcher = two_processes()
    out_dir = tmp_path / "run"
    (out_dir / "models").mkdir(parents=True)
    os.symlink(run_dir / "data", out_dir / "data")
    os.symlink(run_dir / "models" / "PT", out_dir / "models" / "PT")
    result = memlens("train", "stage=FT.2", "experiment=smoke", f"run_dir={out_dir}", "device=cpu",
                      "build_data=false", "stages.FT.2.max_steps=2", launcher=launcher)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    prov = read_json(out_dir / "models" / "FT.2" / "provenance.json")
    assert prov["num_processes"] == 2
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out_dir / "models" / "FT.2")
    assert model.config.model_type == "llama"


def test_lora_sft_on_the_micro_model_trains_adapters_and_saves_a_merged_model(smoke, tmp_path):
    """The GPU presets' code path (PEFT LoRA, merged at save) on the micro model from the smoke run."""
    import torch
    from safetensors.torch import load_file

    from memlens.recipes.stages import sft
    from memlens.recipes.stages.contract import StageContext
    from memlens.recipes.stages.models import parse_model, torch_dtype

    run_dir, _ = smoke
    run = tmp_path / "lora"
    (run / "models").mkdir(parents=True)
    os.symlink(run_dir / "data", run / "data")
    pt = run_dir / "models" / "PT"
    model = {**read_json(pt / "provenance.json")["settings"]["model"],
             "lora": {"enabled": True, "r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}}
    settings = {"init": str(pt), "datasets": ["sd_base"], "model": model, "max_steps": 3, "lr": 1e-2,
                "batch_size": 4, "max_seq_len": 256, "save_steps": 2}
    sft.run_stage(sft.load_settings(settings, "FT.lora"), StageContext(run, "FT.lora", seed=0, device="cpu"))
    out = run / "models" / "FT.lora"
    before, after = load_file(pt / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(before) == set(after)                           # merged: a plain Llama, no adapter keys
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(("q_proj" in k or "v_proj" in k) for k in changed), changed
    assert (out / "checkpoint-2" / "adapter_model.safetensors").is_file()   # checkpoints hold adapters
    assert torch_dtype(parse_model({"dtype": "auto"}, "model"), "cuda") == torch.bfloat16
    assert torch_dtype(parse_model({"dtype": "auto"}, "model"), "cpu") == torch.float32


def test_a_stage_whose_training_diverges_stops_unfinished_with_the_fix(smoke, tmp_path):
    """A stage whose loss or gradient norm turns NaN stops there (memlens.recipes.stages.divergence) instead of
    finishing with NaN weights that an audit would score as "0 % memorized". Made certain here by one infinite weight
    in the initial model (fp32 on the CPU survives any learning rate the settings allow: 0.99 gave losses of ~100,
    all finite): the first logged step is NaN, its row is logged, and no checkpoint from after it is kept."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from memlens.recipes.stages import sft
    from memlens.recipes.stages.contract import StageContext
    from memlens.recipes.stages.divergence import TrainingDiverged

    run_dir, _ = smoke
    run = tmp_path / "diverge"
    (run / "models").mkdir(parents=True)
    os.symlink(run_dir / "data", run / "data")
    pt = run_dir / "models" / "PT"
    init = shutil.copytree(pt, tmp_path / "pt_inf", ignore=shutil.ignore_patterns("checkpoint-*"))
    weights = load_file(init / "model.safetensors")
    name = next(k for k in weights if k.endswith("mlp.up_proj.weight"))
    weights[name][0, 0] = torch.inf
    save_file(weights, init / "model.safetensors", metadata={"format": "pt"})
    settings = {"init": str(init), "datasets": ["sd_base"], "model": read_json(pt / "provenance.json")["settings"]["model"],
                "max_steps": 4, "lr": 1e-3, "batch_size": 4, "max_seq_len": 128, "save_steps": 1, "logging_steps": 1}
    with pytest.raises(TrainingDiverged, match=r"stage FT\.nan diverged: at step 1 its loss nan.*stages\.FT\.nan\.lr"):
        sft.run_stage(sft.load_settings(settings, "FT.nan"), StageContext(run, "FT.nan", seed=0, device="cpu"))
    out = run / "models" / "FT.nan"
    rows = read_jsonl(out / "train_log.jsonl")
    assert [r["step"] for r in rows] == [1] and math.isnan(rows[0]["loss"])   # logged as NaN, not filtered to 0.0
    assert not list(out.glob("checkpoint-*")) and not (out / "provenance.json").exists()


def test_a_pretrained_model_preset_is_imported_as_pt_not_trained(smoke, tmp_path):
    """`model.pretrained: <dir or hub id>` (the GPU presets): PT loads it safely and saves it as the run's PT."""
    import torch
    from safetensors.torch import load_file

    from memlens.recipes.stages import pretrain
    from memlens.recipes.stages.contract import StageContext

    run_dir, _ = smoke
    source = run_dir / "models" / "PT"
    model = {**read_json(source / "provenance.json")["settings"]["model"], "pretrained": str(source)}
    pretrain.run_stage(pretrain.load_settings({"model": model}, "PT"), StageContext(tmp_path, "PT", seed=0, device="cpu"))
    out = tmp_path / "models" / "PT"
    prov = read_json(out / "provenance.json")
    assert prov["init_model"] == str(source) and prov["datasets"] == {}
    assert not list(out.glob("checkpoint-*"))                                 # nothing was trained
    before, after = load_file(source / "model.safetensors"), load_file(out / "model.safetensors")
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert (out / "tokenizer.json").read_text() == (source / "tokenizer.json").read_text()


def test_run_ends_with_audit_and_report_whose_numbers_equal_the_rows(smoke):
    """`memlens run` = data -> stages -> audit (every checkpoint, NED + loss measures) -> report."""
    from memlens.harness.measures.memorization import summarize_rows
    from memlens.harness.report.analyses import load_audit_rows

    run_dir, _ = smoke
    grouped = load_audit_rows(run_dir / "audit")
    models = {m for m, _, _ in grouped}
    assert {"FT.1", "RLFT.1/beta=0.1", "RLFT.1/beta=0.5", "RLFT.4", "IPO"} <= models
    assert {c for m, c, _ in grouped if m == "FT.1"} == {"checkpoint-4", "checkpoint-8", "final"}
    report = run_dir / "report"
    for name in ("report.md", "report.html", "summary.json", "findings.json"):
        assert (report / name).is_file(), name
    summary = read_json(report / "summary.json")
    assert summary["entries"]
    for e in summary["entries"]:
        keys = ("n_total", "n_excluded", "n_scored", "n_memorized", "rate", "ci95")
        expected = summarize_rows(grouped[(e["model"], e["checkpoint"], e["dataset"])])
        assert {k: e[k] for k in keys} == {k: v for k, v in expected.items() if k in keys}
    # Paper 004's measures ran with FT.2 as the control run (same checkpoint steps as FT.1); C1 reports on
    # how many of those strings Lemma 1's premise holds, with n = every control-run string.
    loss = read_json(run_dir / "audit" / "losses" / "FT.1" / "summary.json")
    assert loss["variant"] == "control_run"
    table = {f["id"]: f for f in read_json(report / "findings.json")["findings"]}
    assert table["C1"]["status"] in ("holds", "not reproduced") and table["C1"]["n"] > 0
    # Toy stages do not train: no finding that depends on RL or IPO may hold on the smoke run.
    assert table["F4"]["status"] in ("inconclusive", "not measured")
    for f in table.values():
        assert f["status"] in ("holds", "not reproduced", "inconclusive", "not measured")
        for rate in f["rates"]:
            assert rate["n"] == 0 or rate["ci95"][0] <= rate["rate"] <= rate["ci95"][1]
    assert {u["model"] for u in summary["utility"]} >= {"FT.1", "FT.2"}
