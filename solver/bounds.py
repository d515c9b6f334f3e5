"""A valid lower bound on Comm for an instance, to report how far a placement may be.

Every device ``d`` sits in one stage group with ``D_DP - 1`` peers, so
``DataP >= max_d (sum of the D_DP - 1 smallest T_dp[d, d'], d' != d)``.

Pipeline: each of the ``D_DP`` pipelines is a path of ``D_PP`` distinct devices, and each
pipeline edge costs at least the largest of its links, hence at least their mean:
``Pipeline / 2 = sum_s max_r link(r, s) >= (1 / D_DP) sum_r sum_s link(r, s)``. The
pipelines together form a spanning forest of ``N - D_DP`` edges, which weighs at least
the minimum spanning forest with ``D_DP`` trees (Kruskal's first ``N - D_DP`` edges).
Also, every edge costs at least the smallest link, and the edge holding the device
whose nearest neighbour is farthest costs at least that distance:
``Pipeline / 2 >= max(forest / D_DP, nearest_max + (D_PP - 2) * min_link)``.

DataP and Pipeline bounded separately give ``Comm >= bound_DataP + bound_Pipeline``
(method "separate"), O(N^2) (a selection per row and the spanning tree). ``lower_bound`` then
tries the joint bound of solver.joint_bound, which couples the two through the
components of cheap links, within a time budget, and reports the larger value, the
method that produced it and the time taken.
"""

from __future__ import annotations

from dataclasses import dataclass

import time
from typing import Callable

import numpy as np
from solver.cost import CostModel
from solver.joint_bound import joint_bound
from solver.spanning import spanning_tree

SEPARATE = "separate: DataP and Pipeline bounded apart"
#: Relative difference below which the bound meets Comm (``Bound.gap``, ``Bound.above``).
ROUNDING = 1e-12
#: Seconds the joint bound may take when the caller gives no budget.
DEFAULT_BOUND_BUDGET_S = 0.5


@dataclass(frozen=True)
class Bound:
    """A lower bound on Comm; ``data_p`` and ``pipeline`` are the separate bounds."""

    value: float
    data_p: float
    pipeline: float
    method: str = SEPARATE
    elapsed_s: float = 0.0

    def gap(self, comm: float) -> float:
        """``(Comm - bound) / Comm``: the optimum lies at most this fraction below Comm
        (0, not -1e-16, where the bound meets Comm up to rounding: ROUNDING)."""
        g = (comm - self.value) / comm if comm > 0 else 0.0
        return g if g > ROUNDING else 0.0

    def above(self, comm: float) -> float:
        """``Comm / bound - 1``: Comm is at most this fraction above the optimum (0 where
        the bound meets Comm up to rounding, as ``gap``: not 2.2e-16 beside a gap of 0)."""
        if self.value <= 0:
            return float("inf")
        a = comm / self.value - 1.0
        return a if a > ROUNDING else 0.0


def bound_budget_s(time_limit: float | None) -> float:
    """Seconds for the joint bound within a solve: 0.5 s, or 5% of a time limit (0.2-10 s)."""
    return DEFAULT_BOUND_BUDGET_S if time_limit is None else min(10.0, max(0.2, 0.05 * time_limit))


def lower_bound(model: CostModel, time_budget_s: float = DEFAULT_BOUND_BUDGET_S,
                stop: Callable[[], bool] = lambda: False) -> Bound:
    """A lower bound on Comm over every placement: the better of the separate and the
    joint bound, the latter given ``time_budget_s`` seconds (0: separate only) unless
    ``stop()`` (a cancel) ends it sooner with what it has, still valid."""
    t0 = time.perf_counter()
    sep = separate_bound(model)
    value, method = sep.value, SEPARATE
    if time_budget_s > 0:
        joint, threshold = joint_bound(model, sep.pipeline, sep.data_p, time_budget_s, stop)
        if joint > value:
            value = joint
            method = (f"joint: pipeline edges below {threshold:.4g} s keep the stage groups' "
                      "component counts (solver.joint_bound)")
    return Bound(value, sep.data_p, sep.pipeline, method, time.perf_counter() - t0)


def separate_bound(model: CostModel) -> Bound:
    """The separate bound (module text) on Comm over every placement."""
    w = model.workload
    n = model.n
    apart = np.diag(np.full(n, np.inf))  # a device is not its own peer or neighbour
    data_p = 0.0
    if w.d_dp > 1:  # each row's D_DP - 1 smallest, by selection (O(N^2), not a sort)
        k = w.d_dp - 1
        rows = model.t_dp + apart
        rows.partition(k - 1, axis=1)
        data_p = float(rows[:, :k].sum(axis=1).max())
    pipeline = 0.0
    if w.d_pp > 1:
        nearest = (model.t_pp + apart).min(axis=1)
        per_edge = float(nearest.max()) + (w.d_pp - 2) * float(nearest.min())
        forest = spanning_tree(model).forest_weight(w.d_dp) / w.d_dp
        pipeline = 2.0 * max(per_edge, forest)
    return Bound(value=data_p + pipeline, data_p=data_p, pipeline=pipeline)
