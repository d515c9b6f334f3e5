"""Block starts: a device order cut into runs of stage groups, pipelines local in each run.

A topology start (solver.search) cuts one device order ``o`` into a grid in one of two
ways: *pipelines local* (each pipeline on ``D_PP`` consecutive devices, so every stage
group spans the whole order: every region) or *stage groups local* (each group on
``D_DP`` consecutive devices: region-pure groups, pipelines that cross every region).
A *block layout* lies between them. A composition ``b_1 + ... + b_m = D_PP`` cuts ``o``
into consecutive runs of ``b_k D_DP`` devices; run ``k`` holds stage groups
``B_k .. B_k + b_k - 1`` (``B_k = b_1 + ... + b_{k-1}``) laid out pipelines local inside
the run (``run.reshape(D_DP, b_k)``): a group then spans only its run's part of the
order, say two regions whose devices fill three groups, and its pipelines stay inside
those regions until the run ends. ``b = (D_PP)`` is the pipelines-local layout and
``(1, ..., 1)`` the stage-groups-local one.

Choice. Every composition with at least two runs and at least one run of two or more
groups (``2^(D_PP - 1) - 2`` of them; fewest runs first, at most BLOCK_MOST) is scored
by the proxy

    max_k DataP(run k) + 2 (sum_k inner(run k) + sum_k joint(run k, run k + 1))

where ``DataP(run)`` is the largest DataP of its groups, ``inner(run)`` the sum of the
bottleneck matchings between its consecutive groups and ``joint`` the bottleneck
matching between a run's last group and the next run's first: the run's Comm in order
as laid, with exact matchings but without re-ordering the groups. The groups of a run
depend only on where it starts and its length, so every matching is computed once:
O(D_PP^3) bottleneck matchings of ``D_DP x D_DP`` (solver.matching), then O(D_PP) table
reads per composition. The best composition of each order becomes one start; the
search polishes it (exact matchings, best pipeline order) like the other starts.

Why. The best layouts of the hierarchical suite instances are often of this kind: on
the draw-9 192-GPU 8 x 24 instance (52.0-52.9 s at ``--time-limit 10``) two regions of
75 devices share three stage groups and the other two regions five, every pipeline
staying inside one pair of regions but at the joint. Polished, the best block start is
far below every plain start on several suite instances (draw-0 12 x 8: 48.3 s against
68.6 s; draw-5 12 x 8: 52.4 against 62.1 s; draw-9 10 x 8: 17.4 against 27.6 s), so
the anytime curve starts lower. Measured with ``benchmarks/`` in one session (2
workers, each instance with and without, one after the other): at ``--time-limit 2``,
seeds 0-2, 16 x 4, 10 x 8, 12 x 8 and 8 x 24 of draws 0, 1, 5 and 9, the mean Comm was
lower on 12 of 16 (median -0.9%, mean -0.6%; 16 x 4 draw 0 36.82 -> 34.80 s, 10 x 8
draw 9 16.39 -> 15.80 s; 8 x 24 draw 5 39.90 -> 42.54 s, one seed at 48.3 s, and draw
1 46.53 -> 48.30 s the worst); at ``--time-limit 10``, seeds 0-4, the seven instances
of draws 3, 5 and 9, within noise (mean change -0.04%; 10 x 8 draw 5 25.37 -> 25.25 s,
8 x 24 draw 5 36.65 -> 36.46 s, 10 x 8 draw 3 41.77 -> 42.18 s, where seeds fall in two
basins either way). The tables cost 4-250 ms per solve on the suite (16 x 4: 250 ms).

Only up to BLOCK_MAX_N devices (the matchings grow as ``D_DP^2`` to ``D_DP^3`` each) and
from ``D_PP >= 3`` (for two stages the two plain layouts are every composition).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from solver.matching import bottleneck_matching

#: Largest fabric given block starts: the tables cost O(D_PP^3) matchings of D_DP x D_DP.
BLOCK_MAX_N = 512
#: Deepest pipeline given block starts (its runs cost up to D_PP^3 / 6 matchings).
BLOCK_MAX_P = 16
#: Most compositions scored per order, fewest runs first: every one up to 13 stages
#: (4 094), at 16 stages those of up to five runs and part of the six-run ones.
BLOCK_MOST = 4096


def run_groups(order: np.ndarray, d_dp: int, start: int, length: int) -> list[np.ndarray]:
    """The stage groups of a run of ``length`` groups starting at group ``start``:
    ``order[start D_DP : (start + length) D_DP]`` laid pipelines local, column by column."""
    run = np.asarray(order[start * d_dp:(start + length) * d_dp]).reshape(d_dp, length)
    return [run[:, j].copy() for j in range(length)]


def block_grid(order: np.ndarray, d_dp: int, parts: tuple[int, ...]) -> np.ndarray:
    """The ``D_DP x D_PP`` grid of composition ``parts`` over ``order`` (module text)."""
    cols, start = [], 0
    for length in parts:
        cols += run_groups(order, d_dp, start, length)
        start += length
    return np.stack(cols, axis=1)


def compositions(p: int):
    """Every composition of ``p`` with at least two parts and one part above 1, as
    tuples, in a fixed order. O(2^p)."""
    for k in range(2, p):  # k parts
        for cuts in combinations(range(1, p), k - 1):
            bounds = (0, *cuts, p)
            yield tuple(bounds[i + 1] - bounds[i] for i in range(k))


class _Tables:
    """The proxy's pieces for one order, each computed once (module text)."""

    def __init__(self, model, order: np.ndarray) -> None:
        self.model, self.order = model, np.asarray(order)
        self.d_dp = model.workload.d_dp
        self._runs: dict[tuple[int, int], tuple[float, float, np.ndarray, np.ndarray]] = {}
        self._joints: dict[tuple[int, int, int], float] = {}

    def _edge(self, a: np.ndarray, b: np.ndarray) -> float:
        return bottleneck_matching(self.model.t_pp[np.ix_(a, b)])[0]

    def run(self, start: int, length: int) -> tuple[float, float, np.ndarray, np.ndarray]:
        """``(DataP, inner, first group, last group)`` of a run."""
        key = (start, length)
        if key not in self._runs:
            groups = run_groups(self.order, self.d_dp, start, length)
            data_p = float(self.model.peer_sums(np.stack(groups, axis=1)).max())
            inner = sum(self._edge(groups[j], groups[j + 1]) for j in range(length - 1))
            self._runs[key] = (data_p, inner, groups[0], groups[-1])
        return self._runs[key]

    def joint(self, start: int, length: int, nxt: int) -> float:
        """The matching between run (start, length)'s last group and the first group of
        the run of ``nxt`` groups that follows it."""
        key = (start, length, nxt)
        if key not in self._joints:
            self._joints[key] = self._edge(self.run(start, length)[3], self.run(start + length, nxt)[2])
        return self._joints[key]

    def proxy(self, parts: tuple[int, ...]) -> float:
        data_p, path, start = 0.0, 0.0, 0
        for k, length in enumerate(parts):
            d, inner, _, _ = self.run(start, length)
            data_p = max(data_p, d)
            path += inner
            if k + 1 < len(parts):
                path += self.joint(start, length, parts[k + 1])
            start += length
        return data_p + 2.0 * path


def best_block(model, order: np.ndarray, stop=lambda: False) -> tuple[tuple[int, ...], np.ndarray] | None:
    """The composition of lowest proxy over ``order`` and its grid; None where block
    starts do not apply (module text) or ``stop()`` turned true before one was scored."""
    w = model.workload
    if model.n > BLOCK_MAX_N or not 3 <= w.d_pp <= BLOCK_MAX_P:
        return None
    tables = _Tables(model, order)
    best: tuple[float, tuple[int, ...]] | None = None
    for count, parts in enumerate(compositions(w.d_pp)):
        if count >= BLOCK_MOST or (count % 64 == 0 and stop()):
            break
        value = tables.proxy(parts)
        if best is None or value < best[0]:
            best = (value, parts)
    if best is None:
        return None
    return best[1], block_grid(order, w.d_dp, best[1])
