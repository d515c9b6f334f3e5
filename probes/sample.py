"""Sampled sweeps: which device pairs to measure, and how the others are inferred.

A full sweep of ``H`` hosts of ``G`` devices measures ``H G (H G - 1) / 2`` pairs,
``G^2`` of them per host pair, and those share the two hosts' NICs, so they run one
after another. On a real fleet the device pairs of one host pair differ mostly by
which NIC each device reaches, so a sampled sweep measures:

* **inside a host**: every pair, except on GPU hosts whose ``nvidia-smi topo -m`` is
  known, where one pair per link class (``NV4``, ``PIX``, ``SYS``...) is measured and
  the other pairs of that class are inferred from it;
* **per host pair**: a few device pairs that together cover every NIC of both hosts
  (the NIC nearest each GPU, from the topology's NIC columns); without NIC affinity
  (CPU hosts, one NIC), two pairs with distinct devices on both sides;
* **one concurrent test** of all device pairs of the host pair at once (the sweep's
  group job), which shows whether they share a NIC under load: an aggregate rate close
  to one pair's rate means one shared link (recorded in the fabric's meta, per host pair).

Every other pair is *inferred*: per direction, the median alpha and beta of the
sampled pairs of the same two hosts that use the same two NICs (else of all sampled
pairs of those hosts, that direction), or of the measured pairs of the same link
class on the same host. The fabric marks such entries in ``inferred`` (``n x n``
bools) with the basis in ``inferred_basis`` and the relative spread of the sampled
betas ((max - min) / median) in ``inferred_spread``; a pair that was to be measured
and failed is never inferred (its reason stays), and an inferred pair is never
reported as measured. Pure; O(n^2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class SamplePlan:
    """What a sampled sweep measures: unordered pairs ``(i, j)``, ``i < j``, and the
    host pairs that get a concurrent test."""

    measure: frozenset[tuple[int, int]]
    groups: frozenset[tuple[str, str]]
    #: Row -> the NIC nearest it (``None`` without NIC affinity).
    nic: Mapping[int, str | None] = field(default_factory=dict)
    #: Same-host row pair -> its ``topo -m`` link class (GPU hosts with a topology).
    link: Mapping[tuple[int, int], str] = field(default_factory=dict)


def _rows_by_host(device_hosts: Sequence[str]) -> dict[str, list[int]]:
    rows: dict[str, list[int]] = {}
    for i, h in enumerate(device_hosts):
        rows.setdefault(h, []).append(i)
    return rows


def _nic_of(rows: list[int], gpus: Sequence[int | None], topo: Any) -> dict[int, str | None]:
    out: dict[int, str | None] = {}
    for i in rows:
        g = gpus[i]
        nic = None
        if topo is not None and g is not None and getattr(topo, "nics", None) and g < topo.n:
            nic = topo.nearest_nic(g)
        out[i] = nic
    return out


def _cover(rows_a: list[int], rows_b: list[int], nic: Mapping[int, str | None]) -> list[tuple[int, int]]:
    """Few pairs whose ends cover every NIC of both hosts; at least two when possible."""
    def by_nic(rows: list[int]) -> list[list[int]]:
        groups: dict[str | None, list[int]] = {}
        for i in rows:
            groups.setdefault(nic.get(i), []).append(i)
        return list(groups.values())

    ga, gb = by_nic(rows_a), by_nic(rows_b)
    want = min(max(len(ga), len(gb), 2), len(rows_a) * len(rows_b))
    chosen: list[tuple[int, int]] = []
    m = 0
    while len(chosen) < want and m < 4 * len(rows_a) * len(rows_b):
        a = ga[m % len(ga)][(m // len(ga)) % len(ga[m % len(ga)])]
        b = gb[m % len(gb)][(m // len(gb)) % len(gb[m % len(gb)])]
        if (a, b) not in chosen:
            chosen.append((a, b))
        m += 1
    for a in rows_a:  # small hosts: fill with any pair not yet chosen
        for b in rows_b:
            if len(chosen) < want and (a, b) not in chosen:
                chosen.append((a, b))
    return chosen


def plan_sample(device_hosts: Sequence[str], gpus: Sequence[int | None],
                topologies: Mapping[str, Any]) -> SamplePlan:
    """Choose the pairs of a sampled sweep (see the module docstring).

    ``gpus[i]``: row ``i``'s GPU index (``None`` on CPU hosts); ``topologies``: host ->
    :class:`probes.topo.Topology` where known.
    """
    rows = _rows_by_host(device_hosts)
    nic: dict[int, str | None] = {}
    link: dict[tuple[int, int], str] = {}
    measure: set[tuple[int, int]] = set()
    groups: set[tuple[str, str]] = set()
    for host, mine in rows.items():
        topo = topologies.get(host)
        nic.update(_nic_of(mine, gpus, topo))
        seen: set[str] = set()
        for i, j in combinations(mine, 2):
            gi, gj = gpus[i], gpus[j]
            if topo is not None and gi is not None and gj is not None and max(gi, gj) < topo.n:
                cls = topo.link(gi, gj)
                link[(i, j)] = link[(j, i)] = cls
                if cls in seen:
                    continue
                seen.add(cls)
            measure.add((i, j))
    for a, b in combinations(rows, 2):
        ra, rb = rows[a], rows[b]
        for i, j in _cover(ra, rb, nic):
            measure.add((min(i, j), max(i, j)))
        if len(ra) * len(rb) > 1:
            groups.add((a, b))
    return SamplePlan(frozenset(measure), frozenset(groups), nic, link)


@dataclass(eq=False)
class Inference:
    """Inferred entries: ``mask`` (n, n) bools, values where ``mask``, basis and spread."""

    alpha_ms: np.ndarray
    beta_gbps: np.ndarray
    mask: np.ndarray
    basis: list[list[str | None]]
    spread: list[list[float | None]]

    @property
    def pairs(self) -> int:
        """Unordered pairs with at least one inferred direction."""
        m = self.mask | self.mask.T
        return int(np.triu(m, 1).sum())


def spread_of(betas: Sequence[float]) -> float:
    """Relative spread (max - min) / median of sampled betas; 0 for one sample."""
    if len(betas) < 2:
        return 0.0
    med = float(np.median(betas))
    return (max(betas) - min(betas)) / med if med > 0 else math.inf


def infer(alpha: np.ndarray, beta: np.ndarray, device_hosts: Sequence[str],
          plan: SamplePlan) -> Inference:
    """Infer every pair the plan did not measure from the measured ones (module docstring).

    ``alpha``/``beta``: the measured directional matrices, NaN where not measured.
    """
    n = len(device_hosts)
    measured = np.isfinite(alpha) & np.isfinite(beta)
    np.fill_diagonal(measured, False)
    planned = np.zeros((n, n), dtype=bool)
    for i, j in plan.measure:
        planned[i, j] = planned[j, i] = True
    samples: dict[tuple, list[tuple[int, int]]] = {}

    def keys(i: int, j: int) -> list[tuple]:
        hi, hj = device_hosts[i], device_hosts[j]
        if hi == hj:
            cls = plan.link.get((i, j))
            return [("class", hi, cls)] if cls is not None else []
        ni, nj = plan.nic.get(i), plan.nic.get(j)
        both = [("nic", hi, hj, ni, nj)] if ni is not None or nj is not None else []
        return both + [("hosts", hi, hj)]

    for i, j in zip(*np.nonzero(measured & planned)):
        i, j = int(i), int(j)
        for key in keys(i, j):
            samples.setdefault(key, []).append((i, j))
            if key[0] == "class" and measured[j, i]:  # a link class is the same both ways
                samples[key].append((j, i))
    a_out, b_out = np.full((n, n), np.nan), np.full((n, n), np.nan)
    mask = np.zeros((n, n), dtype=bool)
    basis: list[list[str | None]] = [[None] * n for _ in range(n)]
    spread: list[list[float | None]] = [[None] * n for _ in range(n)]
    for i in range(n):
        for j in range(n):
            if i == j or planned[i, j] or measured[i, j]:
                continue
            for key in keys(i, j):
                got = samples.get(key)
                if not got:
                    continue
                alphas = [float(alpha[p]) for p in got]
                betas = [float(beta[p]) for p in got]
                a_out[i, j], b_out[i, j] = float(np.median(alphas)), float(np.median(betas))
                mask[i, j] = True
                spread[i][j] = round(spread_of(betas), 6)
                basis[i][j] = _words(key, len(got), spread[i][j])
                break
    return Inference(a_out, b_out, mask, basis, spread)


def _words(key: tuple, count: int, spread: float) -> str:
    noun = "pair" if count == 1 else "pairs"
    if key[0] == "class":
        return f"link {key[2]} on {key[1]}: median of {count} measured {noun} (beta spread {spread:.1%})"
    if key[0] == "nic":
        return (f"{key[1]} -> {key[2]} via {key[3]}/{key[4]}: median of {count} sampled {noun} "
                f"(beta spread {spread:.1%})")
    return f"{key[1]} -> {key[2]}: median of {count} sampled {noun} (beta spread {spread:.1%})"
