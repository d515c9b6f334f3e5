"""Outer placement search: topology-derived seeds, swap local search, exact polishing.

The balanced partition into stage groups is NP-hard (DT-FM); this search does not
certify optimality, it reports a lower bound beside its answer instead (solver.bounds).

1. Starts. For each device order (labels sorted, the leaf order of an average-linkage
   clustering of ``T_pp``, and any ``seed_orders`` given), two layouts: pipelines on
   consecutive devices (each pipeline stays local, each stage group spans the order)
   and stage groups on consecutive devices (the transpose).
2. Each start is *polished*: its stage groups get exact bottleneck matchings and the
   best pipeline order (solver.cost.grid_for_partition), which never raises Comm. Starts
   are descended best first: swap local search (solver.localsearch) to a local optimum,
   polishing and partition swaps (solver.partition_moves) until none improves. A start
   more than SKIP_START_RATIO worse than the best so far is not descended.
3. ``restarts`` times, the best grid is perturbed by random swaps and re-optimised
   (iterated local search); a better result replaces it.

``budget`` caps scored swaps over the whole run (``nfev``); ``time_limit`` caps wall time
(then results depend on machine speed). With neither hit, output is a pure function of
the instance, ``seed`` and options. Cost per local-search batch is O(N D_DP).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from scipy.cluster.hierarchy import leaves_list, linkage
from scipy.spatial.distance import squareform

from solver.cost import CostModel, Score, rank_map_from_grid
from solver.enumerate import optimal_grid
from solver.localsearch import GridState, local_search
from solver.partition_moves import partition_pass

#: A topology start whose polished Comm is this much worse than the best so far is not
#: descended (the starts are tried best first); its descent would cost full sweeps.
SKIP_START_RATIO = 1.25

#: Result status codes (``PlacementResult.status``).
CONVERGED, BUDGET, TIME_LIMIT, CANCELLED, OPTIMAL = 0, 1, 2, 3, 4
_MESSAGES = {
    OPTIMAL: "optimal: every balanced partition was enumerated",
    CONVERGED: "search converged (no improving swap after every restart)",
    BUDGET: "evaluation budget used up",
    TIME_LIMIT: "time limit reached; best placement so far",
    CANCELLED: "cancelled by the caller; best placement so far",
}


@dataclass(eq=False)
class SolveProgress:
    """What the callback sees: the best Comm so far and how much work went in."""

    fun: float
    nit: int
    nfev: int
    elapsed_s: float
    phase: str
    restart: int
    budget: int


@dataclass(eq=False)
class PlacementResult:
    """Outcome of ``solve`` (field names follow scipy.optimize.OptimizeResult)."""

    x: np.ndarray  #: rank map: ``x[i]`` is the global rank of device i
    fun: float  #: Comm of ``x`` in seconds, recomputed from scratch
    score: Score
    status: int
    message: str
    nit: int  #: improving moves accepted (swaps and polishes)
    nfev: int  #: swaps scored
    elapsed_s: float
    seed: int
    budget: int
    restarts: int
    start: str  #: the start that led to the best placement
    exact_path: bool  #: pipeline order solved exactly (D_PP <= 16)
    optimal: bool = False  #: certified optimal (small instance, enumerated)
    history: list[tuple[float, float]] = field(default_factory=list)  #: (elapsed, best)


def default_budget(n: int) -> int:
    """Swaps scored when no budget is given: about ``sweeps`` full local-search sweeps
    (N^2 swaps each), 40 up to 204 devices, fewer beyond (8 at 1024, 2 at 4096), so the
    search ends in seconds at 64 devices, under a minute at 1024 and within about five
    minutes at 4096 on two cores."""
    sweeps = max(2, min(40, 8192 // max(n, 1)))
    return int(max(sweeps * n * n, 200_000))


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


def _starts(model: CostModel, extra) -> list[tuple[str, np.ndarray]]:
    r, p = model.workload.d_dp, model.workload.d_pp
    starts = []
    for name, o in _orders(model, extra):
        starts.append((f"{name}: pipelines local", o.reshape(r, p)))
        starts.append((f"{name}: stage groups local", o.reshape(p, r).T))
    return starts


class _Run:
    """Book-keeping shared by every phase: best so far, budget, clock, callback."""

    def __init__(self, model, budget, time_limit, callback):
        self.model, self.budget, self.time_limit, self.callback = model, budget, time_limit, callback
        self.t0 = time.perf_counter()
        self.nfev = self.nit = 0
        self.best: np.ndarray | None = None
        self.best_score = np.inf
        self.best_start = ""
        self.exact_path = True
        self.history: list[tuple[float, float]] = []
        self.status = CONVERGED
        self.phase, self.restart = "seeds", 0
        self._last_report = -1.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def offer(self, grid: np.ndarray, score: float, start: str) -> None:
        if score < self.best_score - 1e-12 * max(1.0, abs(score)):
            self.best, self.best_score, self.best_start = grid.copy(), score, start
            self.history.append((self.elapsed(), score))
            self.report(force=True)

    def report(self, force: bool = False) -> None:
        now = self.elapsed()
        if self.callback is None or (not force and now - self._last_report < 0.1):
            return
        self._last_report = now
        progress = SolveProgress(self.best_score, self.nit, self.nfev, now, self.phase,
                                 self.restart, self.budget)
        try:
            self.callback(progress)
        except StopIteration:
            self.status = CANCELLED

    def should_stop(self) -> bool:
        if self.status == CANCELLED:
            return True
        if self.time_limit is not None and self.elapsed() >= self.time_limit:
            self.status = TIME_LIMIT
            return True
        if self.nfev >= self.budget:
            self.status = BUDGET
            return True
        self.report()
        return self.status == CANCELLED

    def polish(self, grid: np.ndarray) -> np.ndarray:
        polished, exact = self.model.grid_for_partition(self.model.partition_of(grid))
        self.exact_path = self.exact_path and exact
        return polished

    def descend(self, grid: np.ndarray, rng: np.random.Generator, start: str) -> np.ndarray:
        """Polish, then alternate local search and polishing until neither improves."""
        grid = self.polish(grid)
        state = GridState(self.model, grid)
        self.offer(state.grid, state.score, start)
        while not self.should_stop():
            moves, evals = local_search(
                state, rng, max_evals=self.budget - self.nfev, should_stop=self.should_stop
            )
            self.nfev += evals
            self.nit += moves
            self.offer(state.grid, state.score, start)
            polished = GridState(self.model, self.polish(state.grid))
            if polished.score < state.score - 1e-12 * max(1.0, state.score):
                self.nit += 1
                state = polished
                self.offer(state.grid, state.score, start)
                continue
            if polished.score <= state.score:  # same partition, columns in pipeline order
                state = polished
            if self.should_stop():
                break
            better, evals = partition_pass(
                self.model, state.grid, state.critical_devices(),
                max_evals=self.budget - self.nfev, should_stop=self.should_stop,
            )
            self.nfev += evals
            if better is None:
                break
            self.nit += 1
            state = GridState(self.model, better)
            self.offer(state.grid, state.score, start)
        return state.grid


def solve(
    model: CostModel,
    *,
    seed: int = 0,
    budget: int | None = None,
    restarts: int = 8,
    time_limit: float | None = None,
    callback: Callable[[SolveProgress], None] | None = None,
    seed_orders: Sequence[Sequence[int]] | None = None,
) -> PlacementResult:
    """Search for a placement minimising Comm.

    Parameters
    ----------
    model : CostModel of the instance.
    seed : random seed; equal inputs and seed give equal output (unless time-limited).
    budget : most swaps to score (default ``default_budget(N)``).
    restarts : perturbation restarts after the topology seeds.
    time_limit : wall-clock seconds; the best placement so far is returned.
    callback : called with a SolveProgress at most every 0.1 s and on each improvement;
        raising StopIteration stops the search and returns the best so far.
    seed_orders : extra device orders to derive starting layouts from.
    """
    if budget is not None and budget < 0:
        raise ValueError(f"budget: must be >= 0, got {budget}")
    if restarts < 0:
        raise ValueError(f"restarts: must be >= 0, got {restarts}")
    if time_limit is not None and not time_limit > 0:
        raise ValueError(f"time_limit: must be > 0 seconds, got {time_limit}")
    run = _Run(model, default_budget(model.n) if budget is None else int(budget), time_limit, callback)
    rng = np.random.default_rng(seed)
    starts = _starts(model, seed_orders)
    run.phase = "enumeration"
    exact_grid, scored = optimal_grid(model, run.should_stop)
    run.nfev += scored
    if exact_grid is not None:
        run.offer(exact_grid, model.score_grid(exact_grid).comm, "enumeration")
        run.status = OPTIMAL
        starts = []
    run.phase = "seeds"
    scored_starts = []
    for k, (name, grid) in enumerate(starts):
        grid = run.polish(grid)
        comm = model.score_grid(grid).comm
        run.offer(grid, comm, name)
        scored_starts.append((comm, k, name, grid))
    for comm, _, name, grid in sorted(scored_starts, key=lambda x: (x[0], x[1])):
        if run.should_stop():
            break
        if comm > SKIP_START_RATIO * run.best_score:
            continue  # far behind the best: not worth a descent
        run.descend(grid, rng, name)
    run.phase = "restarts"
    for k in range(restarts if exact_grid is None else 0):
        if run.should_stop():
            break
        run.restart = k + 1
        if k % 2 == 1:  # every other restart starts afresh from a random placement
            grid = rng.permutation(model.n).reshape(run.best.shape)
            name = f"restart {k + 1} (random)"
        else:  # perturb the best with a few random swaps (iterated local search)
            grid = run.best.copy()
            flat = grid.ravel()
            for _ in range(int(rng.integers(2, 3 + int(np.sqrt(model.n))))):
                i, j = rng.choice(model.n, size=2, replace=False)
                flat[i], flat[j] = flat[j], flat[i]
            name = f"restart {k + 1} (perturbed best)"
        run.descend(grid, rng, name)
    score = model.score_grid(run.best)
    run.phase = "done"
    if run.status != CANCELLED:  # a cancelling callback is not called again
        run.report(force=True)
    return PlacementResult(
        x=rank_map_from_grid(run.best),
        fun=score.comm,
        score=score,
        status=run.status,
        message=_MESSAGES[run.status],
        nit=run.nit,
        nfev=run.nfev,
        elapsed_s=run.elapsed(),
        seed=seed,
        budget=run.budget,
        restarts=restarts,
        start=run.best_start,
        exact_path=run.exact_path,
        history=run.history,
        optimal=run.status == OPTIMAL,
    )
