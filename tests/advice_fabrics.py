"""Small fabrics made to trigger (or not) each advice rule: 4 regions of GPUs, one per host."""

from __future__ import annotations

import numpy as np

from solver.fabric import Device, Fabric


def region_fabric(n: int = 16, *, jitter: float = 0.05, regions: int = 4, slow: int | None = None,
                  slow_beta: float = 0.1, seed: int = 1) -> Fabric:
    """``n`` devices ``h<i>:0`` in ``regions`` regions (row i in region i % regions):
    5 ms / 2 Gbps inside a region, 50 ms / 0.5 Gbps across, each value jittered by up to
    ``jitter``. ``regions=0``: one region, every link alike (a nearly uniform fabric).
    ``slow``: that row reaches everyone at ``slow_beta`` Gbps (a poor device)."""
    rng = np.random.default_rng(seed)
    alpha = np.full((n, n), 5.0) * (1 + jitter * rng.uniform(-1, 1, (n, n)))
    beta = np.full((n, n), 2.0) * (1 + jitter * rng.uniform(-1, 1, (n, n)))
    if regions:
        r = np.arange(n) % regions
        cross = r[:, None] != r[None, :]
        alpha = np.where(cross, alpha * 10, alpha)
        beta = np.where(cross, beta / 4, beta)
    if slow is not None:
        beta[slow, :] = beta[:, slow] = slow_beta
    np.fill_diagonal(alpha, 0.0)
    np.fill_diagonal(beta, 0.0)
    devices = tuple(Device(f"h{i}", 0, region=f"r{i % regions if regions else 0}") for i in range(n))
    return Fabric(alpha, beta, [d.region for d in devices], devices, source="<advice test>")


def advice_app(fabric: Fabric | None = None):
    """The console on ``fabric`` (default: 16 devices, h5 slow to everyone), D_PP = D_DP = 4,
    with a fixed clock."""
    from support import fixed_clock

    from geoconsole.app import GeoConsoleApp
    from geoconsole.session import Session
    from solver.workload import Workload

    session = Session(fabric if fabric is not None else region_fabric(slow=5), Workload(4, 4, 0.5, 0.5))
    return GeoConsoleApp(session, clock=fixed_clock)


def with_advised_solution(app):
    """A solution solved (seeded, fixed budget) and advised by the core, as the Solve screen
    does, with fixed times so that screenshots are stable."""
    from support import FIXED_NOW, make_solution

    from geoconsole.advice import for_solve
    from geoconsole.solving import SolveOptions, cost_model, run_placement

    s = app.session
    model = cost_model(s.fabric, s.workload)
    out = run_placement(model, SolveOptions(budget=20_000, baseline_samples=30))
    sol = make_solution(s, out.result.x)
    sol.advice = [a.to_json() for a in for_solve(s.fabric, model, out.result, out.baselines, out.bound, now=FIXED_NOW)]
    s.add_solution(sol)
    return app


def random_fabric(n: int = 32, seed: int = 2) -> Fabric:
    """Unlabelled links drawn uniformly (1-200 ms, 0.05-5 Gbps): no topology for the starts
    to follow, so on a small budget the search lands far apart from seed to seed."""
    rng = np.random.default_rng(seed)
    alpha, beta = rng.uniform(1, 200, (n, n)), rng.uniform(0.05, 5, (n, n))
    np.fill_diagonal(alpha, 0.0)
    np.fill_diagonal(beta, 0.0)
    return Fabric(alpha, beta, ["x"] * n, source="<random test fabric>")
