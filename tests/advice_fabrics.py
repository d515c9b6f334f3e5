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
