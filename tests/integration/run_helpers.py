"""What the integration tests share to drive the real CLI: the checkout, `python -m memlens` in a subprocess, its
one-line-per-stage status, the bad-input assertions, and the toy-size overrides every pipeline experiment runs
at. Helpers only: no test lives here, and test modules import from here, never from each other."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from memlens.harness.cli import compose
from memlens.recipes.orchestration.stage_plan import plan

REPO = Path(__file__).resolve().parents[2]
# DeepSpeed for the ZeRO-3 test only, beside .venv (scripts/setup.sh installs it; pyproject.toml says why)
DEEPSPEED_OVERLAY = REPO / ".venv" / "deepspeed-overlay"
CONF = REPO / "conf"
# Pipeline experiments: the ones that declare `stages:` (others, e.g. nmt_*, belong to other commands).
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml") if "\nstages:" in p.read_text())


def two_processes() -> list[str]:
    """`accelerate launch` of two CPU processes (launch/cpu_2proc.yaml: torchrun over gloo) on a free port, so two
    test workers can each run one at once (the default port, 29500, would be taken by the first)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(REPO / "launch" / "cpu_2proc.yaml"),
            "--main_process_port", str(port)]


OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
# The worker's environment as the session started (tests/conftest.py has set its variables): the environment of the
# preloaded server, and so of every call forked from it.
SESSION_ENV = {**os.environ, **OFFLINE}
# Variables set while the session runs that no import reads differently: pytest's name of the current test, and the
# cache folder torch sets in a process the first time something asks for it (a test's training does; measured: before
# it was ignored here, every later call went to a new interpreter).
# Set in-process by a library on first use, and by a call that uses it anyway: torch's inductor cache folder, and
# scikit-learn's import (os.environ.setdefault of two variables of Intel's OpenMP runtime, which torch's CPU build, on
# GNU OpenMP, does not read): a worker that ran the blind-baseline tests would otherwise fork no call again.
NOT_COMPARED = ("PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR", "KMP_DUPLICATE_LIB_OK", "KMP_INIT_AT_FORK")
# MEMLENS_TEST_FRESH_PROCESSES=1: every call a new interpreter, as before the preloaded server (to rule it out).
_PRELOADED: list = []


def preloaded_cli():
    """This worker's preloaded server (tests/integration/preloaded_cli.py), started on first use; None when turned
    off."""
    if os.environ.get("MEMLENS_TEST_FRESH_PROCESSES") == "1":
        return None
    if not _PRELOADED:
        import atexit
        import shutil
        import tempfile

        from tests.integration.preloaded_cli import PreloadedCli

        folder = Path(tempfile.mkdtemp(prefix="memlens-cli-"))     # short: a socket path has ~100 characters
        server = PreloadedCli(folder)
        server.start(SESSION_ENV, REPO)
        atexit.register(shutil.rmtree, folder, True)
        _PRELOADED.append(server)
    return _PRELOADED[0]


def as_a_command_starts(env: dict[str, str]) -> dict[str, str]:
    """`env` as every memlens command makes it before it imports a library (harness/cli.py stay_offline,
    harness/core/console.py quiet_libraries), less what is not compared: a worker whose own tests ran those
    functions in-process holds their variables, and a call would set them anyway."""
    from memlens.harness.cli import OFFLINE_ENVIRONMENT
    from memlens.harness.core.console import QUIET_LIBRARY_ENV

    out = {**QUIET_LIBRARY_ENV, **env, **OFFLINE_ENVIRONMENT}
    return {k: v for k, v in out.items() if k not in NOT_COMPARED and k != "PYTHONPATH"}


def environment_drift(env: dict[str, str]) -> list[str]:
    """The variables in which `env` differs from the preloaded server's, as a command starts: none means a call in
    `env` may be forked from it. PYTHONPATH may also put the checkout first (memlens_in), where the server's imports
    came from already."""
    a, b = as_a_command_starts(env), as_a_command_starts(SESSION_ENV)
    drift = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    session_path = SESSION_ENV.get("PYTHONPATH", "")
    if env.get("PYTHONPATH", "") not in (session_path, os.pathsep.join([str(REPO), session_path])):
        drift.append("PYTHONPATH")
    return drift


def forkable(env: dict[str, str]) -> bool:
    return not environment_drift(env)


def run_memlens(args: list[str], env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """`python -m memlens ARGS` in `env` from `cwd`, captured: forked from this worker's preloaded server where the
    environment allows it (a process of its own that skips ~5 s of imports: tests/integration/preloaded_cli.py),
    else a new interpreter."""
    if forkable(env) and (server := preloaded_cli()):
        return server.run(args, env, cwd, timeout)
    return subprocess.run([sys.executable, "-m", "memlens", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def run_python(script: Path, args: list[str], env: dict[str, str], cwd: Path, timeout: float
               ) -> subprocess.CompletedProcess:
    """`python SCRIPT ARGS` in `env` from `cwd`, captured, forked from the preloaded server as run_memlens is."""
    if forkable(env) and (server := preloaded_cli()):
        return server.run(args, env, cwd, timeout, script=script)
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def memlens(*args: str, launcher: list[str] | None = None, timeout: int = 900,
            env: dict[str, str] | None = None, module: str = "memlens") -> subprocess.CompletedProcess:
    """`python -m memlens ARGS` from the checkout, offline (or under `launcher`, e.g. accelerate launch; `env`: the
    environment to start from, e.g. a test SLURM cluster's SLURM_CONF; `module`: a test's wrapper of the command,
    e.g. tests.integration.zero3_probe)."""
    env = {**(env or os.environ), **OFFLINE}
    if launcher is None and module == "memlens":
        return run_memlens(list(args), env, REPO, timeout)
    cmd = (launcher or [sys.executable]) + ["-m", module, *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def user_directory_env() -> dict[str, str]:
    """memlens_in's environment: one thread, offline, the checkout first on the path."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def memlens_in(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m memlens ARGS` run from `cwd` (a user's directory), one thread, offline."""
    return run_memlens(list(args), user_directory_env(), cwd, 600)


def status_lines(stdout: str) -> dict[str, str]:
    """{model: status} from the pipeline's one-line-per-stage report."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) == 6 and parts[0] == "[memlens]" and parts[-1] == "s":
            out[parts[1]] = parts[3]
    return out


def refused(proc: subprocess.CompletedProcess, *patterns: str) -> str:
    """Exit 2, a one-paragraph error (no traceback) matching every pattern."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert proc.stderr.startswith("memlens: error: ") and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for pattern in patterns:
        assert re.search(pattern, proc.stderr), (pattern, proc.stderr)
    return proc.stderr


def write_examples(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


# A prefix longer than any tiny model's context: its prompt is excluded as prompt_too_long.
LONG_PREFIX = "".join(f"value_{i} = compute_{i}(value_{i - 1}, {i * 7919 % 1000})\n" for i in range(1, 200))


# A few optimizer steps per recipe, at the smoke experiment's sequence lengths.
TOY_STAGE = {
    "pretrain": {"max_tokens": 16384, "max_seq_len": 128, "batch_size": 8, "save_steps": 8,
                 "tokenizer_chars": 300000},
    "sft": {"max_steps": 4, "save_steps": 2, "batch_size": 8, "max_seq_len": 256},
    "reward": {"max_steps": 4, "save_steps": 2, "batch_size": 8, "max_length": 256},
    "rl": {"max_steps": 2, "save_steps": 1, "num_generations": 2, "prompts_per_step": 2,
           "max_completion_length": 8, "eval_prompts": 4, "eval_samples": 2},
    "preference": {"max_steps": 2, "save_steps": 1, "batch_size": 4, "max_length": 256},
}
# The smoke experiment's model, data and decoding budget, read from conf/experiment/smoke.yaml.
SMOKE_KEYS = ("data.sd.size", "data.sd.line_counts", "data.pd.max_files", "data.pd.proportions",
              "audit.max_new_tokens", "audit.target_tokens", "audit.min_target_tokens", "audit.utility_examples")


def smoke_overrides() -> list[str]:
    """`key=value` overrides (Hydra's grammar: unquoted dict keys) carrying smoke's values of SMOKE_KEYS."""
    from omegaconf import OmegaConf

    smoke = compose(["experiment=smoke"])
    return [f"model={smoke.model.name}", "device=cpu",
            *(f"{key}={OmegaConf.select(smoke, key)}".replace(" ", "").replace("'", "") for key in SMOKE_KEYS)]


# Membership inference (on in findings and findings_rlvr) on the target span with 200 bootstrap resamples: the same
# wiring, about half the teacher-forced passes of both spans (measured: ~1 min 45 s of findings' toy run at load ~10).
# The toy runs check plumbing: RL-prompt membership (on in the quickstart) samples 4 completions of 8 tokens per prompt.
TOY_RUN = [*smoke_overrides(), "audit.mia_spans=[target]", "audit.mia_bootstrap=200", "audit.prompt_mia_samples=4",
           "audit.prompt_mia_k=2", "audit.prompt_mia_max_new_tokens=8"]


def toy_overrides(name: str) -> list[str]:
    """The experiment's composed stages, each cut to TOY_STAGE for its recipe (`++` adds a key it lacks)."""
    stages = {s.name: s.recipe for s in plan(compose([f"experiment={name}", *TOY_RUN]))}
    return [f"++stages.{stage}.{key}={value}" for stage, recipe in stages.items()
            for key, value in TOY_STAGE[recipe].items()]


def copy_run(run_dir: Path, dest: Path, parts: list[str] | None = None) -> Path:
    """A copy of a run (or of `parts` of it, e.g. ["data", "models/PT"]) to run commands on, times kept (a model's
    up-to-date check compares them); no lock files, which another test's command on the original may be holding."""
    import shutil

    ignore = shutil.ignore_patterns(".memlens.lock*", ".locks")
    for part in parts or [""]:
        shutil.copytree(run_dir / part, dest / part, symlinks=True, ignore=ignore, dirs_exist_ok=True)
    return dest
