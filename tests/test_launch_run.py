"""The rank supervisor and the runner, locally (no SSH): a local process stands in for
the SSH channel, with the same pipes. The real path is in test_launch_fleet.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid

import pytest

from geoconsole.launch.plan import LaunchHost, build_plan
from geoconsole.launch.run import SUPERVISOR, resolve_interfaces, run_plan, supervised_argv
from solver.fabric import Device


def _pids_with(token: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                raw = open(f"/proc/{d}/cmdline", "rb").read()
                state = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if token.encode() in raw and state != "Z":
                out.append(int(d))
    return out


def _wait_gone(token: str, seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := _pids_with(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _supervise(cmd: str, grace: float = 1.0) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SUPERVISOR, cmd, str(grace)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 20) -> tuple[str, str]:
    """Wait for the supervisor with its stdin still open (closing it means abort)."""
    proc.wait(timeout=timeout)
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.stdin.close()
    return out, err


def test_supervisor_passes_the_exit_status_through():
    proc = _supervise("echo out; exit 5")
    out, err = _finish(proc)
    assert proc.returncode == 5 and out == "out\n"
    assert err.startswith("@@geoconsole-supervisor pid=")


def test_closing_stdin_kills_the_whole_tree_even_what_ignores_sigterm():
    token = uuid.uuid4().hex[:10]
    # a grandchild in its own session that ignores SIGTERM: only SIGKILL after grace stops it
    cmd = f"setsid sh -c \"trap '' TERM; sleep 300; : {token}\" & sh -c 'sleep 300; : {token}'"
    proc = _supervise(cmd, grace=0.5)
    deadline = time.monotonic() + 10
    while len(_pids_with(token)) < 3 and time.monotonic() < deadline:  # supervisor + 2 sh
        time.sleep(0.05)
    assert len(_pids_with(token)) >= 3
    proc.stdin.close()  # what sshd does when the channel goes
    proc.wait(timeout=20)
    assert _wait_gone(token) == []


def test_stragglers_die_when_the_rank_command_ends():
    token = uuid.uuid4().hex[:10]
    proc = _supervise(f"sh -c 'sleep 300; : {token}' & echo started", grace=0.5)
    out, _ = _finish(proc)
    assert proc.returncode == 0 and "started" in out
    assert _wait_gone(token) == []


def test_the_supervisor_ignores_modules_in_its_directory_and_on_pythonpath(tmp_path):
    """sshd starts the supervisor in the login's home directory: a ``subprocess.py`` or
    ``signal.py`` there (or on a PYTHONPATH the login sets) must not replace the standard
    modules it imports, since ``python -c`` puts the current directory first on its path."""
    shadow, marks = tmp_path / "shadow", tmp_path / "marks"
    shadow.mkdir()
    marks.mkdir()
    for d in (tmp_path, shadow):
        for mod in ("subprocess", "signal", "threading", "time"):
            (d / f"{mod}.py").write_text(f"open({str(marks / mod)!r}, 'w').close()\n")
    host = LaunchHost("l0", "127.0.0.1", python=sys.executable)
    plan = build_plan([0], [Device("l0")], [host], ["/bin/echo", "rank ran"], mode="env")  # no Python in the rank
    env = {**os.environ, "PYTHONPATH": str(shadow)}
    proc = subprocess.Popen(supervised_argv(plan, plan.processes[0]), cwd=tmp_path, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    out, err = _finish(proc)
    assert proc.returncode == 0, err
    assert out == "rank ran\n" and err.startswith("@@geoconsole-supervisor pid=")
    assert sorted(p.name for p in marks.iterdir()) == []


class _LocalProcess:
    """An asyncssh-like process over local pipes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self.stdout = _Lines(proc.stdout)
        self.stderr = _Lines(proc.stderr)
        self.stdin = self
        self.exit_signal = None

    @property
    def exit_status(self):
        return self._proc.returncode

    def write_eof(self) -> None:
        self._proc.stdin.close()

    def close(self) -> None:
        self._proc.kill()

    async def wait(self):
        await self._proc.wait()


class _Lines:
    def __init__(self, stream) -> None:
        self._stream = stream

    async def readline(self) -> str:
        return (await self._stream.readline()).decode()


class _LocalSession:
    async def start(self, argv):
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        return _LocalProcess(proc)

    async def run(self, argv, timeout=None):
        class R:
            ok = True
            stdout = "198.18.1.2 via 198.19.128.2 dev to-h1 src 198.19.128.1 uid 0\n"
            stderr = ""
        self.asked = argv
        return R()


def _local_plan(program: str, n: int = 3, **kw):
    hosts = [LaunchHost(f"l{i}", "127.0.0.1", python=sys.executable) for i in range(n)]
    devices = [Device(f"l{i}") for i in range(n)]
    return build_plan(list(range(n)), devices, hosts, [sys.executable, "-c", program],
                      mode="env", **kw), {f"l{i}": _LocalSession() for i in range(n)}


async def test_runner_streams_prefixed_lines_and_collects_exit_codes():
    plan, sessions = _local_plan("import os; print('hello from', os.environ['RANK'])")
    lines = []
    result = await run_plan(plan, sessions, sink=lambda p, s, line: lines.append((p.rank, line)))
    assert result.ok and [o.exit_status for o in result.outcomes] == [0, 0, 0]
    assert sorted(lines) == [(0, "hello from 0"), (1, "hello from 1"), (2, "hello from 2")]


async def test_runner_aborts_every_rank_when_one_fails():
    token = uuid.uuid4().hex[:10]
    program = (f"import os, sys, time  # {token}\n"
               "if os.environ['RANK'] == '1':\n    sys.exit(7)\ntime.sleep(300)\n")
    plan, sessions = _local_plan(program)
    t0 = time.monotonic()
    result = await run_plan(plan, sessions, sink=lambda *a: None, grace_s=1)
    assert time.monotonic() - t0 < 30
    assert result.aborted and result.reason == "rank 1 on l1 failed"
    assert {o.rank: o.exit_status for o in result.outcomes}[1] == 7
    assert _wait_gone(token) == []


async def test_runner_without_abort_lets_the_others_finish():
    program = "import os, sys, time\nif os.environ['RANK'] == '0':\n    sys.exit(2)\ntime.sleep(0.5)\n"
    plan, sessions = _local_plan(program)
    result = await run_plan(plan, sessions, abort_on_failure=False, sink=lambda *a: None)
    assert not result.aborted and [o.exit_status for o in result.outcomes] == [2, 0, 0]


async def test_cancelling_the_runner_stops_every_rank_and_returns_the_result():
    token = uuid.uuid4().hex[:10]
    plan, sessions = _local_plan(f"import time  # {token}\nprint('up', flush=True)\ntime.sleep(300)\n")
    seen = []
    task = asyncio.ensure_future(run_plan(plan, sessions, sink=lambda p, s, line: seen.append(line), grace_s=1))
    while len(seen) < 3:
        await asyncio.sleep(0.05)
    task.cancel()
    result = await task
    assert result.interrupted and result.aborted
    assert _wait_gone(token) == []


async def test_interfaces_come_from_ip_route_get_towards_rank_zero():
    hosts = [LaunchHost("a", "10.0.0.1"), LaunchHost("b", "10.0.0.2")]
    plan = build_plan([1, 0], [Device("a"), Device("b")], hosts, ["t.py"], backend="gloo")
    sessions = {"a": _LocalSession(), "b": _LocalSession()}
    found = await resolve_interfaces(plan, sessions)
    assert found == {"a": "to-h1", "b": "to-h1"}
    assert sessions["a"].asked == ["ip", "-o", "route", "get", "10.0.0.2"]  # rank 0 is on b
    assert sessions["b"].asked == ["ip", "-o", "route", "get", "10.0.0.1"]  # b asks for a peer


@pytest.mark.parametrize("rank_map", [[0, 1], [1, 0]])
def test_plan_for_one_host_uses_loopback(rank_map):
    plan = build_plan(rank_map, [Device("a", 0), Device("a", 1)], [LaunchHost("a", "10.0.0.1")],
                      ["t.py"], backend="gloo")
    assert asyncio.run(resolve_interfaces(plan, {"a": _LocalSession()})) == {"a": "lo"}


async def test_hosts_with_many_ranks_spread_over_several_connections():
    from geoconsole.launch.run import RANKS_PER_CONNECTION, close_sessions, rank_sessions

    class Pool:
        def __init__(self):
            self.connects = 0

        async def session(self, host):
            return ("pool", host.name)

        async def connect(self, host):
            self.connects += 1
            return object()

    n = 2 * RANKS_PER_CONNECTION + 1  # 17 GPUs on one host, 1 on another
    devices = [Device("big", g) for g in range(n)] + [Device("small", 0)]
    hosts = [LaunchHost("big", "10.0.0.1"), LaunchHost("small", "10.0.0.2")]
    plan = build_plan(list(range(n + 1)), devices, hosts, ["t.py"])
    pool = Pool()
    sessions = await rank_sessions(pool, {h.name: h for h in hosts}, plan)
    assert len(sessions["big"]) == 3 and len(sessions["small"]) == 1 and pool.connects == 2

    started: dict[int, object] = {}

    class Recorder:
        def __init__(self, tag):
            self.tag = tag

        async def start(self, argv):
            rank = int(argv[-2].split("--node-rank=")[1].split()[0])
            started[rank] = self.tag
            raise OSError("not really starting")

    fake = {"big": [Recorder(0), Recorder(1), Recorder(2)], "small": [Recorder("s")]}
    result = await run_plan(plan, fake, sink=lambda *a: None)
    assert not result.ok and all(o.error.startswith("cannot start") for o in result.outcomes)
    per_connection = [sum(1 for r, t in started.items() if t == k) for k in (0, 1, 2)]
    assert per_connection == [RANKS_PER_CONNECTION, RANKS_PER_CONNECTION, 1]
    close_sessions({"big": [sessions["big"][0]]})  # nothing extra to close: no error
