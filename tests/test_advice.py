"""geoconsole.advice: each rule triggered on a fabric made to trigger it, silent on one made not to."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import numpy as np
import pytest
from advice_fabrics import region_fabric

from geoconsole import advice
from geoconsole.prepare import prepare_for_solve
from geoconsole.solving import SolveOptions, cost_model, run_placement
from solver.workload import Workload

W44 = Workload(4, 4, 0.5, 0.5)
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def solved(fabric, workload=W44, samples=40, budget=20_000):
    prepared = prepare_for_solve(fabric, workload.n_devices)
    model = cost_model(prepared.fabric, workload)
    outcome = run_placement(model, SolveOptions(budget=budget, baseline_samples=samples),
                            seed_orders=prepared.seed_orders)
    return prepared, model, outcome


def codes(items):
    return [a.code for a in items]


@pytest.fixture(scope="module")
def uniform():
    return solved(region_fabric(jitter=0.005, regions=0))


@pytest.fixture(scope="module")
def regions():
    return solved(region_fabric())


@pytest.fixture(scope="module")
def slow():
    return solved(region_fabric(slow=5))


def test_advice_json_has_the_four_keys():
    a = advice.Advice("poor-device", advice.WARNING, "m", "h1:0")
    assert a.to_json() == {"code": "poor-device", "severity": "warning", "message": "m", "subject": "h1:0"}
    assert a.with_hint("solve --exclude h1:0").message == "m (solve --exclude h1:0)"


class TestBarelyBeatsRandom:
    def test_a_nearly_uniform_fabric_barely_beats_random_and_is_called_uniform(self, uniform):
        _p, model, out = uniform
        found = advice.barely_beats_random(model, out.result.fun, out.baselines)
        assert codes(found) == ["barely-beats-random", "uniform-fabric"]
        assert "1.00x" in found[0].message and "span 0." in found[0].message  # spread under 1%
        assert advice.link_spread(model) < 0.01

    def test_a_fabric_of_regions_beats_random_clearly(self, regions):
        _p, model, out = regions
        assert advice.barely_beats_random(model, out.result.fun, out.baselines) == []
        assert advice.link_spread(model) > advice.UNIFORM_SPREAD

    def test_no_baseline_drawn_no_advice(self, uniform):
        _p, model, out = uniform
        assert advice.barely_beats_random(model, out.result.fun, []) == []

    def test_barely_beating_random_on_a_spread_fabric_does_not_call_it_uniform(self, regions):
        _p, model, out = regions
        fake = SimpleNamespace(name="random stage groups", median=out.result.fun * 1.05, values=np.ones(3))
        assert codes(advice.barely_beats_random(model, out.result.fun, [fake])) == ["barely-beats-random"]

    def test_a_proven_optimum_is_not_blamed_on_the_search(self, uniform, regions):
        """On a uniform fabric solved to its bound, the warning told the operator the search
        budget may be too small, beside "optimal"."""
        _p, model, out = uniform
        found = advice.barely_beats_random(model, out.result.fun, out.baselines, optimal=True)
        assert codes(found) == ["uniform-fabric"]
        _p, model, out = regions
        fake = SimpleNamespace(name="random stage groups", median=out.result.fun * 1.05, values=np.ones(3))
        found = advice.barely_beats_random(model, out.result.fun, [fake], optimal=True)
        assert codes(found) == ["optimal-near-random"] and found[0].severity == advice.INFO
        assert "optimal" in found[0].message and "budget" not in found[0].message


class TestPoorDevice:
    def test_a_device_slow_to_everyone_is_named_with_comm_without_it(self, slow):
        prepared, model, out = slow
        found = advice.poor_device(model, out.result.score, prepared.fabric)
        assert codes(found) == ["poor-device"] and found[0].subject == "h5:0"
        assert "typical device" in found[0].message  # no spare: a median device stands in
        without = float(found[0].message.split("Comm would be ")[1].split(" s")[0])
        assert without < out.result.fun * (1 - advice.POOR_DEVICE_GAIN)

    def test_with_a_spare_the_re_solve_leaves_the_device_out(self):
        fabric = region_fabric(17, slow=5)
        prepared, model, out = solved(fabric)
        found = advice.poor_device(model, out.result.score, prepared.fabric,
                                   without=advice.spare_without(fabric, W44))
        assert codes(found) == ["poor-device"] and found[0].subject == "h5:0"
        assert "a spare device takes part" in found[0].message

    def test_no_dominating_poor_device_on_a_fabric_of_regions(self, regions):
        prepared, model, out = regions
        assert advice.poor_device(model, out.result.score, prepared.fabric) == []

    def test_no_device_sets_a_datap_of_zero(self):
        """With D_DP = 1 DataP is 0: the advice said '#0 sets DataP' (its worst device is
        only the first); a device on the bottleneck of most edges may still be named."""
        prepared, model, out = solved(region_fabric(8, slow=5), Workload(8, 1, 0.5, 0.5))
        assert out.result.score.data_p == 0.0
        found = advice.dominating_device(model, out.result.score)
        assert found is None or "sets DataP" not in found[1]
        for item in advice.poor_device(model, out.result.score, prepared.fabric):
            assert "sets DataP" not in item.message
        # the first device is the worst by default; on the only edge's bottleneck it is named
        # for that alone
        score = SimpleNamespace(bottlenecks=[(0, 5)], worst_device=0, data_p=0.0)
        assert advice.dominating_device(model, score)[1] == "is in the bottleneck link of 1 of 1 pipeline edges"

    def test_the_re_solve_budget_is_a_tenth_of_the_default(self):
        from solver.search import default_budget

        assert advice.reduced_budget(64) == int(default_budget(64) * advice.POOR_DEVICE_BUDGET_SHARE)

    @pytest.mark.parametrize("limit, expected", [(None, None), (3.0, advice.POOR_DEVICE_MIN_S),
                                                 (20.0, 20.0 * advice.POOR_DEVICE_TIME_SHARE), (0.2, 0.2)])
    def test_the_re_solve_takes_a_share_of_the_solve_s_time_limit(self, slow, monkeypatch, limit, expected):
        """At 100 stages the budgeted re-solve alone took 7 s after a 3 s solve."""
        import solver.search

        prepared, model, out = slow
        real, seen = solver.search.solve, []

        def spy(*args, **kwargs):
            seen.append(kwargs.get("time_limit"))
            return real(*args, **kwargs)

        monkeypatch.setattr(solver.search, "solve", spy)
        found = advice.for_solve(prepared.fabric, model, out.result, out.baselines, out.bound, time_limit=limit)
        assert seen == [expected] and "poor-device" in codes(found)


class TestSeeds:
    def test_a_spread_above_the_threshold_is_reported_with_both_ends(self):
        found = advice.seed_spread({0: 10.0, 1: 11.0, 2: 10.2})
        assert codes(found) == ["seeds-vary"]
        assert "10.00 s (seed 0)" in found[0].message and "11.00 s (seed 1)" in found[0].message

    def test_close_seeds_or_a_single_seed_say_nothing(self):
        assert advice.seed_spread({0: 10.0, 1: 10.2}) == []
        assert advice.seed_spread({0: 10.0}) == []

    def test_validate_s_own_seeds_are_compared(self):
        placements = [SimpleNamespace(name="solution (seed 3)", model_s=1.0),
                      SimpleNamespace(name="alternate seed 4", model_s=1.2),
                      SimpleNamespace(name="random map 1", model_s=3.0)]
        assert advice.validated_seeds(placements) == {3: 1.0, 4: 1.2}
        assert codes(advice.seed_spread(advice.validated_seeds(placements))) == ["seeds-vary"]

    def test_validate_s_placement_names_are_the_ones_read(self):
        from advice_fabrics import random_fabric

        from geoconsole.launch.validate import choose_placements

        model = cost_model(random_fabric(), Workload(4, 8, 0.5, 0.5))
        placements, _notes = choose_placements(model, model, seed=0, random_maps=1,
                                               solve_kwargs={"budget": 2000})
        assert sorted(advice.validated_seeds(placements)) == [0, 1]

    def test_rerun_seeds_solves_each_seed(self, regions):
        prepared, model, _out = regions
        comms = advice.rerun_seeds(model, [1, 2], budget=2_000, restarts=1, seed_orders=prepared.seed_orders)
        assert sorted(comms) == [1, 2] and all(v > 0 for v in comms.values())


class TestMeasurement:
    def test_a_fabric_measured_long_ago_is_stale(self):
        old = replace(region_fabric(), measured_at=(NOW - timedelta(days=90)).isoformat())
        found = advice.stale_measurement(old, NOW)
        assert codes(found) == ["stale-measurement"] and "90 days ago" in found[0].message

    def test_a_recent_or_unstamped_fabric_is_not(self):
        recent = replace(region_fabric(), measured_at=(NOW - timedelta(days=2)).isoformat())
        assert advice.stale_measurement(recent, NOW) == []
        assert advice.stale_measurement(region_fabric(), NOW) == []

    def test_an_unreadable_timestamp_is_reported(self):
        assert codes(advice.stale_measurement(replace(region_fabric(), measured_at="yesterday"), NOW)) == [
            "stale-measurement"]

    def test_discovery_unlike_the_record_is_a_mismatch_per_host(self):
        fabric = replace(region_fabric(), meta={"nccl": "2.18.1", "hosts": {
            "h0": {"torch": "2.3.0", "interface": "eth0", "mtu": 1500}, "h1": {"torch": "2.3.0", "mtu": 1500}}})
        now = {"h0": SimpleNamespace(torch="2.3.0", nccl="2.21.5", interface="eth0", mtu=9000),
               "h1": SimpleNamespace(torch="2.3.0", nccl="2.18.1", interface="wg0", mtu=1500)}
        found = advice.measurement_mismatch(fabric, now)
        assert [a.subject for a in found] == ["h0"]  # h1's interface was not recorded
        assert "NCCL 2.18.1 then, 2.21.5 now" in found[0].message and "MTU 1500 then, 9000 now" in found[0].message

    def test_discovery_like_the_record_is_no_mismatch(self):
        fabric = replace(region_fabric(), meta={"torch": "2.3.0", "mtu": 1500})
        now = {"h0": SimpleNamespace(torch="2.3.0", nccl=None, interface="eth0", mtu=1500)}
        assert advice.measurement_mismatch(fabric, now) == []


class TestAssumptions:
    def test_mixed_gpu_models_or_memory(self):
        fabric = replace(region_fabric(), meta={"hosts": {"h0": {"gpus": ["A100"], "gpu_memory_mib": [81920]},
                                                          "h1": {"gpus": ["A100"], "gpu_memory_mib": [40960]}}})
        found = advice.model_assumptions(fabric, W44)
        assert codes(found) == ["mixed-gpus"] and "81920 MiB on h0" in found[0].message

    def test_mixed_gpus_seen_by_discovery(self):
        gpu = lambda name: SimpleNamespace(name=name, memory_mib=None)  # noqa: E731
        found = advice.mixed_gpus(region_fabric(), {"h0": SimpleNamespace(gpus=(gpu("A100"),)),
                                                    "h1": SimpleNamespace(gpus=(gpu("V100"),))})
        assert codes(found) == ["mixed-gpus"]

    def test_one_gpu_kind_and_a_plain_shape_say_nothing(self):
        fabric = replace(region_fabric(), meta={"hosts": {"h0": {"gpus": ["A100"]}, "h1": {"gpus": ["A100"]}}})
        assert advice.model_assumptions(fabric, W44) == []

    @pytest.mark.parametrize("shape, code", [((1, 16), "single-stage"), ((16, 1), "single-replica"),
                                             ((17, 1), "approximate-order")])
    def test_shapes_outside_the_model(self, shape, code):
        found = advice.model_assumptions(region_fabric(), Workload(*shape, 0.5, 0.5))
        assert code in codes(found)


class TestSync:
    def test_a_bound_far_above_the_compute_time(self):
        found = advice.sync_too_slow(10.0, 12.0, 2.0)
        assert codes(found) == ["sync-too-slow"] and "DiLoCo" in found[0].message

    def test_a_compute_time_that_hides_it_or_none_given(self):
        assert advice.sync_too_slow(10.0, 12.0, 6.0) == []
        assert advice.sync_too_slow(10.0, 12.0, None) == []


def test_for_solve_gathers_the_rules(uniform):
    prepared, model, out = uniform
    found = advice.for_solve(prepared.fabric, model, out.result, out.baselines, out.bound, now=NOW,
                             seed_comms={0: 10.0, 1: 20.0}, step_compute_s=0.1)
    assert {"barely-beats-random", "uniform-fabric", "seeds-vary", "sync-too-slow"} <= set(codes(found))


def test_for_solve_does_not_blame_the_search_for_a_result_at_its_bound(uniform):
    """An optimum is known by the solve's status or by a bound that meets Comm."""
    prepared, model, out = uniform
    at_bound = SimpleNamespace(value=float(out.result.fun))
    found = advice.for_solve(prepared.fabric, model, out.result, out.baselines, at_bound, now=NOW)
    assert "uniform-fabric" in codes(found) and "barely-beats-random" not in codes(found)
    below = SimpleNamespace(value=float(out.result.fun) * 0.5)
    found = advice.for_solve(prepared.fabric, model, out.result, out.baselines, below, now=NOW)
    assert "barely-beats-random" in codes(found)
