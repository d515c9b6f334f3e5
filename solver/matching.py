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

Notes
-----
O(n^2 log n) to sort plus O(log(n^2)) Hopcroft-Karp runs of O(n^2.5) each: polynomial.

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


def _perfect_matching(feasible: np.ndarray) -> np.ndarray | None:
    """Row -> column perfect matching of the boolean graph, or None if none exists."""
    if not feasible.any(axis=1).all() or not feasible.any(axis=0).all():
        return None
    match = maximum_bipartite_matching(csr_matrix(feasible), perm_type="column")
    return None if (match < 0).any() else match


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
    floor = max(c.min(axis=1).max(), c.min(axis=0).max())
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
