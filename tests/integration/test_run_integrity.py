"""Run integrity through the real CLI: one writer per directory, audits that follow retrained models,
names that stay names, weights checked before anything is written, storage failures as exit 2, report.md
escaped, and the audited model equal to its control refused (tests/README.md, "Reliability").

Audit cases run on the audit fixtures' tiny Llamas (seconds each). Pipeline cases run a cut-down smoke
run (PT, FT.1, FT.2 on the micro model, FT.1 audited against FT.2 on sd_base: ~15 s on 2 idle cores).
The disk cases mount a small tmpfs inside a user namespace (`unshare -rm`) and are skipped where the
kernel does not allow that.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memlens.harness.core.io import read_json, read_jsonl
from tests.integration.conftest import audit_overrides
from tests.integration.pipeline_helpers import write_smoke_datasets
from tests.integration.run_helpers import LONG_PREFIX, refused, write_examples
from tests.integration.run_helpers import memlens_in as memlens

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
CHECKPOINTS = ["checkpoint-30", "checkpoint-90", "final"]
# The smoke experiment cut to three stages and one audit: every piece of `memlens run`, in seconds.
MINI_RUN = ["run", "experiment=smoke", "device=cpu", "build_data=false", "~stages.RM", "~stages.RLFT",
            "~stages.IPO", "audit_plan=[{models: [FT.1], control: FT.2, datasets: [sd_base]}]",
            "audit.utility=false", "audit.progress=false", "report.nmt_summary=null", "report.figures=false"]


def start(*args: str, cwd: Path) -> subprocess.Popen:
    """`python -m memlens <args>` as a real process in its own session (so that we can stop and kill it)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "memlens", *args], env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def ids_of(path: Path) -> list:
    return [r["id"] for r in read_jsonl(path)]


# --------------------------------------------------------------------------------------------------
# 1: one writer per directory
# --------------------------------------------------------------------------------------------------

def test_two_runs_started_together_on_one_run_dir_one_is_refused(tmp_path):
    """The issue's case: two `memlens run` on one run_dir, started together. Before, both exited 0,
    every stage trained twice into the same folders and audit rows held every id twice."""
    run_dir = tmp_path / "run"
    write_smoke_datasets(run_dir)
    procs = [start(*MINI_RUN, f"run_dir={run_dir}", cwd=tmp_path) for _ in range(2)]
    outputs = [p.communicate(timeout=900) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], (codes, [err[-2000:] for _, err in outputs])
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    err = outputs[loser][1]
    assert err.startswith("memlens: error: ") and "Traceback" not in err, err
    assert f"is in use by another memlens process (pid {procs[winner].pid}" in err, err
    assert "memlens run experiment=smoke" in err and "run_dir" in err, err
    for rows in (run_dir / "audit" / "FT.1").glob("*/sd_base.jsonl"):
        ids = ids_of(rows)
        assert len(ids) == len(set(ids)) == 8, rows
    summary = read_json(run_dir / "audit" / "summary.json")["results"]["FT.1"]
    assert {entry["sd_base"]["n_total"] for entry in summary.values()} == {8}
    assert not list(run_dir.rglob(".memlens.lock"))          # released on exit


TRAIN = ["train", "experiment=smoke", "device=cpu", "build_data=false", "report.figures=false"]


def wait_until_held(lock_dir: Path, proc: subprocess.Popen, shared: bool, seconds: float = 120) -> None:
    """Until `proc` holds `lock_dir` (its record in the lock file, or in the readers folder when shared), then
    freeze it (SIGSTOP): a frozen holder keeps its lock however fast its training would have been."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if shared:
            held = any(f"-{proc.pid}-" in p.name for p in (lock_dir / ".memlens.lock.readers").glob("*.json"))
        else:
            held = (lock_dir / ".memlens.lock").is_file() and f'"pid": {proc.pid},' in (
                lock_dir / ".memlens.lock").read_text()
        if held:
            os.kill(proc.pid, signal.SIGSTOP)
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"pid {proc.pid} never took {lock_dir}")


def test_two_sweep_points_train_at_once_and_one_model_is_never_trained_twice(tmp_path):
    """Per-model locks: two `memlens train` of one run's sweep points hold their locks at once (each its model,
    both the run and PT shared) and both finish; PT retrained while they read it, a `memlens run` of the run, and
    the same model started twice are refused, naming the holders."""
    run_dir = tmp_path / "run"
    write_smoke_datasets(run_dir)
    assert memlens(*TRAIN, f"run_dir={run_dir}", "stage=PT", cwd=tmp_path).returncode == 0
    pt_lock = run_dir / ".locks" / "models" / "PT"
    points = []
    for lr in ("0.001", "0.002"):
        points.append(start(*TRAIN, "-m", f"run_dir={run_dir}", "stage=FT.2", f"stages.FT.2.lr=choice({lr})", cwd=tmp_path))
        wait_until_held(pt_lock, points[-1], shared=True)
    try:
        retrain_pt = memlens(*TRAIN, f"run_dir={run_dir}", "stage=PT", "stages.PT.lr=0.002", cwd=tmp_path)
        whole_run = memlens(*MINI_RUN, f"run_dir={run_dir}", cwd=tmp_path)
    finally:
        for p in points:
            os.kill(p.pid, signal.SIGCONT)
    outputs = [p.communicate(timeout=900) for p in points]
    assert [p.returncode for p in points] == [0, 0], [err[-2000:] for _, err in outputs]
    for lr in ("0.001", "0.002"):
        assert read_json(run_dir / "models" / f"FT.2/lr={lr}" / "provenance.json")["settings"]["lr"] == float(lr)
    err = refused(retrain_pt, r"\.locks/models/PT is in use by 2 other memlens processes")
    assert all(f"pid {p.pid}" in err for p in points) and "stage=FT.2" in err, err
    refused(whole_run, rf"{re.escape(str(run_dir))} is in use by 2 other memlens processes")
    first = start(*TRAIN, f"run_dir={run_dir}", "stage=FT.1", cwd=tmp_path)
    wait_until_held(run_dir / ".locks" / "models" / "FT.1", first, shared=False)
    try:
        second = memlens(*TRAIN, f"run_dir={run_dir}", "stage=FT.1", cwd=tmp_path)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    _, first_err = first.communicate(timeout=900)
    assert first.returncode == 0, first_err[-2000:]
    refused(second, rf"\.locks/models/FT\.1 is in use by another memlens process \(pid {first.pid}\b")


def test_second_audit_of_an_out_dir_is_refused_and_a_killed_holder_never_blocks(audit_world, tmp_path):
    """A holder frozen mid-audit (SIGSTOP) keeps its lock: a second process is refused, naming the holder's
    pid and command, and writes nothing. Killed (SIGKILL), it leaves its lock file behind; the rerun is not
    blocked by it and ends with every row exactly once."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = ["audit", *audit_overrides(audit_world, out, "audit.all_checkpoints=true", f"audit.cache_dir={cache}",
                                      "audit.batch_size=4")]
    first_rows = out / "FT.1" / "checkpoint-30" / "canaries.jsonl"
    holder = start(*args, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        while holder.poll() is None and time.monotonic() < deadline:
            if first_rows.exists() and first_rows.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.01)
        assert holder.poll() is None, "the audit finished before it could be stopped"
        os.killpg(holder.pid, signal.SIGSTOP)          # our own child's session only
        before = first_rows.read_bytes()
        second = memlens(*args, cwd=tmp_path)
        refused(second, rf"{re.escape(str(out))} is in use by another memlens process \(pid {holder.pid}\b",
                r"memlens audit audit\.model_dir=", r"audit\.out_dir")
        assert first_rows.read_bytes() == before
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.communicate()
    assert (out / ".memlens.lock").exists()            # what a kill leaves: it must not block
    rerun = memlens(*args, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    for checkpoint in CHECKPOINTS:
        ids = ids_of(out / "FT.1" / checkpoint / "canaries.jsonl")
        assert len(ids) == len(set(ids)) == len(audit_world["examples"])


# --------------------------------------------------------------------------------------------------
# 2: audits follow retrained models
# --------------------------------------------------------------------------------------------------

def _fingerprints(audit_dir: Path) -> dict[str, tuple[str, str]]:
    """{checkpoint: (model_fingerprint, control_fingerprint)} of FT.1's sd_base rows."""
    return {meta.parent.name: (read_json(meta)["model_fingerprint"], read_json(meta)["control_fingerprint"])
            for meta in (audit_dir / "FT.1").glob("*/sd_base.meta.json")}


def _current(run_dir: Path, name: str) -> dict[str, str]:
    from memlens.harness.model.load import model_fingerprint

    model = run_dir / "models" / name
    return {"final": model_fingerprint(model),
            **{p.name: model_fingerprint(p) for p in model.glob("checkpoint-*")}}


def test_a_retrained_model_is_audited_and_reported_again(tmp_path):
    """Finished run -> change FT.1's lr -> rerun: FT.1 retrains, its old rows and the old report move to
    stale/ with it, the rerun exits 0 with rows of the new weights and a new report. The same for the
    control (FT.2), and for a model deleted by hand and trained again."""
    run_dir = tmp_path / "run"
    write_smoke_datasets(run_dir)
    audit = run_dir / "audit"

    def run(*extra: str) -> subprocess.CompletedProcess:
        proc = memlens(*MINI_RUN, f"run_dir={run_dir}", *extra, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc

    run()
    first = _fingerprints(audit)
    report_before = (run_dir / "report" / "summary.json").stat().st_mtime_ns

    run("stages.FT.1.lr=1.0e-3")
    model, control = _current(run_dir, "FT.1"), _current(run_dir, "FT.2")
    after = _fingerprints(audit)
    assert {c: fp[0] for c, fp in after.items()} == model
    assert all(fp[0] != first[c][0] for c, fp in after.items())          # the weights did change
    assert {fp[1] for fp in after.values()} == {control["final"]}
    summary = read_json(audit / "summary.json")["results"]["FT.1"]
    assert {c: e["sd_base"]["model_fingerprint"] for c, e in summary.items()} == model
    assert (run_dir / "report" / "summary.json").stat().st_mtime_ns > report_before
    stale = [p for p in (run_dir / "stale").iterdir() if p.name.startswith("FT.1-")]
    assert len(stale) == 1
    assert {read_json(m)["model_fingerprint"] for m in (stale[0] / "audit").rglob("sd_base.meta.json")} \
        == {fp[0] for fp in first.values()}
    assert (stale[0] / "report" / "report.md").is_file()

    run("stages.FT.1.lr=1.0e-3", "stages.FT.2.lr=1.0e-3")                # the control retrained
    control = _current(run_dir, "FT.2")
    assert {fp[1] for fp in _fingerprints(audit).values()} == {control["final"]}

    shutil.rmtree(run_dir / "models" / "FT.1")                            # deleted by hand, trained again
    run("stages.FT.1.lr=1.0e-3", "stages.FT.2.lr=1.0e-3", "seed=0")
    assert {c: fp[0] for c, fp in _fingerprints(audit).items()} == _current(run_dir, "FT.1")


# --------------------------------------------------------------------------------------------------
# 3: names are names
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("override, key", [
    ("audit.dataset=../../../escape", "audit.dataset"),
    ("audit.model_name=../../../../x", "audit.model_name"),
    ("audit.model_name=/tmp/abs", "audit.model_name"),
    ("audit.dataset=a/b", "audit.dataset"),
    ("audit.model_name=..", "audit.model_name"),
])
def test_names_that_become_path_parts_are_refused(audit_world, tmp_path, override, key):
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    out = work / "out"
    refused(memlens("audit", *audit_overrides(audit_world, out), override, cwd=work),
            rf"{re.escape(key)}=.*: (is not a name|must be a name)", r"no /, \\ or \.\.")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["a", "a/b", "a/b/c"]


def test_plan_and_sweep_names_that_leave_the_run_are_refused(tmp_path):
    from memlens.harness.cli import compose
    from memlens.harness.core.errors import UserError
    from memlens.recipes.orchestration.stage_plan import plan

    with pytest.raises(UserError, match=r"audit_plan\[0\]\.datasets: '\.\./x' is not a name"):
        memlens_audit_in_process(tmp_path, "audit_plan=[{models: [FT.1], control: FT.2, datasets: [../x]}]")
    cfg = compose(["experiment=smoke", f"run_dir={tmp_path / 'run'}", "+stages.IPO.sweep={objective: [ipo, ../../x]}"])
    with pytest.raises(UserError, match=r"stages\.IPO: model directory IPO/objective=\.\./\.\./x .*is not a name"):
        plan(cfg)


def memlens_audit_in_process(tmp_path: Path, plan_override: str):
    from memlens.harness.cli import run

    run_dir = tmp_path / "run"
    for name in ("FT.1", "FT.2"):
        (run_dir / "models" / name).mkdir(parents=True)
        (run_dir / "models" / name / "provenance.json").write_text("{}")
    return run(["audit", f"run_dir={run_dir}", plan_override])


# --------------------------------------------------------------------------------------------------
# 4: weights, config and tokenizer are checked before the first byte of output
# --------------------------------------------------------------------------------------------------

def _truncate(model: Path) -> str:
    weights = model / "model.safetensors"
    with weights.open("r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    return r"model\.safetensors: not a readable safetensors file \(.*\)"


def _empty(model: Path) -> str:
    (model / "model.safetensors").write_bytes(b"")
    return r"model\.safetensors: not a readable safetensors file"


def _no_config(model: Path) -> str:
    (model / "config.json").unlink()
    return r"config\.json: missing"


@pytest.mark.parametrize("damage", [_truncate, _empty, _no_config], ids=["truncated", "empty", "no_config"])
def test_unreadable_model_is_refused_before_anything_is_written(audit_world, tmp_path, damage):
    model = shutil.copytree(audit_world["model_dir"], tmp_path / "FT.1", ignore=shutil.ignore_patterns("checkpoint-*"))
    pattern = damage(model)
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = audit_overrides({**audit_world, "model_dir": model}, out, f"audit.cache_dir={cache}")
    refused(memlens("audit", *args, cwd=tmp_path), rf"{re.escape(str(model))}/{pattern}")
    assert not out.exists() and not cache.exists()
    shutil.rmtree(model)                                   # the user restores good weights: the rerun runs
    shutil.copytree(audit_world["model_dir"], model, ignore=shutil.ignore_patterns("checkpoint-*"))
    fixed = memlens("audit", *args, cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr[-3000:]


def test_a_rows_file_without_rows_never_blocks_the_rerun(audit_world, tmp_path):
    """What a crash between the meta file and the first row leaves (another model's fingerprint, no rows):
    nothing to mix, so the rerun rewrites the meta instead of refusing."""
    out = tmp_path / "out"
    meta = out / "FT.1" / "final" / "canaries.meta.json"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"model_fingerprint": "0" * 64, "control_fingerprint": "0" * 64,
                                "examples_sha256": "0" * 64, "settings": {}}))
    (out / "FT.1" / "final" / "canaries.jsonl").write_bytes(b"")
    proc = memlens("audit", *audit_overrides(audit_world, out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_json(meta)["model_fingerprint"] != "0" * 64
    assert len(ids_of(out / "FT.1" / "final" / "canaries.jsonl")) == len(audit_world["examples"])


def test_a_model_without_a_stated_context_is_named_so_in_the_warning(audit_world, tmp_path):
    model = shutil.copytree(audit_world["model_dir"], tmp_path / "FT.1", ignore=shutil.ignore_patterns("checkpoint-*"))
    config = json.loads((model / "config.json").read_text())
    del config["max_position_embeddings"]
    (model / "config.json").write_text(json.dumps(config))
    rows = audit_world["examples"][:3] + [{"id": "l0", "prefix": LONG_PREFIX, "target": "    x = 1\n" * 3,
                                           "suffix": "\n"}]
    examples = write_examples(tmp_path / "data" / "long.jsonl", rows)
    proc = memlens("audit", *audit_overrides({**audit_world, "model_dir": model, "examples_path": examples},
                                              tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warning = [line for line in proc.stdout.splitlines() if "prompt_too_long" in line]
    assert len(warning) == 1 and "None" not in warning[0], warning
    assert "FT.1/final (no context length in its config.json)" in warning[0], warning


# --------------------------------------------------------------------------------------------------
# 5: full and read-only disks (a tmpfs in a user namespace)
# --------------------------------------------------------------------------------------------------

def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


needs_namespaces = pytest.mark.skipif(not _namespaces_work(), reason="cannot mount a tmpfs in a user namespace")


def on_small_disk(tmp_path: Path, mount: Path, steps: list) -> list[subprocess.CompletedProcess]:
    """Run `steps` in one user namespace where `mount` is a fresh tmpfs: a step is ("mount", options) to
    (re)mount it, ("sh", command) or ("memlens", [args]). Returns each memlens step's result."""
    mount.mkdir(parents=True, exist_ok=True)
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    lines, n = ["set -u", f"cd {REPO}"], 0
    for kind, what in steps:
        if kind == "mount":
            first = not any(line.startswith("mount ") for line in lines)
            lines.append(f"mount -t tmpfs -o {what} tmpfs {mount}" if first else f"mount -o remount,{what} {mount}")
        elif kind == "sh":
            lines.append(what)
        else:
            args = " ".join(f"'{a}'" for a in what)
            lines.append(f"{sys.executable} -m memlens {args} > {logs}/{n}.out 2> {logs}/{n}.err; echo $? > {logs}/{n}.rc")
            n += 1
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    script = subprocess.run(["unshare", "-rm", "bash", "-c", "\n".join(lines)], env=env, capture_output=True,
                            text=True, timeout=900)
    assert script.returncode == 0, script.stderr[-3000:]
    return [subprocess.CompletedProcess([], int((logs / f"{i}.rc").read_text()), (logs / f"{i}.out").read_text(),
                                        (logs / f"{i}.err").read_text()) for i in range(n)]


def full_disk(proc: subprocess.CompletedProcess, mount: Path) -> None:
    """Exit 2 and, as the last line (training logs to stderr before it), the message naming the path."""
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, (proc.returncode, proc.stderr[-3000:])
    last = proc.stderr.strip().splitlines()[-1]
    assert re.match(rf"memlens: error: cannot write {re.escape(str(mount))}/\S*: No space left on device; "
                    r"free space .*, then rerun the same command", last), last


@needs_namespaces
def test_full_disk_during_an_audit_is_exit_2_and_the_rerun_resumes(audit_world, tmp_path):
    reference = tmp_path / "reference"
    assert memlens("audit", *audit_overrides(audit_world, reference, "audit.all_checkpoints=true"),
                    cwd=tmp_path).returncode == 0
    mount, copy = tmp_path / "disk", tmp_path / "copy"
    args = ["audit", *audit_overrides(audit_world, mount / "out", "audit.all_checkpoints=true")]
    full, resumed = on_small_disk(tmp_path, mount, [("mount", "size=40k"), ("memlens", args),
                                                    ("mount", "size=20m"), ("memlens", args),
                                                    ("sh", f"cp -r {mount}/out {copy}")])
    full_disk(full, mount)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for checkpoint in CHECKPOINTS:
        got, want = (read_jsonl(d / "FT.1" / checkpoint / "canaries.jsonl") for d in (copy, reference))
        assert sorted(got, key=lambda r: r["id"]) == sorted(want, key=lambda r: r["id"])
    assert read_json(copy / "summary.json")["results"] == read_json(reference / "summary.json")["results"]


@needs_namespaces
def test_full_disk_while_building_data_or_training_is_exit_2_and_the_rerun_resumes(tmp_path):
    mount, data = tmp_path / "disk", tmp_path / "data_src"
    write_smoke_datasets(data)
    run = [*MINI_RUN, f"run_dir={mount}/run2"]
    results = on_small_disk(tmp_path, mount, [
        ("mount", "size=64k"), ("memlens", ["data", "experiment=smoke", f"run_dir={mount}/run"]),
        ("mount", "size=20m"), ("memlens", ["data", "experiment=smoke", f"run_dir={mount}/run"]),
        ("sh", f"rm -rf {mount}/run && mkdir -p {mount}/run2 && cp -r {data}/data {mount}/run2/"),
        ("mount", "size=1500k"), ("memlens", run),
        ("mount", "size=200m"), ("memlens", run),
        ("sh", f"ls {mount}/run2/report > {tmp_path}/report_files"),
    ])
    full_disk(results[0], mount)
    assert results[1].returncode == 0, results[1].stderr[-3000:]
    full_disk(results[2], mount)
    assert results[3].returncode == 0, results[3].stderr[-3000:]
    assert "report.md" in (tmp_path / "report_files").read_text()


@needs_namespaces
def test_read_only_disk_is_exit_2_naming_the_path(audit_world, tmp_path):
    mount = tmp_path / "disk"
    results = on_small_disk(tmp_path, mount, [
        ("mount", "size=1m"), ("sh", f"mkdir {mount}/run"), ("mount", "ro"),
        ("memlens", ["data", "experiment=smoke", f"run_dir={mount}/run"]),
        ("memlens", [*MINI_RUN, f"run_dir={mount}/run"]),
        ("memlens", ["audit", *audit_overrides(audit_world, mount / "run" / "audit")]),
    ])
    for proc in results:
        refused(proc, rf"{re.escape(str(mount))}/run\S*: (cannot write .*Read-only file system|cannot be created or "
                      r"written \(.* is on a read-only file system\))")


# --------------------------------------------------------------------------------------------------
# 7 and 8: report.md escaped; the audited model equal to the control
# --------------------------------------------------------------------------------------------------

def test_report_md_escapes_names_like_report_html(audit_world, tmp_path):
    run_dir = tmp_path / "run"
    model, dataset = "<img src=x onerror=alert(1)>", "<script>alert(1)"
    proc = memlens("audit", *audit_overrides(audit_world, run_dir / "audit"), f"audit.model_name='{model}'",
                    f"audit.dataset='{dataset}'", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = memlens("report", f"run_dir={run_dir}", "report.nmt_summary=null", cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-3000:]
    md = (run_dir / "report" / "report.md").read_text()
    html = (run_dir / "report" / "report.html").read_text()
    for text in (md, html):
        assert "<img" not in text.replace("<img alt=", "") and "<script" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in md and "&lt;script&gt;alert(1)" in md
    figures = [p.name for p in (run_dir / "report" / "figures").rglob("*.png")]
    assert figures and not any(set(name) & set("<>()= ") for name in figures), figures
    links = re.findall(r"!\[[^\]]*\]\(([^)]*)\)", md)
    assert links and all((run_dir / "report" / link).is_file() for link in links)


def test_audited_model_equal_to_the_control_is_refused_unless_a_sanity_baseline(audit_world, tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = audit_overrides({**audit_world, "model_dir": audit_world["control_dir"]}, out, f"audit.cache_dir={cache}")
    refused(memlens("audit", *args, cwd=tmp_path), r"is the control", r"audit\.sanity_baseline=true")
    assert not out.exists() and not cache.exists()
    proc = memlens("audit", *args, "audit.sanity_baseline=true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    n = len(audit_world["examples"])
    # One cache serves both: each completion is generated once and each cache hit is counted once.
    assert (f"control completions: {n} generated, 0 cached; model completions: 0 generated, {n} cached"
            in proc.stdout), proc.stdout
    assert not any(r["memorized"] for r in read_jsonl(out / "CONTROL" / "final" / "canaries.jsonl"))
