"""Exact placement of small instances by enumerating every balanced partition.

The number of partitions of ``N = P R`` devices into ``P`` unordered groups of ``R`` is
``N! / (R!^P P!)`` (15,400 for 12 devices as 4 x 3). Up to ``ENUMERATION_LIMIT`` of them,
enumeration is cheaper than doubt: each group's DataP and each pair of disjoint groups'
bottleneck matching is computed once and cached, partitions whose DataP already reaches
the best Comm are skipped, and the rest get the exact pipeline order. The result is a
certified optimum of the DT-FM objective. Above HELD_KARP_MAX stages the order is not
exact (solver.path), so such instances are not enumerated even when their partitions are
few (``D_DP = 1``: one partition, a Hamiltonian path over ``D_PP`` devices).
"""

from __future__ import annotations

from math import factorial

import numpy as np

from solver.cost import CostModel
from solver.matching import bottleneck_matching
from solver.path import HELD_KARP_MAX, best_path

ENUMERATION_LIMIT = 20_000


def partition_count(p: int, r: int) -> int:
    """``(p r)! / (r!^p p!)``: balanced partitions of p*r devices into p groups of r."""
    return factorial(p * r) // (factorial(r) ** p * factorial(p))


def _partitions(items: tuple[int, ...], size: int):
    if not items:
        yield ()
        return
    first, rest = items[0], items[1:]
    from itertools import combinations

    for others in combinations(rest, size - 1):
        group = (first,) + others
        remaining = tuple(x for x in rest if x not in others)
        for tail in _partitions(remaining, size):
            yield (group,) + tail


def optimal_grid(model: CostModel, should_stop=lambda: False) -> tuple[np.ndarray | None, int]:
    """The optimal grid when the instance is small enough, else ``(None, 0)``.

    Returns ``(grid, partitions_scored)``; ``grid`` is None too when stopped early.
    """
    w = model.workload
    if w.d_pp > HELD_KARP_MAX or partition_count(w.d_pp, w.d_dp) > ENUMERATION_LIMIT:
        return None, 0  # too many partitions, or an order that is not exact
    t_pp, t_dp = model.t_pp, model.t_dp
    dp_cache: dict[tuple[int, ...], float] = {}
    edge_cache: dict[tuple[tuple[int, ...], tuple[int, ...]], float] = {}

    def data_p(g):
        if g not in dp_cache:
            idx = np.array(g)
            dp_cache[g] = float(t_dp[np.ix_(idx, idx)].sum(axis=1).max())
        return dp_cache[g]

    def edge(a, b):
        key = (a, b) if a < b else (b, a)
        if key not in edge_cache:
            edge_cache[key] = bottleneck_matching(t_pp[np.ix_(np.array(key[0]), np.array(key[1]))])[0]
        return edge_cache[key]

    best, best_groups, scored = np.inf, None, 0
    for groups in _partitions(tuple(range(model.n)), w.d_dp):
        scored += 1
        if scored % 256 == 0 and should_stop():
            return None, scored
        d = max(data_p(g) for g in groups)
        if d >= best:
            continue
        p = len(groups)
        e = np.zeros((p, p))
        for j in range(p):
            for k in range(j + 1, p):
                e[j, k] = e[k, j] = edge(groups[j], groups[k])
        comm = d + 2.0 * best_path(e)[0]
        if comm < best:
            best, best_groups = comm, groups
    grid, _ = model.grid_for_partition([np.array(g) for g in best_groups])
    return grid, scored
