"""Block starts: compositions, their grids, the proxy against a term-by-term oracle."""

import sys
from itertools import permutations
from pathlib import Path

import numpy as np
import pytest

import solver.blocks as blocks
from solver.blocks import best_block, block_grid, compositions
from solver_oracles import random_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _bottleneck(cost: np.ndarray) -> float:
    """Bottleneck perfect matching by trying every permutation (small sizes only)."""
    n = cost.shape[0]
    return min(max(cost[i, q[i]] for i in range(n)) for q in permutations(range(n)))


def _proxy_oracle(model, grid: np.ndarray) -> float:
    """The groups in grid order: largest DataP plus twice the consecutive matchings."""
    cols = [grid[:, s] for s in range(grid.shape[1])]
    data_p = max(model.t_dp[np.ix_(c, c)].sum(axis=1).max() for c in cols)
    path = sum(_bottleneck(model.t_pp[np.ix_(a, b)]) for a, b in zip(cols, cols[1:]))
    return float(data_p + 2 * path)


@pytest.mark.parametrize("p", [3, 4, 5, 8])
def test_compositions_are_every_mixed_cut_once(p):
    found = list(compositions(p))
    assert len(found) == len(set(found)) == 2 ** (p - 1) - 2
    assert all(sum(c) == p and 2 <= len(c) < p for c in found)
    assert [len(c) for c in found] == sorted(len(c) for c in found)  # fewest runs first


def test_block_grid_runs_are_pipelines_local_and_the_ends_are_the_plain_layouts():
    order = np.random.default_rng(1).permutation(15)
    r, p = 3, 5
    assert np.array_equal(block_grid(order, r, (p,)), order.reshape(r, p))
    assert np.array_equal(block_grid(order, r, (1,) * p), order.reshape(p, r).T)
    grid = block_grid(order, r, (2, 3))
    assert sorted(grid.ravel().tolist()) == list(range(15))
    assert np.array_equal(grid[:, :2], order[:6].reshape(r, 2))
    assert np.array_equal(grid[:, 2:], order[6:].reshape(r, 3))


def test_the_chosen_composition_has_the_lowest_proxy_term_by_term():
    rng = np.random.default_rng(4)
    model = random_model(rng, 5, 3, clustered=True)
    order = rng.permutation(model.n)
    parts, grid = best_block(model, order)
    oracle = {c: _proxy_oracle(model, block_grid(order, 3, c)) for c in compositions(5)}
    assert oracle[parts] == pytest.approx(min(oracle.values()), rel=1e-12)
    assert np.array_equal(grid, block_grid(order, 3, parts))


def test_no_block_start_where_it_does_not_apply(monkeypatch):
    rng = np.random.default_rng(2)
    assert best_block(random_model(rng, 2, 4), np.arange(8)) is None  # two stages: nothing between
    model = random_model(rng, 4, 3)
    monkeypatch.setattr(blocks, "BLOCK_MAX_N", 11)
    assert best_block(model, np.arange(12)) is None
    monkeypatch.setattr(blocks, "BLOCK_MAX_N", 12)
    assert best_block(model, np.arange(12)) is not None
    assert best_block(model, np.arange(12), stop=lambda: True) is None


def test_a_block_start_beats_both_plain_layouts_on_a_hierarchical_fabric():
    """Draw-0 96-GPU 12 x 8 suite instance: polished, the best block start is far below
    every pipelines-local and stage-groups-local start (48.3 s against 68.6 s when
    measured); the search lists it among its starts."""
    from hierarchical import suite_instance  # benchmarks/
    from solver.orders import seed_orders_for
    from solver.search import _starts

    fabric, model = suite_instance("h96-12x8", 0)

    def polished(grid):
        return model.score_grid(model.grid_for_partition(model.partition_of(grid))[0]).comm

    starts = _starts(model, seed_orders_for(fabric))
    block = [polished(g) for name, g in starts if ": blocks " in name]
    plain = [polished(g) for name, g in starts if ": blocks " not in name and not name.startswith("structure:")]
    assert block and min(block) < 0.8 * min(plain)


def test_the_starts_stop_scoring_compositions_when_told():
    """Under a time limit the block tables stop at the starts' share of it: a stop that
    is true at once leaves the plain layouts only."""
    from solver.search import _starts

    rng = np.random.default_rng(3)
    model = random_model(rng, 5, 3, clustered=True)
    orders = [rng.permutation(model.n)]
    names = [name for name, _ in _starts(model, orders) if not name.startswith("structure:")]
    assert sum(": blocks " in n for n in names) == len(names) // 3
    assert not [n for n, _ in _starts(model, orders, stop=lambda: True) if ": blocks " in n]
