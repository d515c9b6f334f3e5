"""Seams to modules written alongside the console: labels, locality wording, probes, launch.

Each function here prefers the project module that owns the concept and falls back to
a small local version only while that module is absent, so the screens have one place
to switch. The fallbacks follow the same rules (ADR-0021 locality levels).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from typing import Iterable, Sequence

from solver.fabric import Device

LABEL_FIELDS = ("region", "zone", "network_group")
_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def validate_label(field: str, value: str) -> str | None:
    """None when ``value`` is acceptable for ``field`` (empty clears it), else why not."""
    try:
        from geoconsole import labels as owner  # the locality engineer's label model
    except ImportError:
        owner = None
    checker = getattr(owner, "validate_label", None) if owner else None
    if checker is not None:
        try:
            result = checker(field, value)
        except ValueError as exc:
            return str(exc)
        return result if isinstance(result, str) and result != value else None
    value = value.strip()
    if value == "":
        return None
    if not _LABEL_RE.match(value):
        return f"{field}: letters, digits, '.', '_' or '-' (max 63), starting with a letter or digit"
    return None


def apply_labels(
    devices: Sequence[Device], rows: Iterable[int], changes: dict[str, str | None]
) -> tuple[Device, ...]:
    """Devices with ``changes`` (field -> value, '' or None clears) applied to ``rows``."""
    for field, value in changes.items():
        if field not in LABEL_FIELDS:
            raise ValueError(f"{field}: not a label (use {', '.join(LABEL_FIELDS)})")
        why = validate_label(field, value or "")
        if why:
            raise ValueError(why)
    out = list(devices)
    clean = {k: (v.strip() or None) if isinstance(v, str) else None for k, v in changes.items()}
    for i in rows:
        out[i] = replace(out[i], **clean)
    return tuple(out)


def locality_words(devices: Sequence[Device], rows: Sequence[int]) -> str:
    """How close the group ``rows`` is, in words: "same zone europe-west1-b", "spans 3 regions"."""
    try:
        from solver.locality import describe_group
    except ImportError:
        return _fallback_words([devices[i] for i in rows])
    return describe_group(devices, rows)


def _fallback_words(devices: Sequence[Device]) -> str:
    if not devices:
        return "empty"
    hosts = {d.host for d in devices}
    if len(hosts) == 1:
        return f"same host {next(iter(hosts))}"
    for attr, word in (("network_group", "network group"), ("zone", "zone"), ("region", "region")):
        values = {getattr(d, attr) for d in devices}
        if len(values) == 1 and None not in values:
            return f"same {word} {next(iter(values))}"
    regions = Counter(d.region or "unlabelled" for d in devices)
    if len(regions) == 1:
        zones = {d.zone or "unlabelled" for d in devices}
        return f"region {next(iter(regions))}, spans {len(zones)} zones"
    return f"spans {len(regions)} regions"


def group_key(device: Device, fallback: str = "") -> str:
    """The label rows are grouped by: region, else the fabric label, else 'unlabelled'."""
    return device.region or fallback or "unlabelled"
