"""Outer search: true optimum on small instances, determinism, rescoring, callbacks, bound."""

import numpy as np
import pytest

from solver.bounds import lower_bound
from solver.cost import CostModel
from solver.search import BUDGET, CANCELLED, TIME_LIMIT, solve
from solver_oracles import brute_force_optimum, random_model

SHAPES = [(1, 2), (2, 1), (2, 2), (2, 3), (3, 2), (2, 4), (4, 2), (3, 3), (2, 5), (5, 2), (3, 4), (4, 3), (2, 6), (6, 2)]


@pytest.mark.parametrize("d_pp, d_dp", SHAPES)
def test_search_reaches_the_true_optimum_up_to_12_devices(d_pp, d_dp):
    rng = np.random.default_rng(100 * d_pp + d_dp)
    instances = 1 if d_pp * d_dp >= 12 else 3
    for k in range(instances):
        model = random_model(rng, d_pp, d_dp, clustered=bool(k % 2))
        optimum = brute_force_optimum(model)
        result = solve(model, seed=k)
        assert result.fun == pytest.approx(optimum, rel=1e-12, abs=1e-12)
        assert lower_bound(model).value <= optimum + 1e-12


def test_reported_score_equals_the_rank_map_rescored_from_scratch():
    rng = np.random.default_rng(5)
    model = random_model(rng, 8, 8, clustered=True)
    result = solve(model, seed=3)
    rescored = CostModel(model.t_pp.copy(), model.t_dp.copy(), model.workload).score_rank_map(result.x.tolist())
    assert result.fun == rescored.comm
    assert result.score.data_p + result.score.pipeline == result.fun


def test_identical_inputs_and_seed_give_identical_output():
    rng = np.random.default_rng(6)
    model = random_model(rng, 4, 8)
    a, b = solve(model, seed=11), solve(model, seed=11)
    assert np.array_equal(a.x, b.x) and a.fun == b.fun and a.nfev == b.nfev


def test_callback_stop_iteration_returns_best_so_far():
    rng = np.random.default_rng(7)
    model = random_model(rng, 8, 8)
    seen = []

    def callback(progress):
        seen.append(progress.fun)
        if len(seen) >= 2:
            raise StopIteration

    result = solve(model, seed=0, callback=callback)
    assert result.status == CANCELLED
    assert result.fun == model.score_rank_map(result.x).comm
    assert result.fun <= seen[0]


def test_budget_and_time_limit_stop_the_search():
    rng = np.random.default_rng(8)
    model = random_model(rng, 8, 16)
    assert solve(model, budget=10).status == BUDGET
    assert solve(model, time_limit=0.001, restarts=50).status == TIME_LIMIT


def test_search_beats_random_placements_on_a_geo_fabric():
    from geoconsole.demo_fabrics import worldwide_fabric
    from solver.baselines import random_stage_groups
    from solver.workload import DTFM_WORKLOAD

    model = CostModel.from_fabric(worldwide_fabric(), DTFM_WORKLOAD)
    result = solve(model, seed=7)
    assert result.fun <= 51.5005  # the spec's best topology-derived layout scores 51.50
    assert result.fun < random_stage_groups(model, 50, seed=1).min


def test_approximate_path_is_used_above_16_stages():
    rng = np.random.default_rng(9)
    model = random_model(rng, 18, 2)
    result = solve(model, seed=0, restarts=0)
    assert not result.exact_path
    assert result.fun == model.score_rank_map(result.x).comm


@pytest.mark.parametrize("bad", [dict(budget=-1), dict(restarts=-1), dict(time_limit=0)])
def test_bad_options_are_value_errors(bad):
    rng = np.random.default_rng(1)
    with pytest.raises(ValueError):
        solve(random_model(rng, 2, 2), **bad)


def test_seed_orders_must_be_permutations():
    rng = np.random.default_rng(1)
    with pytest.raises(ValueError, match="seed_orders"):
        solve(random_model(rng, 2, 2), seed_orders=[[0, 0, 1, 2]])


def test_lower_bound_never_exceeds_found_solutions():
    rng = np.random.default_rng(12)
    for p, r in [(4, 4), (8, 2), (2, 8)]:
        model = random_model(rng, p, r, clustered=True)
        assert lower_bound(model).value <= solve(model, seed=0).fun + 1e-12


def test_heuristic_alone_on_small_clustered_instances(monkeypatch):
    """Without enumeration the search still finds most optima and stays close on the rest.

    Measured when written: 45 of 54 optimal, worst 2.5% above; the bounds leave room for
    noise in the instances, not for a broken neighbourhood.
    """
    import solver.enumerate as enumerate_
    import solver.search as search

    monkeypatch.setattr(search, "optimal_grid", lambda model, stop=None: (None, 0))
    hits = total = 0
    worst = 1.0
    for d_pp, d_dp in [(2, 4), (4, 2), (3, 3), (2, 5), (5, 2), (3, 4), (4, 3), (2, 6), (6, 2)]:
        rng = np.random.default_rng(d_pp * 7 + d_dp)
        for k in range(6):
            model = random_model(rng, d_pp, d_dp, clustered=True)
            grid, _ = enumerate_.optimal_grid(model)
            optimum = model.score_grid(grid).comm
            found = search.solve(model, seed=k).fun
            assert found >= optimum - 1e-12
            total += 1
            hits += found <= optimum + 1e-12
            worst = max(worst, found / optimum)
    assert hits >= 40 and worst < 1.05, (hits, total, worst)
