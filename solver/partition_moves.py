"""Partition-level swaps evaluated with the exact inner solvers.

A swap of ``a`` (stage group A) and ``b`` (stage group B) can pay off only once the
matchings to the neighbouring groups, or the pipeline order, are re-solved; the
as-launched swap search (solver.localsearch) cannot see that. Here a candidate partition
is scored with exact matchings along the current pipeline order::

    Comm'(partition) = max_j DataP(C_j) + 2 * sum_s edge(C_order[s], C_order[s+1])

recomputing only what the swap touches: DataP of A and B (O(D_DP^2)) and the at most
four order edges adjacent to A and B (bottleneck matchings). Keeping the order
over-estimates the partition's Comm (the best order is no worse), so every accepted move
is a true improvement; an accepted partition is then polished (best order).
Candidates are pruned before any matching when the untouched terms alone reach the
current Comm, then when the touched edges' matching lower bounds (row and column minima)
reach it, and only then are the matchings solved, one at a time with an early exit.
Cost per candidate: O(D_DP^2) plus at most four matchings; a pass stops after 4 N exact
matchings, so on large instances it samples the critical devices' neighbourhood.

First improvement: the pass returns as soon as one swap lowers Comm.
"""

from __future__ import annotations

import numpy as np

from solver.cost import CostModel
from solver.matching import bottleneck_matching, matching_lower_bound

def _swap_data_p(t_dp, group_a, keep_a, sums_a, a, group_b, sums_b):
    """DataP of A and of B after swapping ``a`` with each ``b`` of B, for all b at once.

    With peer sums ``S``: in A the others become ``S[d] - T[d, a] + T[d, b]`` and ``b``
    gets ``sum_{d in A - a} T[b, d]``; in B the others become ``S[d] - T[d, b] + T[d, a]``
    and ``a`` gets ``sum_{d in B - b} T[a, d]``. O(R^2) for the R candidates.
    """
    others_a = group_a[keep_a]
    in_a = (sums_a[keep_a] - t_dp[others_a, a])[:, None] + t_dp[np.ix_(others_a, group_b)]
    b_in_a = t_dp[np.ix_(group_b, others_a)].sum(axis=1)
    dp_a = np.maximum(in_a.max(axis=0) if len(others_a) else -np.inf, b_in_a)
    block_b = t_dp[np.ix_(group_b, group_b)]  # [d, b]
    in_b = sums_b[:, None] - block_b + t_dp[group_b, a][:, None]
    np.fill_diagonal(in_b, -np.inf)
    a_row = t_dp[a, group_b]
    a_in_b = a_row.sum() - a_row
    dp_b = np.maximum(in_b.max(axis=0), a_in_b)
    return dp_a, dp_b


def partition_pass(model: CostModel, grid: np.ndarray, candidates: list[int],
                   *, max_evals: int, should_stop) -> tuple[np.ndarray | None, int]:
    """One first-improvement pass: swap each device of ``candidates`` with every device
    of another stage group.

    ``grid`` must be polished (its columns in pipeline order), so the current order is
    ``0 .. P-1``. Returns the improved partition's grid (polished) or ``None``, and the
    number of candidates scored.
    """
    t_pp, t_dp = model.t_pp, model.t_dp
    groups = model.partition_of(grid)
    p = len(groups)
    if p < 2:
        return None, 0
    # edges along the current order; edge s joins groups s and s + 1
    edges = np.array([bottleneck_matching(t_pp[np.ix_(groups[s], groups[s + 1])])[0] for s in range(p - 1)])
    sums = [t_dp[np.ix_(g, g)].sum(axis=1) for g in groups]  # peer sums inside each group
    dps = np.array([s.max() for s in sums])
    pipe = float(edges.sum())
    current = float(dps.max()) + 2.0 * pipe
    tolerance = 1e-12 * abs(current)
    where = {int(d): (s, i) for s, g in enumerate(groups) for i, d in enumerate(g)}
    seen: set[int] = set()
    evals = 0
    solved = 0  # exact matchings solved; capped so one pass stays O(N) matchings
    cap = 4 * model.n
    for a in (d for d in candidates if not (d in seen or seen.add(d))):
        ga, ia = where[a]
        group_a = groups[ga]
        keep_a = np.arange(len(group_a)) != ia
        for gb in range(p):
            if gb == ga:
                continue
            touched = sorted({e for g in (ga, gb) for e in (g - 1, g) if 0 <= e < p - 1})
            base_pipe = pipe - float(edges[touched].sum())
            rest = np.delete(dps, [ga, gb])
            rest_max = float(rest.max()) if rest.size else 0.0
            if rest_max + 2.0 * base_pipe >= current - tolerance:
                continue
            group_b = groups[gb]
            dp_a, dp_b = _swap_data_p(t_dp, group_a, keep_a, sums[ga], a, group_b, sums[gb])
            lower = np.maximum(np.maximum(dp_a, dp_b), rest_max) + 2.0 * base_pipe
            if evals >= max_evals or should_stop():
                return None, evals
            evals += len(group_b)
            for ib in np.flatnonzero(lower < current - tolerance):
                b = int(group_b[ib])
                new = list(groups)
                new[ga] = np.where(group_a == a, b, group_a)
                new[gb] = np.where(group_b == b, a, group_b)
                blocks = [t_pp[np.ix_(new[e], new[e + 1])] for e in touched]
                floors = [matching_lower_bound(block) for block in blocks]
                value = float(lower[ib]) + 2.0 * sum(floors)
                for block, floor in zip(blocks, floors):
                    if value >= current - tolerance:
                        break
                    value += 2.0 * (bottleneck_matching(block)[0] - floor)
                    solved += 1
                if solved >= cap and value >= current - tolerance:
                    return None, evals
                if value < current - tolerance:
                    polished, _ = model.grid_for_partition(new)
                    return polished, evals
    return None, evals
