"""Lower bounds: never above the true optimum (brute force), and worth reading on geo fabrics."""

import numpy as np
import pytest

from solver.bounds import SEPARATE, lower_bound, separate_bound
from solver.cost import CostModel
from solver.joint_bound import _vectors, joint_bound
from solver_oracles import brute_force_optimum, random_model

SHAPES = [(2, 2), (2, 3), (3, 2), (2, 4), (4, 2), (3, 3), (2, 5), (5, 2)] + [
    pytest.param(p, r, marks=pytest.mark.slow) for p, r in [(3, 4), (4, 3), (2, 6), (6, 2)]
]


@pytest.mark.parametrize("d_pp, d_dp", SHAPES)
def test_joint_bound_never_exceeds_the_brute_forced_optimum(d_pp, d_dp):
    rng = np.random.default_rng(300 + 10 * d_pp + d_dp)
    for k in range(3 if d_pp * d_dp <= 10 else 2):
        model = random_model(rng, d_pp, d_dp, clustered=k % 2 == 0)
        optimum = brute_force_optimum(model)
        sep = separate_bound(model)
        joint, _ = joint_bound(model, sep.pipeline, sep.data_p, 0.5)
        assert joint <= optimum + 1e-9
        assert lower_bound(model, 0.5).value <= optimum + 1e-9


def test_joint_bound_is_tight_on_a_planted_two_site_instance():
    """Two sites, cheap inside: the bound must see that keeping every pipeline edge cheap
    forces each stage group to take half its devices from each site."""
    d_pp, d_dp = 2, 4
    site = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    same = site[:, None] == site[None, :]
    t_pp = np.where(same, 1.0, 10.0)
    t_dp = np.where(same, 0.1, 1.0)
    np.fill_diagonal(t_pp, 0)
    np.fill_diagonal(t_dp, 0)
    from solver.workload import Workload

    model = CostModel(t_pp, t_dp, Workload(d_pp, d_dp, 1.0, 1.0))
    optimum = brute_force_optimum(model)
    bound = lower_bound(model, 5.0)
    assert bound.value == pytest.approx(optimum)
    assert bound.method != SEPARATE and bound.value > separate_bound(model).value


def test_bound_on_the_worldwide_demo_is_valid_and_joint():
    from geoconsole.demo_fabrics import worldwide_fabric
    from solver.workload import DTFM_WORKLOAD

    model = CostModel.from_fabric(worldwide_fabric(), DTFM_WORKLOAD)
    bound = lower_bound(model, 1.0)
    assert bound.value <= 51.50 + 1e-9  # the spec's layout scores 51.50
    assert bound.value > separate_bound(model).value
    assert bound.method.startswith("joint") and bound.elapsed_s > 0
    # a cancel ends the joint work with what it has: still a bound, no better than the full one
    calls = []

    def stop() -> bool:
        calls.append(1)
        return len(calls) > 3

    cut = lower_bound(model, 1000.0, stop=stop)
    assert calls and separate_bound(model).value <= cut.value <= bound.value + 1e-9


def test_component_vectors_are_exactly_the_bounded_compositions():
    z = np.array([3, 1, 2])
    got = {tuple(v) for v in _vectors(z, 3).tolist()}
    want = {(a, b, c) for a in range(4) for b in range(2) for c in range(3) if a + b + c == 3}
    assert got == want


def test_gap_wording_helpers():
    bound = separate_bound(random_model(np.random.default_rng(0), 2, 2))
    comm = 2 * bound.value
    assert bound.gap(comm) == pytest.approx(0.5)  # (Comm - bound) / Comm
    assert bound.above(comm) == pytest.approx(1.0)  # Comm / bound - 1


def test_gap_is_never_negative_where_the_bound_meets_comm_up_to_rounding():
    """An 8 x 1 fabric's bound came out 1 ulp above its optimum: gap -1.8e-16."""
    from solver.bounds import Bound

    bound = Bound(value=10.028028009, data_p=0.0, pipeline=10.028028009)
    assert bound.gap(10.028028008999998) == 0.0 and bound.above(10.028028008999998) == 0.0
    comm = float(np.nextafter(10.028028009, 11.0))  # 1 ulp above: the gap 0, and 'above' 0 too, not 2.2e-16
    assert bound.gap(comm) == 0.0 and bound.above(comm) == 0.0
    assert bound.gap(10.1) > 0 and bound.above(10.1) > 0


def test_free_links_add_nothing_to_the_pipeline_bound():
    """Zero-cost pairs stood in the spanning tree as 2.2e-308: a zero workload's bound
    was 4.45e-308, above its optimum of 0, and 'Comm / bound - 1' came out -100%."""
    from solver.spanning import SpanningTree
    from solver.workload import Workload

    t = np.zeros((4, 4))
    assert SpanningTree(t).forest_weight(1) == 0.0
    assert separate_bound(CostModel(t, t, Workload(2, 2, 0.0, 0.0))).value == 0.0


def _slow_device_model(rng, d_pp, d_dp, slow=1):
    """Clustered like a geo fabric, with ``slow`` devices whose links off their region cost
    4x (a host with a slow NIC): they must sit in some stage group."""
    model = random_model(rng, d_pp, d_dp, clustered=True)
    t_pp, t_dp = model.t_pp.copy(), model.t_dp.copy()
    for d in rng.choice(model.n, size=slow, replace=False):
        far = t_pp[d] > 0.5
        t_pp[d, far] *= 4
        t_pp[far, d] *= 4
        t_dp[d, far] *= 4
        t_dp[far, d] *= 4
    return CostModel(t_pp, t_dp, model.workload)


@pytest.mark.parametrize("d_pp, d_dp", [(2, 3), (3, 2), (2, 4), (4, 2), (3, 3),
                                        pytest.param(2, 6, marks=pytest.mark.slow)])
def test_joint_bound_with_slow_devices_never_exceeds_the_brute_forced_optimum(d_pp, d_dp):
    rng = np.random.default_rng(900 + 10 * d_pp + d_dp)
    for k in range(3):
        model = _slow_device_model(rng, d_pp, d_dp, slow=1 + k % 2)
        optimum = brute_force_optimum(model)
        assert lower_bound(model, 0.5).value <= optimum + 1e-9


def test_device_floors_see_that_a_slow_device_sits_in_some_stage_group(monkeypatch):
    """Two sites of 10; device 0's links to the other site are 10x dearer. Keeping the
    pipeline edge cheap needs five devices of each site per group, so device 0 pays five
    dear links in whichever group holds it (Comm >= 52.4); the per-group floor alone
    prices a mixed group by its cheapest device (7.4). With the edge dear, Comm >= 20 +
    0.9, met by the sites-apart layout: the optimum is 20.9 (too many devices for the
    single-device components, which would see device 0 too)."""
    from solver import joint_bound as jb
    from solver.workload import Workload

    d_pp, d_dp = 2, 10
    site = np.repeat([0, 1], 10)
    same = site[:, None] == site[None, :]
    t_pp = np.where(same, 1.0, 10.0)
    t_dp = np.where(same, 0.1, 1.0)
    t_dp[0, ~same[0]] = t_dp[~same[0], 0] = 10.0
    np.fill_diagonal(t_pp, 0)
    np.fill_diagonal(t_dp, 0)
    model = CostModel(t_pp, t_dp, Workload(d_pp, d_dp, 1.0, 1.0))
    apart = model.score_grid(np.arange(20).reshape(2, 10).T).comm
    assert apart == pytest.approx(20.9)
    with_floors = lower_bound(model, 5.0).value
    monkeypatch.setattr(jb, "FLOOR_CELLS", 0)
    without = lower_bound(model, 5.0).value
    assert with_floors == pytest.approx(apart)
    assert without == pytest.approx(7.4)


def test_spanning_tree_keeps_links_cheaper_than_a_hundred_millionth():
    """Hosts whose inner links cost 1e-9 s (a tiny payload): the tree must join each
    host by them (scipy's dense-to-sparse conversion drops values below 1e-8 as if they
    were no link), and the bound on such a fabric stays valid."""
    from solver.spanning import SpanningTree
    from solver.workload import Workload

    host = np.array([0, 0, 1, 1, 2, 2])
    rng = np.random.default_rng(5)
    t_pp = np.where(host[:, None] == host[None, :], 1e-9, 1.0 + rng.random((6, 6)))
    t_pp = (t_pp + t_pp.T) / 2
    np.fill_diagonal(t_pp, 0.0)
    tree = SpanningTree(t_pp)
    assert int((tree.weights < 1e-8).sum()) == 3
    m, labels = tree.components(1e-8)
    assert m == 3 and len({(labels[2 * h], labels[2 * h + 1]) for h in range(3)}) == 3
    assert all(labels[2 * h] == labels[2 * h + 1] for h in range(3))
    t_dp = t_pp / 2
    model = CostModel(t_pp, t_dp, Workload(3, 2, 1.0, 1.0))
    assert lower_bound(model, 0.5).value <= brute_force_optimum(model) + 1e-12


# -- the exact search behind the joint bound, against plain enumeration ---------------

def _reference_threshold_bound(model, t, components):
    """threshold_bound without pruning, sorting or numpy look-ups: every decomposition
    into x + 1 pieces scored as the module text says (same floors and orders)."""
    from itertools import combinations_with_replacement

    from solver import joint_bound as jb

    w = model.workload
    m, labels = components
    z = np.bincount(labels, minlength=m)
    vecs = jb._vectors(z, w.d_dp)
    values, floors = jb._group_data_p(jb._cumulative(model.t_dp, labels, m, w.d_dp), labels, vecs, True)
    sep = separate_bound(model)
    n = model.n
    m1 = float(model.t_pp[~np.eye(n, dtype=bool)].min())
    edge = jb._EdgeFloor(jb._pair_floor(model.t_pp, labels, m), vecs, jb._Work(1e6))

    def lengths(q, total):
        if q == 1:
            yield (total,)
            return
        for first in range(1, total - q + 2):
            for rest in lengths(q - 1, total - first):
                yield (first,) + rest

    best = np.inf
    for x in range(w.d_pp):
        for pieces in combinations_with_replacement(range(len(vecs)), x + 1):
            for ls in set(lengths(x + 1, w.d_pp)):
                if not (sum(L * vecs[i] for L, i in zip(ls, pieces)) == z).all():
                    continue
                d = max(float(values[list(pieces)].max()), float(floors[:, list(pieces)].min(axis=1).max()))
                e = jb._ordered_cost(list(pieces), edge)
                best = min(best, max(sep.data_p, d) + max(sep.pipeline, 2 * ((w.d_pp - 1 - x) * m1 + e)))
    return best


@pytest.mark.parametrize("d_pp, d_dp, seed", [(4, 3, 1), (5, 2, 2), (3, 4, 3), (6, 2, 4)])
def test_pruned_decomposition_search_equals_plain_enumeration(d_pp, d_dp, seed):
    from solver import joint_bound as jb
    from solver.spanning import spanning_tree

    model = random_model(np.random.default_rng(seed), d_pp, d_dp, clustered=True)
    sep = separate_bound(model)
    tree = spanning_tree(model)
    compared = 0
    for t in list(tree.thresholds())[:4]:
        components = tree.components(float(t))
        if components[0] < 2:
            continue
        got = jb.threshold_bound(model.t_pp, model.t_dp, d_pp, d_dp, float(t), sep.pipeline, sep.data_p,
                                 jb._Work(100.0), components)
        assert got == pytest.approx(_reference_threshold_bound(model, float(t), components), rel=1e-9)
        compared += 1
    assert compared >= 2


def test_orders_are_exact_up_to_six_pieces_and_a_spanning_tree_floor_above():
    from itertools import permutations

    from solver import joint_bound as jb

    rng = np.random.default_rng(8)
    for q in (2, 3, 5, 6, 7, 8):
        c = rng.uniform(1, 10, (q, q))
        c = c + c.T
        pieces = list(range(q))
        if q >= 4:
            pieces[1] = pieces[3]  # a vector used twice: never next to itself
        edge = lambda a, b: float(c[a, b])  # noqa: E731
        exact = min(sum(edge(o[k], o[k + 1]) for k in range(q - 1)) for o in permutations(pieces)
                    if all(a != b for a, b in zip(o, o[1:])))
        got = jb._ordered_cost(pieces, edge)
        if q <= jb.ORDER_EXACT_MAX:
            assert got == pytest.approx(exact)
        else:
            assert got <= exact + 1e-12 and got > 0


def test_least_run_datap_by_bisection_equals_the_scan_over_levels():
    from solver import joint_bound as jb

    rng = np.random.default_rng(3)
    z = np.array([5, 4, 3])
    vecs = jb._vectors(z, 4)
    for _ in range(5):
        values = rng.uniform(0, 10, len(vecs))
        for q in (1, 2, 3):
            scan = next((float(d) for d in np.unique(values)
                         if jb._Decompositions(vecs, values <= d, jb._Work(100.0)).feasible(z.copy(), 3, q)), np.inf)
            assert jb._dmin(values, vecs, z, 3, q, jb._Work(100.0)) == scan


@pytest.mark.parametrize("n, d_pp", [(32, 16), (64, 32)])
def test_many_tied_components_keep_the_joint_bound_small_and_valid(n, d_pp):
    """Two zones of single-GPU hosts whose links inside a zone all tie: at the cheapest
    link's threshold every device is a component of its own, and the edge floor built all
    2^N row subsets (32 devices: 32 GiB asked for, a traceback). Above HALL_EXACT_MAX
    components it tests the single rows and the whole set: a floor no higher, still a
    valid bound, within its budget."""
    import solver.joint_bound as jb
    from solver.workload import Workload

    zone = np.repeat([0, 1], n // 2)
    t = np.where(zone[:, None] == zone[None, :], 1.0, 3.0)
    np.fill_diagonal(t, 0.0)
    model = CostModel(t, t, Workload(d_pp, n // d_pp, 1.0, 1.0))
    assert n > jb.HALL_EXACT_MAX
    bound = lower_bound(model, 0.2)
    grid = np.arange(n).reshape(n // d_pp, d_pp)  # each pipeline inside one zone
    assert bound.value <= model.score_grid(grid).comm + 1e-9
    assert bound.value > separate_bound(model).value  # the joint bound still applies
