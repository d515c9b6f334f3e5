"""Batched incremental swap evaluation equals full re-scoring."""

import numpy as np
import pytest

from solver.localsearch import GridState
from solver_oracles import random_model


@pytest.fixture(params=["compiled", "numpy"])
def scorer(request, monkeypatch):
    """Both batch scorers: solver/tempering.c's swap_scores and the numpy one."""
    from solver import native

    if request.param == "numpy":
        monkeypatch.setattr(native, "swap_scorer", lambda: None)
    elif native.swap_scorer() is None:
        pytest.fail(f"the compiled kernels should build here: {native.why_not()}")
    return request.param


@pytest.mark.parametrize("d_pp, d_dp", [(1, 4), (4, 1), (2, 2), (3, 4), (5, 3), (4, 5)])
def test_swap_scores_equal_rescoring_every_swap(d_pp, d_dp, scorer):
    rng = np.random.default_rng(d_pp * 10 + d_dp)
    model = random_model(rng, d_pp, d_dp)
    grid = rng.permutation(model.n).reshape(d_dp, d_pp)
    # a grid handed over in column-major order (a transpose) is scored the same
    state = GridState(model, np.asfortranarray(grid) if d_pp == 3 else grid)
    for a in range(model.n):
        scores = state.swap_scores(a)
        for b in range(model.n):
            if b == a:
                assert scores[b] == np.inf
                continue
            g = grid.copy()
            g[grid == a], g[grid == b] = b, a
            assert scores[b] == pytest.approx(model.score_grid(g).comm, abs=1e-9)


def test_swap_keeps_running_sums_exact(scorer):
    rng = np.random.default_rng(3)
    model = random_model(rng, 4, 4)
    state = GridState(model, rng.permutation(16).reshape(4, 4))
    for _ in range(30):
        a, b = rng.choice(16, 2, replace=False)
        state.swap(int(a), int(b))
        assert state.score == pytest.approx(model.score_grid(state.grid).comm, abs=1e-9)
        c = int(rng.integers(16))  # the batch after a swap sees the updated state
        g = state.grid.copy()
        g[state.grid == a], g[state.grid == c] = c, a
        if c != a:
            assert state.swap_scores(int(a))[c] == pytest.approx(model.score_grid(g).comm, abs=1e-9)


def test_partition_swap_data_p_equals_direct_computation():
    from solver.partition_moves import _swap_data_p

    rng = np.random.default_rng(4)
    model = random_model(rng, 3, 5)
    t = model.t_dp
    groups = [np.array(g) for g in rng.permutation(15).reshape(3, 5)]
    a_group, b_group = groups[0], groups[2]
    for ia, a in enumerate(a_group):
        keep = np.arange(5) != ia
        sums_a = t[np.ix_(a_group, a_group)].sum(axis=1)
        sums_b = t[np.ix_(b_group, b_group)].sum(axis=1)
        dp_a, dp_b = _swap_data_p(t, a_group, keep, sums_a, a, b_group, sums_b)
        for ib, b in enumerate(b_group):
            new_a = np.where(a_group == a, b, a_group)
            new_b = np.where(b_group == b, a, b_group)
            assert dp_a[ib] == pytest.approx(t[np.ix_(new_a, new_a)].sum(axis=1).max())
            assert dp_b[ib] == pytest.approx(t[np.ix_(new_b, new_b)].sum(axis=1).max())
