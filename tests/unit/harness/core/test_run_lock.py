"""One writer per directory (harness/core/lock.py): a second process is refused naming the holder, the OS
releases a killed holder's lock, and a lock file left by a dead process never blocks."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from memlens.harness.core.errors import UserError
from memlens.harness.core.lock import LOCK_FILE, hold_directories

REPO = Path(__file__).resolve().parents[4]
HOLDER = """
import sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
from memlens.harness.core.lock import hold_directories
with hold_directories([("run_dir", Path({path!r}))], "memlens run experiment=smoke"):
    print("held", flush=True)
    time.sleep(600)
"""


def start_holder(path: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(repo=str(REPO), path=str(path))],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_process_is_refused_naming_the_holder_until_it_is_killed(tmp_path):
    run_dir = tmp_path / "run"
    holder = start_holder(run_dir)
    try:
        with pytest.raises(UserError) as refused:
            with hold_directories([("run_dir", run_dir)], "memlens data"):
                pass
        message = str(refused.value)
        assert f"{run_dir} is in use by another memlens process (pid {holder.pid}" in message
        assert "memlens run experiment=smoke" in message and "run_dir" in message
    finally:
        os.killpg(holder.pid, signal.SIGKILL)       # our own child's session only
        holder.wait()
    assert (run_dir / LOCK_FILE).exists()            # left by the kill; the OS released the lock itself
    with hold_directories([("run_dir", run_dir)], "memlens data"):
        assert json.loads((run_dir / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert not (run_dir / LOCK_FILE).exists()


def test_a_lock_file_of_a_dead_process_never_blocks(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (run_dir / LOCK_FILE).write_text(json.dumps({"pid": int(dead.stdout), "command": "memlens run"}))
    with hold_directories([("run_dir", run_dir)], "memlens run"):
        pass
    assert sorted(p.name for p in run_dir.iterdir()) == []


def test_a_refused_or_finished_command_leaves_no_directory_it_created(tmp_path):
    out = tmp_path / "a" / "b" / "out"
    with hold_directories([("audit.out_dir", out)], "memlens audit"):
        assert out.is_dir()
    assert not (tmp_path / "a").exists()
    with hold_directories([("audit.out_dir", out)], "memlens audit"):
        (out / "rows.jsonl").write_text("")          # the command wrote something: it stays
    assert sorted(p.name for p in out.iterdir()) == ["rows.jsonl"]


def test_a_path_below_a_file_names_its_key(tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(UserError, match=r"audit\.out_dir=.*/a_file/sub: cannot be a directory"):
        with hold_directories([("audit.out_dir", tmp_path / "a_file" / "sub")], "memlens audit"):
            pass


def test_a_released_lock_is_never_held_twice(tmp_path):
    """Holders that come and go quickly (each unlinks its file on release) never overlap."""
    run_dir = tmp_path / "run"
    script = (f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from pathlib import Path\n"
              "from memlens.harness.core.lock import hold_directories\nfrom memlens.harness.core.errors import UserError\n"
              f"n = 0\nend = time.time() + 3\nwhile time.time() < end:\n"
              f"    try:\n        with hold_directories([('run_dir', Path({str(run_dir)!r}))], 'x'):\n"
              f"            p = Path({str(run_dir / 'inside')!r})\n            p.mkdir()\n"
              "            time.sleep(0.001)\n            p.rmdir()\n            n += 1\n"
              "    except UserError:\n        pass\nprint(n)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    results = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-1000:] for _, err in results]   # mkdir never clashed
    assert sum(int(out) for out, _ in results) > 0


SHARED_HOLDER = """
import sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
from memlens.harness.core.lock import hold_directories
with hold_directories([("run_dir", Path({path!r}), {mode!r})], {command!r}):
    print("held", flush=True)
    time.sleep(600)
"""


def start_mode_holder(path: Path, mode: str, command: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SHARED_HOLDER.format(repo=str(REPO), path=str(path), mode=mode,
                                                                         command=command)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_shared_holders_coexist_and_an_exclusive_taker_is_told_every_one(tmp_path):
    from memlens.harness.core.lock import EXCLUSIVE, SHARED

    run_dir = tmp_path / "run"
    readers = [start_mode_holder(run_dir, SHARED, f"memlens train stage=RLFT.1 point {i}") for i in (1, 2)]
    try:
        with hold_directories([("run_dir", run_dir, SHARED)], "memlens train stage=RLFT.4"):
            pass                                      # a third shared holder is let in
        with pytest.raises(UserError) as refused:
            with hold_directories([("run_dir", run_dir, EXCLUSIVE)], "memlens run"):
                pass
        message = str(refused.value)
        assert "is in use by 2 other memlens processes" in message
        assert all(f"pid {r.pid}" in message for r in readers) and "point 1" in message and "point 2" in message
        assert f"kill {readers[0].pid} {readers[1].pid}" in message
    finally:
        for r in readers:
            os.killpg(r.pid, signal.SIGKILL)
            r.wait()
    with hold_directories([("run_dir", run_dir, EXCLUSIVE)], "memlens run"):   # the OS released both
        pass


def test_an_exclusive_holder_refuses_a_shared_taker(tmp_path):
    from memlens.harness.core.lock import SHARED

    run_dir = tmp_path / "run"
    holder = start_holder(run_dir)
    try:
        with pytest.raises(UserError, match=rf"in use by another memlens process \(pid {holder.pid}\b"):
            with hold_directories([("run_dir", run_dir, SHARED)], "memlens train stage=FT.1"):
                pass
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    with hold_directories([("run_dir", run_dir, SHARED), ("run_dir", run_dir)], "memlens run"):
        assert json.loads((run_dir / LOCK_FILE).read_text())["mode"] == "exclusive"   # named twice: the stronger


def test_a_patient_taker_gets_a_lock_its_holder_releases_within_the_wait_and_is_refused_after_it(tmp_path):
    """A launcher's job that only reads the data waits (wait_s) for the driver checking or building it: a holder
    that lets go within the wait lets it in; one that holds on past it refuses it, saying how long it waited."""
    import time

    from memlens.harness.core.lock import EXCLUSIVE, SHARED

    run_dir = tmp_path / "run"
    holder = start_mode_holder(run_dir, EXCLUSIVE, "memlens run (data)")
    try:
        started = time.monotonic()
        with pytest.raises(UserError, match=rf"in use by another memlens process \(still, after waiting 1 s\) "
                                            rf"\(pid {holder.pid}\b.*memlens run \(data\)"):
            with hold_directories([("run_dir", run_dir, SHARED, 1.0)], "memlens train stage=FT.2"):
                pass
        assert time.monotonic() - started >= 1.0
        subprocess.Popen(["sh", "-c", f"sleep 1; kill -9 {holder.pid}"])          # lets go within the next wait
        with hold_directories([("run_dir", run_dir, SHARED, 60.0)], "memlens train stage=FT.2"):
            assert holder.wait(timeout=5) == -signal.SIGKILL       # let in once the holder was gone, not before
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def test_a_training_that_fails_under_its_shared_locks_raises_its_own_error(tmp_path):
    """`memlens train` holds (key, directory, SHARED) entries; a failure that is not the disk's passes through as it
    is (it was a `too many values to unpack` from the disk check)."""
    from memlens.harness.cli import compose, run_locked

    def fails(cfg):
        raise RuntimeError("the stage failed")

    cfg = compose(["experiment=smoke", f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(RuntimeError, match="the stage failed"):
        run_locked("train", fails, cfg, ["train", "stage=PT"])
