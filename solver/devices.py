"""Which of a machine's GPUs a task gets: ``pick_devices`` (ADR-0021 addendum).

``nvidia-smi topo -m`` names the link between every two GPUs of a machine. Their speed
order, fastest first::

    NV<n> (more bonded NVLinks is faster) > PIX > PXB > PHB > NODE > SYS

(``SOC`` is the old name of SYS.) For a task that needs ``k`` GPUs out of the free ones,
``pick_devices`` returns the set whose *slowest* internal link is fastest, then the one
with the most total link speed, then the lowest indices (lexicographically smallest
sorted tuple). Without link data, or for ``k == 1``, it keeps the lowest free indices.

Link speeds are ordinal scores (link_speed), not bandwidths: the ranking above is what
the ADR fixes, and a sum of ordinal scores is a tie-breaker only.

Search: when ``C(free, k)`` is at most EXACT_LIMIT (every 8-GPU case), all subsets are
scored, so the answer is exact. Beyond it, the ADR's greedy runs from every starting
GPU (add the free GPU whose weakest link to the set is fastest, then the largest sum to
the set, then the lowest index) and the best of those sets is kept:
O(f^2 k) for ``f`` free GPUs.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Mapping, Sequence

import numpy as np

#: Ordinal speed of each PCIe/socket link class; NV<n> scores NV_BASE + n.
CLASS_SPEED = {"SYS": 1, "NODE": 2, "PHB": 3, "PXB": 4, "PIX": 5}
NV_BASE = 10
#: Largest number of subsets pick_devices scores exhaustively before it goes greedy.
EXACT_LIMIT = 5000

_NV = re.compile(r"^NV(\d+)$")


def link_speed(link: str | None) -> int:
    """Ordinal speed of a ``topo -m`` link class (0 = unknown / no link). ValueError if unparseable.

    >>> link_speed("NV12") > link_speed("NV2") > link_speed("PIX") > link_speed("SYS")
    True
    """
    if link is None:
        return 0
    text = str(link).strip().upper()
    if text == "SOC":
        text = "SYS"
    if text in CLASS_SPEED:
        return CLASS_SPEED[text]
    m = _NV.match(text)
    if m:
        return NV_BASE + int(m.group(1))
    if text in ("X", ""):
        return 0
    raise ValueError(f"unknown GPU link class {link!r}; expected NV<n>, PIX, PXB, PHB, NODE or SYS")


def speed_matrix(links, n: int | None = None) -> np.ndarray | None:
    """Ordinal speeds as an ``(n, n)`` int array from link classes; None when no data.

    ``links`` is a square sequence of class strings (row i, column j; the diagonal
    ``X`` is ignored) or a mapping ``{i: {j: class}}`` as AcceleratorDevice.links.
    """
    if links is None:
        return None
    if isinstance(links, Mapping):
        size = n if n is not None else 1 + max(
            [int(i) for i in links] + [int(j) for peers in links.values() for j in peers], default=-1
        )
        if size == 0 or not any(links.values()):
            return None
        out = np.zeros((size, size), dtype=int)
        for i, peers in links.items():
            for j, cls in peers.items():
                if int(i) != int(j):
                    out[int(i), int(j)] = out[int(j), int(i)] = max(out[int(i), int(j)], link_speed(cls))
        return out
    rows = list(links)
    if not rows:
        return None
    size = len(rows)
    out = np.zeros((size, size), dtype=int)
    for i, row in enumerate(rows):
        row = list(row)
        if len(row) != size:
            raise ValueError(f"links[{i}]: {len(row)} entries for {size} GPUs")
        for j, cls in enumerate(row):
            if i != j:
                out[i, j] = link_speed(cls)
    return np.maximum(out, out.T)


def _key(speed: list[list[int]], subset: Sequence[int]) -> tuple:
    """Sort key of a subset: slowest link, total speed, then lowest indices (all better first).

    Plain lists, not numpy: subsets are tiny and numpy's per-call overhead dominates.
    """
    members = sorted(subset)
    links = [speed[a][b] for x, a in enumerate(members) for b in members[x + 1:]]
    return (-min(links), -sum(links), tuple(members))


def _greedy_from(speed: np.ndarray, start: int, free: list[int], k: int) -> list[int]:
    chosen = [start]
    rest = [f for f in free if f != start]
    while len(chosen) < k:
        links = speed[np.ix_(rest, chosen)]
        scores = [(-int(links[r].min()), -int(links[r].sum()), rest[r]) for r in range(len(rest))]
        best = min(scores)[2]
        chosen.append(best)
        rest.remove(best)
    return chosen


def pick_devices(links, free: Sequence[int], k: int) -> list[int]:
    """The ``k`` GPUs of ``free`` a task should get, ascending.

    Parameters
    ----------
    links : square sequence of link classes, mapping ``{i: {j: class}}``, or None
        The machine's ``topo -m`` matrix (indices as in CUDA_VISIBLE_DEVICES with
        CUDA_DEVICE_ORDER=PCI_BUS_ID).
    free : sequence of int
        Indices of the free GPUs.
    k : int
        How many the task needs.

    Raises
    ------
    ValueError
        ``k`` outside ``0..len(free)``, duplicate or out-of-range indices, bad classes.
    """
    pool = sorted({int(i) for i in free})
    if len(pool) != len(list(free)):
        raise ValueError("free: duplicate GPU indices")
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= len(pool):
        raise ValueError(f"k: must be between 0 and {len(pool)} free GPUs, got {k!r}")
    if pool and pool[0] < 0:
        raise ValueError(f"free: GPU index {pool[0]} is negative")
    speed = speed_matrix(links)
    if speed is None or k <= 1:
        return pool[:k]
    if pool[-1] >= speed.shape[0]:
        raise ValueError(f"free: GPU {pool[-1]} is not in the {speed.shape[0]}-GPU link matrix")
    table = speed.tolist()
    if math.comb(len(pool), k) <= EXACT_LIMIT:
        candidates = itertools.combinations(pool, k)
    else:
        candidates = (_greedy_from(speed, s, pool, k) for s in pool)
    best = min(candidates, key=lambda c: _key(table, c))
    return sorted(int(i) for i in best)


def pick_devices_greedy(links, free: Sequence[int], k: int) -> list[int]:
    """pick_devices with the greedy search forced (for tests and the benchmark)."""
    pool = sorted({int(i) for i in free})
    speed = speed_matrix(links)
    if speed is None or k <= 1:
        return pool[:k]
    table = speed.tolist()
    best = min((_greedy_from(speed, s, pool, k) for s in pool), key=lambda c: _key(table, c))
    return sorted(best)
