"""The screens' one seam to the label model and the locality wording (owned elsewhere).

Screens call these rather than :mod:`geoconsole.labels` and :mod:`solver.locality`
directly, so an API change there is absorbed in one place.
"""

from __future__ import annotations

from typing import Sequence

from geoconsole.labels import FIELDS as LABEL_FIELDS
from geoconsole.labels import label_problem
from solver.fabric import Device
from solver.locality import describe_group

__all__ = ["LABEL_FIELDS", "group_key", "locality_words", "validate_label"]


def validate_label(field: str, value: str) -> str | None:
    """None when ``value`` is acceptable for ``field`` (empty clears it), else why not."""
    return label_problem(field, value.strip() or None)


def locality_words(devices: Sequence[Device], rows: Sequence[int]) -> str:
    """How close the group ``rows`` is, in words: "same zone europe-west1-b", "spans 3 regions"."""
    return describe_group(devices, rows)


def group_key(device: Device, fallback: str = "") -> str:
    """The label rows are grouped by: region, else the fabric label, else 'unlabelled'."""
    return device.region or fallback or "unlabelled"
