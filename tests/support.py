"""Shared test helpers: waiting for a condition, small fabrics, the console app with a fixed
clock, and ready-made deterministic solutions."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

import numpy as np

from geoconsole.app import GeoConsoleApp, create_app
from geoconsole.session import Session, Solution
from solver.fabric import Fabric
from solver.baselines import random_rank_maps, random_stage_groups
from solver.bounds import lower_bound
from solver.cost import CostModel

async def wait_until(condition, timeout: float = 30.0, interval: float = 0.02) -> None:
    """Poll ``condition`` on the event loop until it holds; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)


def fabric_of(devices) -> Fabric:
    """A uniform fabric (1 ms, 10 Gbps) over ``devices``, labelled by region."""
    n = len(devices)
    a = np.full((n, n), 1.0)
    b = np.full((n, n), 10.0)
    np.fill_diagonal(a, 0)
    np.fill_diagonal(b, 0)
    return Fabric(a, b, [d.region or "?" for d in devices], tuple(devices))


FIXED_NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=timezone.utc)


def fixed_clock() -> datetime:
    return FIXED_NOW


def demo_app(**kwargs) -> GeoConsoleApp:
    """The console on the demo fabric with a fixed clock. Screens are built on first
    visit (``prebuild=True`` builds them in the background, as the real console does)."""
    kwargs.setdefault("prebuild", False)
    return create_app(clock=fixed_clock, **kwargs)


def region_pipelines(session: Session) -> np.ndarray:
    """The spec's best topology seed on the world-wide demo: every pipeline in one region,
    every stage group one GPU per region (rank = region * 8 + index = row). 51.50 s."""
    return np.arange(session.fabric.n)


def make_solution(session: Session, rank_map, name: str = "solve #1", samples: int = 30) -> Solution:
    """Score ``rank_map`` from scratch and wrap it like the solve screen does, with fixed
    times so that screenshots are stable."""
    model = CostModel.from_fabric(session.fabric, session.workload)
    fun = model.score_rank_map(np.asarray(rank_map)).comm
    baselines = {d.name: [float(v) for v in d.values]
                 for d in (random_rank_maps(model, samples, 0), random_stage_groups(model, samples, 0))}
    history = [(0.0, fun * 1.6), (0.2, fun * 1.2), (0.5, fun * 1.05), (0.9, fun)]
    return Solution(
        name=name, rank_map=np.asarray(rank_map), fun=fun, workload=session.workload,
        digest=session.digest(), created_at="2026-11-29T12:00:00Z", bound=lower_bound(model).value,
        status="0", message="evaluation budget used up", seed=0, nit=12, nfev=20000,
        elapsed_s=0.9, history=history, baselines=baselines,
    )


def with_solutions(app: GeoConsoleApp, *rank_maps) -> GeoConsoleApp:
    for k, rank_map in enumerate(rank_maps, start=1):
        app.session.add_solution(make_solution(app.session, rank_map, name=f"solve #{k}"))
    return app
