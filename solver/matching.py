"""Bottleneck perfect matching between two equal-sized device groups.

Problem
-------
Given an ``n x n`` cost matrix ``C``, find a permutation ``p`` minimising
``max_i C[i, p(i)]`` (min-max, not the min-sum of the assignment problem).

Method
------
Threshold search: the optimum is one of the matrix's values. For a threshold ``t`` the
bipartite graph ``{(i, j) : C[i, j] <= t}`` has a perfect matching iff ``t`` is feasible,
and feasibility is monotone in ``t``, so a binary search over the sorted distinct values
finds the smallest feasible one. Each feasibility test is one Hopcroft-Karp maximum
matching (``scipy.sparse.csgraph.maximum_bipartite_matching``).

The search starts at the lower bound ``max(max_i min_j C, max_j min_i C)`` (every row
and every column must take some entry), which on geographic fabrics is usually feasible
at once.

Compiled
--------
Where the compiled kernels build (solver.native), ``bottleneck_match`` in
solver/matching.c answers instead: rows are matched one at a time, each along the
augmenting path whose largest new entry is smallest (a bottleneck Dijkstra over
alternating paths), and the answer is the largest entry any path needed. O(n^3). On a
random 24 x 24 matrix one call (with its ctypes overhead, about 5 us) takes 18 us against
116 us for the search below; on the 192-GPU suite's groups, where the search needs
several thresholds, about 1 ms in Python. One segment-rebalancing pass there took 1.57 s
with the Python search and 0.90 s with this one (0.80 s with the rebalancing's own
changes of the same release). The value is the same; where several
matchings reach it, the two may return different ones.

Notes
-----
O(n^2 log n) to sort plus O(log(n^2)) Hopcroft-Karp runs of O(n^2.5) each: polynomial.
Feasibility uses Kuhn's augmenting paths up to ``KUHN_MAX`` devices. Groups of at most
``PERMUTATION_MAX`` devices are matched by scoring all n! <= 120
permutations in one array operation instead (same answer, less overhead).

References
----------
Gross, O. "The bottleneck assignment problem." RAND P-1630 (1959).
Hopcroft, J. and Karp, R. "An n^5/2 algorithm for maximum matchings in bipartite graphs."
SIAM J. Comput. 2(4), 1973.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_bipartite_matching

from solver import native


#: Up to this size the feasibility test runs Kuhn's augmenting paths in plain Python;
#: building a scipy sparse graph costs more than the whole search on such small groups.
KUHN_MAX = 24


def _kuhn(feasible: np.ndarray) -> np.ndarray | None:
    """Perfect matching by augmenting paths (Kuhn 1955). O(n E)."""
    n = feasible.shape[0]
    flat = np.nonzero(feasible)[1].tolist()  # one nonzero() instead of one per row
    adj, at = [], 0
    for count in feasible.sum(axis=1).tolist():
        adj.append(flat[at:at + count])
        at += count
    owner = [-1] * n  # column -> row

    def augment(i: int, seen: list[bool]) -> bool:
        for j in adj[i]:
            if not seen[j]:
                seen[j] = True
                if owner[j] < 0 or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(n):
        if not augment(i, [False] * n):
            return None
    match = np.empty(n, dtype=int)
    match[owner] = np.arange(n)
    return match


def _perfect_matching(feasible: np.ndarray) -> np.ndarray | None:
    """Row -> column perfect matching of the boolean graph, or None if none exists."""
    if not feasible.any(axis=1).all() or not feasible.any(axis=0).all():
        return None
    if feasible.shape[0] <= KUHN_MAX:
        return _kuhn(feasible)
    n = feasible.shape[0]
    rows, cols = np.nonzero(feasible)
    indptr = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    # built from (data, indices, indptr): a third of the cost of converting the dense array
    graph = csr_matrix((np.ones(len(cols), dtype=bool), cols.astype(np.int32), indptr), shape=(n, n))
    match = maximum_bipartite_matching(graph, perm_type="column")
    return None if (match < 0).any() else match


#: Up to this size every permutation is scored in one array operation (n! rows): on the
#: small groups that dominate the search, cheaper than building sparse graphs.
PERMUTATION_MAX = 5
_PERMUTATIONS: dict[int, np.ndarray] = {}


def _by_permutations(c: np.ndarray) -> tuple[float, list[int]]:
    n = c.shape[0]
    if n not in _PERMUTATIONS:
        import itertools

        _PERMUTATIONS[n] = np.array(list(itertools.permutations(range(n))), dtype=np.intp)
    perms = _PERMUTATIONS[n]
    worst = c[np.arange(n), perms].max(axis=1)
    best = int(worst.argmin())
    return float(worst[best]), perms[best].tolist()


def matching_lower_bound(cost: np.ndarray) -> float:
    """``max(max_i min_j C, max_j min_i C)``: no perfect matching can do better. O(n^2)."""
    c = np.asarray(cost, dtype=float)
    if c.size == 0:
        return 0.0
    return float(max(c.min(axis=1).max(), c.min(axis=0).max()))


def bottleneck_matching(cost: np.ndarray) -> tuple[float, list[int]]:
    """Minimise the largest matched cost over perfect matchings of a square matrix.

    Parameters
    ----------
    cost : (n, n) array_like of finite floats.

    Returns
    -------
    value : float
        ``min over permutations p of max_i cost[i, p[i]]``.
    matching : list of int
        An optimal ``p``: row ``i`` is matched to column ``matching[i]``.
    """
    c = np.asarray(cost, dtype=float)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError(f"cost: must be a square matrix, got shape {c.shape}")
    n = c.shape[0]
    if n == 0:
        return 0.0, []
    if not np.isfinite(c).all():
        raise ValueError("cost: must be finite")
    compiled = native.matcher()
    if compiled is not None:
        c = np.ascontiguousarray(c)
        match = np.empty(n, dtype=np.int64)
        value = compiled(n, c.ctypes.data, match.ctypes.data)
        if not np.isnan(value):  # NaN: out of memory there; the search below answers
            return float(value), match.tolist()
    if n <= PERMUTATION_MAX:
        return _by_permutations(c)
    floor = matching_lower_bound(c)
    values = np.unique(c[c >= floor])
    lo, hi = 0, len(values) - 1
    best = _perfect_matching(c <= values[lo])
    if best is not None:
        return float(values[lo]), best.tolist()
    lo += 1  # values[0] is infeasible; values[-1] (everything allowed) always is
    while lo < hi:
        mid = (lo + hi) // 2
        found = _perfect_matching(c <= values[mid])
        if found is None:
            lo = mid + 1
        else:
            hi, best = mid, found
    if best is None:  # hi never moved: the answer is the top value
        best = _perfect_matching(c <= values[lo])
    return float(values[lo]), best.tolist()


def is_perfect_matching(matching: list[int] | np.ndarray, n: int) -> bool:
    """True when ``matching`` is a permutation of ``range(n)`` (a validator for tests)."""
    m = list(matching)
    return len(m) == n and sorted(m) == list(range(n))
