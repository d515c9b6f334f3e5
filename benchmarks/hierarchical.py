"""SYNTHETIC hierarchical fabrics for the placement benchmarks (seeded, documented).

A fabric of ``n`` GPUs is built top-down:

- 2-4 *regions* placed on a sphere; inter-region latency 2 ms + 1 ms per 100 km (one
  way), bandwidth 0.4-1.5 Gbps falling with distance;
- 2-3 *zones* per region: 1.5 ms / 8 Gbps between zones of one region;
- *hosts* of 4-8 GPUs (the last host takes what is left): 0.3 ms / 20 Gbps between
  hosts of one zone, 0.01 ms / 150 Gbps between GPUs of one host;
- a few *slow-NIC hosts* (about one in eight, at least one): every link leaving such a
  host has a quarter of the bandwidth and 1 ms more latency;
- every directional entry is then multiplied by an independent factor in [0.9, 1.1]
  (alpha and beta separately), and the rows are shuffled, so neither the row order nor
  identical rows give the structure away. Labels (region/zone/host) stay on the devices,
  as a real inventory would have them.

``SUITE`` lists the benchmark instances (``name -> (D_PP, D_DP, seed)``), 36-192 GPUs.
``suite_instance(name, draw)`` builds them with the seed ``seed + DRAW_STRIDE * draw``:
draw 0 is the suite the README's tables use, other draws are fabrics of the same shapes
and kind the search was never tuned on.
All figures are model seconds under the DT-FM workload payloads (c_pp 0.512 GB, c_dp
0.65 GB, one message each).
"""

from __future__ import annotations

import numpy as np

from solver.cost import CostModel
from solver.fabric import Device, Fabric
from solver.workload import Workload

#: name -> (D_PP, D_DP, seed); N = D_PP x D_DP GPUs
SUITE: dict[str, tuple[int, int, int]] = {
    "h36-6x6": (6, 6, 1),
    "h48-4x12": (4, 12, 2),
    "h64-8x8": (8, 8, 3),
    "h64-16x4": (16, 4, 4),
    "h80-10x8": (10, 8, 5),
    "h96-12x8": (12, 8, 6),
    "h192-8x24": (8, 24, 7),
}

HOST = (0.01, 150.0)  # (alpha ms, beta Gbps) inside a host
ZONE = (0.3, 20.0)  # between hosts of one zone
REGION = (1.5, 8.0)  # between zones of one region
SLOW_NIC_FACTOR = 0.25
#: Seed distance between two draws of the suite (suite_instance).
DRAW_STRIDE = 100


def _hosts(rng: np.random.Generator, n: int) -> list[int]:
    sizes: list[int] = []
    while sum(sizes) < n:
        sizes.append(int(min(rng.integers(4, 9), n - sum(sizes))))
    return sizes


def _layout(rng: np.random.Generator, n: int) -> list[tuple[int, int, int]]:
    """(region, zone, host) per GPU, in build order."""
    sizes = _hosts(rng, n)
    regions = int(rng.integers(2, 5))
    zones_per = [int(rng.integers(2, 4)) for _ in range(regions)]
    zone_of = [(r, z) for r in range(regions) for z in range(zones_per[r])]
    out = []
    for h, size in enumerate(sizes):
        r, z = zone_of[h % len(zone_of)] if h < len(zone_of) else zone_of[int(rng.integers(len(zone_of)))]
        out += [(r, z, h)] * size
    return out


def _region_links(rng: np.random.Generator, regions: int) -> tuple[np.ndarray, np.ndarray]:
    lat = np.arcsin(rng.uniform(-0.9, 0.9, regions))
    lon = rng.uniform(-np.pi, np.pi, regions)
    xyz = np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)
    km = 6371.0 * np.arccos(np.clip(xyz @ xyz.T, -1.0, 1.0))
    alpha = 2.0 + km / 100.0
    beta = np.clip(1.5 - km / 20000.0 * 1.1, 0.4, 1.5)
    return alpha, beta


def hierarchical_fabric(n: int, seed: int) -> Fabric:
    """A SYNTHETIC fabric of ``n`` GPUs as described in the module text."""
    rng = np.random.default_rng([seed, n])
    where = _layout(rng, n)
    reg = np.array([w[0] for w in where])
    zone = np.array([w[0] * 10 + w[1] for w in where])
    host = np.array([w[2] for w in where])
    ra, rb = _region_links(rng, int(reg.max()) + 1)
    alpha = ra[reg[:, None], reg[None, :]].copy()
    beta = rb[reg[:, None], reg[None, :]].copy()
    for mask, (a, b) in ((zone[:, None] != zone[None, :]) & (reg[:, None] == reg[None, :]), REGION), \
            ((zone[:, None] == zone[None, :]), ZONE), ((host[:, None] == host[None, :]), HOST):
        alpha[mask], beta[mask] = a, b
    hosts = np.unique(host)
    slow = rng.choice(hosts, size=max(1, len(hosts) // 8), replace=False)
    off_host = host[:, None] != host[None, :]
    touches = np.isin(host, slow)
    slow_link = off_host & (touches[:, None] | touches[None, :])
    beta[slow_link] *= SLOW_NIC_FACTOR
    alpha[slow_link] += 1.0
    alpha *= rng.uniform(0.9, 1.1, (n, n))
    beta *= rng.uniform(0.9, 1.1, (n, n))
    perm = rng.permutation(n)
    alpha, beta = alpha[np.ix_(perm, perm)], beta[np.ix_(perm, perm)]
    np.fill_diagonal(alpha, 0.0)
    np.fill_diagonal(beta, 0.0)
    gpu_index = {}
    devices = []
    for i in perm:
        k = gpu_index.get(host[i], 0)
        gpu_index[host[i]] = k + 1
        slow_tag = "-slownic" if host[i] in slow else ""
        devices.append(Device(host=f"h{host[i]:02d}{slow_tag}", gpu=k, region=f"r{reg[i]}",
                              zone=f"r{reg[i]}z{zone[i] % 10}"))
    labels = tuple(d.region for d in devices)
    meta = {"source": f"synthetic hierarchical fabric, {n} GPUs, seed {seed}", "synthetic": True}
    return Fabric(alpha, beta, labels, tuple(devices), None, meta, {}, f"synthetic:hier{n}s{seed}")


def suite_instance(name: str, draw: int = 0) -> tuple[Fabric, CostModel]:
    """The fabric and cost model of one ``SUITE`` instance (``draw``: module text)."""
    d_pp, d_dp, seed = SUITE[name]
    fabric = hierarchical_fabric(d_pp * d_dp, seed + DRAW_STRIDE * draw)
    return fabric, CostModel.from_fabric(fabric, Workload(d_pp, d_dp, 0.512, 0.65))
