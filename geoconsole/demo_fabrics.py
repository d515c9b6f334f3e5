"""Built-in demo fabrics: the DT-FM world-wide matrix and a synthetic two-datacenter one.

Both are built from small tables here, not read from files, so the console and the
``demo`` command work on a fresh install with no fleet.
"""

from __future__ import annotations

import numpy as np

from solver.fabric import Device, Fabric
from solver.workload import DTFM_WORKLOAD, Workload

#: DT-FM world-wide regions, in the order of its ``config.py``.
WORLDWIDE_REGIONS = ("Oregon", "Virginia", "Ohio", "Tokyo", "Seoul", "London", "Frankfurt", "Ireland")

# Upper triangles of DT-FM's inter-region delay (ms) and bandwidth (Gbps) tables, row by row.
_WW_ALPHA = (
    (67, 49, 96, 124, 136, 143, 124),
    (11, 143, 172, 76, 90, 67),
    (130, 159, 86, 99, 77),
    (34, 210, 223, 199),
    (238, 235, 228),
    (14, 12),
    (24,),
)
_WW_BETA = (
    (0.79, 1.1, 0.523, 0.46, 0.42, 0.404, 0.482),
    (1.12, 0.524, 0.5, 1.16, 1.02, 1.05),
    (0.694, 0.529, 1.05, 0.799, 1.14),
    (1.1, 0.366, 0.36, 0.465),
    (0.342, 0.358, 0.335),
    (1.14, 1.09),
    (1.08,),
)
#: The paper's intra-region assumption.
WW_INTRA_ALPHA_MS = 5.0
WW_INTRA_BETA_GBPS = 2.0


def _symmetric_table(upper: tuple[tuple[float, ...], ...], n: int) -> np.ndarray:
    table = np.zeros((n, n))
    for i, row in enumerate(upper):
        table[i, i + 1 :] = row
    return table + table.T


def _expand(region_table: np.ndarray, per_region: int, intra: float) -> np.ndarray:
    """Block matrix: ``intra`` inside a region, the table's value across, 0 diagonal."""
    m = np.kron(region_table, np.ones((per_region, per_region)))
    n_regions = region_table.shape[0]
    for r in range(n_regions):
        block = slice(r * per_region, (r + 1) * per_region)
        m[block, block] = intra
    np.fill_diagonal(m, 0.0)
    return m


def worldwide_fabric(gpus_per_region: int = 8) -> Fabric:
    """DT-FM's world-wide fabric: 8 regions x ``gpus_per_region`` GPUs (64 by default)."""
    n_regions = len(WORLDWIDE_REGIONS)
    alpha = _expand(_symmetric_table(_WW_ALPHA, n_regions), gpus_per_region, WW_INTRA_ALPHA_MS)
    beta = _expand(_symmetric_table(_WW_BETA, n_regions), gpus_per_region, WW_INTRA_BETA_GBPS)
    labels = tuple(r for r in WORLDWIDE_REGIONS for _ in range(gpus_per_region))
    devices = tuple(
        Device(host=f"{r.lower()}-{g}", gpu=0, region=r)
        for r in WORLDWIDE_REGIONS
        for g in range(gpus_per_region)
    )
    meta = {
        "source": "DT-FM world-wide table (config.py) with the paper's 5 ms / 2 Gbps intra-region values",
        "synthetic": False,
    }
    return Fabric(alpha, beta, labels, devices, None, meta, {}, "demo:worldwide")


#: Synthetic two-datacenter fabric: (alpha ms, beta Gbps) per level of shared locality.
SYNTHETIC_LEVELS = {
    "same host": (0.02, 40.0),
    "same datacenter": (0.5, 10.0),
    "across datacenters": (40.0, 0.4),
}


def two_datacenter_fabric() -> Fabric:
    """SYNTHETIC: 2 datacenters x 4 hosts x 8 GPUs with the levels of SYNTHETIC_LEVELS.

    Made up for the demo (the placement spec's own two-datacenter example is not
    published numerically); it shows the gain when a few slow links cross a fast core.
    """
    devices = tuple(
        Device(host=f"dc{d}-host{h}", gpu=g, region=f"dc-{'ab'[d]}", zone=f"dc-{'ab'[d]}-1")
        for d in range(2)
        for h in range(4)
        for g in range(8)
    )
    n = len(devices)
    alpha = np.empty((n, n))
    beta = np.empty((n, n))
    for i, a in enumerate(devices):
        for j, b in enumerate(devices):
            if a.host == b.host:
                level = "same host"
            elif a.region == b.region:
                level = "same datacenter"
            else:
                level = "across datacenters"
            alpha[i, j], beta[i, j] = SYNTHETIC_LEVELS[level]
    np.fill_diagonal(alpha, 0.0)
    np.fill_diagonal(beta, 0.0)
    labels = tuple(d.region or "" for d in devices)
    meta = {"source": "synthetic two-datacenter example (made up, see SYNTHETIC_LEVELS)", "synthetic": True}
    return Fabric(alpha, beta, labels, devices, None, meta, {}, "demo:two-datacenter (synthetic)")


#: Workload used with the synthetic fabric: activations dominate, as on a real LLM split.
TWO_DC_WORKLOAD = Workload(d_pp=8, d_dp=8, c_pp=0.512, c_dp=0.65)

DEMOS = {
    "worldwide": (worldwide_fabric, DTFM_WORKLOAD),
    "two-datacenter": (two_datacenter_fabric, TWO_DC_WORKLOAD),
}


def random_geo_fabric(regions: int, per_region: int, seed: int = 0) -> Fabric:
    """SYNTHETIC: ``regions`` random sites on a sphere, ``per_region`` GPUs each.

    Inter-region latency grows with great-circle distance (~1 ms per 100 km one way,
    plus 2 ms), bandwidth falls with it (0.3-1.2 Gbps, jittered 10%); inside a region
    5 ms / 2 Gbps as in DT-FM's world-wide table. Used by benchmarks and scale tests.
    """
    rng = np.random.default_rng(seed)
    lat = np.arcsin(rng.uniform(-0.9, 0.9, regions))
    lon = rng.uniform(-np.pi, np.pi, regions)
    xyz = np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)
    angle = np.arccos(np.clip(xyz @ xyz.T, -1.0, 1.0))
    km = 6371.0 * angle
    alpha_r = 2.0 + km / 100.0
    beta_r = np.clip(1.2 - km / 20000.0 * 0.9, 0.3, 1.2) * rng.uniform(0.9, 1.1, (regions, regions))
    beta_r = (beta_r + beta_r.T) / 2
    alpha = _expand(alpha_r, per_region, WW_INTRA_ALPHA_MS)
    beta = _expand(beta_r, per_region, WW_INTRA_BETA_GBPS)
    names = [f"site{k:02d}" for k in range(regions)]
    labels = tuple(nm for nm in names for _ in range(per_region))
    devices = tuple(Device(host=f"{nm}-{g}", gpu=0, region=nm) for nm in names for g in range(per_region))
    meta = {"source": f"synthetic random geo fabric, {regions} x {per_region}, seed {seed}", "synthetic": True}
    return Fabric(alpha, beta, labels, devices, None, meta, {}, f"synthetic:{regions}x{per_region}")
