"""Random baselines: what a placement is worth without measuring the fabric.

- "random rank map": a uniformly random permutation of ranks, scored as launched.
- "random stage groups": a uniformly random partition into stage groups, then DT-FM's
  exact inner solvers (bottleneck matchings and best pipeline order). This is DT-FM's
  own random baseline, and the one the spec's 97.61 s median refers to.

Each sample costs one grid score (O(N D_DP)) or one full inner solve (O(D_PP^2)
bottleneck matchings plus the path solver).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.cost import CostModel

RANDOM_RANK_MAP = "random rank map"
RANDOM_STAGE_GROUPS = "random stage groups"


@dataclass(eq=False)
class Distribution:
    name: str
    values: np.ndarray

    @property
    def min(self) -> float:
        return float(self.values.min())

    @property
    def median(self) -> float:
        return float(np.median(self.values))

    @property
    def max(self) -> float:
        return float(self.values.max())

    def to_json(self) -> dict:
        return {"name": self.name, "samples": int(self.values.size), "min": self.min,
                "median": self.median, "max": self.max}


def random_rank_maps(model: CostModel, samples: int, seed: int = 0) -> Distribution:
    """Scores of ``samples`` uniformly random rank maps, as launched."""
    rng = np.random.default_rng([seed, 1])
    w = model.workload
    values = np.array([
        model.score_grid(rng.permutation(model.n).reshape(w.d_dp, w.d_pp)).comm
        for _ in range(samples)
    ])
    return Distribution(RANDOM_RANK_MAP, values)


def random_stage_groups(model: CostModel, samples: int, seed: int = 0) -> Distribution:
    """Scores of ``samples`` random partitions with exact matchings and pipeline order."""
    rng = np.random.default_rng([seed, 2])
    w = model.workload
    values = []
    for _ in range(samples):
        perm = rng.permutation(model.n).reshape(w.d_pp, w.d_dp)
        grid, _ = model.grid_for_partition(list(perm))
        values.append(model.score_grid(grid).comm)
    return Distribution(RANDOM_STAGE_GROUPS, np.array(values))
