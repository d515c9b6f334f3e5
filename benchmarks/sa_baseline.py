"""An independent plain simulated-annealing baseline (shares no search code with solver/).

State: a grid scored as launched, with its own scoring written from the spec's formulas
(DataP as the worst peer sum over stage groups, Pipeline as twice the sum of each
edge's slowest link). Move: swap two random devices. Acceptance: Metropolis with a
geometric temperature from 5% to 0.01% of the start's Comm over the time given.
Each move rescoring costs O(N D_DP) numpy work; no incremental evaluation, no exact
inner solvers, no topology starts: what a careful first attempt would be.
"""

from __future__ import annotations

import time

import numpy as np


def comm(t_pp: np.ndarray, t_dp: np.ndarray, grid: np.ndarray) -> float:
    cols = grid.T
    data_p = t_dp[cols[:, :, None], cols[:, None, :]].sum(axis=2).max()
    pipeline = t_pp[grid[:, :-1], grid[:, 1:]].max(axis=0).sum() if grid.shape[1] > 1 else 0.0
    return float(data_p + 2.0 * pipeline)


def anneal(t_pp: np.ndarray, t_dp: np.ndarray, d_pp: int, d_dp: int, seconds: float,
           seed: int = 0) -> tuple[float, np.ndarray, int]:
    """``(best Comm, best grid, moves tried)`` after ``seconds`` of annealing."""
    rng = np.random.default_rng(seed)
    n = d_pp * d_dp
    grid = rng.permutation(n).reshape(d_dp, d_pp)
    cur = comm(t_pp, t_dp, grid)
    best, best_grid = cur, grid.copy()
    t_hot, t_cold = 0.05 * cur, 1e-4 * cur
    t0 = time.perf_counter()
    moves = 0
    while True:
        done = (time.perf_counter() - t0) / seconds
        if done >= 1.0:
            break
        temp = t_hot * (t_cold / t_hot) ** done
        for _ in range(200):
            i, j = rng.integers(n, size=2)
            flat = grid.ravel()
            flat[i], flat[j] = flat[j], flat[i]
            new = comm(t_pp, t_dp, grid)
            moves += 1
            if new <= cur or rng.random() < np.exp((cur - new) / temp):
                cur = new
                if new < best:
                    best, best_grid = new, grid.copy()
            else:
                flat[i], flat[j] = flat[j], flat[i]
    return best, best_grid, moves
