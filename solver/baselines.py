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
from typing import Callable

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


#: Samples drawn between two calls of ``keep_going`` (a call is a clock read; one
#: sample at 16 stages is a Held-Karp order, 15-30 ms, so every sample is asked).
CHECK_EVERY = 1


def _draw(samples: int, one: Callable[[], float], keep_going: Callable[[], bool] | None) -> np.ndarray:
    values = []
    for k in range(samples):
        if keep_going is not None and k % CHECK_EVERY == 0 and k and not keep_going():
            break
        values.append(one())
    return np.array(values, dtype=float)


def random_rank_maps(model: CostModel, samples: int, seed: int = 0,
                     keep_going: Callable[[], bool] | None = None) -> Distribution:
    """Scores of ``samples`` uniformly random rank maps, as launched.

    ``keep_going`` is asked every CHECK_EVERY samples; False ends the draw early (the
    samples drawn so far are kept, the same as the first ones of a full draw).
    """
    rng = np.random.default_rng([seed, 1])
    w = model.workload
    return Distribution(RANDOM_RANK_MAP, _draw(
        samples, lambda: model.score_grid(rng.permutation(model.n).reshape(w.d_dp, w.d_pp)).comm,
        keep_going))


def random_stage_groups(model: CostModel, samples: int, seed: int = 0,
                        keep_going: Callable[[], bool] | None = None) -> Distribution:
    """Scores of ``samples`` random partitions with exact matchings and pipeline order
    (``keep_going`` as in :func:`random_rank_maps`)."""
    rng = np.random.default_rng([seed, 2])
    w = model.workload

    def one() -> float:
        perm = rng.permutation(model.n).reshape(w.d_pp, w.d_dp)
        grid, _ = model.grid_for_partition(list(perm))
        return model.score_grid(grid).comm

    return Distribution(RANDOM_STAGE_GROUPS, _draw(samples, one, keep_going))
