"""Worker 1's own lineage: a tempering ladder from a random layout that never takes the elite."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import pytest

from solver import anytime, tempering
from solver.anytime import lineage_ladder, temper
from solver.descent import Effort

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from hierarchical import suite_instance  # noqa: E402


def _model():
    return suite_instance("h36-6x6", 0)[1]


def _random_layout(model, seed):
    return np.random.default_rng([*seed, anytime.LINEAGE_STREAM]).permutation(model.n).reshape(6, 6)


def test_a_lineage_starts_from_a_random_layout_at_its_temperature_scale():
    model = _model()
    memory = {}
    ladder = lineage_ladder(model, (6, 6), memory, [0, 1])
    start = _random_layout(model, [0, 1])
    assert memory["ladder"] is ladder and all((g == start).all() for g in ladder.grids)
    assert ladder.temps.max() == pytest.approx(tempering.TAU_HOT * model.score_grid(start).comm)
    again = lineage_ladder(model, (6, 6), {}, [0, 1])
    other = lineage_ladder(model, (6, 6), {}, [1, 1])
    assert (again.grids[0] == start).all() and not (other.grids[0] == start).all()


def test_a_nearly_stalled_lineage_restarts_at_its_own_best_once_then_afresh():
    model = _model()
    memory = {}
    first = lineage_ladder(model, (6, 6), memory, [0, 1])
    first.run(3000)  # improves its best far more than NEAR_STALL: kept
    assert memory["lineage_best"] > first.best * (1 + anytime.NEAR_STALL)
    assert lineage_ladder(model, (6, 6), memory, [0, 1]) is first
    # no walk since: its best moved by 0, so every chain restarts at it, scaled to it
    second = lineage_ladder(model, (6, 6), memory, [0, 1])
    assert second is not first and memory["ladder"] is second
    assert all((g == first.best_grid).all() for g in second.grids)
    assert second.temps.max() == pytest.approx(tempering.TAU_HOT * first.best)
    assert second.rng_state.tobytes() != first.rng_state.tobytes()
    # still stalled, at the best it already restarted from: once per best, then a
    # fresh lineage from another random layout of its own stream
    third = lineage_ladder(model, (6, 6), memory, [0, 1])
    fresh = np.random.default_rng([0, 1, anytime.LINEAGE_STREAM, anytime.FRESH_STREAM + 1])
    start = fresh.permutation(model.n).reshape(6, 6)
    assert third is not second and memory["ladder"] is third
    assert all((g == start).all() for g in third.grids) and not (start == first.best_grid).all()
    assert third.temps.max() == pytest.approx(tempering.TAU_HOT * model.score_grid(start).comm)
    third.run(3000)  # it moves: kept, as the first was
    assert lineage_ladder(model, (6, 6), memory, [0, 1]) is third


def _nearly_stalled_at_another_best(model, memory, ladder):
    """The last walk moved the ladder's best to another grid, by less than NEAR_STALL:
    the same layout with two pipelines (rows) swapped, which has the same Comm."""
    moved = ladder.best_grid[[1, 0, *range(2, ladder.best_grid.shape[0])]].copy()
    assert model.score_grid(moved).comm == pytest.approx(ladder.best)
    memory["lineage_best"] = ladder.best * (1 + anytime.NEAR_STALL / 2)
    ladder.best_grid = moved
    return moved


def test_a_lineage_restarts_once_then_afresh_even_when_its_best_crawls():
    """The walk after the restart moved the best, but by less than NEAR_STALL: a fresh
    lineage, not a second restart at the new best."""
    model = _model()
    memory = {}
    first = lineage_ladder(model, (6, 6), memory, [0, 1])
    second = lineage_ladder(model, (6, 6), memory, [0, 1])  # stalled: restart at its best
    assert all((g == first.best_grid).all() for g in second.grids)
    moved = _nearly_stalled_at_another_best(model, memory, second)
    third = lineage_ladder(model, (6, 6), memory, [0, 1])
    start = np.random.default_rng([0, 1, anytime.LINEAGE_STREAM, anytime.FRESH_STREAM + 1]).permutation(
        model.n).reshape(6, 6)
    assert all((g == start).all() for g in third.grids) and not (start == moved).all()
    # the fresh lineage gets its own restart when it stalls in turn
    fourth = lineage_ladder(model, (6, 6), memory, [0, 1])
    assert all((g == third.best_grid).all() for g in fourth.grids)


def test_without_fresh_lineages_a_crawling_lineage_restarts_at_each_new_best(monkeypatch):
    monkeypatch.setattr(anytime, "LINEAGE_FRESH", False)
    model = _model()
    memory = {}
    first = lineage_ladder(model, (6, 6), memory, [0, 1])
    second = lineage_ladder(model, (6, 6), memory, [0, 1])
    moved = _nearly_stalled_at_another_best(model, memory, second)
    third = lineage_ladder(model, (6, 6), memory, [0, 1])
    assert third is not second and all((g == moved).all() for g in third.grids)
    assert first is not second


def test_without_fresh_lineages_a_stalled_lineage_keeps_its_ladder(monkeypatch):
    monkeypatch.setattr(anytime, "LINEAGE_FRESH", False)
    model = _model()
    memory = {}
    first = lineage_ladder(model, (6, 6), memory, [0, 1])
    second = lineage_ladder(model, (6, 6), memory, [0, 1])  # stalled: restarts at its best
    assert second is not first
    assert lineage_ladder(model, (6, 6), memory, [0, 1]) is second


def test_a_lineage_walk_never_takes_the_elite_and_returns_the_better(monkeypatch):
    """Three walks handed the same elite: it never enters the ladder (its own descended
    grids do), only the stalled elite of walks 2 and 3 is offered to ``explore``
    (LINEAGE_EXPLORES; here it declines), and each walk returns the better of the two."""
    model = _model()
    injected, built = [], []
    real = anytime.Ladder.inject
    monkeypatch.setattr(anytime.Ladder, "inject", lambda self, g, f: injected.append(g.copy()) or real(self, g, f))

    class Recorded(anytime.Ladder):
        def __init__(self, model, g, rng, *a, **k):
            super().__init__(model, g, rng, *a, **k)
            built.append(np.asarray(g).copy())

    monkeypatch.setattr(anytime, "Ladder", Recorded)
    explored = []
    monkeypatch.setattr(anytime, "explore", lambda *a, **k: explored.append(1))
    memory = {}
    elite = np.arange(36).reshape(6, 6)
    fun = model.score_grid(elite).comm
    for _ in range(3):
        walk = temper(model, elite, fun, np.random.default_rng(0), Effort(100_000), memory,
                      seed=[0, 1], clock=time.monotonic, cancel=lambda: False, explorer=True,
                      lineage=True, strategy_prefix="worker 1: ")
        assert walk.fun <= fun and walk.fun == pytest.approx(model.score_grid(walk.grid).comm)
        if walk.fun < fun:
            assert walk.strategy.startswith("worker 1: parallel tempering (own lineage)")
        assert not any((g == elite).all() for g in memory["ladder"].grids)
    assert injected and not any((g == elite).all() for g in injected) and explored == [1, 1]
    assert built and not any((g == elite).all() for g in built)
    assert walk.fun < fun  # three lineage walks beat the elite, a layout in device order


def test_exploring_walks_spare_only_the_next_lineage_walk_from_a_stall_verdict():
    """LINEAGE_EXPLORES: the walk after exploring walks keeps its ladder whatever the last
    lineage walk gained; the mark is used up there, so the walk after that is judged."""
    model = _model()
    for gained in (True, False):
        memory = {}
        first = lineage_ladder(model, (6, 6), memory, [0, 1])
        memory["lineage_best"] = first.best * (2.0 if gained else 1.0)
        memory["lineage_idle"] = True  # set by temper after an exploring walk
        assert lineage_ladder(model, (6, 6), memory, [0, 1]) is first and "lineage_idle" not in memory
        # nothing gained since: stalled, so it restarts at its best
        second = lineage_ladder(model, (6, 6), memory, [0, 1])
        assert second is not first and all((g == first.best_grid).all() for g in second.grids)


@pytest.mark.parametrize("seed", [2**63, 2**64 - 1])
def test_streams_take_every_seed_the_cli_accepts(seed):
    """numpy turned [2**63, 1] into floats and refused them as a seed: solve --seed 2**63
    ended in a traceback (one worker) or a lost worker (two)."""
    model = _model()
    assert anytime.seed_words([seed, 1]) == [seed, 1] and anytime.seed_words(seed) == [seed]
    ladder = lineage_ladder(model, (6, 6), {}, [seed, 1])
    assert (ladder.grids[0] == _random_layout(model, [seed, 1])).all()
    assert anytime.origin_ladder(model, [ladder.grids[0]], {}, [seed, 0]).best > 0
