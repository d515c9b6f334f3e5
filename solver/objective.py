"""What the placement search needs from a cost model (a structural interface).

The search (solver.search, solver.descent, solver.anytime, solver.tempering, solver.workers)
only ever calls the methods below, so another objective — DT-FM's Comm plus a compute
or memory term for mixed GPU generations, as the spec's "extend the objective" asks —
slots in by providing them; ``solver.cost.CostModel`` is the DT-FM implementation and
``solver.localsearch.GridState`` its incremental evaluator.

An objective must be picklable (worker processes receive a copy) and deterministic.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np


class IncrementalState(Protocol):
    """A grid and what it takes to score swaps without rescoring from scratch."""

    grid: np.ndarray

    @property
    def score(self) -> float: ...

    def swap_scores(self, a: int) -> np.ndarray:
        """Objective after swapping ``a`` with each device (``inf`` at ``a``)."""

    def swap(self, a: int, b: int) -> None: ...

    def critical_devices(self) -> list[int]:
        """Devices that set the objective, most critical first (tried first)."""


class PlacementObjective(Protocol):
    """A cost model over placement grids of shape ``(D_DP, D_PP)``."""

    n: int
    t_pp: np.ndarray  #: used by the topology orders and the partition moves
    t_dp: np.ndarray

    def score_grid(self, grid: np.ndarray): ...

    def grid_for_partition(self, groups: Sequence[np.ndarray]) -> tuple[np.ndarray, bool]:
        """The best grid for a partition into stage groups, and whether it is exact."""

    def partition_of(self, grid: np.ndarray) -> list[np.ndarray]: ...

    def incremental(self, grid: np.ndarray) -> IncrementalState: ...
