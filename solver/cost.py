"""The DT-FM communication cost model and the rank-map contract.

A placement of ``N = D_PP * D_DP`` devices is a grid ``G`` of shape ``(D_DP, D_PP)``:
``G[r, s]`` is the device (matrix row) running stage ``s`` of pipeline replica ``r``.
Its global rank is ``r * D_PP + s``; ``rank_map[G[r, s]] = r * D_PP + s``. Rows of the
grid are pipelines, columns are data-parallel (stage) groups.

With ``T_pp = T(c_pp, pp_messages)`` and ``T_dp = 2 T(c_dp / D_DP, dp_messages)``
(``T`` from solver.fabric, symmetric, zero diagonal), the score of a grid as launched is::

    DataP(s)  = max_{d in column s} sum_{d' in column s} T_dp[d, d']
    DataP     = max_s DataP(s)
    edge(s)   = max_r T_pp[G[r, s], G[r, s + 1]]          (the bottleneck link)
    Pipeline  = 2 * sum_{s < D_PP - 1} edge(s)
    Comm      = DataP + Pipeline

For a partition into stage groups, DT-FM's Comm uses the best matching between
adjacent groups and the best group order; ``grid_for_partition`` builds the grid that
realises both, so the score of the emitted rank map equals the partition's Comm.
Scoring a grid is O(N * D_DP).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.fabric import Fabric
from solver.matching import bottleneck_matching
from solver.path import best_path
from solver.workload import Workload


@dataclass(eq=False)
class Score:
    """The cost of one placement, with the parts an operator reviews."""

    comm: float
    data_p: float
    pipeline: float
    stage_data_p: np.ndarray  #: (D_PP,) DataP of each stage group
    edge_s: np.ndarray  #: (D_PP - 1,) bottleneck transfer time of each pipeline edge
    worst_device: int  #: the device whose peer sum sets DataP
    bottlenecks: list[tuple[int, int]]  #: per pipeline edge, the slowest device pair
    grid: np.ndarray  #: (D_DP, D_PP) device ids

    @property
    def rank_map(self) -> np.ndarray:
        return rank_map_from_grid(self.grid)


class CostModel:
    """Transfer-time matrices of one fabric under one workload, and scoring.

    Parameters
    ----------
    t_pp, t_dp : (N, N) symmetric arrays with zero diagonal (seconds).
    workload : Workload with ``d_pp * d_dp == N``.
    """

    def __init__(self, t_pp: np.ndarray, t_dp: np.ndarray, workload: Workload,
                 labels: tuple[str, ...] | None = None) -> None:
        n = workload.n_devices
        if t_pp.shape != (n, n) or t_dp.shape != (n, n):
            raise ValueError(
                f"workload needs {n} devices (D_PP {workload.d_pp} x D_DP {workload.d_dp}), "
                f"fabric has {t_pp.shape[0]}"
            )
        self.t_pp = np.ascontiguousarray(t_pp, dtype=float)
        self.t_dp = np.ascontiguousarray(t_dp, dtype=float)
        self.workload = workload
        self.labels = labels if labels is not None else tuple("" for _ in range(n))

    @classmethod
    def from_fabric(cls, fabric: Fabric, workload: Workload) -> "CostModel":
        """Build from a fabric; ValueError on size mismatch or unmeasured pairs."""
        if fabric.n != workload.n_devices:
            raise ValueError(
                f"{fabric.source}: {fabric.n} devices, but D_PP {workload.d_pp} x "
                f"D_DP {workload.d_dp} needs {workload.n_devices}"
            )
        missing = fabric.missing_pairs()
        if missing:
            shown = ", ".join(
                f"{fabric.device_name(i)}-{fabric.device_name(j)}" for i, j in missing[:8]
            )
            more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
            raise ValueError(
                f"{fabric.source}: {len(missing)} unmeasured pair(s): {shown}{more}"
            )
        w = workload
        t_pp = fabric.transfer_s(w.c_pp, w.pp_messages)
        t_dp = 2.0 * fabric.transfer_s(w.c_dp / w.d_dp, w.dp_messages)
        return cls(t_pp, t_dp, w, fabric.labels)

    @property
    def n(self) -> int:
        return self.workload.n_devices

    def peer_sums(self, grid: np.ndarray) -> np.ndarray:
        """``(P, R)``: each device's sum of ``T_dp`` to its stage group's peers, the
        group's columns in grid order. O(N D_DP)."""
        cols = np.asarray(grid, dtype=int).T
        return self.t_dp[cols[:, :, None], cols[:, None, :]].sum(axis=2)

    def score_grid(self, grid: np.ndarray) -> Score:
        """Score a placement grid as launched (no re-optimisation)."""
        g = np.asarray(grid, dtype=int)
        cols = g.T  # (P, R)
        sums = self.peer_sums(g)
        stage = sums.max(axis=1)
        s_worst = int(stage.argmax())
        worst_device = int(cols[s_worst, int(sums[s_worst].argmax())])
        links = self.t_pp[g[:, :-1], g[:, 1:]]  # (R, P-1)
        edges = links.max(axis=0) if links.size else np.zeros(0)
        worst_r = links.argmax(axis=0) if links.size else np.zeros(0, dtype=int)
        bottlenecks = [(int(g[r, s]), int(g[r, s + 1])) for s, r in enumerate(worst_r)]
        data_p = float(stage.max())
        pipeline = 2.0 * float(edges.sum())
        return Score(
            comm=data_p + pipeline,
            data_p=data_p,
            pipeline=pipeline,
            stage_data_p=stage,
            edge_s=edges,
            worst_device=worst_device,
            bottlenecks=bottlenecks,
            grid=g.copy(),
        )

    def score_rank_map(self, rank_map) -> Score:
        """Score ``rank_map`` (``rank_map[i]`` = global rank of device i) as launched."""
        return self.score_grid(grid_from_rank_map(rank_map, self.workload.d_pp, self.workload.d_dp))

    def edge_matrix(self, groups: list[np.ndarray]) -> tuple[np.ndarray, dict]:
        """Pipeline-edge costs between every pair of stage groups and their matchings.

        Returns ``(E, matchings)`` with ``E[j, k]`` the bottleneck matching value of
        ``T_pp[groups[j]][:, groups[k]]`` and ``matchings[(j, k)]`` (j < k) the matched
        column positions. O(P^2) bottleneck matchings.
        """
        p = len(groups)
        e = np.zeros((p, p))
        matchings = {}
        for j in range(p):
            for k in range(j + 1, p):
                value, match = bottleneck_matching(self.t_pp[np.ix_(groups[j], groups[k])])
                e[j, k] = e[k, j] = value
                matchings[(j, k)] = match
        return e, matchings

    def grid_for_partition(self, groups: list[np.ndarray]) -> tuple[np.ndarray, bool]:
        """The best grid for a partition: exact matchings, best (exact if P <= 16) order.

        Returns ``(grid, exact_path)``. Replicas are numbered by the sorted device ids of
        the first stage group, so the result is deterministic.
        """
        groups = [np.sort(np.asarray(g, dtype=int)) for g in groups]
        p = len(groups)
        r = len(groups[0])
        if p == 1:
            return groups[0][:, None].copy(), True
        e, matchings = self.edge_matrix(groups)
        _, order, exact = best_path(e)
        if order[0] > order[-1]:  # same cost either way; read from the lower group first
            order = order[::-1]
        grid = np.empty((r, p), dtype=int)
        grid[:, 0] = groups[order[0]]
        slot = np.arange(r)  # position of each replica's device inside its current group
        for s in range(1, p):
            a, b = order[s - 1], order[s]
            if a < b:
                step = np.asarray(matchings[(a, b)])
            else:
                step = np.argsort(matchings[(b, a)])  # inverse permutation
            slot = step[slot]
            grid[:, s] = groups[b][slot]
        return grid, exact

    def incremental(self, grid: np.ndarray):
        """The incremental swap evaluator for ``grid`` (solver.localsearch.GridState)."""
        from solver.localsearch import GridState  # localsearch imports this module

        return GridState(self, grid)

    def partition_of(self, grid: np.ndarray) -> list[np.ndarray]:
        """The stage groups (columns) of a grid."""
        return [np.asarray(grid)[:, s].copy() for s in range(np.asarray(grid).shape[1])]


def grid_from_rank_map(rank_map, d_pp: int, d_dp: int) -> np.ndarray:
    """Invert ``rank_map``: ``grid[r, s]`` = the device with rank ``r * d_pp + s``.

    ValueError unless ``rank_map`` is a permutation of ``0 .. d_pp*d_dp - 1``.
    """
    rm = np.asarray(rank_map)
    n = d_pp * d_dp
    if rm.ndim != 1 or len(rm) != n:
        raise ValueError(f"rank map: expected {n} ranks (D_PP {d_pp} x D_DP {d_dp}), got {rm.size}")
    if not np.issubdtype(rm.dtype, np.integer):
        raise ValueError("rank map: ranks must be whole numbers")
    if sorted(rm.tolist()) != list(range(n)):
        seen, dup = set(), None
        for x in rm.tolist():
            if x in seen or not 0 <= x < n:
                dup = x
                break
            seen.add(x)
        raise ValueError(f"rank map: not a permutation of 0..{n - 1} (rank {dup} repeated or out of range)")
    grid = np.empty(n, dtype=int)
    grid[rm] = np.arange(n)
    return grid.reshape(d_dp, d_pp)


def rank_map_from_grid(grid: np.ndarray) -> np.ndarray:
    """``rank_map[grid[r, s]] = r * D_PP + s``."""
    g = np.asarray(grid, dtype=int)
    rank_map = np.empty(g.size, dtype=int)
    rank_map[g.ravel()] = np.arange(g.size)
    return rank_map
