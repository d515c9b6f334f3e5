"""Estimated pairs: fill unmeasured fabric pairs from locality labels and GPU links.

A pair ``(i, j)`` that the probes did not measure gets an estimate from the tightest
thing the two devices share, in this order:

1. the reverse direction, when only one direction was measured (``reverse``);
2. same host: the ``topo -m`` link class between the two GPUs (``link NV2``), else
   ``host``;
3. other hosts: the median of the *measured* pairs between the same two hosts
   (``host pair``), else the same two network groups, zones or regions (``region
   pair``), finest first, when there are any;
4. the shared level: ``network_group``, ``zone``, ``region``, else ``any`` (different
   regions or unknown).

For a level (and a link class) the value is the operator's default when one was set
(``defaults``), else the median of the measured pairs at the same level when there are
any (``learn=True``), else the built-in default (DEFAULT_LEVELS, DEFAULT_LINKS).

Every filled directional entry is marked ``True`` in the fabric's ``estimated`` extra
(``n x n`` bools) and its basis written in ``estimate_basis`` (``n x n``, null for
measured); a measured entry is never overwritten, and an earlier estimate is never
taken as a measurement (medians come from measured entries only). O(n^2).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from solver.devices import link_speed
from solver.fabric import Fabric
from solver.locality import location_key

#: Built-in (alpha ms, beta Gbps) per shared level: deliberately modest, so that an
#: estimated pair does not attract the solver more than a measured one would.
DEFAULT_LEVELS: dict[str, tuple[float, float]] = {
    "host": (0.02, 40.0),
    "network_group": (0.2, 10.0),
    "zone": (0.5, 5.0),
    "region": (2.0, 2.0),
    "any": (100.0, 0.3),
}
#: Built-in (alpha ms, beta Gbps) per same-host link class; NV<n> is n x "NV1".
DEFAULT_LINKS: dict[str, tuple[float, float]] = {
    "NV1": (0.01, 150.0),
    "PIX": (0.01, 100.0),
    "PXB": (0.01, 90.0),
    "PHB": (0.015, 80.0),
    "NODE": (0.02, 60.0),
    "SYS": (0.03, 40.0),
}
ESTIMATE_LEVELS = tuple(DEFAULT_LEVELS)
_LEVEL_ORDER = ("region", "zone", "network_group", "host")  # coarse to fine
_PAIR_WORDS = {"host": "host pair", "network_group": "network-group pair",
               "zone": "zone pair", "region": "region pair"}


@dataclass(frozen=True)
class EstimateDefaults:
    """Operator-set estimates. ``levels``: level -> (alpha ms, beta Gbps); ``links``:
    link class (``NV1``, ``PIX``, ...) -> (alpha, beta); ``learn``: use medians of
    measured pairs at the same level where the operator set nothing."""

    levels: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    links: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    learn: bool = True

    def __post_init__(self) -> None:
        for name, table, allowed in (("level", self.levels, ESTIMATE_LEVELS), ("link", self.links, None)):
            for key, value in table.items():
                if allowed is not None and key not in allowed:
                    raise ValueError(f"estimate {name} {key!r}: expected one of {', '.join(allowed)}")
                if allowed is None:
                    link_speed(key)
                _check_pair(f"estimate {key}", value)

    def to_json(self) -> dict[str, Any]:
        return {
            "levels": {k: list(v) for k, v in self.levels.items()},
            "links": {k: list(v) for k, v in self.links.items()},
            "learn": self.learn,
        }


def _check_pair(where: str, value) -> None:
    try:
        a, b = (float(x) for x in value)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: expected (alpha_ms, beta_gbps), got {value!r}") from None
    if not (math.isfinite(a) and a >= 0):
        raise ValueError(f"{where}: alpha_ms must be finite and >= 0, got {a!r}")
    if not (math.isfinite(b) and b > 0):
        raise ValueError(f"{where}: beta_gbps must be finite and > 0, got {b!r}")


_FLAG = re.compile(r"^\s*([A-Za-z_0-9]+)\s*=\s*([^,]+),([^,]+)\s*$")


def parse_estimate(text: str) -> tuple[str, tuple[float, float]]:
    """Parse ``LEVEL=ALPHA_MS,BETA_GBPS`` (e.g. ``zone=0.5,5`` or ``NV2=0.01,300``).

    Returns ``(key, (alpha, beta))``; ``key`` is a level or an upper-case link class.
    """
    m = _FLAG.match(text)
    if not m:
        raise ValueError(f"estimate {text!r}: expected LEVEL=ALPHA_MS,BETA_GBPS, e.g. zone=0.5,5")
    key = m.group(1)
    if key not in ESTIMATE_LEVELS:
        key = key.upper()
        link_speed(key)  # ValueError names the accepted classes
    try:
        value = (float(m.group(2)), float(m.group(3)))
    except ValueError:
        raise ValueError(f"estimate {text!r}: alpha and beta must be numbers") from None
    _check_pair(f"estimate {text!r}", value)
    return key, value


def defaults_from_flags(flags: list[str], learn: bool = True) -> EstimateDefaults:
    """EstimateDefaults from repeated ``LEVEL=ALPHA,BETA`` texts (levels or link classes)."""
    levels: dict[str, tuple[float, float]] = {}
    links: dict[str, tuple[float, float]] = {}
    for text in flags:
        key, value = parse_estimate(text)
        table = levels if key in ESTIMATE_LEVELS else links
        if key in table and table[key] != value:  # the last one won without a word
            raise ValueError(f"estimate {text!r}: {key} is given twice ({table[key][0]:g},{table[key][1]:g} too)")
        table[key] = value
    return EstimateDefaults(levels, links, learn)


def pair_mask(fabric: Fabric, key: str) -> np.ndarray:
    """``(n, n)`` bools from the fabric's per-pair extra ``key`` (all False when absent);
    ValueError naming the field when it is not an n x n table of booleans."""
    raw = fabric.extras.get(key)
    n = fabric.n
    if raw is None:
        return np.zeros((n, n), dtype=bool)
    try:
        mask = np.array([[bool(x) for x in row] for row in raw], dtype=bool)
    except TypeError:
        raise ValueError(f"{fabric.source}: {key}: expected {n} x {n} booleans") from None
    if mask.shape != (n, n):
        raise ValueError(f"{fabric.source}: {key}: expected {n} x {n} booleans, got shape {mask.shape}")
    return mask


def estimated_mask(fabric: Fabric) -> np.ndarray:
    """``(n, n)`` bools: True where an entry was filled by an estimate, not measured."""
    return pair_mask(fabric, "estimated")


def inferred_mask(fabric: Fabric) -> np.ndarray:
    """``(n, n)`` bools: True where a sampled sweep inferred an entry from other measured
    pairs of the same two hosts (the fabric's ``inferred`` extra), not measured."""
    return pair_mask(fabric, "inferred")


def inferred_pair_count(fabric: Fabric) -> int:
    """Unordered pairs with at least one inferred direction."""
    return estimated_pair_count_from(inferred_mask(fabric))


def measured_mask(fabric: Fabric) -> np.ndarray:
    """``(n, n)`` bools: True where both alpha and beta were measured (not estimated, not
    inferred)."""
    finite = np.isfinite(fabric.alpha_ms) & np.isfinite(fabric.beta_gbps)
    out = finite & ~estimated_mask(fabric) & ~inferred_mask(fabric)
    np.fill_diagonal(out, False)
    return out


def estimated_pair_count(fabric: Fabric) -> int:
    """Unordered pairs with at least one estimated direction."""
    m = estimated_mask(fabric)
    m = m | m.T
    np.fill_diagonal(m, False)
    return int(np.triu(m, 1).sum())


def _codes(fabric: Fabric, level: str) -> np.ndarray:
    """Integer code per row at ``level``; unlabelled rows get a unique negative code."""
    if fabric.devices is None:
        return -1 - np.arange(fabric.n)
    lookup: dict[tuple, int] = {}
    out = np.empty(fabric.n, dtype=int)
    for i, d in enumerate(fabric.devices):
        key = location_key(d, level)
        out[i] = -1 - i if key is None else lookup.setdefault(key, len(lookup))
    return out


def shared_level(fabric: Fabric) -> np.ndarray:
    """``(n, n)`` object array: the tightest level each pair shares (``host`` ... ``any``)."""
    rel = np.full((fabric.n, fabric.n), "any", dtype=object)
    for level in _LEVEL_ORDER:
        c = _codes(fabric, level)
        rel[c[:, None] == c[None, :]] = level
    return rel


class _Source:
    """Where estimates come from: operator values, measured medians, built-ins."""

    def __init__(self, fabric: Fabric, measured: np.ndarray, rel: np.ndarray, d: EstimateDefaults):
        self.fabric, self.measured, self.rel, self.d = fabric, measured, rel, d
        self.cache: dict[Any, tuple[float, float, str]] = {}

    def _median(self, mask: np.ndarray):
        if not mask.any():
            return None
        return float(np.median(self.fabric.alpha_ms[mask])), float(np.median(self.fabric.beta_gbps[mask]))

    def level(self, level: str) -> tuple[float, float, str]:
        if level not in self.cache:
            if level in self.d.levels:
                a, b = self.d.levels[level]
                self.cache[level] = (a, b, f"{level} (operator)")
            else:
                med = self._median(self.measured & (self.rel == level)) if self.d.learn else None
                if med is not None:
                    self.cache[level] = (*med, f"{level} (median measured)")
                else:
                    self.cache[level] = (*DEFAULT_LEVELS[level], f"{level} (default)")
        return self.cache[level]

    def link(self, cls: str) -> tuple[float, float, str]:
        cls = "SYS" if cls == "SOC" else cls
        if cls in self.d.links:
            a, b = self.d.links[cls]
            return a, b, f"link {cls} (operator)"
        m = re.match(r"^NV(\d+)$", cls)
        if m:
            a, b = self.d.links.get("NV1", DEFAULT_LINKS["NV1"])
            why = "operator NV1" if "NV1" in self.d.links else "default"
            return a, b * int(m.group(1)), f"link {cls} ({why})"
        return (*DEFAULT_LINKS[cls], f"link {cls} (default)")


def links_from_meta(fabric: Fabric) -> dict[str, Any] | None:
    """Per-host link classes recorded in ``meta["hosts"][host]["links"]``, if any."""
    hosts = fabric.meta.get("hosts")
    if not isinstance(hosts, dict):
        return None
    out = {h: info["links"] for h, info in hosts.items()
           if isinstance(info, dict) and isinstance(info.get("links"), (list, dict))}
    return out or None


def _host_links(links: Mapping[str, Any] | None, host: str, gi, gj) -> str | None:
    """The topo class between GPUs gi and gj of ``host``; None when unknown."""
    if links is None or host not in links or gi is None or gj is None:
        return None
    table = links[host]
    try:
        if isinstance(table, Mapping):  # {i: {j: class}}; JSON turns the keys into text
            row = table.get(gi, table.get(str(gi), {}))
            cls = row.get(gj, row.get(str(gj)))
        else:
            cls = table[gi][gj]
        speed = link_speed(cls)
    except (IndexError, KeyError, TypeError, AttributeError, ValueError):
        return None  # links that do not describe this pair: estimate by level instead
    if speed == 0:
        return None
    cls = str(cls).strip().upper()
    return "SYS" if cls == "SOC" else cls


def fill_missing(
    fabric: Fabric,
    defaults: EstimateDefaults | Mapping[str, tuple[float, float]] | None = None,
    *,
    links: Mapping[str, Any] | None = None,
) -> tuple[Fabric, int]:
    """Fill every unmeasured entry of ``fabric``; return ``(new fabric, pairs filled)``.

    ``defaults``: EstimateDefaults, or a plain mapping level -> (alpha, beta).
    ``links``: host -> that host's ``topo -m`` link classes (square sequence by GPU
    index, or ``{i: {j: class}}``), for same-host pairs; default: what the fabric's
    ``meta["hosts"][host]["links"]`` records.
    The count is of unordered pairs with at least one filled direction. The input
    fabric is not changed.
    """
    d = defaults if isinstance(defaults, EstimateDefaults) else EstimateDefaults(dict(defaults or {}))
    if links is None:
        links = links_from_meta(fabric)
    alpha, beta = fabric.alpha_ms.copy(), fabric.beta_gbps.copy()
    missing = ~(np.isfinite(alpha) & np.isfinite(beta))
    np.fill_diagonal(missing, False)
    estimated = estimated_mask(fabric)
    basis = _basis_matrix(fabric)
    if not missing.any():
        return fabric, 0
    measured = measured_mask(fabric)
    rel = shared_level(fabric)
    src = _Source(fabric, measured, rel, d)
    codes = [(level, _codes(fabric, level)) for level in reversed(_LEVEL_ORDER)]
    pair_medians: dict[str, dict[tuple[int, int], tuple[float, float]]] = {}
    for i, j in zip(*np.nonzero(missing)):
        i, j = int(i), int(j)
        if not missing[j, i]:
            a, b, why = fabric.alpha_ms[j, i], fabric.beta_gbps[j, i], "reverse"
        else:
            a, b, why = _estimate_pair(fabric, src, rel, codes, pair_medians, measured, links, i, j)
        alpha[i, j], beta[i, j] = a, b
        estimated[i, j] = True
        basis[i][j] = why
    filled = missing | missing.T
    count = int(np.triu(filled, 1).sum())
    extras = dict(fabric.extras)
    extras["estimated"] = estimated.tolist()
    extras["estimate_basis"] = basis
    meta = dict(fabric.meta)
    meta["estimates"] = {"filled_pairs": estimated_pair_count_from(estimated), "defaults": d.to_json()}
    out = Fabric(alpha, beta, fabric.labels, fabric.devices, fabric.measured_at, meta, extras, fabric.source)
    return out, count


def estimated_pair_count_from(mask: np.ndarray) -> int:
    m = mask | mask.T
    np.fill_diagonal(m, False)
    return int(np.triu(m, 1).sum())


def _basis_matrix(fabric: Fabric) -> list[list[str | None]]:
    raw = fabric.extras.get("estimate_basis")
    n = fabric.n
    if isinstance(raw, list) and len(raw) == n and all(isinstance(r, list) and len(r) == n for r in raw):
        return [list(r) for r in raw]
    return [[None] * n for _ in range(n)]


def _pair_medians(fabric: Fabric, measured: np.ndarray, c: np.ndarray) -> dict[tuple[int, int], tuple[float, float]]:
    """Median measured (alpha, beta) between every two distinct locations of codes ``c``.

    One sort over the measured entries: O(n^2 log n) for all pairs of locations at once.
    """
    i, j = np.nonzero(measured & (c[:, None] >= 0) & (c[None, :] >= 0) & (c[:, None] != c[None, :]))
    if i.size == 0:
        return {}
    lo, hi = np.minimum(c[i], c[j]), np.maximum(c[i], c[j])
    order = np.lexsort((hi, lo))
    lo, hi = lo[order], hi[order]
    a, b = fabric.alpha_ms[i, j][order], fabric.beta_gbps[i, j][order]
    cuts = np.nonzero((np.diff(lo) != 0) | (np.diff(hi) != 0))[0] + 1
    out = {}
    for start, stop in zip(np.r_[0, cuts], np.r_[cuts, lo.size]):
        out[(int(lo[start]), int(hi[start]))] = (float(np.median(a[start:stop])), float(np.median(b[start:stop])))
    return out


def _estimate_pair(fabric, src, rel, codes, pair_medians, measured, links, i, j):
    level = rel[i, j]
    if level == "host":
        di, dj = fabric.devices[i], fabric.devices[j]
        cls = _host_links(links, di.host, di.gpu, dj.gpu)
        return src.link(cls) if cls is not None else src.level("host")
    if src.d.learn:
        for name, c in codes:
            if c[i] < 0 or c[j] < 0 or c[i] == c[j]:
                continue
            if name not in pair_medians:
                pair_medians[name] = _pair_medians(fabric, measured, c)
            med = pair_medians[name].get((int(min(c[i], c[j])), int(max(c[i], c[j]))))
            if med is not None:
                return med[0], med[1], f"{_PAIR_WORDS[name]} (median measured)"
    return src.level(level)
