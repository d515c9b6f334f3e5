"""Descent to a local optimum: as-launched swaps, exact polishing, partition swaps.

``descend`` alternates three improving steps until none applies:

1. swap local search with incremental evaluation (solver.localsearch), O(N D_DP) array
   work per device batch;
2. *polishing*: the grid's stage groups get exact bottleneck matchings and the best
   pipeline order (``CostModel.grid_for_partition``), which never raises Comm;
3. one first-improvement pass of partition swaps scored with exact matchings
   (solver.partition_moves).

Every step only ever lowers Comm, so a descent ends at a grid that none of the three
neighbourhoods improves. The work is metered by an ``Effort`` (swaps scored, polishing
charged in swap equivalents, and a stop test), shared by the whole search of a process.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from solver.localsearch import local_search
from solver.partition_moves import partition_pass


class Effort:
    """Work counters and the stop test one search process shares between descents.

    ``nfev``: swaps scored; ``nit``: improving moves; ``budget``: most swaps to score;
    ``stop``: returns True when the caller wants the search to end (cancel, deadline);
    ``charge_polish``: count polishing in ``nfev`` (``polish_cost``).
    """

    charge_polish = True

    def __init__(self, budget: int, stop: Callable[[], bool] = lambda: False) -> None:
        self.budget = int(budget)
        self.nfev = self.nit = 0
        self.exact_path = True
        self._stop = stop

    def should_stop(self) -> bool:
        return self.nfev >= self.budget or self._stop()


def polish_cost(p: int) -> int:
    """What one polish costs, in scored swaps (about 0.5 us each): nothing up to 7 stages
    (orders scored at once), Held-Karp's 2^P P^2 up to 16, the heuristic path beyond.
    Charged to ``nfev`` so that an evaluation budget also bounds the time on deep
    pipelines, where polishing, not swapping, dominates."""
    if p <= 7:
        return 0
    return (1 << p) * p * p // 50 if p <= 16 else 10 * p ** 3


def polish(model, grid: np.ndarray, effort: Effort) -> np.ndarray:
    """The best grid for ``grid``'s partition (exact matchings and order when P <= 16)."""
    polished, exact = model.grid_for_partition(model.partition_of(grid))
    effort.exact_path = effort.exact_path and exact
    if effort.charge_polish:
        effort.nfev += polish_cost(polished.shape[1])
    return polished


def _better(a: float, b: float) -> bool:
    return a < b - 1e-12 * abs(b)


def descend(model, grid: np.ndarray, rng: np.random.Generator, effort: Effort,
            offer: Callable[[np.ndarray, float], None] = lambda g, s: None):
    """Polish ``grid``, then alternate the three neighbourhoods until none improves.

    ``offer(grid, comm)`` is called with every improvement. Returns the final state.
    """
    state = model.incremental(polish(model, grid, effort))
    offer(state.grid, state.score)
    while not effort.should_stop():
        moves, evals = local_search(state, rng, max_evals=effort.budget - effort.nfev,
                                    should_stop=effort.should_stop)
        effort.nfev += evals
        effort.nit += moves
        offer(state.grid, state.score)
        polished = model.incremental(polish(model, state.grid, effort))
        if _better(polished.score, state.score):
            effort.nit += 1
            state = polished
            offer(state.grid, state.score)
            continue
        if polished.score <= state.score:  # same partition, columns in pipeline order
            state = polished
        if effort.should_stop():
            break
        better, evals = partition_pass(model, state.grid, state.critical_devices(),
                                       max_evals=effort.budget - effort.nfev,
                                       should_stop=effort.should_stop)
        effort.nfev += evals
        if better is None:
            break
        effort.nit += 1
        state = model.incremental(better)
        offer(state.grid, state.score)
    return state
