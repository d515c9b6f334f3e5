"""Outer placement search: exact on small instances, topology starts, then anytime rounds.

The balanced partition into stage groups is NP-hard (DT-FM); this search certifies
optimality only by enumeration (up to 12 devices) or when its Comm meets the lower bound
it is given; otherwise it reports a lower bound beside its answer (solver.bounds).

1. Enumeration. Instances with at most ENUMERATION_LIMIT balanced partitions are solved
   exactly (solver.enumerate).
2. Starts. For each device order (labels sorted, the leaf order of an average-linkage
   clustering of ``T_pp``, and any ``seed_orders`` given), two layouts: pipelines on
   consecutive devices and stage groups on consecutive devices, and the best block
   layout between them (solver.blocks: runs of stage groups, pipelines local inside
   each; up to solver.blocks.BLOCK_MAX_N devices). Each is polished (exact
   matchings and best pipeline order); they are descended best first (solver.descent);
   a start more than SKIP_START_RATIO worse than the best so far is not descended.
   Beside them, the structure starts (solver.structures): layouts of a few runs of
   stage groups with equal class counts, chosen on a coarse model and dealt. Where that
   model prefers them clearly to every topology start, they alone are polished and
   descended (``_phase_starts``).
3. Anytime rounds (solver.workers, solver.anytime, solver.tempering): ``workers``
   processes each continue a parallel-tempering ladder into which the best placement
   known is injected, in rounds; each round ends with a descent of the worker's best
   and a segment rebalancing (solver.rebalance), and the best walk becomes the shared
   start of the next. Worker 1 keeps a lineage of its own from a random layout, never
   injected (solver.anytime.lineage_ladder; up to solver.anytime.LINEAGE_MAX_N
   devices). While DataP rules the best placement, the other odd workers explore
   instead (whole-grid redeals, solver.exclusion). In the first round, odd workers may
   start from the other layout's best start (``_firsts``; worker 1's lineage keeps it
   only as its walk's fallback). Under a time limit the
   starts' polishing (one start of each layout at least) and descents stop after
   START_SHARE of it: at 16 stages one polish cost 0.1-0.5 s with the numpy Held-Karp
   (twelve starts of the 64-GPU 16 x 4 suite instance, 2.0 s one after another; the
   compiled one,
   solver/path.c, takes about 11 ms a path). In 10 s runs of that instance the first
   walks began at about 1.1 s with the cap and without it (two seeds each, numpy
   Held-Karp): it bounds the phase where starts are many or deep, it did not move that
   figure.

Stop rule. With ``time_limit`` the rounds go on until the limit (or ``budget``, when one
is given). Without it, the rounds stop after ``restarts`` consecutive rounds that did not
improve the best (default DEFAULT_PATIENCE), or when ``budget`` scored swaps are used
(default ``default_budget(N)`` for the starts plus ``rounds_budget(N, workers)``); the
output is then a pure function of the instance, ``seed``, ``workers`` and options.
Reaching ``lower_bound`` ends the search as optimal. Cost per local-search batch is
O(N D_DP); see solver.anytime for a round.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Callable, Sequence

import numpy as np
from scipy.cluster.hierarchy import leaves_list, linkage
from scipy.spatial.distance import squareform

from solver.anytime import WALK_SWEEPS_TIMED, temper_walk
from solver.blocks import best_block
from solver import native
from solver.cost import CostModel, Score, rank_map_from_grid
from solver.descent import descend, polish
from solver import structures
from solver.structures import structure_starts
from solver.enumerate import optimal_grid
from solver.workers import Outcome, Rounds, WorkerPool, available_cores

#: A topology start whose polished Comm is this much worse than the best so far is not
#: descended (the starts are tried best first); its descent would cost full sweeps.
SKIP_START_RATIO = 1.25
#: Block starts (solver.blocks) beside the two plain layouts of each order.
BLOCK_STARTS = True
#: Structure starts (solver.structures) after the topology starts.
STRUCTURE_STARTS = True
#: Origin ladders take the structure starts first (``_origins``).
STRUCTURE_ORIGINS_FIRST = True
#: Where the structure starts are cheaper on their coarse model than every topology
#: start by more than this share, the starts phase polishes and descends only those
#: within this share of the cheapest (``_phase_starts``; None: never); the topology
#: starts still lead origin ladders.
STRUCTURES_LEAD = 0.015

#: Under a time limit, the structures of many short runs (solver.structure_beam) get this
#: share of it from when they begin, after the enumerated ones: behind the enumeration
#: (0.85-0.92 s at 96 GPUs) the structure window of START_SHARE cut them off.
BEAM_SHARE = 0.03

#: A second worker is handed the other layout's best start when that is at most this
#: much worse than the best start (solver.search._firsts; a lineage keeps it only as its
#: walk's fallback).
DIVERSE_RATIO = 1.1

#: Rounds without improvement before the search stops when no time limit is set.
DEFAULT_PATIENCE = 3
#: Most anytime rounds under the default stop rule (no budget, no time limit).
MAX_DEFAULT_ROUNDS = 6
#: Under a time limit, a round lasts about 1/ROUNDS_IN_LIMIT of the time left after the
#: starts (at least MIN_ROUND_S), plus its closing descent, so the workers share their
#: best that often; with a --budget too, walks are also shortened to fit. This makes
#: time-limited runs depend on machine speed.
ROUNDS_IN_LIMIT = 8
#: Shortest walk, in seconds, under a time limit.
MIN_ROUND_S = 0.5
#: Under a time limit, the topology starts' descents stop after this share of it (the
#: anytime rounds, which use every worker, get the rest).
START_SHARE = 0.1
#: Most swaps the best start's descent scores past a time limit (first_descent_swaps).
FIRST_DESCENT_MOST = 200_000
#: Under a time limit, worker processes past the first two start only in this share of
#: it (``--workers 4 --time-limit 1`` at 192 GPUs on 2 cores: the fourth was up at 1.04
#: s, and no round ran).
POOL_START_SHARE = 0.5
#: The rounds' budget under a time limit without ``budget``: none (reported as no budget).
UNLIMITED_BUDGET = 1 << 62


class SolveStatus(IntEnum):
    """Why the search ended (``PlacementResult.status``); values are stable in JSON."""

    CONVERGED = 0
    BUDGET = 1
    TIME_LIMIT = 2
    CANCELLED = 3
    OPTIMAL = 4


CONVERGED, BUDGET, TIME_LIMIT, CANCELLED, OPTIMAL = tuple(SolveStatus)
_MESSAGES = {
    OPTIMAL: "optimal: every balanced partition was enumerated",
    CONVERGED: "search converged (no round improved the best {patience} times in a row)",
    BUDGET: "evaluation budget used up",
    TIME_LIMIT: "time limit reached; best placement so far",
    CANCELLED: "cancelled; best placement so far",
}
OPTIMAL_BY_BOUND = "optimal: Comm equals the lower bound"


@dataclass(eq=False)
class SolveProgress:
    """What the callback sees: the best Comm so far, the bound, and the work done."""

    fun: float
    nit: int
    nfev: int
    elapsed_s: float
    phase: str
    restart: int  #: anytime rounds completed
    budget: int
    bound: float | None = None  #: the lower bound given to ``solve``, if any
    worker: int | None = None  #: the worker whose walk found ``fun`` (None: the starts)


@dataclass(eq=False)
class PlacementResult:
    """Outcome of ``solve`` (field names follow scipy.optimize.OptimizeResult)."""

    x: np.ndarray  #: rank map: ``x[i]`` is the global rank of device i
    fun: float  #: Comm of ``x`` in seconds, recomputed from scratch
    score: Score
    status: SolveStatus
    message: str
    nit: int  #: improving moves of the descents (swaps, polishes; not the tempering ladders' steps)
    nfev: int  #: swaps scored
    elapsed_s: float
    seed: int
    budget: int
    restarts: int
    start: str  #: what found the best placement: a start, or "worker k: strategy"
    exact_path: bool  #: pipeline order solved exactly (D_PP <= 16)
    optimal: bool = False  #: certified optimal (enumerated, or Comm == lower bound)
    history: list[tuple[float, float]] = field(default_factory=list)  #: anytime trace (elapsed, best)
    workers: int = 1  #: worker processes started (those lost on the way too: ``worker_errors``)
    worker: int | None = None  #: worker that found the best (None: enumeration or starts)
    rounds: int = 0  #: anytime rounds run
    worker_errors: list[str] = field(default_factory=list)  #: workers lost on the way

    @property
    def strategy(self) -> str:
        return self.start


def default_budget(n: int) -> int:
    """Swaps scored when no budget is given: about ``sweeps`` full local-search sweeps
    (N^2 swaps each), 40 up to 204 devices, fewer beyond (8 at 1024, 1/2 above 2048), so the
    search ends in seconds at 64 devices, under a minute at 1024 and within about five
    minutes at 4096 on two cores."""
    sweeps = max(2, min(40, 8192 // max(n, 1))) if n <= 2048 else 0.5
    return int(max(sweeps * n * n, 200_000))


def rounds_budget(n: int, workers: int) -> int:
    """Swaps scored by the anytime rounds when neither a budget nor a time limit is given:
    MAX_DEFAULT_ROUNDS rounds of every worker's tempering walk (``temper_walk(N)``:
    1500 sweeps of N^2, at most 20 million swaps, about 3 s each with the compiled kernel),
    2 rounds above 512 devices."""
    return default_rounds(n) * temper_walk(n) * workers


def default_rounds(n: int) -> int:
    """Rounds' worth of tempering swaps the default rule buys: MAX_DEFAULT_ROUNDS, 2 above
    512 devices (exploring walks score few swaps, so such a run may take more rounds)."""
    return MAX_DEFAULT_ROUNDS if n <= 512 else 2


def _orders(model: CostModel, extra: Sequence[Sequence[int]] | None) -> list[tuple[str, np.ndarray]]:
    n = model.n
    orders = []
    if len(set(model.labels)) > 1:
        orders.append(("labels", np.argsort(np.asarray(model.labels), kind="stable")))
    if n > 2:
        tree = linkage(squareform(model.t_pp, checks=False), method="average")
        orders.append(("clustering", leaves_list(tree)))
    for i, order in enumerate(extra or ()):
        o = np.asarray(order, dtype=int)
        if sorted(o.tolist()) != list(range(n)):
            raise ValueError(f"seed_orders[{i}]: not a permutation of the {n} devices")
        orders.append((f"order {i}", o))
    if not orders:
        orders.append(("identity", np.arange(n)))
    return orders


def _starts(model: CostModel, extra, stop: Callable[[], bool] = lambda: False,
            structure_stop: Callable[[], bool] | None = None,
            beam_stop: Callable[[], bool] | None = None) -> list[tuple[str, np.ndarray]]:
    """Per order: pipelines local, stage groups local, and the best block layout between
    them (solver.blocks; up to BLOCK_MAX_N devices; once ``stop()`` is true, the block
    layout of the compositions scored so far, or none); then the structure starts
    (solver.structures; none once ``structure_stop()``, default ``stop``, is true; the
    structures of many short runs until ``beam_stop()``, default ``structure_stop``)."""
    r, p = model.workload.d_dp, model.workload.d_pp
    starts = []
    orders = _orders(model, extra)
    for name, o in orders:
        starts.append((f"{name}: pipelines local", o.reshape(r, p)))
        starts.append((f"{name}: stage groups local", o.reshape(p, r).T))
        if BLOCK_STARTS:
            found = best_block(model, o, stop)
            if found is not None:
                parts, grid = found
                starts.append((f"{name}: blocks {'+'.join(map(str, parts))}", grid))
    if STRUCTURE_STARTS:
        starts += structure_starts(model, orders[0][1], stop=stop if structure_stop is None else structure_stop,
                                   beam_stop=beam_stop)
    return starts


def _origins(model: CostModel, starts: list[tuple[str, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """The starts as laid out (not polished), each once: where origin ladders begin
    (solver.anytime.origin_ladder). The structure starts come first, in their own order
    (lowest coarse cost first; STRUCTURE_ORIGINS_FIRST), the others by Comm, lowest
    first (ties in list order). O(S N D_DP) for S starts.

    Why the structure starts first: on the draw-1 96-GPU 12 x 8 suite instance, ladders
    from the first of them end in the 38.5 s basin and those from its second and third
    at 39.2-39.6 s (solver.structures), while their dealt Comm does not tell them apart
    (95.7, 102.9 and 102.2 s; the clustering order's pipelines-local layout, 61.2 s,
    came first by Comm). Measured at ``--time-limit 10``, 2 workers, seeds 0-4, one
    session: 38.784 s (two seeds at 39.16-39.18 s) -> 38.570 s (38.48-38.77 s); seeds
    5-9 with them first 38.53-39.21 s."""
    def place(start: tuple[str, np.ndarray]) -> tuple[int, float]:  # sorted() is stable
        if STRUCTURE_ORIGINS_FIRST and _structure(start[0]):
            return 0, 0.0
        return 1, model.score_grid(start[1]).comm

    unique: dict[bytes, np.ndarray] = {}
    for _, grid in sorted(starts, key=place):
        g = np.ascontiguousarray(grid)
        unique.setdefault(g.tobytes(), g)
    return tuple(unique.values())


#: Seconds between two tests for a cancel while the worker processes start.
POLL_START_S = 0.05


class _Run:
    """Book-keeping shared by every phase: best so far, budget, clock, callback."""

    def __init__(self, model, budget, time_limit, callback, bound):
        self.model, self.budget, self.time_limit, self.callback = model, budget, time_limit, callback
        self.bound = bound
        self.t0 = time.perf_counter()
        self.deadline = None if time_limit is None else time.monotonic() + time_limit
        self.phase_deadline: float | None = None  #: ends the current phase, not the search
        self.nfev = self.nit = 0
        self.best: np.ndarray | None = None
        self.best_score = np.inf
        self.best_start = ""
        self.best_worker: int | None = None
        self.exact_path = True
        self.history: list[tuple[float, float]] = []
        self.status = CONVERGED
        self.phase, self.restart = "seeds", 0
        self.other_start: tuple[np.ndarray, float] | None = None  #: see _firsts
        self._last_report = -1.0
        self.default_rule = False  #: no budget and no time limit given (solve sets it)
        self.lost_at_bound = False  #: a walk at the bound stopped the search, then was lost

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def note(self, score: float, worker: int | None = None) -> None:
        """Record a new best Comm in the trace and tell the callback; under a time limit
        a Comm at the bound ends the search there (without one, only at a round's end,
        where ``offer`` takes the round's best: the output stays a function of the seed)."""
        if self.deadline is not None and self._reaches_bound(score):
            if self.status != CANCELLED:
                self.status = OPTIMAL
        if not self.history or score < self.history[-1][1] - 1e-12 * abs(score):
            self.history.append((self.elapsed(), float(score)))
            self.report(force=True, fun=score, worker=worker)

    def offer(self, grid: np.ndarray, score: float, start: str, worker: int | None = None) -> None:
        if score < self.best_score - 1e-12 * abs(score):
            self.best, self.best_score, self.best_start = grid.copy(), score, start
            self.best_worker = worker
            self.note(score, worker)

    def report(self, force: bool = False, fun: float | None = None, worker: int | None = None) -> None:
        now = self.elapsed()
        if self.callback is None or self.status == CANCELLED or (not force and now - self._last_report < 0.1):
            return
        self._last_report = now
        best = self.history[-1][1] if self.history else self.best_score
        progress = SolveProgress(best if fun is None else fun, self.nit, self.nfev, now, self.phase,
                                 self.restart, self.budget, self.bound,
                                 self.best_worker if worker is None else worker)
        try:
            self.callback(progress)
        except StopIteration:
            self.status = CANCELLED

    def _reaches_bound(self, score: float) -> bool:
        # relative alone: an absolute slack called any placement of a Comm under 1e-12 s
        # optimal, whatever its gap (payloads scaled by 1e-14: a 52% gap, "optimal")
        return self.bound is not None and score <= self.bound + 1e-9 * abs(self.bound)

    def at_bound(self) -> bool:
        return self._reaches_bound(self.best_score)

    def should_stop(self, *, clock: bool = True, swaps: float | None = None) -> bool:
        """Whether to stop: cancelled, optimal, the bound reached, the run's budget used,
        and with ``clock`` the deadline or the phase's end passed. ``swaps``: a run swap
        count that stops it in the budget's place (a capped descent; ``math.inf``: none,
        for polishing the starts, which scores no swaps and which a budget does not end)."""
        if self.status in (CANCELLED, OPTIMAL):
            return True
        if self.at_bound():
            self.status = OPTIMAL
            return True
        now = time.monotonic()
        if clock and self.deadline is not None and now >= self.deadline:
            self.status = TIME_LIMIT
            return True
        if swaps is not None:
            if self.nfev >= swaps:
                return True
        elif self.nfev >= self.budget:
            self.status = BUDGET
            return True
        if clock and self.phase_deadline is not None and now >= self.phase_deadline:
            return True
        self.report()
        return self.status == CANCELLED


class _Effort:
    """solver.descent's Effort view of a _Run (the starts share the run's counters; their
    polishing is not charged, so ``default_budget`` keeps meaning swaps). ``cap``: a run
    swap count that ends it as a budget would, and the clock then does not stop it (a
    cancel and the bound still do)."""

    charge_polish = False

    def __init__(self, run: _Run, cap: int | None = None) -> None:
        self.run = run
        self.cap = cap

    budget = property(lambda self: self.run.budget if self.cap is None else min(self.run.budget, self.cap))
    nfev = property(lambda self: self.run.nfev, lambda self, v: setattr(self.run, "nfev", v))
    nit = property(lambda self: self.run.nit, lambda self, v: setattr(self.run, "nit", v))
    exact_path = property(lambda self: self.run.exact_path,
                          lambda self, v: setattr(self.run, "exact_path", v))

    def should_stop(self) -> bool:
        if self.cap is None:
            return self.run.should_stop()
        return self.run.should_stop(clock=False, swaps=self.budget)


def _check_options(budget, restarts, time_limit, workers) -> None:
    if budget is not None and budget < 0:
        raise ValueError(f"budget: must be >= 0, got {budget}")
    if restarts < 0:
        raise ValueError(f"restarts: must be >= 0, got {restarts}")
    if time_limit is not None and not time_limit > 0:
        raise ValueError(f"time_limit: must be > 0 seconds, got {time_limit}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers: must be >= 1, got {workers}")


def _starts_phase(run: _Run, model: CostModel, rng, starts: list[tuple[str, np.ndarray]]) -> None:
    """Polish the starts (under a time limit only while the phase lasts, at least the
    first two: the first order's pipelines-local and stage-groups-local layouts, or two
    leading structures; _phase_starts), then descend them best first;
    ``run.other_start`` keeps the other layout's best result (descended or only
    polished) for _firsts."""
    effort = _Effort(run)
    run.phase = "seeds"
    if run.time_limit is not None:
        run.phase_deadline = time.monotonic() + START_SHARE * run.time_limit
    scored_starts = []
    for k, (name, grid) in enumerate(starts):
        if k >= 2 and run.time_limit is not None and run.should_stop(swaps=math.inf):
            break  # under a time limit, polish only while the phase lasts (one per layout at least)
        grid = polish(model, grid, effort)
        comm = model.score_grid(grid).comm
        run.offer(grid, comm, name)
        scored_starts.append((comm, k, name, grid))
    results = {k: (comm, k, name, grid) for comm, k, name, grid in scored_starts}
    timed = run.time_limit is not None
    for i, (comm, k, name, grid) in enumerate(sorted(scored_starts, key=lambda x: (x[0], x[1]))):
        offer = lambda g, s, name=name: run.offer(g, s, name)  # noqa: E731
        if i == 0 and timed:
            # the best start's descent scores first_descent_swaps(N) however short the
            # time limit (worker processes take about 0.3 s to start, and a limit that
            # ended before them returned a start only polished), then goes on while the
            # phase lasts
            first = _Effort(run, cap=run.nfev + first_descent_swaps(model.n))
            if first.should_stop():
                break
            state = descend(model, grid, rng, first, offer)
            grid = state.grid
            results[k] = (float(state.score), k, name, grid.copy())
            if run.nfev < first.budget and not run.should_stop():
                continue  # it ended below the cap: a local optimum, nothing to go on with
        if (i > 0 or timed) and run.should_stop():
            break
        if i > 0 and comm > SKIP_START_RATIO * run.best_score:
            continue  # far behind the best: not worth a descent
        state = descend(model, grid, rng, effort, offer)
        results[k] = (float(state.score), k, name, state.grid.copy())
    run.other_start = _other_layout(list(results.values()))


def _phase_starts(model: CostModel, starts: list[tuple[str, np.ndarray]]) -> list[tuple[str, np.ndarray]]:
    """The starts the starts phase takes: where the coarse model prefers the structure
    starts to every topology start by more than STRUCTURES_LEAD, only the structure
    starts within STRUCTURES_LEAD of its cheapest (solver.structures.leading), else all.
    O(S N) for S starts, besides the classes (O(N^2)).

    Why: a dealt structure polishes worse than the best topology start, so the rounds
    began from that start, though from the structure they reach a better basin. On the
    draw-3 64-GPU 16 x 4 suite instance the coarse optimum (runs 3+7+3+1+2, coarse cost
    43.83 against 47.89 for the best topology start) polishes to 39.23 against a block
    start's 37.75; 10 s runs (2 workers, seeds 0-4) from the block start ended at
    33.46-34.11 s, from the structures alone at 33.43 s on every seed. Only the near
    ties among the structures: on draw-1 12 x 8 (coarse 48.06, 48.84 and 49.06) the
    second or third polished best in some seeds and led to a 39.3 s basin (38.55-39.28
    s with all three, 38.43-38.64 s on ten seeds with the first alone); on draw-3 12 x 8
    (44.55, 45.00, 45.03) the first alone gave 34.36-34.58 s, all three 33.01-33.18 s.
    Where structures and topology starts are about even on the coarse model (the demo
    fabric: 79.65 against 80.24) the starts' Comm decides, as before. The search asks
    this only when anytime rounds follow: the starts alone (``restarts=0``, no time
    limit) descend them all. The other layout's start for _firsts is then another of
    the leading structures, or none."""
    found = [s for s in starts if _structure(s[0])]
    if STRUCTURES_LEAD is None or not found:
        return starts
    others = [grid for name, grid in starts if not _structure(name)]
    lead = structures.leading(model, [g for _, g in found], others, STRUCTURES_LEAD)
    return [found[k] for k in lead] if lead else starts


def _window_stop(seconds: float | None) -> Callable[[], bool]:
    """A ``stop()`` that turns true ``seconds`` after its first call (never for None)."""
    if seconds is None:
        return lambda: False
    until: list[float] = []

    def stop() -> bool:
        if not until:
            until.append(time.monotonic() + seconds)
        return time.monotonic() > until[0]
    return stop


def _structure(name: str) -> bool:
    """Whether a start is a structure start (solver.structures), by its name."""
    return name.startswith(structures.NAME)


def first_descent_swaps(n: int) -> int:
    """Swaps the best start's descent may score past a time limit: one sweep (N^2), at
    most FIRST_DESCENT_MOST (about 0.1 s)."""
    return min(n * n, FIRST_DESCENT_MOST)


def _other_layout(results: list[tuple[float, int, str, np.ndarray]]) -> tuple[np.ndarray, float] | None:
    """The best result among the starts of another layout than the best start's, as
    ``(grid, Comm)``; None if there is none. A layout is what a start's name gives after
    its order: pipelines local, stage groups local, or one block composition
    (``blocks 5+3``; each composition counts as a layout of its own, as measured)."""
    ordered = sorted(results, key=lambda x: (x[0], x[1]))
    layout = lambda name: name.rsplit(": ", 1)[-1]  # noqa: E731
    other = [r for r in ordered if layout(r[2]) != layout(ordered[0][2])]
    return (other[0][3], other[0][0]) if other else None


def _firsts(run: _Run, workers: int) -> list[tuple[np.ndarray, float]]:
    """Each worker's grid in the first round: the best known; odd workers are handed the
    other layout's best start when it is within DIVERSE_RATIO of the best, or when there
    are at least 3 workers.

    The two layouts can fall into different basins, the good one many block exchanges
    from the best start: on the 64-GPU 8 x 8 suite instance the stage-groups-local start
    descends best (27.4 against 28.5) but tempers to 26.4 where a pipelines-local start
    reaches 24.6 in the same 3 s; where the other layout starts far behind, a worker of
    two spends its first round better on the best one. While worker 1 keeps a lineage
    of its own (solver.anytime.lineage_ladder) its grid does not enter its ladder: the
    walk returns it only when the lineage ends above it, and the other layout is
    tempered by workers 3, 5, ..."""
    best = (run.best, run.best_score)
    other = run.other_start
    if other is None:
        return [best]
    if workers < 3 and other[1] > DIVERSE_RATIO * run.best_score:
        return [best]
    return [other if w % 2 else best for w in range(workers)]


def _rounds_plan(run: _Run, model: CostModel, seed: int, patience: int, budget_given: bool,
                 workers: int, origins: tuple[np.ndarray, ...] = ()) -> Rounds:
    n2 = model.n * model.n
    left = max(0, run.budget - run.nfev) if budget_given else rounds_budget(model.n, workers)
    if run.deadline is None and not budget_given:  # the default rule: whole tempering walks
        walk = temper_walk(model.n)
    else:
        walk = max(n2, min(temper_walk(model.n) if run.deadline is None else WALK_SWEEPS_TIMED * n2,
                           left // max(1, workers)))
    if run.deadline is not None:  # let at least ROUNDS_IN_LIMIT rounds fit the time left
        rate = run.nfev / max(run.elapsed(), 1e-3)  # swaps scored per second by the starts
        left_s = max(0.0, run.deadline - time.monotonic())
        walk = max(n2, min(walk, int(rate * left_s / ROUNDS_IN_LIMIT)))
    round_s = None
    if run.deadline is not None:
        round_s = max(MIN_ROUND_S, (run.deadline - time.monotonic()) / ROUNDS_IN_LIMIT)
        if not budget_given:
            left = UNLIMITED_BUDGET
    return Rounds(seed=seed, walk_evals=int(walk), patience=patience, budget=int(left),
                  deadline=run.deadline, round_s=round_s,
                  by_clock=run.deadline is not None and not budget_given, origins=origins)


def _rounds_phase(run: _Run, model: CostModel, pool: WorkerPool, plan: Rounds) -> list[str]:
    """Anytime rounds from the best start; folds their outcome into ``run``."""
    run.phase = "anytime"
    if run.should_stop():
        return []

    firsts = _firsts(run, pool.workers)

    def counted(nfev: int, nit: int, out: Outcome) -> None:  # after each round: progress shows it live
        run.nfev += nfev
        run.nit += nit
        run.restart = out.rounds
        if out.worker is not None:  # the round's best: a bound reached ends the search here
            run.offer(out.grid, out.fun, out.strategy, out.worker)

    out = pool.run(run.best, run.best_score, plan, run.should_stop,
                   lambda fun, worker, clock: run.note(fun, worker), firsts=firsts, on_round=counted)
    if run.status == CONVERGED and out.spent:
        run.status = BUDGET
    if run.status == CONVERGED and plan.deadline is not None and time.monotonic() >= plan.deadline:
        run.status = TIME_LIMIT  # the rounds' own deadline test ended them
    if run.at_bound() and run.status != CANCELLED:
        run.status = OPTIMAL
    elif run.status == OPTIMAL:  # a walk's best reached the bound, and its walk was lost
        run.status = TIME_LIMIT if plan.deadline is not None else CONVERGED
        run.lost_at_bound = True
    return out.errors


def solve(
    model: CostModel,
    *,
    seed: int = 0,
    budget: int | None = None,
    restarts: int = DEFAULT_PATIENCE,
    time_limit: float | None = None,
    callback: Callable[[SolveProgress], None] | None = None,
    seed_orders: Sequence[Sequence[int]] | None = None,
    workers: int | None = None,
    lower_bound: float | None = None,
) -> PlacementResult:
    """Search for a placement minimising Comm.

    Parameters
    ----------
    model : CostModel of the instance.
    seed : random seed; equal inputs, seed and workers give equal output (unless
        time-limited).
    budget : most swaps to score (default ``default_budget(N)`` for the starts and as
        ``rounds_budget(N, workers)`` for the anytime rounds; unlimited rounds with a time limit).
    restarts : anytime rounds without improvement before the search stops (no time limit).
    time_limit : wall-clock seconds; the search improves until then, the best is returned.
    callback : called with a SolveProgress at most every 0.1 s and on each improvement;
        raising StopIteration stops every worker and returns the best so far.
    seed_orders : extra device orders to derive starting layouts from.
    workers : processes for the anytime rounds (default: the cores this process may use).
    lower_bound : a valid lower bound on Comm; reaching it ends the search as optimal.
    """
    _check_options(budget, restarts, time_limit, workers)
    workers = available_cores() if workers is None else int(workers)
    run = _Run(model, default_budget(model.n) if budget is None else int(budget), time_limit,
               callback, lower_bound)
    run.default_rule = budget is None and time_limit is None
    rng = np.random.default_rng(seed)
    # the block tables get the starts' share of a time limit (at 512 devices and 16 stages
    # about 0.2 s an order); without one they are whole, so the result stays reproducible
    tables_until = None if time_limit is None else time.monotonic() + START_SHARE * time_limit
    # ... and the structure starts the same share again, from when they begin: behind the
    # block tables they were cut off on a loaded machine (0.45 s at 96 GPUs after 0.2 s of tables);
    # the beams (structures of many short runs) get BEAM_SHARE after them
    starts = _starts(model, seed_orders,  # validates seed_orders first
                     lambda: tables_until is not None and time.monotonic() > tables_until,
                     _window_stop(None if time_limit is None else START_SHARE * time_limit),
                     _window_stop(None if time_limit is None else BEAM_SHARE * time_limit))
    origins = _origins(model, starts)
    run.phase = "enumeration"
    exact_grid, scored = optimal_grid(model, run.should_stop)
    run.nfev += scored
    errors: list[str] = []
    notes: list[str] = []
    if exact_grid is not None:
        run.offer(exact_grid, model.score_grid(exact_grid).comm, "enumeration")
        run.status = OPTIMAL
        workers = 1  # no worker process ran
    else:
        anytime = restarts > 0 or time_limit is not None
        workers = workers if anytime else 1  # the starts alone: this process
        pool = WorkerPool(model, workers)
        # processes start (forkserver, imports) while this one descends the starts; past
        # the first two, only in the first POOL_START_SHARE of a time limit, so that the
        # rounds get the rest
        abandon = threading.Event()  # set: start no more worker processes
        start_until = None if time_limit is None else time.monotonic() + POOL_START_SHARE * time_limit
        starter = threading.Thread(target=pool.start, name="solver-pool-start", daemon=True,
                                   kwargs=dict(deadline=start_until, abandon=abandon.is_set,
                                               what=f"{POOL_START_SHARE:.0%} of the time limit had passed"))
        starter.start()
        try:
            try:
                _starts_phase(run, model, rng, _phase_starts(model, starts) if anytime else starts)
            finally:
                run.phase_deadline = None
            while starter.is_alive():  # a cancel ends the start (the pool tests the deadline)
                run.report()  # a callback raising StopIteration cancels
                if run.status in (CANCELLED, OPTIMAL):
                    abandon.set()
                starter.join(POLL_START_S)
            notes = list(pool.notes)
            if anytime:
                workers = pool.workers  # those started (a time limit, a cancel or a failed start: fewer)
                plan = _rounds_plan(run, model, seed, restarts, budget is not None, workers, origins)
                if budget is None:  # the default budget bounded the starts, not the rounds
                    run.budget = run.nfev + plan.budget
                    if run.status == BUDGET:
                        run.status = CONVERGED
                errors = _rounds_phase(run, model, pool, plan) or list(pool.errors)  # a failed start too
                if notes and pool.notes:
                    notes[-1] += "; the search used those" if run.restart else "; too late for any round"
                elif not run.restart and run.status == TIME_LIMIT:
                    notes.append("the time limit came before any anytime round")
        finally:
            abandon.set()
            starter.join()
            pool.close()
    return _result(run, model, seed, restarts, workers, errors, notes)


def _result(run: _Run, model: CostModel, seed: int, restarts: int, workers: int,
            errors: list[str], notes: Sequence[str] = ()) -> PlacementResult:
    score = model.score_grid(run.best)
    run.phase = "done"
    if run.status != CANCELLED:  # a cancelling callback is not called again
        run.report(force=True)
    message = _MESSAGES[run.status].format(patience=restarts)
    if run.status == BUDGET and run.default_rule and run.restart:  # the rounds' default swaps, no budget given
        rounds = default_rounds(model.n)
        walks = f"{rounds} round{'s' * (rounds != 1)} of tempering walks per worker"
        message = f"default work used up (the swaps of {walks}; a time limit or a budget searches longer)"
    if run.status == CONVERGED and run.restart == 0 and restarts == 0:
        message = "search converged: topology starts descended (no anytime rounds asked for)"
    if run.status == OPTIMAL and run.best_start != "enumeration":
        message = OPTIMAL_BY_BOUND
    if run.lost_at_bound:
        message += "; a walk reached the bound and ended the search early, but its worker was lost"
    if errors:
        message += f"; {len(errors)} worker(s) lost: " + "; ".join(errors)
    for note in notes:
        message += f"; {note}"
    if run.restart and native.kernel() is None:
        message += f"; tempering stepped in numpy, about 20x slower ({native.why_not()})"
    # a walk's improvement whose walk was then lost (a worker killed or dead) is not in
    # the result: the trace lists what it returns
    tol = 1e-9 * abs(score.comm)
    history = [(t, v) for t, v in run.history if v >= score.comm - tol]
    if not history or history[-1][1] > score.comm + tol:
        history.append((run.elapsed(), float(score.comm)))
    return PlacementResult(
        x=rank_map_from_grid(run.best), fun=score.comm, score=score, status=run.status,
        message=message, nit=run.nit, nfev=run.nfev, elapsed_s=run.elapsed(), seed=seed,
        budget=run.budget, restarts=restarts, start=run.best_start, exact_path=run.exact_path,
        history=history, optimal=run.status == OPTIMAL, workers=workers,
        worker=run.best_worker, rounds=run.restart, worker_errors=errors,
    )
