"""Which devices take part when the fleet has more than D_PP x D_DP (ADR-0021 policy).

``group_locality`` decides how close the chosen group must be:

prefer (default)
    The tightest group available: one network group, else one zone, else one region,
    else any. Never fails for locality alone (the console never waits for a tighter
    group to free up; it places what it has).
network_group, zone, region
    Required: only devices with a value at that level qualify, and all chosen devices
    share it. When no single location has enough, selection fails with the reason.
any
    Location is ignored.

Within a level, candidate groups are *buckets* of (torch version, location key at that
level) -- every chosen device runs the same torch version. Devices are visited in the
rank order below and the first bucket to fill wins, as in the ADR; so between equally
close groups the rank order decides.

Rank order (simplified from the ADR's spread / first_fit / most_free_memory, which
need load and free-memory figures the console does not have): **first fit in fabric
row order**. Inside the winning bucket the ``k`` members are then taken *tightly*: whole
sub-locations at the next finer level (zone, network group, host) first, the smallest
one that still holds all that is needed, else the largest that fits, so a region-level
pick spans as few zones and hosts as it can (``prefer`` falling back to ``any`` too;
the ``any`` *policy* ignores location and takes the first rows). A host that gives
only some of its GPUs gives the set pick_devices chooses on its ``topo -m`` links
(ADR-0021 addendum), else its lowest GPU indices. Deterministic: same input, same rows.

``regions`` filters first: a device qualifies when its region *or* its zone is listed,
so filters written with zone names keep working.

Cost: O(n * levels) dictionary work per call (see benchmarks/selection.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from solver.devices import pick_devices
from solver.estimate import links_from_meta
from solver.fabric import Device, Fabric
from solver.locality import LEVELS, describe_group, location_key, location_name

#: Accepted ``group_locality`` values.
POLICIES: tuple[str, ...] = ("prefer", "network_group", "zone", "region", "any")

_WORDS = {"network_group": "network group", "zone": "zone", "region": "region", "any": "any"}
#: Finer levels used to take a bucket's members tightly, for each bucket level.
_FINER = {
    "any": ("region", "zone", "network_group", "host"),
    "region": ("zone", "network_group", "host"),
    "zone": ("network_group", "host"),
    "network_group": ("host",),
}


class SelectionError(ValueError):
    """The policy cannot be met; the message is one line and says why."""


class TooFewDevices(SelectionError):
    """Fewer devices than D_PP x D_DP take part at all (``regions`` names the flag's
    restriction when it caused it): bad input rather than an unmet policy."""

    def __init__(self, message: str, regions: bool = False) -> None:
        super().__init__(message)
        self.regions = regions


@dataclass(frozen=True)
class Selection:
    """Result of select_devices.

    rows:
        Chosen fabric rows, ascending (``fabric.subset(rows)`` is what the solver gets).
    left_out:
        ``(row, reason)`` for every other row, ascending by row.
    level:
        The level whose bucket was chosen (``network_group`` ... ``any``).
    summary:
        The chosen group's locality in words ("same zone europe-west1-b").
    policy:
        The ``group_locality`` that was applied.
    """

    rows: tuple[int, ...]
    left_out: tuple[tuple[int, str], ...]
    level: str
    summary: str
    policy: str = "prefer"

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "level": self.level,
            "summary": self.summary,
            "rows": list(self.rows),
            "left_out": [{"row": r, "reason": why} for r, why in self.left_out],
        }


def fabric_devices(fabric: Fabric) -> tuple[Device, ...]:
    """The fabric's devices; unlabelled placeholders (host ``#i``) when it has none."""
    if fabric.devices is not None:
        return fabric.devices
    return tuple(Device(host=f"#{i}") for i in range(fabric.n))


def torch_versions_of(fabric: Fabric) -> list[str | None] | None:
    """Torch version per row from ``meta["hosts"][host]["torch"]``; None when not recorded."""
    hosts = fabric.meta.get("hosts")
    if not isinstance(hosts, dict) or fabric.devices is None:
        return None
    out = []
    for d in fabric.devices:
        info = hosts.get(d.host)
        v = info.get("torch") if isinstance(info, dict) else None
        out.append(v if isinstance(v, str) else None)
    return out if any(v is not None for v in out) else None


def _matches_regions(d: Device, wanted: frozenset[str]) -> bool:
    return (d.region is not None and d.region in wanted) or (d.zone is not None and d.zone in wanted)


def _where(d: Device) -> str:
    parts = [p for p in (d.region, d.zone) if p is not None]
    return " / ".join(parts) if parts else "no region or zone label"


def _torch(v: str | None) -> str:
    return "torch unknown" if v is None else f"torch {v}"


def select_devices(
    fabric: Fabric,
    workload_size: int,
    policy: str = "prefer",
    regions: Sequence[str] | None = None,
    torch_versions: Sequence[str | None] | None = None,
    links: Mapping[str, Any] | None = None,
    exclude: Sequence[int] = (),
) -> Selection:
    """Choose ``workload_size`` rows of ``fabric`` under ``group_locality = policy``.

    Parameters
    ----------
    fabric : Fabric
        Its ``devices`` carry the labels; a fabric without devices is unlabelled.
    workload_size : int
        ``D_PP * D_DP``.
    policy : str
        One of POLICIES.
    regions : sequence of str, optional
        Keep only devices whose region or zone is listed.
    torch_versions : sequence, optional
        Torch version per row (``None`` = unknown, a version of its own); all chosen
        rows share one. Default: what a probe sweep recorded in
        ``meta["hosts"][host]["torch"]``, else all the same.
    links : mapping, optional
        Host -> its ``topo -m`` link classes. When only some GPUs of a host are
        needed, pick_devices chooses them (else the lowest GPU indices). Default:
        ``meta["hosts"][host]["links"]`` when recorded.
    exclude : sequence of int, optional
        Rows that never take part (the operator left them out).

    Raises
    ------
    SelectionError
        When the policy cannot be met; one line naming the policy and the shortfall.
    ValueError
        For a bad policy, size or torch_versions length.

    Notes
    -----
    Visits every row once per level tried: O(n * 4).
    """
    devices = fabric_devices(fabric)
    n = len(devices)
    k = workload_size
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"workload size: must be a whole number >= 1, got {k!r}")
    if policy not in POLICIES:
        raise ValueError(f"group_locality: expected one of {', '.join(POLICIES)}, got {policy!r}")
    if torch_versions is None:
        torch_versions = torch_versions_of(fabric) or [None] * n
    if links is None:
        links = links_from_meta(fabric)
    versions = list(torch_versions)
    if len(versions) != n:
        raise ValueError(f"torch_versions: {len(versions)} entries for {n} devices")

    reasons: dict[int, str] = {i: "left out by the operator" for i in exclude}
    candidates = [i for i in range(n) if i not in reasons]
    if regions:
        wanted = frozenset(regions)
        listed = ", ".join(sorted(wanted))
        for i in candidates:
            if not _matches_regions(devices[i], wanted):
                reasons[i] = f"{_where(devices[i])} not in --regions {listed}"
        candidates = [i for i in candidates if i not in reasons]
        if len(candidates) < k:
            raise TooFewDevices(
                f"--regions {listed}: {len(candidates)} of {n} devices match, the workload needs {k}", regions=True
            )
    if len(candidates) < k:
        left = f", {len(exclude)} left out by the operator" if exclude else ""
        raise TooFewDevices(f"the fabric has {n} devices{left}, the workload needs {k}")

    levels = LEVELS if policy == "prefer" else (policy,)
    for level in levels:
        bucket = _first_full_bucket(devices, versions, candidates, k, level)
        if bucket is not None:
            return _finish(devices, versions, candidates, reasons, bucket, k, level, policy, links)
    raise SelectionError(_shortfall(devices, versions, candidates, k, policy))


def _buckets(devices, versions, rows, level):
    """Rows grouped by (torch version, location key at ``level``), in first-seen order."""
    out: dict[tuple, list[int]] = {}
    for i in rows:
        key = location_key(devices[i], level)
        if key is not None:
            out.setdefault((versions[i], key), []).append(i)
    return out


def _first_full_bucket(devices, versions, rows, k, level):
    """The key of the bucket that reaches ``k`` members first in row order, or None."""
    counts: dict[tuple, int] = {}
    for i in rows:
        key = location_key(devices[i], level)
        if key is None:
            continue
        bk = (versions[i], key)
        c = counts.get(bk, 0) + 1
        counts[bk] = c
        if c == k:
            return bk
    return None


def _take_tight(devices, rows: list[int], need: int, finer: tuple[str, ...], links=None) -> list[int]:
    """``need`` of ``rows``, keeping whole sub-locations at the finer levels together."""
    if need >= len(rows):
        return list(rows)
    if not finer:
        return _part_of_host(devices, rows, need, links)
    groups: dict[Any, list[int]] = {}
    for i in rows:
        key = location_key(devices[i], finer[0])
        # Unlabelled at this level: still keep the host whole.
        groups.setdefault((0, devices[i].host) if key is None else key, []).append(i)  # 0: never a label
    pool = sorted(groups.values(), key=lambda g: (-len(g), g[0]))
    chosen: list[int] = []
    while need > 0:
        covering = [g for g in pool if len(g) >= need]
        if covering:
            best = min(covering, key=lambda g: (len(g), g[0]))
            chosen += _take_tight(devices, best, need, finer[1:], links)
            break
        largest = pool.pop(0)
        chosen += largest
        need -= len(largest)
    return sorted(chosen)


def _part_of_host(devices, rows: list[int], need: int, links) -> list[int]:
    """``need`` rows of one host: pick_devices on its topology, else the first rows."""
    host = devices[rows[0]].host
    gpus = [devices[i].gpu for i in rows]
    if links is None or host not in links or None in gpus or len({devices[i].host for i in rows}) > 1:
        return sorted(rows)[:need]
    by_gpu = dict(zip(gpus, rows))
    try:
        picked = pick_devices(links[host], gpus, need)
    except ValueError:  # links that do not cover these GPUs: keep the plain order
        return sorted(rows)[:need]
    return sorted(by_gpu[g] for g in picked)


def _finish(devices, versions, candidates, reasons, bucket_key, k, level, policy, links) -> Selection:
    version, key = bucket_key
    members = _buckets(devices, versions, candidates, level)[bucket_key]
    # ``any`` as a policy ignores location (the ADR's previous behaviour): first fit.
    chosen = _take_tight(devices, members, k, () if policy == "any" else _FINER[level], links)
    chosen_set = set(chosen)
    member_set = set(members)
    where = "" if level == "any" else f" in {_WORDS[level]} {location_name(key)}"
    for i in candidates:
        if i in chosen_set:
            continue
        if versions[i] != version:
            reasons[i] = f"{_torch(versions[i])}; the group runs {_torch(version)}"
        elif i in member_set:
            reasons[i] = f"not needed: the group took {k} of {len(members)} devices{where}"
        elif location_key(devices[i], level) is None:
            reasons[i] = f"no {_WORDS[level]} label (group_locality={policy} needs one)"
        else:
            reasons[i] = f"outside the group's {_WORDS[level]} {location_name(key)} ({_where(devices[i])})"
    return Selection(
        rows=tuple(chosen),
        left_out=tuple(sorted(reasons.items())),
        level=level,
        summary=describe_group(devices, chosen),
        policy=policy,
    )


def _shortfall(devices, versions, candidates, k, policy) -> str:
    """Why no bucket filled: the largest one, and how many rows had no label."""
    level = "any" if policy == "prefer" else policy
    buckets = _buckets(devices, versions, candidates, level)
    unlabelled = sum(1 for i in candidates if location_key(devices[i], level) is None)
    several = len({versions[i] for i in candidates}) > 1
    if not buckets:
        return f"group_locality={policy}: none of the {len(candidates)} devices has a {_WORDS[level]} label"
    (version, key), best = max(buckets.items(), key=lambda kv: (len(kv[1]), -kv[1][0]))
    one = " with one torch version" if several else ""
    if level == "any":
        text = (f"group_locality={policy}: no {k} devices share one torch version "
                f"(largest: {len(best)} on {_torch(version)})")
    else:
        largest = f"{location_name(key)} with {len(best)}" + (f" on {_torch(version)}" if several else "")
        text = f"group_locality={policy}: no {_WORDS[level]} has {k} devices{one} (largest: {largest})"
    if unlabelled:
        text += f"; {unlabelled} devices have no {_WORDS[level]} label"
    return text
