"""Segment rebalancing: equal component vectors across a run in one move, and runs gathered."""

import numpy as np

from solver.cost import CostModel
from solver.rebalance import levels, rebalance
from solver_oracles import tiered_model
from solver.workload import Workload


def _two_sites(d_pp=4, d_dp=4, seed=0, first=None):
    """Two sites (of ``first`` devices and the rest; 8 and 8 by default); links inside a
    site cheap, between sites dear (T_pp and T_dp)."""
    n = d_pp * d_dp
    first = n // 2 if first is None else first
    return _sites([first, n - first], d_pp, d_dp, pp=(0.1, 3.0), dp=(0.05, 0.4), seed=seed)


def _sites(sizes, d_pp, d_dp, pp=(0.1, 1.0), dp=(0.05, 5.0), seed=0):
    """Sites of ``sizes`` devices; ``pp`` and ``dp``: (inside a site, between sites)."""
    site = np.repeat(np.arange(len(sizes)), sizes)
    one = np.zeros(len(site), dtype=int)  # one region: "between groups of a region" is every cross-site pair
    tiers = [(inside, between, between) for inside, between in (pp, dp)]
    return tiered_model(site, one, tiers, (0.9, 1.1), d_pp, d_dp, seed), site


def _only_with(monkeypatch, flag, model, grid, lv, before, **kw):
    """``rebalance`` (with ``kw``) finds nothing with ``flag`` off and an improvement with
    it on; returns the improved ``(grid, Comm)`` (checked against a rescoring)."""
    import solver.rebalance as rb

    monkeypatch.setattr(rb, flag, False)
    assert rebalance(model, grid, lv, before, np.random.default_rng(0), **kw) is None
    monkeypatch.setattr(rb, flag, True)
    out = rebalance(model, grid, lv, before, np.random.default_rng(0), **kw)
    assert out is not None
    new, comm, _ = out
    assert comm == model.score_grid(new).comm < before
    return new, comm


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


def test_a_run_that_cannot_split_evenly_trades_with_the_group_beside_it(monkeypatch):
    """Sites of 6 and 10: groups (2,2), (2,2), (1,3), (1,3). No run's counts divide
    evenly except runs already equal, so equal vectors alone find nothing; groups 1-3
    take (2,2) each and hand the rest to group 0, which becomes (0,4): one dear edge
    fewer."""
    model, site = _two_sites(first=6)
    a, b = list(range(6)), list(range(6, 16))
    cols = [a[0:2] + b[0:2], a[2:4] + b[2:4], a[4:5] + b[4:7], a[5:6] + b[7:10]]
    grid = model.grid_for_partition(model.partition_of(np.array(cols).T))[0]
    before = model.score_grid(grid).comm
    new, _ = _only_with(monkeypatch, "ANCHORED", model, grid, levels(model)[:1], before)
    counts = sorted(np.bincount(site[new[:, s]], minlength=2).tolist() for s in range(4))
    assert counts == [[0, 4], [2, 2], [2, 2], [2, 2]]


def test_a_balanced_grid_is_left_alone():
    model, _ = _two_sites()
    a, b = list(range(8)), list(range(8, 16))
    grid = np.array([a[2 * k:2 * k + 2] + b[2 * k:2 * k + 2] for k in range(4)]).T
    grid = model.grid_for_partition(model.partition_of(grid))[0]
    fun = model.score_grid(grid).comm
    # the site level only: finer levels split the sites by the noise, unevenly
    assert rebalance(model, grid, levels(model)[:1], fun, np.random.default_rng(0)) is None


def test_rebalance_stops_when_asked():
    model, _ = _two_sites()
    a, b = list(range(8)), list(range(8, 16))
    grid = np.array([a[0:2] + b[0:2], a[2:4] + b[2:4], a[4:7] + b[4:5], a[7:8] + b[5:8]]).T
    fun = model.score_grid(grid).comm
    assert rebalance(model, grid, levels(model), fun, np.random.default_rng(0), stop=lambda: True) is None


def test_gathered_counts_fill_whole_groups_largest_component_first():
    from solver.rebalance import _gathered

    vec = np.array([[2, 1, 1], [2, 1, 1], [2, 1, 1], [2, 1, 1]])
    out = _gathered(vec)
    assert sorted(map(tuple, out.tolist())) == [(0, 0, 4), (0, 4, 0), (4, 0, 0), (4, 0, 0)]
    assert (out.sum(axis=0) == vec.sum(axis=0)).all() and (out.sum(axis=1) == 4).all()
    # counts that do not fill whole groups: one group mixes the remainders
    mixed = _gathered(np.array([[3, 1], [2, 2], [1, 3]]))
    assert sorted(map(tuple, mixed.tolist())) == [(0, 4), (2, 2), (4, 0)]
    # a group keeps the dealt vector closest to its own
    assert _gathered(np.array([[0, 4], [3, 1], [3, 1]])).tolist()[0] == [0, 4]


def test_a_mixed_run_is_gathered_when_its_datap_rules(monkeypatch):
    """Sites of 8, 4 and 4 devices, every group holding (2, 1, 1): DataP between sites is
    dear (5 against 0.05) and rules Comm; no single swap lowers the largest group's DataP,
    and the vectors are already equal, so rebalancing alone finds nothing. Gathered, the
    groups are (4, 0, 0) x 2, (0, 4, 0), (0, 0, 4): two dear pipeline edges (1.0) instead
    of DataP over 10."""
    model, site = _sites([8, 4, 4], d_pp=4, d_dp=4)
    a, b, c = list(range(8)), list(range(8, 12)), list(range(12, 16))
    cols = [a[2 * k:2 * k + 2] + [b[k], c[k]] for k in range(4)]
    grid = model.grid_for_partition(model.partition_of(np.array(cols).T))[0]
    before = model.score_grid(grid).comm
    assert before > 10
    lv = [site.astype(np.int64)]  # the sites as the one level (finer ones split them by noise)
    new, comm = _only_with(monkeypatch, "GATHER", model, grid, lv, before)
    assert sorted(new.ravel().tolist()) == list(range(16))
    assert comm < 5
    counts = sorted(tuple(np.bincount(site[new[:, s]], minlength=3).tolist()) for s in range(4))
    assert counts == [(0, 0, 4), (0, 4, 0), (4, 0, 0), (4, 0, 0)]


def _regions_of_hosts(hosts, regions, d_pp, d_dp, seed=0):
    """Hosts of ``hosts`` devices in ``regions[h]``; T_pp 0.1 / 1 / 10 and T_dp 0.05 /
    0.5 / 5 inside a host / between hosts of a region / between regions (x [0.95, 1.05])."""
    host = np.repeat(np.arange(len(hosts)), hosts)
    reg = np.array([regions[h] for h in host])
    return tiered_model(host, reg, ((0.1, 1.0, 10.0), (0.05, 0.5, 5.0)), (0.95, 1.05), d_pp, d_dp, seed), host, reg


def test_the_fine_level_is_the_hosts():
    from solver.rebalance import fine_level

    model, host, _ = _regions_of_hosts([4, 5, 4, 5], [0, 0, 1, 1], d_pp=9, d_dp=2)
    lab = fine_level(model)
    assert lab is not None and len(set(lab.tolist())) == 4
    assert all(((lab == lab[i]) == (host == host[i])).all() for i in range(model.n))
    # every link alike: no clear level
    flat = CostModel(np.ones((8, 8)) - np.eye(8), np.ones((8, 8)) - np.eye(8), Workload(4, 2, 1.0, 1.0))
    assert fine_level(flat) is None


def test_split_runs_deal_equal_vectors_to_two_sub_runs():
    from solver.rebalance import _split_runs

    vec = np.array([[1, 0, 0, 1], [1, 0, 0, 1], [1, 0, 0, 1], [1, 0, 0, 1], [0, 1, 0, 1],
                    [0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 0]])
    for k1 in range(1, 9):
        for t in _split_runs(vec, k1):
            assert (t.sum(axis=0) == vec.sum(axis=0)).all() and (t.sum(axis=1) == 2).all()
            assert (t[:k1] == t[0]).all() and (t[k1:] == t[k1]).all()
            assert (t != vec).any()
    # hosts 4 / 5 / 4 / 5 over 4 + 5 groups: the first sub-run takes hosts 0 and 2
    assert [t.tolist() for t in _split_runs(vec, 4)][0] == [[1, 0, 1, 0]] * 4 + [[0, 1, 0, 1]] * 5
    assert _split_runs(np.array([[1, 1]] * 3), 1) == []  # already one vector: nothing else deals


def test_a_run_whose_pipelines_change_hosts_apart_is_split(monkeypatch):
    """Two regions of two hosts each (4 and 5 devices); every group holds one device of
    each region, so each pipeline stays in its region. A descent ends where one pipeline
    changes host inside the run at another edge than the other (two dear edges), and
    neither rebalancing nor gathering at the region level moves it; dealt into a sub-run
    of 4 and one of 5 groups with one host vector each, both pipelines change host at
    the same edge."""
    from solver.descent import Effort, descend

    model, host, reg = _regions_of_hosts([4, 5, 4, 5], [0, 0, 1, 1], d_pp=9, d_dp=2, seed=1)
    rng = np.random.default_rng(1)
    grid = np.vstack([rng.permutation(np.flatnonzero(reg == 0)), rng.permutation(np.flatnonzero(reg == 1))])
    state = descend(model, grid, rng, Effort(10**6))
    grid, before = state.grid, float(state.score)
    again = descend(model, grid, np.random.default_rng(2), Effort(10**6))
    assert float(again.score) == before  # a local optimum of the descent
    regions = [reg.astype(np.int64)]
    new, comm = _only_with(monkeypatch, "SPLIT", model, grid, regions, before,
                           split_labels=host.astype(np.int64))
    assert comm < before - 1.0
    assert sorted(new.ravel().tolist()) == list(range(model.n))
    dear = [s for s in range(8) if (host[new[:, s]] != host[new[:, s + 1]]).any()]
    assert len(dear) == 1  # both pipelines change host at one edge


def test_gathering_keeps_a_component_that_fills_whole_groups_whole():
    from solver.rebalance import _gathered

    # components a, b, c over five groups of 4: b's eight devices fill two groups, and
    # only the remainders of a and c share one (dealt largest first, b would be split)
    vec = np.array([[4, 0, 0], [2, 2, 0], [2, 2, 0], [1, 2, 1], [1, 2, 1]])
    out = _gathered(vec)
    assert sorted(map(tuple, out.tolist())) == [(0, 4, 0), (0, 4, 0), (2, 0, 2), (4, 0, 0), (4, 0, 0)]


#: A 10 s walk's result on the suite's 64-GPU 16 x 4 instance (draw 0), 38.23 s: the
#: eight GPUs of the region of hosts h09 and h10 spread two a group over four groups
#: with the leftovers of two other regions. Gathered (those eight as two whole groups,
#: the leftovers in one), it is worse until the region with the slow NIC host is also
#: dealt evenly over its hosts; both moves at once reach 35.1 s.
SPREAD_16X4 = [
    [7, 44, 2, 63, 26, 0, 55, 43, 28, 24, 35, 31, 40, 9, 15, 48],
    [12, 51, 30, 20, 21, 29, 17, 6, 60, 32, 27, 36, 11, 50, 61, 8],
    [38, 23, 58, 56, 3, 19, 37, 18, 25, 42, 34, 5, 4, 62, 46, 47],
    [57, 14, 53, 10, 49, 33, 45, 52, 54, 16, 39, 22, 1, 13, 59, 41],
]


def test_a_gathered_run_is_followed_by_a_fine_rebalance(monkeypatch):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from hierarchical import suite_instance

    from solver.rebalance import fine_level

    _, model = suite_instance("h64-16x4", 0)
    grid = np.array(SPREAD_16X4)
    before = model.score_grid(grid).comm
    assert 38.0 < before < 38.5
    new, comm = _only_with(monkeypatch, "FOLLOW", model, grid, levels(model), before,
                           split_labels=fine_level(model))
    assert comm < before - 2.0
    assert sorted(new.ravel().tolist()) == list(range(64))


def test_compiled_redeal_matches_the_python_greedy(monkeypatch):
    """solver/redeal.c deals every candidate segment into the same groups as the Python
    greedy and scores them the same (the sums' order aside; random costs, so no two are
    equal in exact arithmetic): on random layouts of a three-site fabric, every segment
    redealt to its gathered, equal-split and anchored (either side) count vectors, at
    every level and the sites' own labels. The Python greedy is turned off inside
    ``redealt``, so every answer there is the compiled one."""
    import pytest

    import solver.rebalance as rb
    from solver import native
    from solver.rebalance import _anchored, _counts, _gathered, _Scorer, _split_runs

    if native.redealer() is None:
        pytest.skip(f"compiled kernels unavailable: {native.why_not()}")
    python_redeal = rb._redeal

    def refused(*a, **k):
        raise AssertionError("redealt fell back to Python")

    monkeypatch.setattr(rb, "_redeal", refused)
    model, site = _sites([10, 7, 7], 6, 4, seed=3)
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(4):
        grid = rng.permutation(model.n).reshape(4, 6)
        cols = [grid[:, s] for s in range(grid.shape[1])]
        scorer = _Scorer(model, cols)
        assert scorer._native is not None
        for lab in levels(model) + [site.astype(np.int64)]:
            vec = _counts(grid, lab)
            for a in range(5):
                for b in range(a + 1, 6):
                    total = vec[a:b + 1].sum(axis=0)
                    tries = [(a, b, _gathered(vec[a:b + 1]))]
                    tries += [(a, b, t) for k1 in range(1, b - a + 1) for t in _split_runs(vec[a:b + 1], k1)]
                    if a:
                        tries += [(a - 1, b, t) for t in _anchored(total, b - a + 1, vec[a - 1])]
                    if b + 1 < 6:
                        tries += [(a, b + 1, t[np.r_[1:len(t), 0]]) for t in _anchored(total, b - a + 1, vec[b + 1])]
                    for lo, hi, t in tries:
                        comm, new = scorer.redealt(lo, hi, lab, t)
                        want = cols[:lo] + python_redeal(model.t_dp, cols[lo:hi + 1], lab, t) + cols[hi + 1:]
                        assert all(np.array_equal(x, y) for x, y in zip(new, want))
                        assert comm == pytest.approx(scorer.comm(want, lo, hi), rel=1e-12)
                        assert sorted(np.concatenate(new).tolist()) == list(range(model.n))
                        assert np.array_equal(_counts(np.stack(new, axis=1), lab)[lo:hi + 1], t)
                        checked += 1
    assert checked > 200
