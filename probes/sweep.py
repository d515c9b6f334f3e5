"""The probe sweep: measure the device pairs of a fleet, streaming events as it goes.

Phases:

1. **Set-up**, every host concurrently, bounded by ``host_timeout_s``: connect,
   discover (:mod:`probes.discovery`), upload :mod:`probes.worker`; then, per host,
   start its one worker process (``setsid -w``, pid file), which imports torch once and
   forks a child per device, and wait for every child's hello. A host that fails here
   is lost; its devices stay in the fabric with null pairs.
2. **Slots** (:mod:`probes.schedule`): intra-host pairs, then a round-robin tournament
   of host pairs. A slot starts as soon as both its hosts are set up and free, so set-up
   overlaps measurement and rounds are an order, not a barrier; no host is in two slots
   at once; the device pairs of a slot run in sequence. Each pair job measures both
   directions with one process group and is bounded by ``pair_timeout_s``. A poor fit
   (R^2 < 0.98 or a non-positive slope) is retried once and then kept with a flag.
3. **Strategy**: ``all`` measures every device pair; ``sampled`` (the default when a
   host has more than one device) measures the pairs :mod:`probes.sample` chooses, runs
   one concurrent test per host pair (:class:`GroupMeasured`) and infers every other
   pair, marked ``inferred`` in the fabric; ``only`` (a refresh) measures given pairs.
4. **Faults**: a worker child that dies or times out is forked again once (no new
   ``import torch``); a worker process that is gone is killed (process group) and
   started again once the host answers; a host that no longer answers (reconnect once)
   is lost: :class:`HostLost`, and every pair of it not yet measured fails with that
   reason, while the rest of the sweep goes on.
5. **End** (also on :meth:`Sweep.cancel` or an exception): every remote worker is
   killed by its process group, then :class:`SweepDone` carries the fabric.

Events, all frozen dataclasses, in order: :class:`Discovered`, then as slots run
:class:`RoundStarted` (first slot of a round), :class:`PairStarted`,
:class:`PairMeasured` (one per direction) or :class:`PairFailed`, :class:`GroupMeasured`,
any :class:`HostLost`, and finally :class:`SweepDone`.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import json
import math
import shlex
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Sequence

import numpy as np

from probes.discovery import HostInfo, discover_host, peer_for
from probes.fit import MIN_R2, Fit, fit_alpha_beta, fastest
from probes.sample import SamplePlan, infer, plan_sample
from probes.schedule import Round, Slot, schedule
from probes.ssh import HostSession, SSHError, SSHPool
from solver.fabric import Device, Fabric

WORKER_SOURCE = Path(__file__).with_name("worker.py")
REMOTE_DIR = ".cache/geoconsole"
STRATEGIES = ("all", "sampled")


@dataclass(frozen=True)
class ProbeSettings:
    """How a sweep measures. Sizes bracket the workload; slow links scale them down."""

    #: Payload sizes in bytes (before scaling to ``max_transfer_s``).
    sizes_bytes: tuple[int, ...] = (256 << 10, 1 << 20, 4 << 20, 16 << 20)
    #: Timed repetitions per size (the fit uses the fastest of each size).
    reps: int = 3
    #: Small untimed ping-pongs before each direction.
    warmup: int = 3
    #: The largest transfer is scaled down to take about this long.
    max_transfer_s: float = 0.25
    #: Floor for scaled sizes.
    min_bytes: int = 32 << 10
    pair_timeout_s: float = 60.0
    #: Bound on one host's set-up: connect, discovery, worker start (torch import).
    host_timeout_s: float = 90.0
    #: One pair at a time instead of tournament rounds (the benchmark's baseline).
    sequential: bool = False
    min_r2: float = MIN_R2
    #: Recorded in the fabric's meta (the command line that ran the sweep).
    command: str | None = None
    #: ``"all"``, ``"sampled"``, or ``None``: sampled when a host has several devices.
    strategy: str | None = None
    #: Repetitions of a sampled pair (``None``: ``reps - 1``, at least 1): the inference
    #: pools at least two sampled pairs per host pair and direction, so each direction
    #: still rests on more timed repetitions per size than one pair of a full sweep.
    sampled_reps: int | None = None
    #: The concurrent test moves this share of ``max_transfer_s`` at one pair's rate,
    #: once each way after a warm-up: it only has to tell one shared link from several.
    group_share: float = 0.5

    def __post_init__(self) -> None:
        if self.strategy not in (None, *STRATEGIES):
            raise ValueError(f"strategy: expected one of {', '.join(STRATEGIES)}, got {self.strategy!r}")

    def to_json(self) -> dict[str, Any]:
        return {
            "sizes_bytes": list(self.sizes_bytes), "reps": self.reps, "warmup": self.warmup,
            "max_transfer_s": self.max_transfer_s, "min_bytes": self.min_bytes,
            "pair_timeout_s": self.pair_timeout_s, "host_timeout_s": self.host_timeout_s,
            "schedule": "sequential" if self.sequential else "tournament", "min_r2": self.min_r2,
            "sampled_reps": self.pair_reps(True), "group_share": self.group_share,
        }

    def pair_reps(self, sampled: bool) -> int:
        """Timed repetitions per size of a pair (of a sampled sweep, or not)."""
        if not sampled:
            return self.reps
        return self.sampled_reps if self.sampled_reps is not None else max(1, self.reps - 1)


# -- events --------------------------------------------------------------------------


@dataclass(frozen=True)
class Discovered:
    """Set-up finished: rows of the fabric-to-be and what each reachable host is."""

    devices: tuple[Device, ...]
    hosts: tuple[HostInfo, ...]
    rounds: int
    #: Device pairs to measure (a sampled sweep infers the others).
    pairs: int
    strategy: str = "all"
    #: Concurrent host-pair tests planned (sampled sweeps).
    groups: int = 0


@dataclass(frozen=True)
class RoundStarted:
    index: int
    total: int
    slots: int


@dataclass(frozen=True)
class PairStarted:
    i: int
    j: int
    src: str
    dst: str
    round: int


@dataclass(frozen=True)
class PairMeasured:
    """One direction: row ``i`` sent to row ``j``."""

    i: int
    j: int
    src: str
    dst: str
    alpha_ms: float
    beta_gbps: float
    r2: float
    #: ``None`` or a short reason kept in the fabric's ``fit_flag`` ("poor-fit R^2=0.95").
    flag: str | None
    attempts: int
    #: Console-side wall time of the whole pair job and the worker's transfer time in it.
    wall_s: float
    transfer_s: float
    interface: str | None
    #: The fitted points: ``(gigabits, fastest seconds)`` per payload size.
    points: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class PairFailed:
    i: int
    j: int
    src: str
    dst: str
    reason: str


@dataclass(frozen=True)
class GroupMeasured:
    """The concurrent test of a host pair: all its device pairs at once, each way.

    ``gbps``: aggregate rate (a -> b, b -> a) over all ``flows`` device pairs;
    ``single_gbps``: the median sampled pair's rate each way; ``shared``: the aggregate
    stays within 1.5x of one pair's rate, so the device pairs share one link.
    ``error`` is set (and the rates are NaN) when the test failed."""

    hosts: tuple[str, str]
    flows: int
    gbps: tuple[float, float]
    single_gbps: tuple[float, float]
    shared: bool
    wall_s: float
    error: str | None = None


@dataclass(frozen=True)
class HostLost:
    host: str
    reason: str


@dataclass(frozen=True)
class SweepDone:
    fabric: Fabric
    elapsed_s: float
    #: Directional entries measured, not measured (null), and inferred (sampled sweeps).
    measured: int
    failed: int
    cancelled: bool
    inferred: int = 0


SweepEvent = (Discovered | RoundStarted | PairStarted | PairMeasured | PairFailed | GroupMeasured
              | HostLost | SweepDone)


class WorkerGone(Exception):
    """The worker's output ended (process exited or the SSH session died)."""


class HostGone(Exception):
    """The host no longer answers."""


# -- remote worker -------------------------------------------------------------------


class HostWorkers:
    """The one probe worker process of a host (:mod:`probes.worker`), over one SSH channel.

    Lines from the worker carry ``dev`` (the child's position in ``devices``); a reader
    task sorts them into one queue per child. When the channel ends every queue gets
    ``None``, so every waiting child sees :class:`WorkerGone`.
    """

    def __init__(self, session: HostSession, host: Any, devices: Sequence[str], path: str,
                 pidfile: str) -> None:
        self.session, self.host, self.devices = session, host, list(devices)
        self.path, self.pidfile = path, pidfile
        self.proc = None
        self.hellos: dict[int, dict[str, Any]] = {}
        self.queues: dict[int, asyncio.Queue] = {}
        self.stderr: collections.deque[str] = collections.deque(maxlen=20)
        self.alive = False
        self._tasks: list[asyncio.Task] = []

    async def start(self, timeout: float) -> None:
        """Start the process and wait for every child's hello (``timeout`` in all)."""
        self.close()
        argv = ["setsid", "-w", self.host.python, "-u", self.path, "--name", self.host.name,
                "--devices", ",".join(self.devices), "--pidfile", self.pidfile]
        self.queues = {k: asyncio.Queue() for k in range(len(self.devices))}
        self.hellos = {}
        self.proc = await self.session.start(argv, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                                         "PYTHONUNBUFFERED": "1"})
        self.alive = True
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._drain_stderr())]
        deadline = time.monotonic() + timeout
        for k in range(len(self.devices)):
            await self._hello(k, deadline - time.monotonic())

    async def _hello(self, dev: int, timeout: float) -> None:
        msg = await self.recv(dev, timeout)
        if msg.get("event") != "hello":
            raise SSHError(self.host.name, f"worker: {msg.get('error') or msg}")
        self.hellos[dev] = msg

    async def restart(self, dev: int, timeout: float) -> None:
        """Fork child ``dev`` again (the process keeps its imported torch)."""
        queue = self.queues[dev]
        while not queue.empty():
            if queue.get_nowait() is None:
                raise WorkerGone(f"worker exited: {self.stderr_tail()}")
        await self.send({"op": "restart", "dev": dev})
        await self._hello(dev, timeout)

    async def _read(self) -> None:
        try:
            async for line in self.proc.stdout:
                line = line.strip()
                if not line.startswith("{"):
                    if line:
                        self.stderr.append(line)
                    continue
                try:
                    msg = json.loads(line)
                except ValueError:
                    self.stderr.append(line[:200])
                    continue
                queue = self.queues.get(msg.get("dev"))
                for q in [queue] if queue is not None else self.queues.values():
                    q.put_nowait(msg)
        except Exception:
            pass
        finally:
            self.alive = False
            for q in self.queues.values():
                q.put_nowait(None)

    async def _drain_stderr(self) -> None:
        # Keeps the channel window open: unread stderr would block the worker.
        try:
            async for line in self.proc.stderr:
                if line.strip():
                    self.stderr.append(line.strip())
        except Exception:
            pass

    def stderr_tail(self) -> str:
        return self.stderr[-1][:200] if self.stderr else "no output"

    async def send(self, obj: dict[str, Any]) -> None:
        try:
            self.proc.stdin.write(json.dumps(obj) + "\n")
            await self.proc.stdin.drain()
        except Exception as exc:
            raise WorkerGone(f"cannot write to worker: {exc}") from None

    async def recv(self, dev: int, timeout: float) -> dict[str, Any]:
        queue = self.queues[dev]
        try:
            msg = await asyncio.wait_for(queue.get(), max(timeout, 0.0))
        except (asyncio.TimeoutError, TimeoutError):
            raise asyncio.TimeoutError from None
        if msg is None:
            queue.put_nowait(None)  # every later wait sees the end too
            raise WorkerGone(f"worker exited: {self.stderr_tail()}")
        if msg.get("event") == "exited":
            raise WorkerGone(f"worker child exited (status {msg.get('status')}): {self.stderr_tail()}")
        return msg

    def exit(self) -> None:
        """Ask the process to end (it kills its children) and close its stdin."""
        if self.proc is not None:
            try:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.write_eof()
            except Exception:
                pass

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.close()
            except Exception:
                pass
        for t in self._tasks:
            t.cancel()
        self._tasks = []


class RemoteWorker:
    """One device's child of a host's worker process: the handle a pair job talks to."""

    def __init__(self, workers: HostWorkers, row: int, dev: int) -> None:
        self.workers, self.row, self.dev = workers, row, dev

    @property
    def host(self) -> Any:
        return self.workers.host

    @property
    def hello(self) -> dict[str, Any]:
        return self.workers.hellos.get(self.dev, {})

    async def send(self, obj: dict[str, Any]) -> None:
        await self.workers.send(dict(obj, dev=self.dev))

    async def recv(self, timeout: float) -> dict[str, Any]:
        return await self.workers.recv(self.dev, timeout)


def kill_script(pidfiles: Sequence[str]) -> str:
    """Shell text that kills each pid file's process group and removes the file."""
    parts = []
    for pf in pidfiles:
        q = shlex.quote(pf)
        parts.append(
            f"if [ -f {q} ]; then pg=$(cat {q}); case $pg in ''|*[!0-9]*) ;; "
            f"*) kill -KILL -- -$pg 2>/dev/null ;; esac; rm -f {q}; fi"
        )
    return "; ".join(parts) + "; true"


# -- the sweep -----------------------------------------------------------------------


@dataclass
class _Direction:
    fit: Fit
    attempts: int
    interface: str | None
    points: tuple[tuple[float, float], ...]


class Sweep:
    """Measure a fleet; iterate :meth:`events` to run it. See the module docstring.

    ``hosts``: inventory hosts (``name``, ``address``, ``port``, ``user``, ``identity``,
    ``python``, ``interface``, ``gpus``, labels). ``labels``: fallback ``region``,
    ``zone``, ``network_group`` (the CLI flags).
    """

    def __init__(self, hosts: Sequence[Any], *, pool: SSHPool, settings: ProbeSettings | None = None,
                 labels: dict[str, str | None] | None = None,
                 only: Sequence[tuple[str, str]] | None = None) -> None:
        if not hosts:
            raise ValueError("a sweep needs at least one host")
        self.hosts = list(hosts)
        self.pool = pool
        self.settings = settings or ProbeSettings()
        self.labels = labels or {}
        #: Measure only these device pairs (by device name), as ``probe --refresh`` does.
        self.only = list(only) if only is not None else None
        self.strategy = "pairs" if only is not None else (self.settings.strategy or "all")
        self.sweep_id = uuid.uuid4().hex[:12]
        self.devices: list[Device] = []
        self.device_hosts: list[str] = []
        self.hosts_info: dict[str, HostInfo] = {}
        self.lost: dict[str, str] = {}
        self.workers: dict[int, RemoteWorker] = {}
        self.host_workers: dict[str, HostWorkers] = {}
        self.sessions: dict[str, HostSession] = {}
        self.rounds: list[Round] = []
        self.plan: SamplePlan | None = None
        self.fabric: Fabric | None = None
        self.groups: list[GroupMeasured] = []
        self._queue: asyncio.Queue[SweepEvent] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._results: dict[tuple[int, int], _Direction] = {}
        self._failed: dict[tuple[int, int], str] = {}
        self._ready: dict[str, asyncio.Event] = {}
        self._wake = asyncio.Event()
        self._started = 0.0
        self._cancelled = False
        self._restarted: set[int] = set()
        #: An unexpected exception that ended the sweep (re-raised by events()).
        self.error: BaseException | None = None
        self._worker_path = f"{REMOTE_DIR}/worker-{_source_hash()}.py"

    # -- public ------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[SweepEvent]:
        """Run the sweep (on first call) and yield its events; the last is SweepDone."""
        if self._task is None:
            self._task = asyncio.create_task(self._run())
        while True:
            event = await self._queue.get()
            yield event
            if isinstance(event, SweepDone):
                if self.error is not None:
                    raise self.error
                return

    async def run(self, on_event: Callable[[SweepEvent], None] | None = None) -> Fabric:
        """Run to the end, calling ``on_event`` for each event; return the fabric."""
        async for event in self.events():
            if on_event is not None:
                on_event(event)
        assert self.fabric is not None
        return self.fabric

    async def cancel(self) -> None:
        """Stop the sweep: kill every remote worker; events() ends with SweepDone(cancelled)."""
        self._cancelled = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    # -- phases ------------------------------------------------------------------------

    def _emit(self, event: SweepEvent) -> None:
        self._queue.put_nowait(event)

    async def _run(self) -> None:
        self._started = time.monotonic()
        starts: list[asyncio.Task] = []
        try:
            starts = await self._setup()
            await self._dispatch()
        except asyncio.CancelledError:
            self._cancelled = True
        except Exception as exc:  # a bug: still clean up and end the stream, then re-raise
            self._cancelled = True
            self.error = exc
        finally:
            for t in starts:
                t.cancel()
            await asyncio.gather(*starts, return_exceptions=True)
            await asyncio.shield(self._cleanup())
            self.fabric = self._build_fabric()
            measured = len(self._results)
            inferred = _count(self.fabric.extras.get("inferred"))
            failed = self.fabric.n * (self.fabric.n - 1) - measured - inferred
            self._emit(SweepDone(self.fabric, time.monotonic() - self._started, measured,
                                 failed, self._cancelled, inferred))

    async def _setup(self) -> list[asyncio.Task]:
        """Discover every host, plan the slots, and start the workers (returned tasks)."""
        results = await asyncio.gather(*(self._setup_host(k) for k in range(len(self.hosts))))
        rows: list[tuple[Any, int | None, int | None]] = []
        for host, info in zip(self.hosts, results):
            if info is None:
                wanted = host.gpus if getattr(host, "gpus", None) else (None,)
                rows += [(host, g, None) for g in wanted]
            else:
                several = len(info.devices) > 1
                rows += [(host, g, k if g is None and several else None) for k, g in enumerate(info.devices)]
        for host, gpu, slot in rows:
            info = self.hosts_info.get(host.name)
            region = info.region if info else getattr(host, "region", None) or self.labels.get("region")
            zone = info.zone if info else getattr(host, "zone", None) or self.labels.get("zone")
            group = info.network_group if info else getattr(host, "network_group", None) or self.labels.get("network_group")
            self.devices.append(Device(host.name, gpu, region, zone, group, slot))
            self.device_hosts.append(host.name)
        self._plan()
        npairs = sum(len(sl.pairs) for r in self.rounds for sl in r.slots)
        ngroups = sum(sl.group for r in self.rounds for sl in r.slots)
        self._emit(Discovered(tuple(self.devices), tuple(self.hosts_info.values()), len(self.rounds),
                              npairs, self.strategy, ngroups))
        for row, name in enumerate(self.device_hosts):  # hosts lost during set-up
            if name in self.lost:
                self._fail_host_pairs(name, f"host-lost: {name}: {self.lost[name]}")
        by_host: dict[str, list[int]] = {}
        for row, name in enumerate(self.device_hosts):
            by_host.setdefault(name, []).append(row)
        starts = []
        for name, host_rows in by_host.items():
            self._ready[name] = asyncio.Event()
            if name in self.lost:
                continue
            starts.append(asyncio.create_task(self._start_host(self.hosts_by_name(name), host_rows)))
        return starts

    def _plan(self) -> None:
        s = self.settings
        if self.strategy == "pairs":
            index = {d.name: r for r, d in enumerate(self.devices)}
            wanted = set()
            for a, b in self.only or ():
                if a in index and b in index and a != b:
                    wanted.add((min(index[a], index[b]), max(index[a], index[b])))
            self.rounds = schedule(self.device_hosts, sequential=s.sequential, wanted=wanted)
            return
        if s.strategy is None:
            counts = collections.Counter(self.device_hosts)
            self.strategy = "sampled" if counts and max(counts.values()) > 1 else "all"
        if self.strategy == "sampled":
            topos = {name: info.topo for name, info in self.hosts_info.items() if info.topo is not None}
            self.plan = plan_sample(self.device_hosts, [d.gpu for d in self.devices], topos)
            self.rounds = schedule(self.device_hosts, sequential=s.sequential, wanted=self.plan.measure,
                                   groups=self.plan.groups)
        else:
            self.rounds = schedule(self.device_hosts, sequential=s.sequential)

    async def _setup_host(self, k: int) -> HostInfo | None:
        host = self.hosts[k]
        try:
            return await asyncio.wait_for(self._connect_discover(k), self.settings.host_timeout_s)
        except (asyncio.TimeoutError, TimeoutError):
            self._lose(host.name, f"set-up took longer than {self.settings.host_timeout_s:g} s")
        except SSHError as exc:
            self._lose(host.name, str(exc).split(": ", 1)[-1])
        return None

    async def _connect_discover(self, k: int) -> HostInfo:
        host = self.hosts[k]
        session = await self.pool.session(host)
        self.sessions[host.name] = session
        info = await discover_host(session, host, peer=peer_for(self.hosts, k), labels=self.labels,
                                   timeout=self.settings.host_timeout_s)
        self.hosts_info[host.name] = info
        await session.write_file(self._worker_path, WORKER_SOURCE.read_text())
        await session.run(["mkdir", "-p", f"{REMOTE_DIR}/run"], check=True)
        return info

    async def _start_host(self, host: Any, rows: list[int]) -> None:
        """Start the host's worker process (one child per row); then the host is ready."""
        pidfile = f"{REMOTE_DIR}/run/{self.sweep_id}-{rows[0]}.pid"
        devices = ["cpu" if self.devices[r].gpu is None else str(self.devices[r].gpu) for r in rows]
        hw = HostWorkers(self.sessions[host.name], host, devices, self._worker_path, pidfile)
        self.host_workers[host.name] = hw
        for k, row in enumerate(rows):
            self.workers[row] = RemoteWorker(hw, row, k)
        try:
            await asyncio.wait_for(hw.start(self.settings.host_timeout_s), self.settings.host_timeout_s)
        except (asyncio.TimeoutError, TimeoutError):
            self._lose(host.name, f"probe worker did not start within {self.settings.host_timeout_s:g} s")
        except (SSHError, WorkerGone) as exc:
            self._lose(host.name, f"probe worker failed to start: {str(exc).split(': ', 1)[-1]}")
        finally:
            self._ready[host.name].set()
            self._wake.set()

    async def _dispatch(self) -> None:
        """Run each host's slots in round order, each as soon as its hosts are set up and
        done with their earlier slots (no barrier between rounds; module docstring)."""
        queue: dict[str, list[Slot]] = {}
        index_of: dict[int, int] = {}
        for r in self.rounds:
            for slot in r.slots:
                index_of[id(slot)] = r.index
                for h in slot.hosts:
                    queue.setdefault(h, []).append(slot)
        pending = [slot for r in self.rounds for slot in r.slots]
        sizes = {r.index: len(r.slots) for r in self.rounds}
        running: set[asyncio.Task] = set()
        try:
            await self._dispatch_loop(queue, index_of, pending, sizes, running)
        finally:
            # Cancelled (Ctrl-C) or a bug: stop every slot before the cleanup kills the
            # workers, or a slot would see its worker die and start it again.
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _dispatch_loop(self, queue: dict[str, list[Slot]], index_of: dict[int, int],
                             pending: list[Slot], sizes: dict[int, int], running: set[asyncio.Task]) -> None:
        announced: set[int] = set()
        while True:
            self._wake.clear()
            for task in [t for t in running if t.done()]:
                running.discard(task)
                task.result()  # a bug in a slot ends the sweep (re-raised from _run)
            for slot in list(pending):
                if self.settings.sequential and running:
                    break
                if not all(queue[h][0] is slot and (self._ready[h].is_set() or h in self.lost)
                           for h in slot.hosts):
                    if self.settings.sequential:
                        break  # one at a time, in order
                    continue
                pending.remove(slot)
                index = index_of[id(slot)]
                if index not in announced:
                    announced.add(index)
                    self._emit(RoundStarted(index, len(self.rounds), sizes[index]))
                task = asyncio.create_task(self._run_slot(index, slot))
                task.add_done_callback(lambda _t, slot=slot: self._slot_done(queue, slot))
                running.add(task)
            if not pending and not running:
                return
            await self._wake.wait()

    def _slot_done(self, queue: dict[str, list[Slot]], slot: Slot) -> None:
        for h in slot.hosts:
            queue[h].remove(slot)
        self._wake.set()

    def _lose(self, name: str, reason: str) -> None:
        if name in self.lost:
            return
        self.lost[name] = reason
        self._emit(HostLost(name, reason))
        if self.devices:
            self._fail_host_pairs(name, f"host-lost: {name}: {reason}")

    def _fail_host_pairs(self, name: str, reason: str) -> None:
        rows = [r for r, h in enumerate(self.device_hosts) if h == name]
        for rnd in self.rounds:
            for slot in rnd.slots:
                for i, j in slot.pairs:
                    if (i in rows or j in rows) and (i, j) not in self._failed and (i, j) not in self._results:
                        self._fail(i, j, reason)

    def _fail(self, i: int, j: int, reason: str) -> None:
        if (i, j) in self._failed:
            return
        self._failed[(i, j)] = reason
        self._emit(PairFailed(i, j, self.devices[i].name, self.devices[j].name, reason))

    # -- pairs ---------------------------------------------------------------------------

    async def _run_slot(self, round_index: int, slot: Slot) -> None:
        for i, j in slot.pairs:
            if (i, j) in self._failed:
                continue
            a, b = self.device_hosts[i], self.device_hosts[j]
            if a in self.lost or b in self.lost:
                self._fail(i, j, f"host-lost: {a if a in self.lost else b}: {self.lost.get(a) or self.lost.get(b)}")
                continue
            self._emit(PairStarted(i, j, self.devices[i].name, self.devices[j].name, round_index))
            await self._measure(i, j)
        if slot.group and not any(h in self.lost for h in slot.hosts):
            await self._group_test(slot.hosts)

    def _sampled_beta(self, src_host: str, dst_host: str) -> float:
        betas = [_alpha_beta(d.fit)[1] for (i, j), d in self._results.items()
                 if self.device_hosts[i] == src_host and self.device_hosts[j] == dst_host]
        betas = [b for b in betas if math.isfinite(b)]
        return float(np.median(betas)) if betas else math.nan

    async def _group_test(self, hosts: tuple[str, ...]) -> None:
        """All device pairs of two hosts at once, each way (one process group of all)."""
        s = self.settings
        a, b = hosts
        rows_a = [r for r, h in enumerate(self.device_hosts) if h == a]
        rows_b = [r for r, h in enumerate(self.device_hosts) if h == b]
        single = (self._sampled_beta(a, b), self._sampled_beta(b, a))
        flows = len(rows_a) * len(rows_b)
        started = time.monotonic()
        nan = (math.nan, math.nan)
        if not all(math.isfinite(x) for x in single):
            self._group_done(GroupMeasured((a, b), flows, nan, single, False, 0.0, "no sampled pair measured"))
            return
        # The whole test moves about max_transfer_s of one pair's rate, split over the flows.
        nbytes = max(int(min(single) * 1e9 / 8 * s.max_transfer_s * s.group_share / flows), s.min_bytes)
        try:
            times = await self._group_job(rows_a, rows_b, nbytes)
        except _PairError as exc:
            self._group_done(GroupMeasured((a, b), flows, nan, single, False,
                                           time.monotonic() - started, exc.reason))
            return
        gbps = tuple(flows * nbytes * 8 / 1e9 / min(times[k]) for k in ("forward", "backward"))
        shared = all(g < 1.5 * one for g, one in zip(gbps, single))
        self._group_done(GroupMeasured((a, b), flows, gbps, single, shared, time.monotonic() - started))

    def _group_done(self, event: GroupMeasured) -> None:
        self.groups.append(event)
        self._emit(event)

    async def _group_job(self, rows_a: list[int], rows_b: list[int], nbytes: int) -> dict[str, list[float]]:
        s = self.settings
        ranks = rows_a + rows_b
        workers = [self.workers.get(r) for r in ranks]
        if any(w is None for w in workers):
            raise _PairError("no worker")
        ha, hb = self.hosts_by_name(self.device_hosts[rows_a[0]]), self.hosts_by_name(self.device_hosts[rows_b[0]])
        job_id = f"group-{ha.name}-{hb.name}-{time.monotonic_ns()}"
        common = {"op": "group", "id": job_id, "world": len(ranks), "nbytes": nbytes, "reps": 1,
                  "senders": list(range(len(rows_a))), "receivers": list(range(len(rows_a), len(ranks))),
                  "master_addr": ha.address, "timeout_s": s.pair_timeout_s}
        jobs = []
        for rank, row in enumerate(ranks):
            mine, other = (ha, hb) if rank < len(rows_a) else (hb, ha)
            jobs.append(dict(common, rank=rank, peer_addr=other.address, ifname=mine.interface))
        deadline = time.monotonic() + s.pair_timeout_s
        try:
            await workers[0].send(dict(jobs[0], master_port=0))
            msg = await workers[0].recv(deadline - time.monotonic())
        except (asyncio.TimeoutError, TimeoutError, WorkerGone) as exc:
            await self._recover([workers[0]])
            raise _PairError(self._failure_reason([workers[0]], exc)) from None
        if msg.get("event") != "listening":
            raise _PairError(f"{ha.name}: {msg.get('error') or msg}")

        async def answer(w: RemoteWorker, job: dict[str, Any] | None) -> dict[str, Any]:
            if job is not None:
                await w.send(dict(job, master_port=msg["port"]))
            return await w.recv(max(deadline - time.monotonic(), 0.0) + 5)

        answers = await asyncio.gather(*(answer(w, j if k else None) for k, (w, j) in enumerate(zip(workers, jobs))),
                                       return_exceptions=True)
        broken = [w for w, got in zip(workers, answers) if isinstance(got, BaseException)]
        if broken:
            await self._recover(broken)
            await self._recover([w for w in workers if w not in broken], counted=False)
            first = next(got for got in answers if isinstance(got, BaseException))
            raise _PairError(self._failure_reason(broken, first))
        for w, got in zip(workers, answers):
            if not got.get("ok"):
                await self._recover(workers, counted=False)
                raise _PairError(f"{w.host.name}: {got.get('error')}")
        return answers[0]["times"]

    async def _measure(self, i: int, j: int) -> None:
        best: dict[tuple[int, int], _Direction] = {}
        wall = transfer = 0.0
        error = None
        for attempt in (1, 2):  # a failed pair or a poor fit is tried once more
            started = time.monotonic()
            try:
                out = await self._pair_job(i, j)
            except _PairError as exc:
                error = exc.reason
                if self.device_hosts[i] in self.lost or self.device_hosts[j] in self.lost:
                    break
                continue
            wall, transfer = time.monotonic() - started, out["transfer_s"]
            for key, samples, iface in ((i, j), out["a"], out["a_if"]), ((j, i), out["b"], out["b_if"]):
                fit = fit_alpha_beta(samples, min_r2=self.settings.min_r2)
                prev = best.get(key)
                if prev is None or (not prev.fit.ok and _better(fit, prev.fit)):
                    best[key] = _Direction(fit, attempt, iface, tuple(fastest(samples)))
            if all(d.fit.ok for d in best.values()):
                break
        if not best:
            self._fail(i, j, error or "no result")
            return
        for (src, dst), d in best.items():
            self._results[(src, dst)] = d
            flag = None if d.fit.ok else f"{d.fit.problem} (after retry)"
            alpha_ms, beta = _alpha_beta(d.fit)
            self._emit(PairMeasured(src, dst, self.devices[src].name, self.devices[dst].name, alpha_ms,
                                    beta, d.fit.r2, flag, d.attempts, wall, transfer, d.interface,
                                    d.points))

    async def _pair_job(self, i: int, j: int) -> dict[str, Any]:
        s = self.settings
        wa, wb = self.workers.get(i), self.workers.get(j)
        if wa is None or wb is None:
            raise _PairError("no worker")
        ha, hb = self.hosts_by_name(self.device_hosts[i]), self.hosts_by_name(self.device_hosts[j])
        same = ha.name == hb.name
        job_id = f"{i}-{j}-{time.monotonic_ns()}"
        common = {"op": "pair", "id": job_id, "sizes": list(s.sizes_bytes),
                  "reps": s.pair_reps(self.plan is not None),
                  "warmup": s.warmup, "max_transfer_s": s.max_transfer_s, "min_bytes": s.min_bytes,
                  "timeout_s": s.pair_timeout_s}
        master = "127.0.0.1" if same else ha.address
        job_a = dict(common, rank=0, master_addr=master, master_port=0,
                     peer_addr="127.0.0.1" if same else hb.address, ifname=None if same else ha.interface)
        job_b = dict(common, rank=1, master_addr=master,
                     peer_addr="127.0.0.1" if same else ha.address, ifname=None if same else hb.interface)
        deadline = time.monotonic() + s.pair_timeout_s
        try:
            await wa.send(job_a)
            msg = await wa.recv(deadline - time.monotonic())
        except (asyncio.TimeoutError, TimeoutError, WorkerGone) as exc:
            await self._recover([wa])
            raise _PairError(self._failure_reason([wa], exc)) from None
        if msg.get("event") != "listening":
            raise _PairError(f"{ha.name}: {msg.get('error') or msg}")
        job_b["master_port"] = msg["port"]
        answers = await self._both_answers(wa, wb, job_b, deadline)
        broken = [w for w, a in zip((wa, wb), answers) if isinstance(a, BaseException)]
        if broken:
            await self._recover(broken)
            await self._recover([w for w in (wa, wb) if w not in broken], counted=False)
            first = next(a for a in answers if isinstance(a, BaseException))
            raise _PairError(self._failure_reason(broken, first))
        ra, rb = answers
        for r, host in ((ra, ha), (rb, hb)):
            if not r.get("ok"):
                await self._recover([wa, wb], counted=False)
                raise _PairError(f"{host.name}: {r.get('error')}")
        return {"a": ra["samples"], "b": rb["samples"], "a_if": ra.get("interface"),
                "b_if": rb.get("interface"), "transfer_s": max(ra["transfer_s"], rb["transfer_s"])}

    async def _both_answers(self, wa: RemoteWorker, wb: RemoteWorker, job_b: dict[str, Any],
                            deadline: float) -> list[Any]:
        """Both workers' results (or the exception each hit).

        When one side fails, the other gets a short grace to report the broken transfer
        itself (gloo notices a closed peer at once), so a healthy worker is reused
        instead of being killed and paying for ``import torch`` again.
        """
        async def answer(w: RemoteWorker, send: dict[str, Any] | None) -> dict[str, Any]:
            if send is not None:
                await w.send(send)
            return await w.recv(max(deadline - time.monotonic(), 0.0) + 5)

        tasks = [asyncio.create_task(answer(wa, None)), asyncio.create_task(answer(wb, job_b))]
        try:
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if pending:
                first = next(iter(done))
                failed = first.exception() is not None or not first.result().get("ok")
                await asyncio.wait(pending, timeout=10.0 if failed else None)
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        out: list[Any] = []
        for t in tasks:
            exc = t.exception() if not t.cancelled() else asyncio.TimeoutError()
            out.append(exc if exc is not None else t.result())
        return out

    def _failure_reason(self, workers: Sequence[RemoteWorker], exc: BaseException) -> str:
        for w in workers:
            if w.host.name in self.lost:
                return f"host-lost: {w.host.name}: {self.lost[w.host.name]}"
        if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
            return f"timeout after {self.settings.pair_timeout_s:g} s"
        return f"{workers[0].host.name}: {exc}"

    def hosts_by_name(self, name: str) -> Any:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    async def _recover(self, workers: Sequence[RemoteWorker], counted: bool = True) -> None:
        """Fork broken worker children again, or restart a host's whole worker process, once
        per device; a host that no longer answers is lost.

        ``counted=False`` renews the healthy side of a failed job: a fork is cheap (torch
        stays imported), and a child whose process group broke mid-transfer is not trusted
        to form the next one; it does not use up the device's one restart.
        """
        for w in workers:
            name = w.host.name
            if name in self.lost or self._cancelled:
                continue
            hw, session = w.workers, self.sessions[name]
            try:
                await session.run(["true"], timeout=10)  # reconnects once if the link dropped
            except SSHError as exc:
                hw.close()
                self._lose(name, f"no longer answers: {str(exc).split(': ', 1)[-1]}")
                continue
            try:
                if counted and w.row in self._restarted:
                    raise SSHError(name, "probe worker failed twice")
                if counted:
                    self._restarted.add(w.row)
                if hw.alive:
                    try:
                        await hw.restart(w.dev, self.settings.host_timeout_s)
                        continue
                    except WorkerGone:
                        pass  # the whole process went meanwhile: start it again below
                await session.run_shell(kill_script([hw.pidfile]), timeout=10)
                hw.session = session
                await hw.start(self.settings.host_timeout_s)
            except (SSHError, WorkerGone, asyncio.TimeoutError, TimeoutError) as exc:
                hw.close()
                self._lose(name, f"probe worker could not be restarted: {str(exc).split(': ', 1)[-1]}")

    # -- end -----------------------------------------------------------------------------

    async def _cleanup(self) -> None:
        async def finish(name: str, hw: HostWorkers) -> None:
            if not self._cancelled:
                hw.exit()
            session = self.sessions.get(name)
            # A host lost for a timeout or a failed restart may still answer: kill there too.
            if session is not None and not (name in self.lost and session.closed):
                try:
                    await asyncio.wait_for(session.run_shell(
                        kill_script([hw.pidfile]), timeout=10, retry=False), 15)
                except (SSHError, asyncio.TimeoutError, TimeoutError):
                    pass
            hw.close()

        await asyncio.gather(*(finish(n, hw) for n, hw in self.host_workers.items()), return_exceptions=True)

    def _build_fabric(self) -> Fabric:
        n = len(self.devices) or 1
        if not self.devices:  # nothing reachable and no rows known: keep the hosts as rows
            self.devices = [Device(h.name) for h in self.hosts]
            self.device_hosts = [h.name for h in self.hosts]
            n = len(self.devices)
        alpha = np.full((n, n), np.nan)
        beta = np.full((n, n), np.nan)
        np.fill_diagonal(alpha, 0.0)
        np.fill_diagonal(beta, 0.0)
        r2: list[list[float | None]] = [[None] * n for _ in range(n)]
        flag: list[list[str | None]] = [[None] * n for _ in range(n)]
        iface: list[list[str | None]] = [[None] * n for _ in range(n)]
        for (i, j), d in self._results.items():
            alpha[i, j], beta[i, j] = _alpha_beta(d.fit)
            if not math.isfinite(beta[i, j]):
                alpha[i, j] = beta[i, j] = np.nan
            r2[i][j] = round(d.fit.r2, 6)
            flag[i][j] = None if d.fit.ok else f"{d.fit.problem} (after retry)"
            iface[i][j] = d.interface
        for (i, j), reason in self._failed.items():
            for a, b in ((i, j), (j, i)):
                if (a, b) not in self._results:
                    flag[a][b] = reason
        extras: dict[str, Any] = {"fit_r2": r2, "fit_flag": flag, "probe_interface": iface}
        if self.plan is not None and len(self.device_hosts) == n:
            inf = infer(alpha, beta, self.device_hosts, self.plan)
            alpha = np.where(inf.mask, inf.alpha_ms, alpha)
            beta = np.where(inf.mask, inf.beta_gbps, beta)
            extras.update(inferred=inf.mask.tolist(), inferred_basis=inf.basis, inferred_spread=inf.spread)
        for i in range(n):
            for j in range(n):
                if i != j and flag[i][j] is None and not math.isfinite(alpha[i, j]):
                    flag[i][j] = self._why_not(i, j)
        labels = [d.region or d.host for d in self.devices]
        return Fabric(alpha, beta, labels, tuple(self.devices),
                      measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      meta=self._meta(), extras=extras, source="<probe sweep>")

    def _why_not(self, i: int, j: int) -> str:
        """The reason an entry has no value (neither measured nor inferred)."""
        if self._cancelled:
            return "cancelled"
        if self.plan is None:
            return "not measured" if self.strategy != "pairs" else "not re-measured"
        a, b = self.device_hosts[i], self.device_hosts[j]
        lost = next((h for h in (a, b) if h in self.lost), None)
        if lost is not None:
            return f"host-lost: {lost}: {self.lost[lost]}"
        return f"not inferred: no sampled pair of {a} -> {b} measured"

    def _meta(self) -> dict[str, Any]:
        hosts: dict[str, Any] = {}
        for h in self.hosts:
            info = self.hosts_info.get(h.name)
            hello = next((w.hello for w in self.workers.values() if w.host.name == h.name and w.hello), {})
            entry: dict[str, Any] = {"address": h.address}
            if info is not None:
                entry.update({
                    "hostname": info.hostname, "gpus": [g.name for g in info.gpus],
                    "gpu_memory_mib": [g.memory_mib for g in info.gpus],
                    "topology": info.topo.summary() if info.topo else None,
                    "torch": hello.get("torch") or info.torch, "nccl": hello.get("nccl") or info.nccl,
                    "backend": hello.get("backend"), "python": info.python,
                    "interface": info.interface, "mtu": info.mtu,
                    "congestion_control": info.congestion_control, "location_source": info.location_source,
                })
            if h.name in self.lost:
                entry["lost"] = self.lost[h.name]
            hosts[h.name] = entry
        meta: dict[str, Any] = {}
        for key in ("torch", "nccl", "backend", "interface", "mtu", "congestion_control"):
            values = {name: e.get(key) for name, e in hosts.items() if key in e}
            distinct = set(json.dumps(v) for v in values.values())
            meta[key] = next(iter(values.values())) if len(distinct) == 1 else values
        meta["probe"] = dict(self.settings.to_json(), sweep_id=self.sweep_id,
                             elapsed_s=round(time.monotonic() - self._started, 3),
                             rounds=len(self.rounds), command=self.settings.command,
                             strategy=self.strategy,
                             planned_pairs=sum(len(sl.pairs) for r in self.rounds for sl in r.slots),
                             concurrent=[_group_json(g) for g in self.groups],
                             timing="sender clock, round trip of (payload there, 1 byte back); "
                                    "alpha = half the fitted intercept")
        meta["hosts"] = hosts
        return meta


class _PairError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = " ".join(reason.split())[:300]


def _better(new: Fit, old: Fit) -> bool:
    if new.ok != old.ok:
        return new.ok
    return new.r2 > old.r2


def _alpha_beta(fit: Fit) -> tuple[float, float]:
    """(alpha_ms, beta_gbps) of a direction: half the round-trip intercept, >= 0."""
    alpha_ms = max(fit.intercept_s, 0.0) / 2.0 * 1000.0
    return alpha_ms, fit.beta_gbps


def _group_json(g: GroupMeasured) -> dict[str, Any]:
    def num(x: float) -> float | None:
        return round(x, 6) if math.isfinite(x) else None

    return {"hosts": list(g.hosts), "flows": g.flows, "gbps": [num(x) for x in g.gbps],
            "single_pair_gbps": [num(x) for x in g.single_gbps], "shared_link": g.shared,
            "wall_s": round(g.wall_s, 3), "error": g.error}


def _count(mask: Any) -> int:
    """True entries of an ``n x n`` list of bools (None: 0)."""
    return sum(bool(x) for row in mask for x in row) if isinstance(mask, list) else 0


def _source_hash() -> str:
    return hashlib.sha256(WORKER_SOURCE.read_bytes()).hexdigest()[:12]
