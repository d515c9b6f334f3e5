"""The one solve path (geoconsole.solving): what a time limit covers."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from hierarchical import hierarchical_fabric  # noqa: E402

from geoconsole.solving import BASELINE_SHARE, SolveOptions, cost_model, run_placement  # noqa: E402
from solver.workload import Workload  # noqa: E402


def test_the_time_limit_covers_the_bound_the_search_and_the_baselines(monkeypatch):
    """A 16-stage fabric: one random stage-group sample costs a Held-Karp order, so
    100,000 of them would take minutes. The search is given what the bound left less the
    baselines' share, both baselines get samples, and the call ends near the limit."""
    import solver.search

    model = cost_model(hierarchical_fabric(32, 3), Workload(16, 2, 0.512, 0.65))
    real, asked = solver.search.solve, []

    def spy(*args, **kwargs):
        asked.append(kwargs["time_limit"])
        return real(*args, **kwargs)

    monkeypatch.setattr(solver.search, "solve", spy)
    limit = 2.0
    began = time.monotonic()
    out = run_placement(model, SolveOptions(time_limit=limit, baseline_samples=100_000, workers=1))
    took = time.monotonic() - began
    (search_limit,) = asked
    assert search_limit <= limit * (1 - BASELINE_SHARE) - out.bound.elapsed_s + 1e-6
    assert [len(d.values) > 0 for d in out.baselines] == [True, True] and out.baselines_cut
    assert took < limit + 1.5  # the baselines stop at the deadline (not minutes later)


def test_without_baselines_the_search_gets_all_the_bound_left(monkeypatch):
    import solver.search

    model = cost_model(hierarchical_fabric(16, 1), Workload(4, 4, 0.512, 0.65))
    real, asked = solver.search.solve, []
    monkeypatch.setattr(solver.search, "solve",
                        lambda *a, **k: asked.append(k["time_limit"]) or real(*a, **k))
    began = time.monotonic()
    out = run_placement(model, SolveOptions(time_limit=1.0, baseline_samples=0, workers=1))
    assert 1.0 - (time.monotonic() - began) <= asked[0] <= 1.0 - out.bound.elapsed_s + 1e-6
    assert out.baselines == []
