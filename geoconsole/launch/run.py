"""Run a launch plan over SSH: every rank at once, output streamed, nothing left behind.

Each rank runs under a small supervisor (:data:`SUPERVISOR`, Python, shipped in the
command line) that

- starts the rank's command in its own session and process group,
- makes itself the *child subreaper*, so processes that leave the group (torchrun starts
  its workers in new sessions) or lose their parent stay its descendants,
- watches its stdin: when the console closes it (abort), exits or loses the connection,
  sshd closes the pipe, and the supervisor stops every descendant: SIGTERM, then SIGKILL
  after a grace period, until none is left,
- does the same when the rank's own command ends, so stragglers die with it,
- exits with the command's status (128 + signal when it was killed).

So an abort needs no PID bookkeeping on the console side and survives a lost console:
nothing keeps running without the SSH channel that started it.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping, Sequence

from geoconsole.launch.plan import LaunchPlan, Process

#: Seconds between SIGTERM and SIGKILL when a rank is stopped.
DEFAULT_GRACE_S = 5.0
#: Ranks per SSH connection: each rank holds one channel, and sshd's default MaxSessions
#: is 10, so a host with more GPUs gets one more connection per 8 ranks.
RANKS_PER_CONNECTION = 8

SUPERVISOR = r"""
import ctypes, os, signal, subprocess, sys, threading, time
cmd, grace = sys.argv[1], float(sys.argv[2])
try:
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except Exception:
    pass
me = os.getpid()
child = subprocess.Popen(["/bin/sh", "-c", cmd], stdin=subprocess.DEVNULL, start_new_session=True)
sys.stderr.write("@@geoconsole-supervisor pid=%d pgid=%d\n" % (me, child.pid))
sys.stderr.flush()
def tree():
    kids, zombies = {}, set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            s = open("/proc/%s/stat" % d).read()
            f = s[s.rindex(")") + 2:].split()
        except (OSError, ValueError):
            continue
        kids.setdefault(int(f[1]), []).append(int(d))
        if f[0] == "Z":
            zombies.add(int(d))
    out, todo = [], [me]
    while todo:
        for c in kids.get(todo.pop(), []):
            todo.append(c)
            if c not in zombies:
                out.append(c)
    return out
lock = threading.Lock()
def stop(*_):
    # Runs until the supervisor exits (when no child is left to wait for): a process
    # forked while the tree was read, or reparented after it, is found on a later pass.
    if not lock.acquire(False):
        return
    end = time.monotonic() + grace
    termed = set()
    while True:
        late = time.monotonic() > end
        for p in tree():
            if late or p not in termed:
                try:
                    os.kill(p, signal.SIGKILL if late else signal.SIGTERM)
                except OSError:
                    pass
                termed.add(p)
        time.sleep(0.1)
def watch():
    while sys.stdin.buffer.read1(65536):
        pass
    stop()
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(s, lambda *a: threading.Thread(target=stop, daemon=True).start())
threading.Thread(target=watch, daemon=True).start()
status = None
while True:
    try:
        pid, st = os.waitpid(-1, 0)
    except ChildProcessError:
        break
    except InterruptedError:
        continue
    if pid == child.pid:
        status = st
        threading.Thread(target=stop, daemon=True).start()
code = 1 if status is None else (os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
sys.stdout.flush()
os._exit(code)
"""

_MARKER = re.compile(r"@@geoconsole-supervisor pid=(\d+) pgid=(\d+)")

LineSink = Callable[[Process, str, str], None]


@dataclass
class RankOutcome:
    rank: int
    host: str
    exit_status: int | None = None
    supervisor_pid: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and self.error is None


@dataclass
class LaunchResult:
    outcomes: list[RankOutcome]
    aborted: bool = False
    reason: str | None = None
    elapsed_s: float = 0.0
    interrupted: bool = False

    @property
    def failed(self) -> list[RankOutcome]:
        return [o for o in self.outcomes if not o.ok]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.aborted

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "aborted": self.aborted,
            "interrupted": self.interrupted,
            "reason": self.reason,
            "elapsed_s": round(self.elapsed_s, 3),
            "exit_status": {str(o.rank): o.exit_status for o in self.outcomes},
            "errors": {str(o.rank): o.error for o in self.outcomes if o.error},
        }


def supervised_argv(plan: LaunchPlan, p: Process, grace_s: float = DEFAULT_GRACE_S) -> list[str]:
    """The argv started over SSH for one rank (the host's Python runs the supervisor).

    ``-I`` (isolated mode, Python 3.4+): sshd starts it in the login's home directory,
    which ``python -c`` would put first on the module path, so a ``signal.py`` there, or
    a module on the login's ``PYTHONPATH``, would replace the standard modules the
    supervisor imports. The rank's own command still gets the environment unchanged.
    """
    python = plan.hosts[p.host].python if p.host in plan.hosts else "python3"
    return [python, "-I", "-u", "-c", SUPERVISOR, p.shell_command(plan.workdir), f"{grace_s:g}"]


def default_sink(p: Process, stream: str, line: str) -> None:
    import sys

    out = sys.stderr if stream == "stderr" else sys.stdout
    print(f"[rank {p.rank} {p.host}] {line}", file=out, flush=True)


_ROUTE_DEV = re.compile(r"\bdev\s+(\S+)")


async def resolve_interfaces(
    plan: LaunchPlan, sessions: Mapping[str, Any], *, timeout: float = 15.0
) -> dict[str, str]:
    """The data interface of every host whose plan leaves it open, by ``ip route get``.

    A host routes towards rank 0's address; rank 0's host routes towards the next host
    in rank order (a one-host plan uses ``lo``). Raises ``RuntimeError`` naming the host.
    """
    by_host = plan.by_host()
    addresses = {p.host: plan.hosts[p.host].rendezvous_address for p in plan.processes}
    order = list(dict.fromkeys(p.host for p in plan.processes))
    todo = [h for h in order if any(p.interface is None for p in by_host[h])]

    async def one(host: str) -> tuple[str, str]:
        peers = [h for h in order if h != host]
        if not peers:
            return host, "lo"
        target = addresses[plan.master_host] if host != plan.master_host else addresses[peers[0]]
        result = await primary(sessions[host]).run(["ip", "-o", "route", "get", target], timeout=timeout)
        m = _ROUTE_DEV.search(result.stdout)
        if not result.ok or not m:
            tail = (result.stderr.strip().splitlines() or ["no route"])[-1]
            raise RuntimeError(f"{host}: cannot find the interface towards {target}: {tail}")
        return host, m.group(1)

    return dict(await asyncio.gather(*(one(h) for h in todo)))


def primary(session: Any) -> Any:
    """The host's first session, whether given alone or as :func:`rank_sessions`' list."""
    return session[0] if isinstance(session, (list, tuple)) else session


def _session_for(sessions: Mapping[str, Any], p: Process) -> Any:
    s = sessions[p.host]
    if isinstance(s, (list, tuple)):
        return s[min(p.local_index // RANKS_PER_CONNECTION, len(s) - 1)]
    return s


async def rank_sessions(pool: Any, ssh_hosts: Mapping[str, Any], plan: LaunchPlan) -> dict[str, list[Any]]:
    """Sessions for :func:`run_plan`: the pool's session per host, plus one more
    connection for every further :data:`RANKS_PER_CONNECTION` ranks on that host.

    The extra connections are not the pool's: close them with :func:`close_sessions`.
    """
    return await sessions_for_counts(pool, ssh_hosts, {h: len(ps) for h, ps in plan.by_host().items()})


async def sessions_for_counts(pool: Any, ssh_hosts: Mapping[str, Any], counts: Mapping[str, int]) -> dict[str, list[Any]]:
    """Like :func:`rank_sessions`, from the number of ranks per host name."""
    from probes.ssh import HostSession

    out: dict[str, list[Any]] = {}
    for name, count in counts.items():
        host = ssh_hosts[name]
        need = max(1, -(-count // RANKS_PER_CONNECTION))
        out[name] = [await pool.session(host)]
        for _ in range(need - 1):
            out[name].append(HostSession(pool, host, await pool.connect(host)))
    return out


def close_sessions(sessions: Mapping[str, list[Any]]) -> None:
    """Close the extra connections :func:`rank_sessions` opened (the pool closes the rest)."""
    for group in sessions.values():
        for s in group[1:]:
            s.close()


async def _pump(stream, p: Process, name: str, sink: LineSink, outcome: RankOutcome) -> None:
    while True:
        line = await stream.readline()
        if not line:
            return
        line = line.rstrip("\r\n")
        if name == "stderr" and outcome.supervisor_pid is None:
            m = _MARKER.fullmatch(line.strip())
            if m:
                outcome.supervisor_pid = int(m.group(1))
                continue
        sink(p, name, line)


async def run_plan(
    plan: LaunchPlan,
    sessions: Mapping[str, Any],
    *,
    abort_on_failure: bool = True,
    sink: LineSink = default_sink,
    grace_s: float = DEFAULT_GRACE_S,
    started: Callable[[], Awaitable[None] | None] | None = None,
) -> LaunchResult:
    """Start every rank of ``plan`` at once and wait for all of them.

    ``sessions`` maps host name to a ``probes.ssh.HostSession`` (or to a list of them
    from :func:`rank_sessions`, for hosts with more ranks than one connection holds). With
    ``abort_on_failure``, the first rank that exits non-zero stops every other rank.
    Cancelling the task (Ctrl-C under ``asyncio.run``) stops every rank and returns the
    result with ``interrupted`` set, so the caller can still record the launch.
    ``started`` is called once every rank's process is running.
    """
    t0 = time.monotonic()
    outcomes = [RankOutcome(p.rank, p.host) for p in plan.processes]
    procs: list[Any] = [None] * len(plan.processes)
    result = LaunchResult(outcomes)
    first_failure = asyncio.Event()

    async def start(i: int, p: Process) -> None:
        try:
            procs[i] = await _session_for(sessions, p).start(supervised_argv(plan, p, grace_s))
        except Exception as exc:  # SSHError, asyncssh.Error, OSError: report, then abort all
            outcomes[i].error = f"cannot start: {exc}"
            first_failure.set()

    async def follow(i: int, p: Process) -> None:
        proc, out = procs[i], outcomes[i]
        if proc is None:
            return
        try:
            await asyncio.gather(
                _pump(proc.stdout, p, "stdout", sink, out),
                _pump(proc.stderr, p, "stderr", sink, out),
            )
            await proc.wait()
            out.exit_status = proc.exit_status if proc.exit_status is not None else (
                128 + 9 if proc.exit_signal else None)
            if out.exit_status is None:
                out.error = "connection lost"
        except Exception as exc:
            out.error = f"connection lost: {exc}"
        if not out.ok:
            first_failure.set()

    async def stop_all(reason: str) -> None:
        result.aborted = True
        result.reason = result.reason or reason
        for proc in procs:
            if proc is not None and proc.exit_status is None:
                try:
                    proc.stdin.write_eof()
                except Exception:
                    proc.close()

    followers = None
    try:
        await asyncio.gather(*(start(i, p) for i, p in enumerate(plan.processes)))
        if first_failure.is_set():
            await stop_all("a rank could not be started")
        elif started is not None:
            maybe = started()
            if asyncio.iscoroutine(maybe):
                await maybe
        followers = asyncio.gather(*(follow(i, p) for i, p in enumerate(plan.processes)))
        if abort_on_failure and not result.aborted:
            waiter = asyncio.ensure_future(first_failure.wait())
            done, _ = await asyncio.wait({followers, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if waiter in done and not followers.done():
                bad = next(o for o in outcomes if (o.exit_status not in (None, 0)) or o.error)
                await stop_all(f"rank {bad.rank} on {bad.host} failed")
        await followers
    except asyncio.CancelledError:
        result.interrupted = True
        await stop_all("interrupted")
        await _drain(procs, grace_s)
        if followers is not None:
            followers.cancel()
    result.elapsed_s = time.monotonic() - t0
    return result


async def _drain(procs: Sequence[Any], grace_s: float) -> None:
    """Wait (bounded) for stopped ranks' channels to close, so supervisors finished."""
    waits = [p.wait() for p in procs if p is not None]
    if waits:
        try:
            await asyncio.wait_for(asyncio.gather(*waits, return_exceptions=True), grace_s + 10)
        except (asyncio.TimeoutError, TimeoutError):
            pass


def launch_record(plan: LaunchPlan, result: LaunchResult, *, fabric_sha256: str | None = None,
                  kind: str = "launch", extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run-record entry of one launch (no environment values: records hold no secrets)."""
    rec = {
        "kind": kind,
        "fabric_sha256": fabric_sha256,
        "rank_map": plan.rank_map,
        "mode": plan.mode,
        "backend": plan.backend,
        "world_size": plan.world_size,
        "master": f"{plan.master_host} {plan.master_addr}:{plan.master_port}",
        "hosts": {str(p.rank): p.host for p in plan.processes},
        "command": list(plan.command),
        **result.to_json(),
    }
    rec.update(extra or {})
    return rec
