"""Locality levels of device groups and their summaries in words (ADR-0021).

A device sits in a region, a zone and a network group (anything finer than a zone that
only the operator knows: a rack, a LAN, one office). Any of the three may be unknown.
A group of devices has the *tightest* level that all of its members share::

    host < network_group < zone < region < any

``host`` is not a placement level of the ``group_locality`` policy (that policy chooses
between machines); it is reported because on multi-GPU hosts "same host" says more
than the network group around it.

Levels nest: two devices share a zone only when they also share the region (both may
be unknown), and a network group only when they share its zone. So "rack-3" in two
datacenters is two network groups. Keys are tuples along the hierarchy:

    region        (region,)
    zone          (region, zone)
    network_group (region, zone, network_group)

A device with no value *at* a level has no key there (``None``): it never shares that
level with anything, and counts as "unlabelled" in the words.

The words follow the ADR's placement explanations:

    same network group rack-3
    same zone europe-west1-b
    same region europe-west1          (zones unknown for some members)
    spans 3 zones in 1 region          (every member has a zone)
    spans 5 zones in 2 regions
    spans 3 regions                    (zones unknown for some members)
    spans 2 regions + 3 unlabelled     (members without a region)
    no location labels

Everything here is O(len(rows)) per group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from solver.fabric import Device

#: Placement levels of the ``group_locality`` policy, tightest first.
LEVELS: tuple[str, ...] = ("network_group", "zone", "region", "any")

#: Levels a group summary can report, tightest first (``host`` only describes).
SUMMARY_LEVELS: tuple[str, ...] = ("host",) + LEVELS

_WORDS = {"network_group": "network group", "zone": "zone", "region": "region"}


def level_rank(level: str) -> int:
    """Position of ``level`` in SUMMARY_LEVELS (smaller is tighter). ValueError if unknown."""
    try:
        return SUMMARY_LEVELS.index(level)
    except ValueError:
        raise ValueError(f"unknown locality level {level!r}; expected one of {', '.join(SUMMARY_LEVELS)}") from None


def location_key(device: Device, level: str) -> tuple[str | None, ...] | None:
    """The key under which ``device`` shares ``level`` with others; None when unlabelled.

    ``any`` always has the key ``()``: every device shares it.
    """
    if level == "any":
        return ()
    if level == "region":
        return None if device.region is None else (device.region,)
    if level == "zone":
        return None if device.zone is None else (device.region, device.zone)
    if level == "network_group":
        if device.network_group is None:
            return None
        return (device.region, device.zone, device.network_group)
    if level == "host":
        return (device.host,)
    raise ValueError(f"unknown locality level {level!r}")


def location_name(key: tuple[str | None, ...]) -> str:
    """The word for a key: its last (finest) part, e.g. ``europe-west1-b`` for a zone."""
    return str(key[-1]) if key else "any"


@dataclass(frozen=True)
class GroupLocality:
    """Where a group of devices sits.

    level:
        Tightest level all members share (one of SUMMARY_LEVELS).
    words:
        The ADR-style summary ("same zone europe-west1-b", "spans 3 regions").
    regions, zones:
        Distinct regions and ``(region, zone)`` pairs among labelled members.
    unlabelled:
        Members with no region and no zone.
    """

    level: str
    words: str
    regions: tuple[str, ...]
    zones: tuple[tuple[str | None, str], ...]
    unlabelled: int

    def to_json(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "words": self.words,
            "regions": list(self.regions),
            "zones": [z for _, z in self.zones],
            "unlabelled": self.unlabelled,
        }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def group_locality(devices: Sequence[Device], rows: Sequence[int]) -> GroupLocality:
    """Locality of the devices ``rows`` (indices into ``devices``). ValueError if empty."""
    members = [devices[int(i)] for i in rows]
    if not members:
        raise ValueError("a locality needs at least one device")
    regions = tuple(sorted({d.region for d in members if d.region is not None}))
    zones = tuple(sorted({(d.region, d.zone) for d in members if d.zone is not None},
                         key=lambda rz: (rz[0] or "", rz[1])))
    unlabelled = sum(1 for d in members if d.region is None and d.zone is None)

    def done(level: str, words: str) -> GroupLocality:
        return GroupLocality(level, words, regions, zones, unlabelled)

    if len(members) > 1 and len({d.host for d in members}) == 1:
        return done("host", f"same host {members[0].host}")
    for level in ("network_group", "zone", "region"):
        keys = {location_key(d, level) for d in members}
        if len(keys) == 1 and None not in keys:
            if level == "region" and len(zones) > 1 and all(d.zone is not None for d in members):
                return done(level, f"spans {len(zones)} zones in 1 region")
            return done(level, f"same {_WORDS[level]} {location_name(next(iter(keys)))}")
    return done("any", _span_words(members, regions, zones, unlabelled))


def _span_words(members: list[Device], regions, zones, unlabelled: int) -> str:
    """Words for a group that shares no level: what it spans, and what is unknown."""
    if unlabelled == len(members):
        return "no location labels"
    # Members with no label at all are counted apart ("+ 2 unlabelled").
    every_zone = all(d.zone is not None for d in members if d.region is not None)
    if regions and every_zone and len(zones) > 1:
        words = f"spans {_plural(len(zones), 'zone')} in {_plural(len(regions), 'region')}"
    elif regions:
        words = f"spans {_plural(len(regions), 'region')}"
        no_region = sum(1 for d in members if d.region is None and d.zone is not None)
        if no_region:
            words += f" + {_plural(no_region, 'zone')} without a region"
    else:
        words = f"spans {_plural(len(zones), 'zone')}"
    if unlabelled:
        words += f" + {unlabelled} unlabelled"
    return words


def describe_group(devices: Sequence[Device], rows: Sequence[int]) -> str:
    """The ADR-style summary of the devices ``rows``, e.g. ``"same zone europe-west1-b"``."""
    return group_locality(devices, rows).words


def solution_locality_detail(devices: Sequence[Device], grid) -> dict[str, list[dict[str, Any]]]:
    """Locality of every stage group (grid column) and every pipeline (grid row).

    ``grid`` is the ``(D_DP, D_PP)`` array of device ids of a placement (``Score.grid``):
    ``grid[r, s]`` runs stage ``s`` of replica ``r``. Returns JSON-ready lists::

        {"stage_groups": [{"index": s, "level": ..., "words": ..., "devices": [...]}, ...],
         "pipelines":    [{"index": r, ...}, ...]}
    """
    g = np.asarray(grid, dtype=int)
    if g.ndim != 2 or g.size == 0:
        raise ValueError(f"grid: expected a non-empty 2-d array of device ids, got shape {g.shape}")
    if g.min() < 0 or g.max() >= len(devices):
        raise ValueError(f"grid: device ids must be in 0..{len(devices) - 1}")

    def entry(index: int, rows: np.ndarray) -> dict[str, Any]:
        loc = group_locality(devices, rows.tolist())
        return {
            "index": index,
            "level": loc.level,
            "words": loc.words,
            "devices": [devices[int(i)].name for i in rows],
        }

    return {
        "stage_groups": [entry(s, g[:, s]) for s in range(g.shape[1])],
        "pipelines": [entry(r, g[r, :]) for r in range(g.shape[0])],
    }


def solution_locality(devices: Sequence[Device], grid) -> dict[str, list[str]]:
    """The words for every stage group and every pipeline of a placement grid.

    ``{"stage_groups": ["spans 8 regions", ...], "pipelines": ["same region Oregon", ...]}``;
    solution_locality_detail has the levels and device names too.
    """
    detail = solution_locality_detail(devices, grid)
    return {key: [e["words"] for e in entries] for key, entries in detail.items()}


def locality_counts(entries: list[dict[str, Any]]) -> dict[str, int]:
    """How many groups of a solution_locality_detail list sit at each level (tightest first)."""
    counts = {level: 0 for level in SUMMARY_LEVELS}
    for e in entries:
        counts[e["level"]] += 1
    return {k: v for k, v in counts.items() if v}


def locality_lines(summary: dict[str, list[str]]) -> list[str]:
    """Text lines for a solution_locality result, one per stage group then per pipeline.

    ``stage 0: spans 8 regions`` ... ``pipeline 7: same region Ireland``.
    """
    lines = [f"stage {i}: {words}" for i, words in enumerate(summary["stage_groups"])]
    lines += [f"pipeline {i}: {words}" for i, words in enumerate(summary["pipelines"])]
    return lines
