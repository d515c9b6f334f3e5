"""Parallel anytime search: walks in worker processes, in rounds, sharing the best.

Round ``k`` hands every worker ``w`` the best placement known (the elite) and a random
stream seeded ``(seed, w, k)``; each runs one tempering walk (solver.anytime; the worker
keeps its ladder between rounds, seeded ``(seed, w)``, and rebuilds it from a nearly
stalled elite; worker 1 keeps a lineage of its own from a random layout and never takes
the elite into its ladder, ``solver.anytime.lineage_ladder``, up to
``solver.anytime.LINEAGE_MAX_N`` devices, and spends a walk exploring a nearly stalled
elite; the other odd workers explore instead while DataP rules the elite or the elite
has stalled, ``solver.anytime.explore``) for a fixed number of scored
swaps, or, under a time limit, until the round's share of it, the deadline or a cancel.
When every worker has answered, the
best walk (ties: lowest worker index) becomes the elite of round ``k + 1``. Without a
deadline a round is a pure function of the elite, the seed and the worker count, so the
whole search is reproducible for a given ``seed`` and ``workers``.

Processes, not threads: between kernel calls a walk is Python-level numpy work (the
ladder's book-keeping, the closing descent) that holds the
GIL. Workers are forked from a ``forkserver`` (``spawn`` where that is missing), never
from the caller itself, which may be a multi-threaded console. They start while the
caller runs the topology starts, so their start-up (importing numpy and scipy) overlaps
useful work.

Cancellation: one shared ``Event`` that every worker tests in its stop check (between
kernel chunks of about 20 ms, or device batches), so a cancel stops all of them at
once; each then reports the best of its walk (after re-scoring its chains, a few ms). A worker that dies (killed, out of memory) is seen
through its process sentinel, reported in ``Outcome.errors``, and the search goes on
with the others; a worker that does not answer within ``STOP_GRACE_S`` of a stop is
killed.

With ``workers == 1`` the walks run in the calling process (same rounds, same streams,
same result as one worker process).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Callable, Sequence

import numpy as np

from solver import anytime, native
from solver.anytime import Walk, temper
from solver.descent import Effort

#: Seconds a stopped worker gets to hand back its best before it is killed.
STOP_GRACE_S = 5.0
#: How often (seconds) the coordinating process polls its stop test while workers run.
POLL_S = 0.05
#: Niceness added to worker processes, so the process that started them (the console's
#: UI, a shell) stays responsive when the workers take every core.
WORKER_NICE = 4
#: Share of a round's length the descent that ends a tempering walk may add to it.
DESCENT_GRACE = 0.25
#: Most of a timed round kept for the walk's closing descent and rebalancing: the
#: ladder stops that much before the round ends. Without it the closing of a 192-GPU
#: walk (0.3-0.5 s of descent, 0.5 s or more of rebalancing, in rounds of 1.1 s) ran
#: past the grace in most rounds of a 10 s solve and was cut off, so a layout the
#: rebalancing fixes in one move (41.9 -> 38.1 s) was returned as it was in about one
#: run of three.
CLOSING_SHARE = 0.5


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


@dataclass(eq=False)
class Outcome:
    """Best placement of the rounds, who found it, and what went wrong on the way."""

    grid: np.ndarray
    fun: float
    strategy: str = ""
    worker: int | None = None
    nfev: int = 0
    nit: int = 0
    rounds: int = 0
    errors: list[str] = field(default_factory=list)
    spent: bool = False  #: the rounds ended on their budget (no deadline)


@dataclass(frozen=True)
class Rounds:
    """How the rounds run: scored swaps per walk, the stop rule, the deadline."""

    seed: int
    walk_evals: int
    patience: int  #: rounds without improvement before stopping (no deadline)
    budget: int  #: most swaps scored over all rounds (no deadline)
    deadline: float | None  #: time.monotonic() at which to stop
    round_s: float | None = None  #: with a deadline, most seconds per walk (rounds share the best)
    by_clock: bool = False  #: with a deadline and no budget: tempering walks end by the clock alone
    #: the topology starts, best first: where origin ladders begin (solver.anytime.origin_ladder)
    origins: tuple[np.ndarray, ...] = ()


def _context():
    methods = mp.get_all_start_methods()
    ctx = mp.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        ctx.set_forkserver_preload(["numpy", "scipy.sparse.csgraph", "solver.workers"])
    return ctx


def _start_helpers(ctx) -> None:
    """Start multiprocessing's resource tracker (and forkserver) with a real stderr, and
    the forkserver on this ``solver`` package.

    The tracker hands ``sys.stderr.fileno()`` to the process it starts; under the
    console, ``sys.stderr`` is Textual's capture, whose ``fileno()`` is -1, and starting
    fails with "bad value(s) in fds_to_keep". For that moment the process's own stderr
    stands in (it is only the tracker's error channel).

    The forkserver imports ``solver.workers`` (its preload) from the default module
    path, not this process's ``sys.path`` (Python 3.11 drops the ``sys_path`` it is
    handed): a process that imported this package from another folder than an installed
    copy (a second checkout, a benchmark run against an older tree) had its workers run
    the installed copy's code. The folder holding this package goes first on the
    server's ``PYTHONPATH``, for its start only. And the server runs ``python -c``, which
    puts the current directory first on its path: started from a folder holding a
    ``solver`` package of its own (an operator's project, a second checkout), the
    workers imported that package, and ran its code, in place of this one. Both helpers
    (the tracker runs ``python -c`` too) start with ``PYTHONSAFEPATH`` set (Python
    3.11+), which leaves the current directory off their paths; a caller started with
    ``python -E`` (environment ignored, a flag the helpers inherit) does not get this."""
    from multiprocessing import resource_tracker

    captured = sys.stderr
    try:
        valid = captured is not None and captured.fileno() >= 0
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
        valid = False
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", "PYTHONSAFEPATH")}
    # Ctrl-C (and SIGTERM from ``timeout`` or a batch system) reaches the whole process
    # group: the forkserver still importing its preload, or a worker starting up, printed
    # a KeyboardInterrupt traceback, and SIGTERM ended them. The forkserver is started
    # with both blocked in this thread, a mask it keeps (fork and exec keep it) and hands
    # to the workers it forks; the caller decides how to stop. (The resource tracker
    # blocks and then unblocks them itself around its own start, so the mask is set after
    # it.)
    masked = hasattr(signal, "pthread_sigmask")
    blocked = None
    try:
        if not valid and sys.__stderr__ is not None:
            sys.stderr = sys.__stderr__
        os.environ["PYTHONSAFEPATH"] = "1"  # not the current directory first
        resource_tracker.ensure_running()
        if ctx.get_start_method() == "forkserver":
            from multiprocessing import forkserver

            root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            path = saved["PYTHONPATH"]
            os.environ["PYTHONPATH"] = os.pathsep.join([root, path] if path else [root])
            if masked:
                blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            forkserver.ensure_running()
    finally:
        if blocked is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        sys.stderr = captured
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _one_walk(model, index, k, grid, fun, plan: Rounds, stop, on_best, memory: dict) -> Walk:
    clock = time.monotonic
    deadline = ladder_end = plan.deadline
    if deadline is not None and plan.round_s is not None:
        deadline = min(deadline, clock() + plan.round_s)
        # the ladder stops early enough for the walk's closing descent and rebalancing
        # (as long as they took last time, fading) to end with the round
        ladder_end = deadline - min(memory.get("closing_s", 0.0), CLOSING_SHARE * plan.round_s)

    def should_stop() -> bool:
        return stop() or (ladder_end is not None and clock() >= ladder_end)

    rng = np.random.default_rng([plan.seed, index, k])
    # under a time limit and no budget there is no schedule to fit: it runs until its round ends
    effort = Effort(1 << 62 if deadline is not None and plan.by_clock else plan.walk_evals, should_stop)
    # the descent that ends the walk may run a little past the round, never past the limit
    late = None if deadline is None else min(plan.deadline, deadline + DESCENT_GRACE * (plan.round_s or 0.0))

    def cancel() -> bool:
        return stop() or (late is not None and clock() >= late)

    lineage = anytime.LINEAGE and index == 1 and model.n <= anytime.LINEAGE_MAX_N
    # each worker takes the origins in turn from its own place in the list
    turn = index % max(1, len(plan.origins))
    return temper(model, grid, fun, rng, effort, memory, seed=[plan.seed, index], clock=clock,
                  cancel=cancel, on_best=on_best, strategy_prefix=f"worker {index}: ",
                  explorer=index % 2 == 1 and not lineage, lineage=lineage,
                  origins=plan.origins[turn:] + plan.origins[:turn])


def _orphan_check(every: int = 256) -> Callable[[], bool]:
    """True once the coordinating process is gone (tested every ``every`` calls)."""
    parent = mp.parent_process()
    calls = [0]

    def gone() -> bool:
        calls[0] += 1
        if parent is None or calls[0] % every:
            return False
        return bool(wait([parent.sentinel], timeout=0))

    return gone


def _worker_main(conn, stop_event, model, index: int, no_kernel: str | None = None) -> None:
    """Body of a worker process: run walks on request until told to quit (or orphaned).

    ``no_kernel``: why the parent could not have the tempering kernel (this process does
    not try again)."""
    if no_kernel is not None:
        native.disable(no_kernel)
    orphaned = _orphan_check()
    # Ctrl-C in a terminal, and SIGTERM from ``timeout`` or a batch system, reach the whole
    # process group: the caller decides how to stop (it sets stop_event and keeps the best
    # so far), so a worker ignores both; the pool ends one that hangs with SIGKILL.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:  # the caller (a console's event loop) keeps priority over its workers
        os.nice(WORKER_NICE)
    except OSError:
        pass

    def stop() -> bool:
        return stop_event.is_set() or orphaned()

    memory: dict = {}  # what a walk keeps for the next (the tempering ladder)
    while True:
        try:
            msg = conn.recv()
            if msg[0] != "walk":
                return
            _, k, grid, fun, plan = msg
            done = _one_walk(model, index, k, grid, fun, plan, stop,
                             lambda f: conn.send(("best", index, f, time.monotonic())), memory)
            conn.send(("done", index, k, done))
        except (EOFError, BrokenPipeError, ConnectionResetError):
            return  # the caller is gone (killed): nothing to hand back, no traceback


#: Seconds ``WorkerPool.close`` waits for all its workers to quit before it kills those
#: left (processes still starting read the quit only once their imports are done).
CLOSE_WAIT_S = 0.25


class WorkerPool:
    """Worker processes for one solve (``workers > 1``) or the calling process (1)."""

    def __init__(self, model, workers: int) -> None:
        self.model, self.workers = model, int(workers)
        self.procs: list = []
        self.conns: list = []
        self.live: list[int] = []
        self.errors: list[str] = []
        self.notes: list[str] = []  #: how the start went short (``start``), not losses
        self.stop_event = None
        self.memory: dict = {}  # the in-process walks' memory (workers == 1)

    def start(self, deadline: float | None = None, abandon: Callable[[], bool] = lambda: False,
              what: str = "the time limit") -> None:
        """Start the worker processes (none for one worker); may run in a helper thread.

        If processes cannot be started, the walks run in this process and ``errors``
        says why. Starting stops (after the first two) at ``deadline``
        (``time.monotonic()``) or once ``abandon()`` (a cancel): a process takes tens of
        milliseconds to start, so many more workers than cores (``--workers 256`` on 2
        cores: 18 s) would otherwise overrun a time limit, and a cancel would wait for
        them all; the rounds then use those started, and ``notes`` says how many.
        Without a deadline and a cancel every worker starts (the output depends on the
        worker count). A start that fails (any error: out of file descriptors, a model
        that cannot be sent, a start server gone) after two or more workers started
        keeps those, and ``notes`` says so; before that the walks run in this process
        (``errors``)."""
        try:
            self._start(deadline, abandon, what)
        except Exception as exc:  # noqa: BLE001 -- whatever it was, the search goes on
            why, started = str(exc) or type(exc).__name__, len(self.procs)
            if started >= 2:
                self.notes.append(f"{started} of {self.workers} worker processes started "
                                  f"(worker {started} could not start: {why})")
                self.workers, self.live = started, list(range(started))
                return
            self.close()
            self.errors.append(f"worker processes could not start ({why}); searched in-process")
            self.workers = 1

    def _start(self, deadline: float | None, abandon: Callable[[], bool], what: str) -> None:
        no_kernel = None if native.kernel() is not None else native.why_not()  # built once, here
        if self.workers > 1:
            ctx = _context()
            _start_helpers(ctx)
            self.stop_event = ctx.Event()
            for w in range(self.workers):
                late = deadline is not None and time.monotonic() >= deadline
                why = what if late else "the stop" if abandon() else None
                if w >= 2 and why is not None:
                    self.notes.append(f"{w} of {self.workers} worker processes started before {why}")
                    self.workers = w
                    break
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=_worker_main, args=(child, self.stop_event, self.model, w, no_kernel),
                                   daemon=True, name=f"geoconsole-solver-{w}")
                proc.start()
                child.close()
                self.procs.append(proc)
                self.conns.append(parent)
            self.live = list(range(self.workers))

    # -- one round ---------------------------------------------------------------
    def _round_inline(self, k, grid, fun, plan, stop, on_best, own) -> dict[int, Walk]:
        grid, fun = own.get(0, (grid, fun))
        return {0: _one_walk(self.model, 0, k, grid, fun, plan, stop,
                             lambda f: on_best(f, 0, time.monotonic()), self.memory)}

    def _lost(self, w: int, why: str) -> None:
        code = self.procs[w].exitcode
        self.errors.append(f"worker {w} {why} (exit code {code}); the search went on without it")
        self.live.remove(w)

    def _round_processes(self, k, grid, fun, plan, stop, on_best, own) -> dict[int, Walk]:
        for w in list(self.live):
            try:
                g, f = own.get(w, (grid, fun))
                self.conns[w].send(("walk", k, g, f, plan))
            except OSError:  # BrokenPipeError: it is gone
                self.procs[w].join(timeout=1.0)
                self._lost(w, "died")
        results: dict[int, Walk] = {}
        pending = set(self.live)
        stopped_at = None
        while pending:
            handles = {self.conns[w]: w for w in pending}
            sentinels = {self.procs[w].sentinel: w for w in pending}
            for ready in wait(list(handles) + list(sentinels), timeout=POLL_S):
                w = handles.get(ready, sentinels.get(ready))
                if w not in pending:
                    continue
                try:
                    while self.conns[w].poll():
                        msg = self.conns[w].recv()
                        if msg[0] == "best":
                            on_best(msg[2], w, msg[3])
                        else:
                            results[w] = msg[3]
                            pending.discard(w)
                            break
                except (EOFError, OSError):
                    pass
                if w in pending and not self.procs[w].is_alive():
                    pending.discard(w)
                    self._lost(w, "died")
            if stopped_at is None and stop():
                self.stop_event.set()
                stopped_at = time.monotonic()
            if stopped_at is not None and time.monotonic() - stopped_at > STOP_GRACE_S:
                for w in sorted(pending):
                    self.procs[w].kill()  # it ignores SIGTERM (_worker_main)
                    self._lost(w, "did not stop in time and was killed")
                pending.clear()
        return results

    def run(self, grid: np.ndarray, fun: float, plan: Rounds, stop: Callable[[], bool],
            on_best: Callable[[float, int, float], None],
            firsts: Sequence[tuple[np.ndarray, float]] = (),
            on_round: Callable[[int, int, Outcome], None] = lambda nfev, nit, out: None) -> Outcome:
        """Rounds from ``grid`` until the plan's stop rule, the deadline or ``stop()``.

        ``on_best(comm, worker, clock)`` is called as walks improve on their start;
        ``on_round(nfev, nit, out)`` after each round with its work (swaps scored, moves)
        and the outcome so far (its best, rounds run).
        ``firsts[w]``: worker ``w``'s grid and Comm in the first round (default: ``grid``).
        Once every worker process is lost, the rounds go on in this process, with that
        one walk's share of the budget left.
        """
        out = Outcome(grid.copy(), float(fun))
        stall, budget, alone = 0, plan.budget, self.workers == 1
        while not stop():
            if not alone and not self.live:  # every worker lost: one walk a round, so its share
                alone, budget = True, out.nfev + max(0, plan.budget - out.nfev) // self.workers
            if plan.deadline is not None and time.monotonic() >= plan.deadline:
                break
            if plan.deadline is None and (stall >= plan.patience or out.nfev >= budget):
                out.spent = out.nfev >= budget
                break
            runner = self._round_inline if alone else self._round_processes
            own = {w: g for w, g in enumerate(firsts)} if out.rounds == 0 else {}
            results = runner(out.rounds, out.grid, out.fun, plan, stop, on_best, own)
            out.rounds += 1
            improved = False
            round_nfev, round_nit = sum(r.nfev for r in results.values()), sum(r.nit for r in results.values())
            out.nfev += round_nfev
            out.nit += round_nit
            for w in sorted(results):
                r = results[w]
                if r.fun < out.fun - 1e-12 * abs(out.fun):
                    out.grid, out.fun, out.strategy, out.worker = r.grid, r.fun, r.strategy, w
                    improved = True
            stall = 0 if improved else stall + 1
            on_round(round_nfev, round_nit, out)
        out.errors = list(self.errors)
        return out

    def close(self) -> None:
        """Stop and reap every worker process (idempotent)."""
        if self.stop_event is not None:
            self.stop_event.set()
        for w in self.live:
            try:
                self.conns[w].send(("quit",))
            except (OSError, BrokenPipeError):
                pass
        until = time.monotonic() + CLOSE_WAIT_S  # for them all: many may still be starting
        for proc in self.procs:
            proc.join(timeout=max(0.0, until - time.monotonic()))
        left = [proc for proc in self.procs if proc.is_alive()]
        for proc in left:
            proc.kill()  # it ignores SIGTERM (_worker_main); all at once, then reaped
        until = time.monotonic() + 1.0
        for proc in left:
            proc.join(timeout=max(0.0, until - time.monotonic()))
        for conn in self.conns:
            conn.close()
        self.procs, self.conns, self.live = [], [], []
