"""Seams to modules owned elsewhere: the label model and the locality wording.

The screens call these instead of the owners directly, so there is one place to
adapt when those APIs move. ``locality_words`` keeps a small ADR-0021 fallback for
fabrics the locality module cannot describe.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from solver.fabric import Device

LABEL_FIELDS = ("region", "zone", "network_group")


def validate_label(field: str, value: str) -> str | None:
    """None when ``value`` is acceptable for ``field`` (empty clears it), else why not."""
    from geoconsole.labels import label_problem  # the label model's own rules

    return label_problem(field, value.strip() or None)


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
