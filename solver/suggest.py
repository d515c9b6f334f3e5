"""Suggested network groups from the measured fabric (hierarchical clustering).

The measured, symmetric transfer time ``T_ij`` of a reference message (``payload_gb``
decimal GB in ``messages`` messages; ``T`` as in solver.fabric) is turned into the
distance ``D_ij = log(T_ij / min T)`` -- locality levels differ by *factors*, so
differences of logarithms separate them evenly -- and clustered by average linkage
(UPGMA, scipy.cluster.hierarchy). Pairs that were not measured (or only estimated)
count as the largest measured distance: with no evidence that two devices are close,
they are not grouped by it.

The cut is gap-based. Sorted merge heights ``h_1 <= ... <= h_{n-1}`` are geometric-mean
transfer-time ratios; a *gap* is a step ``exp(h_{k+1} - h_k) >= min_gap`` (default 1.5:
the next merge is 1.5 times as slow; DT-FM's closest regions, London and Frankfurt,
are 1.77 times slower than inside a region). From the finest gap upwards, the first cut whose
clusters keep every host whole and put at least two hosts together is the network-group
cut (finer cuts separate GPUs of one host, which the topology already describes).
No such gap: the fabric shows no grouping to suggest.

Each cluster is named after the network-group label most of its rows already carry
(when that label is not the choice of a larger cluster), else ``ng-<k>``. A row whose
label is missing is ``missing``; one whose label differs from its cluster's name
``contradicts`` the measurement. Cost: O(n^2) memory and time for the linkage.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.cluster.hierarchy import fcluster, leaves_list, linkage
from scipy.spatial.distance import squareform

from solver.estimate import measured_mask
from solver.fabric import Fabric

#: Reference message for the clustering distance: 0.1 GB in one message weighs latency
#: and bandwidth both (5 ms vs 0.4 s at 2 Gbps), as a training transfer does.
REFERENCE_PAYLOAD_GB = 0.1
DEFAULT_MIN_GAP = 1.5


@dataclass(frozen=True)
class RowSuggestion:
    """One row whose network group should change: ``status`` is missing or contradicts."""

    row: int
    device: str
    current: str | None
    suggested: str
    status: str

    def to_json(self) -> dict[str, Any]:
        return {"row": self.row, "device": self.device, "current": self.current,
                "suggested": self.suggested, "status": self.status}


@dataclass(eq=False)
class Suggestions:
    """Result of suggest_network_groups.

    clusters:
        ``(n,)`` cluster index per row (0-based, numbered by first row), or None when
        the measurement shows no grouping.
    names:
        Suggested network-group name per cluster.
    cut_s:
        Transfer time (s, of the reference message) separating "inside a group" from
        "between groups"; ``gap`` the ratio of the merge heights either side of it.
    changes:
        Rows whose label is missing or contradicts, ascending.
    agree:
        Rows whose label already matches.
    """

    clusters: np.ndarray | None
    names: tuple[str, ...]
    cut_s: float | None
    gap: float | None
    changes: tuple[RowSuggestion, ...]
    agree: int
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "groups": [] if self.clusters is None else [
                {"name": name, "rows": np.nonzero(self.clusters == c)[0].tolist()}
                for c, name in enumerate(self.names)
            ],
            "cut_s": self.cut_s,
            "gap": self.gap,
            "changes": [c.to_json() for c in self.changes],
            "agree": self.agree,
            "reason": self.reason,
        }


def log_distance(fabric: Fabric, measured: np.ndarray | None = None,
                 payload_gb: float = REFERENCE_PAYLOAD_GB, messages: float = 1.0) -> np.ndarray | None:
    """``(n, n)`` distances ``log(T_ij / min T)``; unmeasured pairs at the maximum.

    ``measured``: directional mask of trusted entries (default: every finite entry).
    None when no pair is measured.
    """
    found = _log_distance(fabric, measured, payload_gb, messages)
    return None if found is None else found[0]


def _log_distance(fabric, measured, payload_gb, messages):
    t = fabric.transfer_s(payload_gb, messages)
    ok = np.isfinite(t)
    if measured is not None:
        ok &= measured & measured.T
    np.fill_diagonal(ok, False)
    if not ok.any():
        return None
    t_min = float(t[ok].min())
    d = np.zeros_like(t)
    d[ok] = np.log(np.maximum(t[ok], t_min) / t_min)
    d[~ok] = float(d[ok].max())
    np.fill_diagonal(d, 0.0)
    return (d + d.T) / 2.0, t_min


def _linkage(d: np.ndarray) -> np.ndarray:
    return linkage(squareform(d, checks=False), method="average")


def leaf_order(fabric: Fabric, measured: np.ndarray | None = None) -> list[int] | None:
    """Rows in dendrogram leaf order (measured neighbours adjacent); None without data."""
    if fabric.n < 2:
        return list(range(fabric.n))
    d = log_distance(fabric, measured)
    if d is None:
        return None
    return [int(i) for i in leaves_list(_linkage(d))]


def _hosts(fabric: Fabric) -> list[str]:
    if fabric.devices is None:
        return [f"#{i}" for i in range(fabric.n)]
    return [d.host for d in fabric.devices]


def _keeps_hosts(labels: np.ndarray, hosts: list[str]) -> bool:
    """Every host's rows in one cluster, and some cluster holds two hosts."""
    by_host: dict[str, set[int]] = {}
    hosts_in: dict[int, set[str]] = {}
    for c, h in zip(labels.tolist(), hosts):
        by_host.setdefault(h, set()).add(c)
        hosts_in.setdefault(c, set()).add(h)
    return all(len(s) == 1 for s in by_host.values()) and any(len(s) > 1 for s in hosts_in.values())


def cluster_rows(d: np.ndarray, hosts: list[str], min_gap: float = DEFAULT_MIN_GAP):
    """Gap-based cut of the average-linkage tree of ``d``.

    Returns ``(labels, cut_height, gap_ratio)`` with ``labels`` 0-based and numbered by
    first row, or ``None`` when no gap of at least ``min_gap`` gives a host-preserving
    grouping.
    """
    n = d.shape[0]
    if n < 3:
        return None
    z = _linkage(d)
    heights = np.sort(z[:, 2])
    for k in range(len(heights) - 1):
        ratio = float(np.exp(heights[k + 1] - heights[k]))
        if ratio < min_gap:
            continue
        cut = (heights[k] + heights[k + 1]) / 2.0
        raw = fcluster(z, t=cut, criterion="distance")
        if len(set(raw.tolist())) < 2 or not _keeps_hosts(raw, hosts):
            continue
        first: dict[int, int] = {}
        for c in raw.tolist():
            first.setdefault(c, len(first))
        return np.array([first[c] for c in raw.tolist()]), float(cut), ratio
    return None


def _names(clusters: np.ndarray, current: list[str | None]) -> tuple[str, ...]:
    """A name per cluster: its rows' majority label if free, else ng-<k>."""
    count = int(clusters.max()) + 1
    sizes = np.bincount(clusters, minlength=count)
    names: list[str | None] = [None] * count
    taken: set[str] = set()
    for c in sorted(range(count), key=lambda c: (-sizes[c], c)):
        votes = Counter(current[i] for i in np.nonzero(clusters == c)[0] if current[i] is not None)
        for label, _ in sorted(votes.items(), key=lambda kv: (-kv[1], kv[0])):
            if label not in taken:
                names[c] = label
                taken.add(label)
                break
    used = taken | {x for x in current if x is not None}
    k = 1
    for c in range(count):
        if names[c] is None:
            while f"ng-{k}" in used:
                k += 1
            names[c] = f"ng-{k}"
            used.add(names[c])
    return tuple(names)  # type: ignore[arg-type]


def suggest_network_groups(
    fabric: Fabric,
    *,
    measured: np.ndarray | None = None,
    payload_gb: float = REFERENCE_PAYLOAD_GB,
    messages: float = 1.0,
    min_gap: float = DEFAULT_MIN_GAP,
) -> Suggestions:
    """Cluster the measured fabric and suggest network groups (see the module text).

    ``measured``: directional mask of trusted entries; default: the measured ones
    (finite and not marked estimated in the fabric's ``estimated`` extra).
    """
    if measured is None:
        measured = measured_mask(fabric)
    if min_gap <= 1.0:
        raise ValueError(f"min_gap: must be > 1 (a ratio of transfer times), got {min_gap!r}")
    current = [None if fabric.devices is None else d.network_group for d in (fabric.devices or [None] * fabric.n)]
    found = _log_distance(fabric, measured, payload_gb, messages)
    if found is None:
        return Suggestions(None, (), None, None, (), 0, "no measured pairs")
    d, t_min = found
    found = cluster_rows(d, _hosts(fabric), min_gap)
    if found is None:
        return Suggestions(None, (), None, None, (), 0,
                           f"no step of {min_gap:g}x or more between groups of hosts in the measurement")
    clusters, cut, gap = found
    names = _names(clusters, current)
    changes, agree = [], 0
    for i, c in enumerate(clusters.tolist()):
        if current[i] == names[c]:
            agree += 1
            continue
        status = "missing" if current[i] is None else "contradicts"
        changes.append(RowSuggestion(i, fabric.device_name(i), current[i], names[c], status))
    return Suggestions(clusters, names, t_min * float(np.exp(cut)), gap, tuple(changes), agree)
