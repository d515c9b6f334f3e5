"""Swap local search over placement grids with batched incremental evaluation.

State: a grid ``G`` (``R = D_DP`` replicas x ``P = D_PP`` stages) scored as launched
(see solver.cost). A move swaps the positions of two devices ``a`` and ``b``.

For one device ``a`` at ``(r1, s1)``, the score after swapping it with *every* other
device is computed at once, touching only what a swap changes:

- DataP of the two columns involved. With ``S[d] = sum_{d' in col(d)} T_dp[d, d']``, when
  ``b`` replaces ``a`` in column ``s1`` the others' sums become
  ``S[d] - T_dp[d, a] + T_dp[d, b]`` and ``b``'s is ``sum_{d in col \\ a} T_dp[b, d]``;
  symmetrically for ``a`` entering ``b``'s column. The other columns' maximum comes from
  the top two of the remaining column values. O(N R).
- Pipeline: at most four edges change (``s1 - 1``, ``s1``, ``s2 - 1``, ``s2``), and on
  each only the links of replicas ``r1`` and ``r2`` change: the new edge value is the
  larger of those two new links and the largest link of the other replicas (kept as the
  top three links per edge). Duplicated edges are counted once. O(N) per edge.

So one batch costs O(N R) array work instead of O(N^2 R) for N full re-scores; the best
swap of the batch is applied when it lowers Comm. ``nfev`` counts scored swaps.

Where the compiled kernels build (solver.native), a batch is scored in C instead
(``swap_scores`` in solver/tempering.c): the same O(N R) rescoring, one candidate at a
time, the same values up to rounding. On the 192-GPU suite instance a batch takes 48 us
against 447 us in numpy, and a two-sweep descent of a layout three swaps from a
descended one 0.03 s against 0.20 s (same answer; one run each, same session).
"""

from __future__ import annotations

import numpy as np

from solver import native
from solver.cost import CostModel


class GridState:
    """A grid with the running sums needed for incremental swap evaluation."""

    def __init__(self, model: CostModel, grid: np.ndarray) -> None:
        self.model = model
        self.grid = np.array(grid, dtype=np.int64, order="C")
        r, p = self.grid.shape
        self.r, self.p = r, p
        self.pos_r = np.empty(model.n, dtype=int)
        self.pos_s = np.empty(model.n, dtype=int)
        rr, ss = np.indices((r, p))
        self.pos_r[self.grid] = rr
        self.pos_s[self.grid] = ss
        self.sums = np.empty(model.n)
        self.col_dp = np.empty(p)
        self.block = np.empty((p, r, r))  # T_dp within each column, kept between swaps
        for s in range(p):
            self._refresh_column(s)
        self.edge = np.zeros(max(p - 1, 0))
        # per edge, the three largest links and their replicas (-inf / -1 when r < 3)
        self.top_val = np.full((3, max(p - 1, 0)), -np.inf)
        self.top_idx = np.full((3, max(p - 1, 0)), -1, dtype=int)
        for e in range(p - 1):
            self._refresh_edge(e)

    @property
    def score(self) -> float:
        return float(self.col_dp.max()) + 2.0 * float(self.edge.sum())

    def _refresh_column(self, s: int) -> None:
        col = self.grid[:, s]
        self.block[s] = self.model.t_dp[np.ix_(col, col)]
        self.sums[col] = self.block[s].sum(axis=1)
        self.col_dp[s] = self.sums[col].max()

    def _refresh_edge(self, e: int) -> None:
        links = self.model.t_pp[self.grid[:, e], self.grid[:, e + 1]]
        k = min(3, self.r)
        idx = np.argsort(-links, kind="stable")[:k]
        self.top_val[:k, e] = links[idx]
        self.top_idx[:k, e] = idx
        self.edge[e] = links[idx[0]]

    def swap(self, a: int, b: int) -> None:
        """Exchange the positions of devices ``a`` and ``b`` and refresh what changed."""
        ra, sa, rb, sb = self.pos_r[a], self.pos_s[a], self.pos_r[b], self.pos_s[b]
        self.grid[ra, sa], self.grid[rb, sb] = b, a
        self.pos_r[a], self.pos_s[a], self.pos_r[b], self.pos_s[b] = rb, sb, ra, sa
        for s in {sa, sb}:
            self._refresh_column(s)
        for e in {sa - 1, sa, sb - 1, sb}:
            if 0 <= e < self.p - 1:
                self._refresh_edge(e)

    def critical_devices(self) -> list[int]:
        """Devices that set the score: the worst stage group (largest peer sum first),
        then both ends of every edge's bottleneck link, slowest edge first."""
        worst_col = self.grid[:, int(self.col_dp.argmax())]
        out = [int(d) for d in worst_col[np.argsort(-self.sums[worst_col], kind="stable")]]
        for e in np.argsort(-self.edge, kind="stable"):
            rep = int(self.top_idx[0, e])
            out += [int(self.grid[rep, e]), int(self.grid[rep, e + 1])]
        return out

    def _max_excluding(self, e: np.ndarray, r1: int, r2: np.ndarray) -> np.ndarray:
        """Largest link of edge ``e[c]`` over replicas other than ``r1`` and ``r2[c]``."""
        out = np.full(len(e), -np.inf)
        for k in range(2, -1, -1):  # the first qualifying of the top three wins
            idx = self.top_idx[k, e]
            ok = (idx >= 0) & (idx != r1) & (idx != r2)
            out = np.where(ok, self.top_val[k, e], out)
        return out

    def _after_swap(self, rr, col, a, b, r1, s1, r2, s2) -> np.ndarray:
        """Device at ``(rr[c], col[c])`` once ``a`` at (r1, s1) and ``b[c]`` at (r2[c], s2[c]) swap."""
        dev = self.grid[rr, col]
        dev = np.where((rr == r1) & (col == s1), b, dev)
        return np.where((rr == r2) & (col == s2), a, dev)

    def swap_scores(self, a: int) -> np.ndarray:
        """Comm after swapping ``a`` with each device (index = device id; ``a`` -> inf)."""
        compiled = native.swap_scorer()
        if compiled is not None:
            return self._swap_scores_compiled(compiled, a)
        m, g = self.model, self.grid
        t_dp, t_pp = m.t_dp, m.t_pp
        r1, s1 = self.pos_r[a], self.pos_s[a]
        n, r, p = m.n, self.r, self.p
        b = g.ravel()  # candidate devices in grid order: c = r2 * p + s2
        r2 = np.repeat(np.arange(r), p)
        s2 = np.tile(np.arange(p), r)

        # --- DataP ---------------------------------------------------------------
        col1 = g[:, s1]
        others1 = col1[col1 != a]
        new1_others = (self.sums[others1] - t_dp[others1, a])[:, None] + t_dp[others1][:, b]
        new1 = np.maximum(
            new1_others.max(axis=0) if len(others1) else -np.inf,
            t_dp[b][:, others1].sum(axis=1),
        )
        cols = g.T  # (p, r): column s holds cols[s]
        # a replaces cols[s, rb]: others d = cols[s, rd], rd != rb
        # block[s, rb, rd] = T[b, d]
        trial = self.sums[cols][:, None, :] - self.block + t_dp[a][cols][:, None, :]
        if r > 1:
            diag = np.eye(r, dtype=bool)[None]
            trial = np.where(diag, -np.inf, trial)
            new2 = trial.max(axis=2)  # (p, r)
        else:
            new2 = np.full((p, r), -np.inf)
        a_row = t_dp[a][cols]  # (p, r)
        new2 = np.maximum(new2, a_row.sum(axis=1, keepdims=True) - a_row)
        new2 = new2.T.ravel()  # grid order
        rest = self.col_dp.copy()
        rest[s1] = -np.inf
        top = int(rest.argmax())
        rest_wo = rest.copy()
        rest_wo[top] = -np.inf
        other_max = np.where(s2 == top, rest_wo.max(), rest[top]) if p > 1 else np.full(n, -np.inf)
        data_p = np.maximum(np.maximum(other_max, new1), new2)
        data_p = np.where(s2 == s1, self.col_dp.max(), data_p)

        # --- Pipeline ------------------------------------------------------------
        pipe = np.full(n, float(self.edge.sum()))
        if p > 1:
            slots = [np.full(n, s1 - 1), np.full(n, s1), s2 - 1, s2]
            valid = [np.full(n, s1 >= 1), np.full(n, s1 <= p - 2), s2 >= 1, s2 <= p - 2]
            valid[2] = valid[2] & (s2 - 1 != s1 - 1) & (s2 - 1 != s1)
            valid[3] = valid[3] & (s2 != s1 - 1) & (s2 != s1)
            for e, ok in zip(slots, valid):
                if not ok.any():
                    continue
                e = np.clip(e, 0, p - 2)
                new_edge = self._max_excluding(e, r1, r2)
                for rr in (np.full(n, r1), r2):
                    left = self._after_swap(rr, e, a, b, r1, s1, r2, s2)
                    right = self._after_swap(rr, e + 1, a, b, r1, s1, r2, s2)
                    new_edge = np.maximum(new_edge, t_pp[left, right])
                pipe = pipe + np.where(ok, new_edge - self.edge[e], 0.0)
        score_c = data_p + 2.0 * pipe
        out = np.empty(n)
        out[b] = score_c
        out[a] = np.inf
        return out

    def _swap_scores_compiled(self, compiled, a: int) -> np.ndarray:
        # CostModel keeps its matrices contiguous float64: these are the same arrays
        t_pp = np.ascontiguousarray(self.model.t_pp, dtype=np.float64)
        t_dp = np.ascontiguousarray(self.model.t_dp, dtype=np.float64)
        n = self.model.n
        if self.r * self.p != n or t_pp.shape != (n, n) or t_dp.shape != (n, n):
            raise ValueError(f"grid {self.r} x {self.p} does not fit a model of {n} devices")
        out = np.empty(n)
        at = int(self.pos_r[a]) * self.p + int(self.pos_s[a])
        if compiled(self.r, self.p, t_pp.ctypes.data, t_dp.ctypes.data, self.grid.ctypes.data, at,
                    self.sums.ctypes.data, self.col_dp.ctypes.data, self.edge.ctypes.data,
                    out.ctypes.data) != 0:
            raise MemoryError("swap_scores: out of memory")
        return out


def local_search(
    state: GridState,
    rng: np.random.Generator,
    *,
    max_evals: int,
    should_stop=lambda: False,
) -> tuple[int, int]:
    """Best-improvement swaps, one device batch at a time, until a full sweep finds none.

    Devices on the critical structure (the worst stage group, every edge's bottleneck
    link) are tried first in each sweep; the rest follow in random order.
    Returns ``(moves, evaluations)``.
    """
    n = state.model.n
    moves = evals = 0
    tolerance = 1e-12
    while evals < max_evals and not should_stop():
        improved = False
        critical = state.critical_devices()
        seen = set()
        order = [d for d in critical + rng.permutation(n).tolist() if not (d in seen or seen.add(d))]
        for a in order:
            if evals >= max_evals or should_stop():
                break
            current = state.score
            scores = state.swap_scores(a)
            evals += n - 1
            b = int(scores.argmin())
            if scores[b] < current - tolerance * abs(current):
                state.swap(a, b)
                moves += 1
                improved = True
        if not improved:
            break
    return moves, evals
