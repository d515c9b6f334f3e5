"""Structures of many short runs (solver.structure_beam), checked against brute force."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from solver import structures
from solver.structure_beam import beam_structures
from solver.structures import Coarse, best_structures, classes, deal, grid_cost, structure_starts, vectors
from solver_oracles import tiered_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from hierarchical import suite_instance  # noqa: E402


def _sites(sizes, d_pp, d_dp, seed=0):
    site = np.repeat(np.arange(len(sizes)), sizes)
    region = (site >= len(sizes) // 2).astype(int)
    return tiered_model(site, region, ((0.1, 1.0, 4.0), (0.05, 0.5, 3.0)), (0.9, 1.1), d_pp, d_dp, seed)


def _sequence_cost(coarse: Coarse, seq: np.ndarray) -> float:
    """``max D + 2 sum e`` over a sequence of stage-group vectors (module text)."""
    same = (seq[1:] == seq[:-1]).all(axis=1)
    edges = np.where(same, coarse.inside(seq[:-1]), coarse.between(seq[:-1], seq[1:]))
    return float(coarse.data_p(seq).max() + 2.0 * edges.sum())


def _brute(coarse: Coarse, vecs: np.ndarray, d_pp: int) -> float:
    """Least cost over every sequence of ``d_pp`` vectors that adds up to ``z`` (depth
    first, partial sums within ``z``; the edges from ``Coarse.between`` and
    ``Coarse.inside`` directly)."""
    n = len(vecs)
    same = np.arange(n)[:, None] == np.arange(n)[None, :]
    pairs = np.array([(i, j) for i in range(n) for j in range(n)])
    edge = np.where(same, coarse.inside(vecs)[:, None],
                    coarse.between(vecs[pairs[:, 0]], vecs[pairs[:, 1]]).reshape(n, n))
    value = coarse.data_p(vecs)
    best = [np.inf]

    def extend(last: int, depth: int, left: np.ndarray, f: float, top: float) -> None:
        if depth == d_pp:
            if not left.any():
                best[0] = min(best[0], top + 2.0 * f)
            return
        for i in range(n):
            if (vecs[i] <= left).all():
                extend(i, depth + 1, left - vecs[i], f + (edge[last, i] if depth else 0.0), max(top, value[i]))

    extend(-1, 0, coarse.z.copy(), 0.0, -np.inf)
    return best[0]


def test_beams_at_every_threshold_find_the_brute_force_optimum_of_any_run_count():
    """With every threshold and a width that keeps every state, the beams are an exact
    dynamic programme: their cheapest sequence is the least cost over all sequences."""
    for seed in range(2):
        model = _sites([5, 5, 3, 2], d_pp=5, d_dp=3, seed=seed)
        coarse = Coarse(model, classes(model))
        vecs = vectors(coarse, 3, most=10_000)
        found = beam_structures(coarse, vecs, 5, most=4, width=10**9, counts=tuple(range(1, len(vecs) + 1)))
        assert found
        assert abs(found[0][0] - _brute(coarse, vecs, 5)) < 1e-9
        for cost, runs in found:  # priced as stated; lengths and class totals add up
            seq = np.array([v for v, length in runs for _ in range(length)])
            assert abs(cost - _sequence_cost(coarse, seq)) < 1e-9
            assert len(seq) == 5 and np.array_equal(seq.sum(axis=0), coarse.z)
            assert all((a != b).any() for (a, _), (b, _) in zip(runs, runs[1:]))  # maximal runs
        assert [c for c, _ in found] == sorted(c for c, _ in found)


def _stub(z, rng) -> Coarse:
    """A coarse model of random mean costs and links drawn from five levels (ties
    common): optima of up to six runs."""
    m = len(z)
    coarse = Coarse.__new__(Coarse)
    coarse.m, coarse.z = m, np.array(z, dtype=np.int64)
    a = rng.uniform(0.1, 3.0, (m, m))
    p = rng.choice([0.1, 0.5, 1.0, 2.0, 4.0], (m, m))
    coarse.a, coarse.p = (a + a.T) / 2, np.minimum(p, p.T)
    coarse.subsets = ((np.arange(1, 1 << m)[:, None] >> np.arange(m)) & 1).astype(np.int64)
    coarse.levels = np.unique(coarse.p)
    first = np.where(coarse.subsets[:, :, None] > 0, coarse.p[None, :, :], np.inf).min(axis=1)
    coarse.reach_order = np.argsort(first, axis=1, kind="stable")
    coarse.reach_at = np.take_along_axis(first, coarse.reach_order, axis=1)
    return coarse


def test_beams_are_exact_on_random_coarse_models_whose_optima_have_many_runs():
    rng = np.random.default_rng(1)
    runs_seen = set()
    tried = 0
    while tried < 30:
        m, r, p = int(rng.integers(2, 5)), int(rng.integers(2, 4)), int(rng.integers(3, 7))
        z = rng.multinomial(r * p, np.ones(m) / m)
        if (z == 0).any():
            continue
        coarse = _stub(z, rng)
        vecs = vectors(coarse, r, most=10_000)
        if len(vecs) ** p > 200_000:
            continue  # keep the brute force quick
        tried += 1
        found = beam_structures(coarse, vecs, p, most=1, width=10**9, counts=tuple(range(1, len(vecs) + 1)))
        best = _brute(coarse, vecs, p)
        assert (found[0][0] if found else np.inf) == pytest.approx(best, abs=1e-9)
        if found:
            runs_seen.add(len(found[0][1]))
    assert max(runs_seen) >= 5  # optima of many runs were among them


def test_the_seven_run_basin_of_draw_2_h96_is_found_by_the_beams():
    """Draw-2 12 x 8: the best layout known (40.32 s) has runs 1+1+5+2+1+1+1 at coarse
    cost 49.72; the cheapest structure of 1-5 runs costs 52.92. The beams find the
    former, and it leads the structure starts."""
    _, model = suite_instance("h96-12x8", 2)
    lab = classes(model)
    coarse = Coarse(model, lab)
    vecs = vectors(coarse, 8)
    assert round(best_structures(coarse, vecs, 12, most=1)[0][0], 2) == 52.92
    (cost, runs), *_ = beam_structures(coarse, vecs, 12, most=3)
    assert round(cost, 2) == 49.72
    assert [length for _, length in runs] in ([1, 1, 5, 2, 1, 1, 1], [1, 1, 1, 2, 5, 1, 1])
    name, grid = structure_starts(model, np.arange(model.n))[0]
    assert name == "structure: runs " + "+".join(str(length) for _, length in runs)
    assert abs(grid_cost(coarse, lab, grid) - cost) < 1e-9


def test_beams_join_the_enumerated_structures_only_when_clearly_cheaper(monkeypatch):
    """Draw-3 16 x 4: the enumeration's five-run structure (43.83) is as cheap as the
    beams' best, and the structure starts are the enumeration's."""
    _, model = suite_instance("h64-16x4", 3)
    with_beams = structure_starts(model, np.arange(model.n))
    monkeypatch.setattr(structures, "BEAMS", False)
    without = structure_starts(model, np.arange(model.n))
    assert [n for n, _ in with_beams] == [n for n, _ in without]
    assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(with_beams, without))


def test_a_stop_keeps_the_beams_already_run():
    _, model = suite_instance("h96-12x8", 2)
    coarse = Coarse(model, classes(model))
    vecs = vectors(coarse, 8)
    assert beam_structures(coarse, vecs, 12, most=3, stop=lambda: True) == []
    calls = []

    def stop_after_one_beam() -> bool:  # one test before the edges, then one per stage
        calls.append(1)
        return len(calls) > 12

    first = beam_structures(coarse, vecs, 12, most=3, counts=(20,))
    assert first
    got = beam_structures(coarse, vecs, 12, most=3, counts=(20, 64), stop=stop_after_one_beam)
    assert len(calls) == 13  # the test after the first beam saw the stop
    assert [c for c, _ in got] == [c for c, _ in first]


def test_a_dealt_beam_structure_costs_what_it_was_priced():
    model = _sites([8, 8, 4, 4], d_pp=6, d_dp=4)
    lab = classes(model)
    coarse = Coarse(model, lab)
    for cost, runs in beam_structures(coarse, vectors(coarse, 4), 6, most=5):
        grid = deal(lab, np.arange(model.n), runs)
        assert sorted(grid.ravel().tolist()) == list(range(model.n))
        assert abs(grid_cost(coarse, lab, grid) - cost) < 1e-9


def test_the_beams_have_a_window_of_their_own_after_the_enumeration(monkeypatch):
    """Behind the enumeration (0.85-0.92 s on draw-2 h96) the structure window of a 10 s
    run cut the beams off; they now run until a stop of their own."""
    from solver import search

    _, model = suite_instance("h96-12x8", 2)
    enumerated = [False]
    real = structures.best_structures

    def enumerate_then_close(*args, **kwargs):
        found = real(*args, **kwargs)
        enumerated[0] = True
        return found

    monkeypatch.setattr(structures, "best_structures", enumerate_then_close)
    window = lambda: enumerated[0]  # noqa: E731  the structure window closes after the enumeration
    names = [n for n, _ in search._starts(model, None, structure_stop=window, beam_stop=lambda: False)
             if search._structure(n)]
    assert names and all(n == "structure: runs 1+1+5+2+1+1+1" or n == "structure: runs 1+1+1+2+5+1+1" for n in names)
    enumerated[0] = False
    names = [n for n, _ in search._starts(model, None, structure_stop=window) if search._structure(n)]
    assert names[0] == "structure: runs 5+1+3+1+2"  # the beams under the structure window: none
    assert search.BEAM_SHARE > 0


def test_no_beams_where_the_state_keys_could_pass_62_bits(monkeypatch):
    """As the enumeration, the beams give nothing where an integer key of a state's
    counts could wrap (many classes of many devices)."""
    import solver.structure_beam as beam_module

    model = _sites([8, 8, 4, 4], d_pp=6, d_dp=4)
    coarse = Coarse(model, classes(model))
    vecs = vectors(coarse, 4)
    assert beam_structures(coarse, vecs, 6, most=5)
    monkeypatch.setattr(beam_module, "KEY_BITS", 3)
    assert beam_structures(coarse, vecs, 6, most=5) == []


def test_a_structure_found_by_both_is_started_once():
    runs = [(np.array([2, 0]), 1), (np.array([0, 2]), 2)]
    mirrored = list(reversed(runs))
    other = [(np.array([1, 1]), 3)]
    kept = structures._once([(1.0, runs), (1.0, mirrored), (1.0, [(v.copy(), n) for v, n in runs]), (2.0, other)])
    assert [c for c, _ in kept] == [1.0, 2.0]


def test_solve_gives_the_beams_a_window_of_their_own(monkeypatch):
    """Under a time limit the beams' stop is a window of BEAM_SHARE of it, apart from
    the structure window (which the enumeration may use up); without one, none."""
    from solver import search

    model = _sites([8, 8, 4, 4], d_pp=6, d_dp=4)
    seen = []

    def record(model_, order, most=3, stop=lambda: False, beam_stop=None):
        seen.append((stop, beam_stop))
        return []

    monkeypatch.setattr(search, "structure_starts", record)
    monkeypatch.setattr(search, "BEAM_SHARE", 0.05)
    monkeypatch.setattr(search, "START_SHARE", 0.01)
    search.solve(model, time_limit=2.0, workers=1)
    stop, beam_stop = seen[-1]
    assert beam_stop is not stop
    stop()  # the windows open at their first call
    beam_stop()
    time.sleep(0.03)
    assert stop() and not beam_stop()  # 0.02 s against 0.1 s
    time.sleep(0.08)
    assert beam_stop()
    search.solve(model, restarts=0, workers=1)
    stop, beam_stop = seen[-1]
    assert not stop() and not beam_stop()
