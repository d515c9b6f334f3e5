"""Device orderings from labels and measurement, for the solver's topology-derived seeds.

A seed ordering lists every fabric row once; the search cuts it into pipelines or stage
groups, so an ordering that keeps close devices adjacent yields seeds such as "each
pipeline stays in one region". ``seed_orders_for`` returns, without duplicates:

1. ``labels``: rows sorted by (region, zone, network_group, host, gpu), unknown values
   last within their level, ties by row;
2. ``labels-chained``: the same blocks, with regions (then zones inside each region)
   chained by nearest neighbour on the median measured transfer time between blocks,
   so consecutive blocks are also close to each other;
3. ``measured``: the leaf order of the average-linkage tree of measured transfer times
   (solver.suggest), which needs no labels at all;
4. ``hosts``: rows grouped by host in order of first appearance, GPUs ascending.

Cost: O(n log n) for the sorts, O(n^2) for the chained and measured orders.
"""

from __future__ import annotations

import numpy as np

from solver.estimate import measured_mask
from solver.fabric import Device, Fabric
from solver.suggest import REFERENCE_PAYLOAD_GB, leaf_order


def _label_key(d: Device, row: int) -> tuple:
    def part(v):
        return (v is None, v or "")

    return (part(d.region), part(d.zone), part(d.network_group), d.host,
            -1 if d.gpu is None else d.gpu, row)


def label_order(fabric: Fabric) -> list[int]:
    """Rows sorted by (region, zone, network_group, host, gpu); unlabelled last."""
    if fabric.devices is None:
        return list(range(fabric.n))
    return sorted(range(fabric.n), key=lambda i: _label_key(fabric.devices[i], i))


def host_order(fabric: Fabric) -> list[int]:
    """Rows grouped by host (first appearance), GPUs ascending inside a host."""
    if fabric.devices is None:
        return list(range(fabric.n))
    first: dict[str, int] = {}
    for i, d in enumerate(fabric.devices):
        first.setdefault(d.host, i)
    return sorted(range(fabric.n), key=lambda i: (first[fabric.devices[i].host],
                                                  -1 if fabric.devices[i].gpu is None else fabric.devices[i].gpu, i))


def _chain(blocks: list[list[int]], t: np.ndarray) -> list[list[int]]:
    """Blocks reordered by nearest neighbour from the first, on median inter-block time."""
    if len(blocks) < 3:
        return blocks
    m = len(blocks)
    cost = np.full((m, m), np.inf)
    for a in range(m):
        for b in range(m):
            if a != b:
                vals = t[np.ix_(blocks[a], blocks[b])]
                vals = vals[np.isfinite(vals)]
                if vals.size:
                    cost[a, b] = float(np.median(vals))
    order, left = [0], set(range(1, m))
    while left:
        last = order[-1]
        nxt = min(left, key=lambda b: (cost[last, b], b))
        order.append(nxt)
        left.remove(nxt)
    return [blocks[b] for b in order]


def chained_label_order(fabric: Fabric) -> list[int]:
    """label_order with regions, and zones inside each region, chained by proximity."""
    base = label_order(fabric)
    if fabric.devices is None:
        return base
    t = fabric.transfer_s(REFERENCE_PAYLOAD_GB)
    regions: dict[object, list[int]] = {}
    for i in base:
        regions.setdefault(fabric.devices[i].region, []).append(i)
    out: list[int] = []
    for rows in _chain(list(regions.values()), t):
        zones: dict[object, list[int]] = {}
        for i in rows:
            zones.setdefault(fabric.devices[i].zone, []).append(i)
        for block in _chain(list(zones.values()), t):
            out.extend(block)
    return out


def seed_orders_for(fabric: Fabric, measured: np.ndarray | None = None) -> list[list[int]]:
    """Distinct topology-derived orderings of the rows (see the module text).

    ``measured``: mask of trusted entries for the measured order; default: the
    measured ones (finite and not marked estimated).
    """
    if measured is None:
        measured = measured_mask(fabric)
    candidates = [label_order(fabric), chained_label_order(fabric)]
    leaves = leaf_order(fabric, measured)
    if leaves is not None:
        candidates.append(leaves)
    candidates.append(host_order(fabric))
    out: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for order in candidates:
        key = tuple(order)
        if key not in seen:
            seen.add(key)
            out.append(list(order))
    return out
