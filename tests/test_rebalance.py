"""Segment rebalancing: equal component vectors across a run in one move."""

import numpy as np

from solver.cost import CostModel
from solver.rebalance import levels, rebalance
from solver.workload import Workload


def _two_sites(d_pp=4, d_dp=4, seed=0):
    """Two sites of 8; links inside a site cheap, between sites dear (T_pp and T_dp)."""
    rng = np.random.default_rng(seed)
    n = d_pp * d_dp
    site = np.repeat([0, 1], n // 2)
    same = site[:, None] == site[None, :]
    t_pp = np.where(same, 0.1, 3.0) * rng.uniform(0.9, 1.1, (n, n))
    t_dp = np.where(same, 0.05, 0.4) * rng.uniform(0.9, 1.1, (n, n))
    t_pp, t_dp = (t_pp + t_pp.T) / 2, (t_dp + t_dp.T) / 2
    np.fill_diagonal(t_pp, 0)
    np.fill_diagonal(t_dp, 0)
    return CostModel(t_pp, t_dp, Workload(d_pp, d_dp, 1.0, 1.0)), site


def test_levels_are_the_coarse_components():
    model, site = _two_sites()
    found = levels(model)
    assert found, "no level"
    first = found[0]
    assert len(set(first.tolist())) == 2
    assert all((first == first[0]) == (site == site[0]))


def test_an_unequal_run_is_rebalanced_in_one_move():
    """Groups with site counts (2,2), (2,2), (3,1), (1,3) pay dear edges inside the run;
    rebalanced, every group holds two of each site and every edge stays inside a site."""
    model, site = _two_sites()
    a, b = list(range(8)), list(range(8, 16))
    cols = [a[0:2] + b[0:2], a[2:4] + b[2:4], a[4:7] + b[4:5], a[7:8] + b[5:8]]
    grid = np.array(cols).T
    grid = model.grid_for_partition(model.partition_of(grid))[0]
    before = model.score_grid(grid).comm
    out = rebalance(model, grid, levels(model), before, np.random.default_rng(0))
    assert out is not None
    new, comm, nfev = out
    assert sorted(new.ravel().tolist()) == list(range(16))
    assert comm == model.score_grid(new).comm < before
    assert all(np.bincount(site[new[:, s]], minlength=2).tolist() == [2, 2] for s in range(4))
    assert nfev > 0


def test_a_balanced_grid_is_left_alone():
    model, _ = _two_sites()
    a, b = list(range(8)), list(range(8, 16))
    grid = np.array([a[2 * k:2 * k + 2] + b[2 * k:2 * k + 2] for k in range(4)]).T
    grid = model.grid_for_partition(model.partition_of(grid))[0]
    fun = model.score_grid(grid).comm
    assert rebalance(model, grid, levels(model), fun, np.random.default_rng(0)) is None


def test_rebalance_stops_when_asked():
    model, _ = _two_sites()
    a, b = list(range(8)), list(range(8, 16))
    grid = np.array([a[0:2] + b[0:2], a[2:4] + b[2:4], a[4:7] + b[4:5], a[7:8] + b[5:8]]).T
    fun = model.score_grid(grid).comm
    assert rebalance(model, grid, levels(model), fun, np.random.default_rng(0), stop=lambda: True) is None
