"""Fabric model: directional latency/bandwidth matrices, validation and symmetrisation.

A fabric describes ``N`` devices (GPUs, or CPU hosts) and, for every ordered pair
``(i, j)``, the fitted start-up latency ``alpha_ij`` (milliseconds) and serialisation
bandwidth ``beta_ij`` (decimal Gbps) of a point-to-point transfer from ``i`` to ``j``.
Unmeasured pairs are ``null`` in JSON and ``NaN`` in memory, never a made-up number.

The cost model uses the equal-payload symmetric model of the placement spec::

    alpha_ij = (a_ij + a_ji) / 2                      (arithmetic mean)
    beta_ij  = 2 / (1 / b_ij + 1 / b_ji)              (harmonic mean)
    T_ij(c, m) = m * alpha_ij / 1000 + 8 * c / beta_ij   seconds, c in decimal GB

The harmonic mean preserves the sum of forward and reverse serialisation times:
``2 * 8c / beta_ij == 8c / b_ij + 8c / b_ji``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Largest accepted latency (ms) and bandwidth (Gbps); beyond these a value is a unit
#: mistake, and would overflow the cost arithmetic long before it meant anything.
MAX_ALPHA_MS = 1.0e6
MAX_BETA_GBPS = 1.0e6
#: Slowest link accepted: 1 kbit/s. Anything slower is a unit mistake, and a bandwidth
#: near zero (1e-320) would overflow the transfer times to infinity.
MIN_BETA_GBPS = 1.0e-6


class FabricError(ValueError):
    """A fabric file or matrix is malformed. The message is one line naming the place."""


@dataclass(frozen=True)
class Device:
    """One matrix row: where it lives. ``gpu`` is ``None`` for a CPU host; ``slot``
    numbers the processes of a CPU host that runs several (``slots=N``), else ``None``."""

    host: str
    gpu: int | None = None
    region: str | None = None
    zone: str | None = None
    network_group: str | None = None
    slot: int | None = None

    @property
    def name(self) -> str:
        if self.gpu is None:
            return self.host if self.slot is None else f"{self.host}:cpu{self.slot}"
        return f"{self.host}:{self.gpu}"

    def to_json(self) -> dict[str, Any]:
        doc = {
            "host": self.host,
            "gpu": self.gpu,
            "region": self.region,
            "zone": self.zone,
            "network_group": self.network_group,
        }
        if self.slot is not None:
            doc["slot"] = self.slot
        return doc


@dataclass(eq=False)
class Fabric:
    """Directional measurements for ``n`` devices.

    ``alpha_ms`` and ``beta_gbps`` are ``(n, n)`` float arrays as measured (row sends
    to column), ``NaN`` where a pair is unmeasured; the diagonal is ignored.
    ``extras`` keeps every other top-level JSON field (per-pair fit quality, estimated
    flags, ...) so a load/save round trip loses nothing.
    """

    alpha_ms: np.ndarray
    beta_gbps: np.ndarray
    labels: tuple[str, ...]
    devices: tuple[Device, ...] | None = None
    measured_at: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    source: str = "<fabric>"

    def __post_init__(self) -> None:
        self.alpha_ms = np.asarray(self.alpha_ms, dtype=float)
        self.beta_gbps = np.asarray(self.beta_gbps, dtype=float)
        self.labels = tuple(str(x) for x in self.labels)
        _check_arrays(self)

    @property
    def n(self) -> int:
        return int(self.alpha_ms.shape[0])

    def device_name(self, i: int) -> str:
        """Human name of row ``i``: ``host:gpu`` when devices are known, else ``#i``."""
        if self.devices is not None:
            return self.devices[i].name
        return f"#{i}"

    def missing_pairs(self) -> list[tuple[int, int]]:
        """Unordered pairs ``i < j`` with any unmeasured direction, row-major order."""
        bad = ~(np.isfinite(self.alpha_ms) & np.isfinite(self.beta_gbps))
        bad = bad | bad.T
        np.fill_diagonal(bad, False)
        i, j = np.nonzero(np.triu(bad, 1))
        return list(zip(i.tolist(), j.tolist()))

    def symmetric(self) -> tuple[np.ndarray, np.ndarray]:
        """Symmetric ``(alpha_ms, beta_gbps)``: mean latency, harmonic-mean bandwidth.

        Diagonal entries are 0 latency and ``inf`` bandwidth (a device talks to itself
        for free). Unmeasured pairs stay ``NaN``. O(n^2).
        """
        a = (self.alpha_ms + self.alpha_ms.T) / 2.0
        with np.errstate(divide="ignore"):
            b = 2.0 / (1.0 / self.beta_gbps + 1.0 / self.beta_gbps.T)
        np.fill_diagonal(a, 0.0)
        np.fill_diagonal(b, np.inf)
        return a, b

    def transfer_s(self, c_gb: float, messages: float = 1.0) -> np.ndarray:
        """``T_ij(c, m) = m * alpha_ij / 1000 + 8 c / beta_ij`` seconds; zero diagonal."""
        a, b = self.symmetric()
        t = messages * a / 1000.0 + 8.0 * c_gb / b
        np.fill_diagonal(t, 0.0)
        return t

    def sha256(self) -> str:
        """Hash of the measured matrices and labels (what a score depends on)."""
        doc = {
            "labels": list(self.labels),
            "alpha_ms": _matrix_to_json(self.alpha_ms),
            "beta_gbps": _matrix_to_json(self.beta_gbps),
        }
        text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "labels": list(self.labels),
            "alpha_ms": _matrix_to_json(self.alpha_ms),
            "beta_gbps": _matrix_to_json(self.beta_gbps),
        }
        if self.devices is not None:
            doc["devices"] = [d.to_json() for d in self.devices]
        if self.measured_at is not None:
            doc["measured_at"] = self.measured_at
        if self.meta:
            doc["meta"] = self.meta
        doc.update(self.extras)
        return doc

    def save(self, path: str | os.PathLike[str], *, inputs=()) -> None:
        """Write JSON atomically (solver.files.write_text; ``inputs`` must not be ``path``)."""
        write_atomic(Path(path), json.dumps(self.to_json(), indent=1) + "\n", inputs=inputs)

    def subset(self, rows: list[int] | np.ndarray) -> "Fabric":
        """The fabric restricted to ``rows`` (in that order). Per-pair extras are sliced."""
        idx = np.asarray(rows, dtype=int)
        extras = {}
        for key, value in self.extras.items():
            if _is_square(value, self.n):
                extras[key] = [[value[i][j] for j in idx] for i in idx]
            else:
                extras[key] = value
        return Fabric(
            alpha_ms=self.alpha_ms[np.ix_(idx, idx)],
            beta_gbps=self.beta_gbps[np.ix_(idx, idx)],
            labels=tuple(self.labels[i] for i in idx),
            devices=None if self.devices is None else tuple(self.devices[i] for i in idx),
            measured_at=self.measured_at,
            meta=dict(self.meta),
            extras=extras,
            source=self.source,
        )


def write_atomic(path: Path, text: str, *, inputs=()) -> Path:
    """Replace ``path`` with ``text`` so that readers see the old or the new file, whole
    (solver.files.write_text: regular files only, mode kept, symlinks followed)."""
    from solver.files import write_text

    return write_text(path, text, inputs=inputs)


def _is_square(value: Any, n: int) -> bool:
    return (
        isinstance(value, list)
        and len(value) == n
        and n > 0
        and all(isinstance(row, list) and len(row) == n for row in value)
    )


def _matrix_to_json(m: np.ndarray) -> list[list[float | None]]:
    return [[None if not math.isfinite(x) else _plain(x) for x in row] for row in m.tolist()]


def _plain(x: float) -> float | int:
    return int(x) if float(x).is_integer() and abs(x) < 2**53 else x


def _check_arrays(f: Fabric) -> None:
    """Validate shapes and values of an in-memory fabric (raises FabricError)."""
    src = f.source
    for name, m in (("alpha_ms", f.alpha_ms), ("beta_gbps", f.beta_gbps)):
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise FabricError(f"{src}: {name}: must be a square matrix, got shape {m.shape}")
    n = f.alpha_ms.shape[0]
    if n < 1:
        raise FabricError(f"{src}: alpha_ms: needs at least one device")
    if f.beta_gbps.shape != (n, n):
        raise FabricError(
            f"{src}: beta_gbps: shape {f.beta_gbps.shape} differs from alpha_ms {(n, n)}"
        )
    if len(f.labels) != n:
        raise FabricError(f"{src}: labels: {len(f.labels)} labels for {n} devices")
    if f.devices is not None and len(f.devices) != n:
        raise FabricError(f"{src}: devices: {len(f.devices)} entries for {n} devices")
    off = ~np.eye(n, dtype=bool)
    checks = (
        ("alpha_ms", f.alpha_ms, np.isinf(f.alpha_ms), "must be finite"),
        ("alpha_ms", f.alpha_ms, f.alpha_ms < 0, "latency must be >= 0"),
        ("alpha_ms", f.alpha_ms, f.alpha_ms > MAX_ALPHA_MS, f"latency above {MAX_ALPHA_MS:g} ms"),
        ("beta_gbps", f.beta_gbps, np.isinf(f.beta_gbps), "must be finite"),
        ("beta_gbps", f.beta_gbps, (f.beta_gbps <= 0) & off, "bandwidth must be > 0 off the diagonal"),
        ("beta_gbps", f.beta_gbps, (f.beta_gbps < MIN_BETA_GBPS) & off,
         f"bandwidth below {MIN_BETA_GBPS:g} Gbps (1 kbit/s); check the units"),
        ("beta_gbps", f.beta_gbps, f.beta_gbps > MAX_BETA_GBPS, f"bandwidth above {MAX_BETA_GBPS:g} Gbps"),
    )
    for name, m, bad, why in checks:
        bad = bad & off
        if bad.any():
            i, j = (int(v) for v in np.argwhere(bad)[0])
            raise FabricError(f"{src}: {name}[{i}][{j}]: {why}, got {float(m[i, j]):g}")
    nan_a, nan_b = np.isnan(f.alpha_ms) & off, np.isnan(f.beta_gbps) & off
    if (nan_a != nan_b).any():
        i, j = (int(v) for v in np.argwhere(nan_a != nan_b)[0])
        raise FabricError(
            f"{src}: pair [{i}][{j}]: alpha_ms and beta_gbps must both be measured or both null"
        )


def _parse_matrix(raw: Any, name: str, n: int, src: str) -> np.ndarray:
    if not isinstance(raw, list):
        raise FabricError(f"{src}: {name}: expected a list of rows, got {type(raw).__name__}")
    if len(raw) != n:
        raise FabricError(f"{src}: {name}: {len(raw)} rows for {n} devices (labels)")
    out = np.full((n, n), np.nan)
    for i, row in enumerate(raw):
        if not isinstance(row, list):
            raise FabricError(f"{src}: {name}[{i}]: expected a list, got {type(row).__name__}")
        if len(row) != n:
            raise FabricError(f"{src}: {name}[{i}]: {len(row)} entries, expected {n}")
        for j, x in enumerate(row):
            if x is None:
                continue
            if isinstance(x, bool) or not isinstance(x, (int, float)):
                raise FabricError(
                    f"{src}: {name}[{i}][{j}]: expected a number or null, got {json.dumps(x)}"
                )
            if not math.isfinite(float(x)) and not (i == j):
                raise FabricError(f"{src}: {name}[{i}][{j}]: must be finite, got {x!r}")
            out[i, j] = float(x) if math.isfinite(float(x)) else np.nan
    return out


#: Fields a device entry may have.
_DEVICE_KEYS = frozenset({"host", "gpu", "slot", "region", "zone", "network_group"})
#: Top-level fields a fabric may have: the spec's three, the optional ones, and the
#: per-pair fields written by probe sweeps (fit quality, interface) and by estimates.
_FABRIC_KEYS = frozenset({"labels", "alpha_ms", "beta_gbps", "devices", "meta", "measured_at",
                          "fit_r2", "fit_flag", "probe_interface", "estimated", "estimate_basis",
                          "inferred", "inferred_basis", "inferred_spread"})


def _nearest(key: str, known) -> str:
    import difflib

    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


#: Largest GPU index or CPU slot of a device row (as an inventory's GPU list).
MAX_INDEX = 65535


def _parse_devices(raw: Any, n: int, src: str) -> tuple[Device, ...]:
    if not isinstance(raw, list) or len(raw) != n:
        got = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise FabricError(f"{src}: devices: expected a list of {n} entries, got {got}")
    out = []
    seen: dict[tuple[str, str, int], int] = {}  # (host lowercased, "GPU" or "slot", index) -> row
    from solver.names import label_problem, name_problem

    for i, d in enumerate(raw):
        if not isinstance(d, dict) or "host" not in d:
            raise FabricError(f"{src}: devices[{i}]: expected an object with a host name")
        unknown = sorted(set(d) - _DEVICE_KEYS)
        if unknown:
            raise FabricError(f"{src}: devices[{i}]: unknown field {unknown[0]!r}{_nearest(unknown[0], _DEVICE_KEYS)}")
        why = name_problem(d["host"])
        if why:
            raise FabricError(f"{src}: devices[{i}].host: {why}")
        gpu = d.get("gpu")
        if gpu is not None and (isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu <= MAX_INDEX):
            raise FabricError(f"{src}: devices[{i}].gpu: expected an index 0-{MAX_INDEX} or null, got {gpu!r}")
        slot = d.get("slot")
        if slot is not None and (isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot <= MAX_INDEX
                                 or gpu is not None):
            raise FabricError(f"{src}: devices[{i}].slot: expected an index 0-{MAX_INDEX} on a CPU row (gpu null), "
                              f"got {slot!r}")
        if gpu is not None or slot is not None:  # one row per GPU (or CPU slot) of a host
            # host names are case-insensitive (DNS): Host0 and host0 are one machine
            key = (d["host"].lower(), "GPU" if gpu is not None else "slot", gpu if gpu is not None else slot)
            if key in seen:
                j = seen[key]
                also = "" if raw[j]["host"] == d["host"] else f" ({raw[j]['host']}: host names ignore case)"
                raise FabricError(f"{src}: devices[{i}]: {d['host']} {key[1]} {key[2]} is also devices[{j}]{also}")
            seen[key] = i
        values = {}
        for key in ("region", "zone", "network_group"):
            v = d.get(key)
            why = label_problem(v)
            if why:
                raise FabricError(f"{src}: devices[{i}].{key}: {why}")
            values[key] = v or None
        out.append(Device(host=d["host"], gpu=gpu, slot=slot, **values))
    return tuple(out)


#: The per-pair tables a fabric may carry besides alpha and beta, each ``n x n``: the
#: type of every entry (probe sweeps, estimates and inferences write them).
_PAIR_TABLES = {"estimated": "booleans", "inferred": "booleans", "fit_r2": "numbers or nulls",
                "inferred_spread": "numbers or nulls", "fit_flag": "strings or nulls",
                "probe_interface": "strings or nulls", "estimate_basis": "strings or nulls",
                "inferred_basis": "strings or nulls"}


#: The JSON value types each kind of table holds (``type(True)`` is bool, not int).
_PAIR_TYPES = {"booleans": {bool}, "numbers or nulls": {int, float, type(None)},
               "strings or nulls": {str, type(None)}}


def _entry_ok(x: Any, kind: str) -> bool:
    if kind == "booleans":
        return isinstance(x, bool)
    if x is None:
        return True
    if kind == "numbers or nulls":
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    return isinstance(x, str)


def _check_pair_tables(doc: dict, n: int, source: str) -> None:
    """Each per-pair table of ``doc`` (``_PAIR_TABLES``) is ``n x n`` entries of its
    type, else FabricError naming the field and the first bad row or entry: a table of
    another shape was carried into ``select``'s output and refused only by a later
    command. O(n^2) per table."""
    for key, kind in _PAIR_TABLES.items():
        raw = doc.get(key)
        if raw is None:
            continue
        if not isinstance(raw, list) or len(raw) != n:
            got = f"{len(raw)} rows" if isinstance(raw, list) else type(raw).__name__
            raise FabricError(f"{source}: {key}: expected {n} x {n} {kind}, got {got}")
        for i, row in enumerate(raw):
            if not isinstance(row, list) or len(row) != n:
                got = f"{len(row)} entries" if isinstance(row, list) else type(row).__name__
                raise FabricError(f"{source}: {key}[{i}]: expected {n} {kind}, got {got}")
            if not set(map(type, row)) <= _PAIR_TYPES[kind]:  # one C pass a row; the culprit only then
                j = next(j for j, x in enumerate(row) if not _entry_ok(x, kind))
                raise FabricError(f"{source}: {key}[{i}][{j}]: expected {kind[:-1] if kind == 'booleans' else kind}, "
                                  f"got {str(row[j])[:40]!r}")


def parse_timestamp(value: Any):
    """An ISO 8601 time (``2026-12-01T10:00:00Z``; RFC 3339's lowercase z too) as a
    ``datetime``, UTC when it names no zone; None when ``value`` is none."""
    from datetime import datetime, timezone

    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        when = datetime.fromisoformat(value[:-1] + "+00:00" if value[-1:] in ("Z", "z") else value)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _check_timestamp(value: Any, source: str) -> None:
    """``measured_at``: an ISO 8601 time (``parse_timestamp``), else FabricError: a
    launch's --strict check and the measurement's age read it."""
    if parse_timestamp(value) is None:
        raise FabricError(f"{source}: measured_at: expected an ISO 8601 timestamp such as 2026-12-01T10:00:00Z, "
                          f"got {repr(value)[:40]}")


def fabric_from_json(doc: Any, source: str = "<fabric>") -> Fabric:
    """Build and validate a Fabric from a parsed JSON document."""
    if not isinstance(doc, dict):
        kind = {type(None): "null", list: "an array", str: "a string", bool: "true or false"}.get(type(doc), "a number")
        raise FabricError(f"{source}: expected a JSON object, got {kind}")
    unknown = sorted(k for k in doc if k not in _FABRIC_KEYS)
    if unknown:
        raise FabricError(f"{source}: unknown field {unknown[0]!r}{_nearest(unknown[0], _FABRIC_KEYS)}")
    for key in ("labels", "alpha_ms", "beta_gbps"):
        if key not in doc:
            raise FabricError(f"{source}: missing field '{key}'")
    labels = doc["labels"]
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        raise FabricError(f"{source}: labels: expected a list of strings")
    for i, label in enumerate(labels):
        if not label.strip() or len(label) > 512 or not label.isprintable():
            raise FabricError(f"{source}: labels[{i}]: expected a printable name of 1-512 characters, "
                              f"not only spaces, got {label[:80]!r}")
    n = len(labels)
    if n < 1:
        raise FabricError(f"{source}: labels: needs at least one device")
    alpha = _parse_matrix(doc["alpha_ms"], "alpha_ms", n, source)
    beta = _parse_matrix(doc["beta_gbps"], "beta_gbps", n, source)
    devices = _parse_devices(doc["devices"], n, source) if doc.get("devices") is not None else None
    meta = doc.get("meta") or {}
    if not isinstance(meta, dict):
        raise FabricError(f"{source}: meta: expected an object")
    measured_at = doc.get("measured_at")
    measured_at = None if measured_at == "" else measured_at  # "": not recorded, as null
    if measured_at is not None:
        _check_timestamp(measured_at, source)
    _check_pair_tables(doc, n, source)
    known = {"labels", "alpha_ms", "beta_gbps", "devices", "meta", "measured_at"}
    extras = {k: v for k, v in doc.items() if k not in known}
    return Fabric(alpha, beta, tuple(labels), devices, measured_at, meta, extras, source)


def load_fabric(path: str | os.PathLike[str]) -> Fabric:
    """Read and validate a fabric JSON file. Raises FabricError with a one-line message."""
    from solver.files import load_json, shown

    return fabric_from_json(load_json(path, "fabric JSON", error=FabricError), shown(path))


def fabric_from_text(text: str, source: str) -> Fabric:
    """Parse and validate fabric JSON text (FabricError naming ``source``)."""
    from solver.files import parse_json

    return fabric_from_json(parse_json(text, source, error=FabricError), source)
