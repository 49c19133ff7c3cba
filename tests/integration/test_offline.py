"""No network at run time, even when the user's environment does not say so.

The CLI runs with HF_HUB_OFFLINE & co. unset and every socket connection and DNS lookup counted and
refused (a sitecustomize.py on PYTHONPATH): importing a preset by its hub id from a populated HF cache,
and the preflight of one that is not cached, make zero attempts. A control run shows the counter works.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memlens.harness.core.io import read_json
from tests.families import build_family

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
HUB_ID = "Qwen/Qwen2.5-Coder-0.5B"       # conf/model/qwen2.5_coder_0.5b.yaml
BLOCKER = '''
import os, socket

def _refuse(*args, **kwargs):
    with open(os.environ["NETWORK_ATTEMPTS_LOG"], "a") as log:
        log.write(repr(args)[:200] + "\\n")
    raise OSError("network access refused by the test")

socket.getaddrinfo = _refuse
socket.create_connection = _refuse
socket.socket.connect = _refuse
socket.socket.connect_ex = _refuse
'''


def cached_hub_model(hf_home: Path, hub_id: str, model_dir: Path) -> Path:
    """`model_dir` laid out as the HF cache holds a downloaded `hub_id` (refs/main -> snapshots/<commit>)."""
    commit = "0" * 40
    repo = hf_home / "hub" / f"models--{hub_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    shutil.copytree(model_dir, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture(scope="module")
def offline_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("offline")
    (root / "site").mkdir()
    (root / "site" / "sitecustomize.py").write_text(BLOCKER)
    snapshot = cached_hub_model(root / "hf", HUB_ID, build_family("qwen2.5-coder", root / "qwen"))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE") and k != "HF_HUB_DISABLE_TELEMETRY"}
    env.update(HF_HOME=str(root / "hf"), PYTHONPATH=str(root / "site"), TOKENIZERS_PARALLELISM="false",
               NETWORK_ATTEMPTS_LOG=str(root / "attempts.log"))
    return root, env, snapshot


def run(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def attempts(root: Path) -> list[str]:
    log = root / "attempts.log"
    return log.read_text().splitlines() if log.is_file() else []


def test_the_blocker_counts_a_connection_attempt(offline_env, tmp_path):
    root, env, _ = offline_env
    env = {**env, "NETWORK_ATTEMPTS_LOG": str(tmp_path / "control.log")}
    result = run(env, "-c", "import socket; socket.create_connection(('huggingface.co', 443))")
    assert result.returncode != 0 and "refused by the test" in result.stderr
    assert (tmp_path / "control.log").read_text().count("\n") == 1


def test_a_cached_hub_id_is_checked_and_imported_without_touching_the_network(offline_env, tmp_path):
    root, env, snapshot = offline_env
    check = run(env, "-m", "memlens", "check", "model=qwen2.5_coder_0.5b", "experiment=smoke", "device=cpu")
    assert check.returncode == 0, check.stdout + check.stderr
    assert str(snapshot) in check.stdout
    run_dir = tmp_path / "run"
    imported = run(env, "-m", "memlens", "train", "stage=PT", "experiment=smoke", "model=qwen2.5_coder_0.5b",
                   f"run_dir={run_dir}", "device=cpu")
    assert imported.returncode == 0, imported.stdout[-2000:] + imported.stderr[-2000:]
    assert read_json(run_dir / "models" / "PT" / "provenance.json")["init_model"] == HUB_ID
    assert attempts(root) == []


def test_an_uncached_hub_id_is_an_exit_2_that_says_how_to_fetch_it(offline_env):
    root, env, _ = offline_env
    result = run(env, "-m", "memlens", "check", "model=starcoder2_3b", "experiment=smoke")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "huggingface-cli download bigcode/starcoder2-3b" in result.stderr
    assert "Traceback" not in result.stderr
    assert attempts(root) == []
