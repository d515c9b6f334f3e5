"""Heat-bath simulated annealing over as-launched swaps, on the incremental evaluator.

One step picks a device ``a`` at random, scores the swap of ``a`` with every other
device at once (``GridState.swap_scores``, O(N D_DP)) and draws the partner ``b`` with
probability proportional to ``exp(-(Comm_b - min_b' Comm_b') / T)`` (a rejection-free
"heat-bath" step: every step moves, and a step sees N - 1 neighbours instead of one).
``T`` falls geometrically from ``TAU_HOT`` to ``TAU_COLD`` times the start's Comm over the
walk's budget of scored swaps. The best grid seen is then descended (solver.descent) so
it also gets exact matchings, the best order and partition swaps.

Why: the iterated local search (solver.anytime) stays near the elite; on fabrics whose
good layouts are far from every topology start (measured: a 10 x 8 hierarchical instance
where the ILS stalled 20% above what a plain annealer found), a hot annealing walk
crosses the whole space, and the rounds keep whichever walk ended lower.
"""

from __future__ import annotations

import numpy as np

from solver.descent import Effort, descend

TAU_HOT = 0.15
TAU_COLD = 1e-4


def anneal(model, grid: np.ndarray, rng: np.random.Generator, effort: Effort,
           *, evals: int) -> tuple[np.ndarray, float]:
    """Anneal from ``grid`` for about ``evals`` scored swaps; ``(best grid, its Comm)``
    after the final descent."""
    state = model.incremental(grid)
    n = model.n
    start = effort.nfev
    hot, cold = TAU_HOT * state.score, TAU_COLD * state.score
    best, best_grid = state.score, state.grid.copy()
    while not effort.should_stop() and effort.nfev - start < evals:
        done = (effort.nfev - start) / evals
        temp = hot * (cold / hot) ** done
        a = int(rng.integers(n))
        scores = state.swap_scores(a)
        effort.nfev += n - 1
        weights = np.exp(-(scores - scores.min()) / temp)  # inf at a -> weight 0
        b = int(rng.choice(n, p=weights / weights.sum()))
        state.swap(a, b)
        if state.score < best - 1e-12 * max(1.0, best):
            best, best_grid = state.score, state.grid.copy()
    final = descend(model, best_grid, rng, effort)
    return final.grid, final.score
