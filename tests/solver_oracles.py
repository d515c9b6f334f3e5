"""Independent brute-force oracles for the placement engine (no shared code with solver/)."""

import itertools

import numpy as np

from solver.cost import CostModel
from solver.workload import Workload


def random_model(rng, d_pp, d_dp, *, clustered=False):
    """A random symmetric instance; ``clustered`` plants cheap regions like a geo fabric."""
    n = d_pp * d_dp
    if clustered:
        region = rng.integers(0, max(2, n // 4), n)
        base = np.where(region[:, None] == region[None, :], 0.2, 1.0)
        t_pp = base * rng.uniform(0.8, 1.2, (n, n))
        t_dp = base * rng.uniform(0.8, 1.2, (n, n)) * 0.3
    else:
        t_pp, t_dp = rng.random((n, n)), rng.random((n, n)) * 0.5
    t_pp, t_dp = (t_pp + t_pp.T) / 2, (t_dp + t_dp.T) / 2
    np.fill_diagonal(t_pp, 0.0)
    np.fill_diagonal(t_dp, 0.0)
    return CostModel(t_pp, t_dp, Workload(d_pp, d_dp, 1.0, 1.0))


def tiered_model(group, region, tiers, spread, d_pp, d_dp, seed=0):
    """Devices in groups (hosts, sites) of regions: for T_pp, then T_dp, the ``tiers``
    entry ``(inside a group, between groups of a region, between regions)``, each pair
    times a draw from ``uniform(*spread)``, made symmetric."""
    rng = np.random.default_rng(seed)
    n = len(group)
    mats = []
    for inside, near, far in tiers:
        t = np.where(group[:, None] == group[None, :], inside,
                     np.where(region[:, None] == region[None, :], near, far))
        t = t * rng.uniform(*spread, (n, n))
        t = (t + t.T) / 2
        np.fill_diagonal(t, 0)
        mats.append(t)
    return CostModel(mats[0], mats[1], Workload(d_pp, d_dp, 1.0, 1.0))


def comm_of_grid(t_pp, t_dp, grid):
    """Comm of a grid written out term by term from the spec's formulas."""
    r, p = grid.shape
    data_p = 0.0
    for s in range(p):
        col = grid[:, s]
        for d in col:
            data_p = max(data_p, sum(t_dp[d, e] for e in col if e != d))
    pipeline = 0.0
    for s in range(p - 1):
        pipeline += max(t_pp[grid[q, s], grid[q, s + 1]] for q in range(r))
    return data_p + 2 * pipeline


def _equal_partitions(items, size):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for others in itertools.combinations(rest, size - 1):
        group = (first,) + others
        remaining = [x for x in rest if x not in others]
        for tail in _equal_partitions(remaining, size):
            yield [group] + tail


def _orders(p, cache={}):
    if p not in cache:
        cache[p] = np.array(list(itertools.permutations(range(p))))
    return cache[p]


def brute_force_optimum(model):
    """min over partitions of max DataP + 2 * min path of min-max matchings, all by enumeration."""
    t_pp, t_dp = model.t_pp, model.t_dp
    w = model.workload
    p, r = w.d_pp, w.d_dp
    edge_cache = {}

    def edge(a, b):
        key = (a, b) if a < b else (b, a)
        if key not in edge_cache:
            edge_cache[key] = min(
                max(t_pp[a[i], b[perm[i]]] for i in range(r)) for perm in itertools.permutations(range(r))
            )
        return edge_cache[key]

    best = np.inf
    for groups in _equal_partitions(list(range(model.n)), r):
        data_p = max(max(sum(t_dp[d, e] for e in g if e != d) for d in g) for g in groups)
        if data_p >= best:
            continue
        if p == 1:
            best = min(best, data_p)
            continue
        e = np.array([[edge(a, b) if a != b else 0.0 for b in groups] for a in groups])
        orders = _orders(p)
        path = e[orders[:, :-1], orders[:, 1:]].sum(axis=1).min()
        best = min(best, data_p + 2 * path)
    return best
