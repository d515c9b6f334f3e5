"""The cost model and the rank-map contract."""

import numpy as np
import pytest

from solver.cost import CostModel, grid_from_rank_map, rank_map_from_grid
from solver.fabric import Fabric
from solver.workload import Workload
from solver_oracles import comm_of_grid, random_model


def test_rank_convention_rows_are_pipelines_columns_are_groups():
    grid = np.arange(12).reshape(3, 4)[:, ::-1]  # 3 replicas x 4 stages
    rank_map = rank_map_from_grid(grid)
    for r in range(3):
        for s in range(4):
            assert rank_map[grid[r, s]] == r * 4 + s
    assert np.array_equal(grid_from_rank_map(rank_map, 4, 3), grid)


@pytest.mark.parametrize("bad, why", [
    ([0, 1, 2], "expected 4 ranks"),
    ([0, 1, 1, 3], "not a permutation"),
    ([0, 1, 2, 4], "not a permutation"),
    (np.array([0.0, 1.0, 2.0, 3.0]), "whole numbers"),
])
def test_rank_map_validation(bad, why):
    with pytest.raises(ValueError, match=why):
        grid_from_rank_map(bad, 2, 2)


def test_score_matches_the_spec_formulas_term_by_term():
    rng = np.random.default_rng(2)
    for p, r in [(1, 4), (4, 1), (2, 3), (3, 3), (4, 2)]:
        model = random_model(rng, p, r)
        for _ in range(10):
            grid = rng.permutation(model.n).reshape(r, p)
            assert model.score_grid(grid).comm == pytest.approx(comm_of_grid(model.t_pp, model.t_dp, grid), abs=1e-12)


def test_from_fabric_uses_symmetrised_transfer_times():
    alpha = np.array([[0, 10, 20, 30], [30, 0, 10, 20], [20, 30, 0, 10], [10, 20, 30, 0]], float)
    beta = np.array([[0, 1, 2, 3], [3, 0, 1, 2], [2, 3, 0, 1], [1, 2, 3, 0]], float)
    fabric = Fabric(alpha, beta, ["a"] * 4)
    w = Workload(2, 2, c_pp=0.5, c_dp=0.25, pp_messages=2, dp_messages=3)
    m = CostModel.from_fabric(fabric, w)
    a01 = (10 + 30) / 2
    b01 = 2 / (1 / 1 + 1 / 3)
    assert m.t_pp[0, 1] == pytest.approx(2 * a01 / 1000 + 8 * 0.5 / b01)
    assert m.t_dp[0, 1] == pytest.approx(2 * (3 * a01 / 1000 + 8 * (0.25 / 2) / b01))
    assert np.allclose(m.t_pp, m.t_pp.T) and (np.diag(m.t_pp) == 0).all()


def test_from_fabric_refuses_size_mismatch_and_unmeasured_pairs():
    a = np.ones((4, 4))
    fabric = Fabric(a, a, ["x"] * 4)
    with pytest.raises(ValueError, match="needs 6"):
        CostModel.from_fabric(fabric, Workload(3, 2, 1, 1))
    a2 = a.copy()
    a2[1, 2] = np.nan
    b2 = a2.copy()
    with pytest.raises(ValueError, match="1 unmeasured pair"):
        CostModel.from_fabric(Fabric(a2, b2, ["x"] * 4), Workload(2, 2, 1, 1))


def test_grid_for_partition_realises_exact_inner_optimum():
    """The emitted grid's as-launched score equals the partition's DT-FM Comm."""
    from solver_oracles import brute_force_optimum

    rng = np.random.default_rng(4)
    model = random_model(rng, 3, 2)
    best = min(
        model.score_grid(model.grid_for_partition([g[0:2], g[2:4], g[4:6]])[0]).comm
        for g in (rng.permutation(6) for _ in range(200))
    )
    assert best >= brute_force_optimum(model) - 1e-12


def test_relabelling_devices_permutes_the_rank_map_and_keeps_the_score():
    rng = np.random.default_rng(8)
    model = random_model(rng, 4, 3)
    perm = rng.permutation(model.n)  # new device i is old device perm[i]
    moved = CostModel(model.t_pp[np.ix_(perm, perm)], model.t_dp[np.ix_(perm, perm)], model.workload)
    rank_map = rng.permutation(model.n)
    assert moved.score_rank_map(rank_map[perm]).comm == pytest.approx(model.score_rank_map(rank_map).comm)


def test_scaling_payloads_scales_bandwidth_terms():
    alpha = np.zeros((4, 4))
    rng = np.random.default_rng(1)
    beta = rng.uniform(0.5, 2.0, (4, 4))
    fabric = Fabric(alpha, beta, ["a"] * 4)
    base = CostModel.from_fabric(fabric, Workload(2, 2, 0.3, 0.2))
    scaled = CostModel.from_fabric(fabric, Workload(2, 2, 0.9, 0.6))
    for rank_map in (rng.permutation(4) for _ in range(5)):
        assert scaled.score_rank_map(rank_map).comm == pytest.approx(3 * base.score_rank_map(rank_map).comm)
