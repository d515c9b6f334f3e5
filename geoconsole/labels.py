"""The label model: region, zone and network group per host, overridable per GPU.

This module is the one place that knows what a locality label is; the console's label
editor, the inventory and the ``labels`` commands all go through it.

- A label is a value and the *source* it came from: ``inventory`` (the hosts file),
  ``detected`` (GCE metadata at discovery), ``flag`` (``--region``/``--zone``/
  ``--network-group``), ``operator`` (an edit in the console or a command) or
  ``suggested`` (accepted from ``labels suggest``). The source is shown next to the
  value, so the operator can tell a guess from a fact.
- Labels are set per host and may be overridden per GPU; a GPU's label is its own
  override, else its host's.
- Values: 1 to 63 printable characters, no whitespace or control characters (they end
  up in tables, file names and remote command lines, always ``shlex.quote``-d). An empty
  value means "no label".
- A later ``set`` replaces an earlier one whatever the source, except that suggestions
  never replace an operator's value (``apply_suggestions``).

The fabric JSON keeps the values on its ``devices``; the sources travel in
``meta["label_sources"]``, keyed by device name (``host:gpu``), so a subset of the fabric
keeps them right; a saved console session holds the labelled fabric, so the sources
travel with it. ``LabelSet.to_json()`` is the stand-alone form.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Sequence

from geoconsole.errors import InputError
from solver import names as name_rules
from solver.fabric import Device, Fabric

FIELDS: tuple[str, ...] = ("region", "zone", "network_group")
SOURCES: tuple[str, ...] = ("inventory", "detected", "flag", "operator", "suggested")
MAX_LABEL_CHARS = name_rules.MAX_LABEL_CHARS
#: ``meta["hosts"][host]["location_source"]`` of a probe sweep -> label source.
_PROBE_SOURCES = {"inventory": "inventory", "gce": "detected", "flags": "flag", "flag": "flag",
                  "detected": "detected", "operator": "operator"}


class LabelError(InputError):
    """A label value, field or source is invalid; one line naming where."""


def label_problem(field: str, value: Any) -> str | None:
    """Why ``value`` is not a valid ``field`` label, or None when it is (None/"" clear)."""
    if field not in FIELDS:
        return f"{field!r} is not a label; expected one of {', '.join(FIELDS)}"
    why = name_rules.label_problem(value)
    return None if why is None else f"{field}: {why}"


def validate_label(field: str, value: Any, where: str = "") -> Any:
    """Return ``value`` unchanged when it is a valid ``field`` label, else raise LabelError.

    None and "" are accepted and mean "no label". ``where`` prefixes the message
    (a file and entry, a host).
    """
    why = label_problem(field, value)
    if why:
        raise LabelError(f"{where}: {why}" if where else why)
    return value


@dataclass(frozen=True)
class Label:
    """A label value and where it came from (one of SOURCES)."""

    value: str
    source: str

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise LabelError(f"label source {self.source!r}: expected one of {', '.join(SOURCES)}")

    def to_json(self) -> dict[str, str]:
        return {"value": self.value, "source": self.source}

    def __str__(self) -> str:
        return f"{self.value} ({self.source})"


def _parse_labels(doc: Any, where: str) -> dict[str, Label]:
    if not isinstance(doc, dict):
        raise LabelError(f"{where}: expected an object of labels")
    out = {}
    for field, entry in doc.items():
        if not isinstance(entry, dict) or "value" not in entry or "source" not in entry:
            raise LabelError(f"{where}.{field}: expected {{\"value\": ..., \"source\": ...}}")
        value = entry["value"]
        if value in (None, ""):
            raise LabelError(f"{where}.{field}: empty value (omit the label instead)")
        validate_label(field, value, where)
        if entry["source"] not in SOURCES:
            raise LabelError(f"{where}.{field}.source: expected one of {', '.join(SOURCES)}, got {entry['source']!r}")
        out[field] = Label(value, entry["source"])
    return out


class LabelSet:
    """Labels per host and per GPU, with their sources. Mutable; cheap to copy()."""

    def __init__(self) -> None:
        self.hosts: dict[str, dict[str, Label]] = {}
        self.gpus: dict[tuple[str, int], dict[str, Label]] = {}

    def copy(self) -> "LabelSet":
        out = LabelSet()
        out.hosts = {h: dict(v) for h, v in self.hosts.items()}
        out.gpus = {k: dict(v) for k, v in self.gpus.items()}
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabelSet) and self.hosts == other.hosts and self.gpus == other.gpus

    # -- edits -----------------------------------------------------------------
    def set(self, host: str, field: str, value: str | None, source: str = "operator",
            gpu: int | None = None, replace_gpus: bool = False) -> None:
        """Set (or with None/"" clear) one label of a host, or of one GPU when ``gpu``.

        ``replace_gpus``: a host-level edit also drops that field's per-GPU overrides
        (the whole host gets the value).
        """
        validate_label(field, value, host if gpu is None else f"{host}:{gpu}")
        if source not in SOURCES:
            raise LabelError(f"label source {source!r}: expected one of {', '.join(SOURCES)}")
        if gpu is None and replace_gpus:
            for (h, _), table in self.gpus.items():
                if h == host:
                    table.pop(field, None)
        table = self.hosts.setdefault(host, {}) if gpu is None else self.gpus.setdefault((host, gpu), {})
        if value in (None, ""):
            table.pop(field, None)
        else:
            table[field] = Label(value, source)

    def set_many(self, targets: Iterable[tuple[str, int | None]], field: str, value: str | None,
                 source: str = "operator", replace_gpus: bool = False) -> int:
        """The same edit on several ``(host, gpu-or-None)`` targets; returns how many."""
        validate_label(field, value)
        count = 0
        for host, gpu in targets:
            self.set(host, field, value, source, gpu, replace_gpus)
            count += 1
        return count

    # -- reads -----------------------------------------------------------------
    def get(self, host: str, field: str, gpu: int | None = None) -> Label | None:
        """The GPU's own label, else its host's, else None."""
        if gpu is not None:
            own = self.gpus.get((host, gpu), {}).get(field)
            if own is not None:
                return own
        return self.hosts.get(host, {}).get(field)

    def resolve(self, host: str, gpu: int | None = None) -> dict[str, Label | None]:
        return {f: self.get(host, f, gpu) for f in FIELDS}

    def device(self, d: Device, keep_unset: bool = True) -> Device:
        """``d`` with this set's labels; fields this set does not label keep ``d``'s value
        when ``keep_unset`` (else become None)."""
        values = {}
        for f, label in self.resolve(d.host, d.gpu).items():
            values[f] = label.value if label is not None else (getattr(d, f) if keep_unset else None)
        return replace(d, **values)

    def sources(self, devices: Sequence[Device]) -> dict[str, dict[str, str]]:
        """``{device name: {field: source}}`` for the labelled fields of ``devices``."""
        out: dict[str, dict[str, str]] = {}
        for d in devices:
            got = {f: lab.source for f, lab in self.resolve(d.host, d.gpu).items() if lab is not None}
            if got:
                out[d.name] = got
        return out

    # -- fabric ----------------------------------------------------------------
    def apply(self, fabric: Fabric, keep_unset: bool = True) -> Fabric:
        """A copy of ``fabric`` whose devices carry these labels, sources in meta."""
        if fabric.devices is None:
            raise LabelError(f"{fabric.source}: the fabric has no devices to label")
        devices = tuple(self.device(d, keep_unset) for d in fabric.devices)
        meta = dict(fabric.meta)
        meta["label_sources"] = self.sources(devices)
        return Fabric(fabric.alpha_ms, fabric.beta_gbps, fabric.labels, devices,
                      fabric.measured_at, meta, dict(fabric.extras), fabric.source)

    @classmethod
    def from_devices(cls, devices: Sequence[Device], source: str = "inventory",
                     known_sources: dict[str, dict[str, str]] | None = None) -> "LabelSet":
        """Labels as the devices carry them: per host where all its GPUs agree, else per GPU.

        ``known_sources`` (``{device name: {field: source}}``) overrides ``source``.
        """
        out = cls()
        known = known_sources or {}
        by_host: dict[str, list[Device]] = {}
        for d in devices:
            by_host.setdefault(d.host, []).append(d)
        for host, members in by_host.items():
            for f in FIELDS:
                values = {getattr(d, f) for d in members}
                srcs = {known.get(d.name, {}).get(f, source) for d in members}
                if len(values) == 1 and len(srcs) == 1:
                    v = next(iter(values))
                    if v is not None:
                        out.set(host, f, v, next(iter(srcs)))
                    continue
                for d in members:
                    v = getattr(d, f)
                    if v is not None:
                        out.set(host, f, v, known.get(d.name, {}).get(f, source), d.gpu)
        return out

    @classmethod
    def from_fabric(cls, fabric: Fabric, source: str = "inventory") -> "LabelSet":
        """Labels of a fabric's devices; sources from ``meta["label_sources"]`` if there."""
        if fabric.devices is None:
            return cls()
        known = fabric.meta.get("label_sources")
        if not isinstance(known, dict):
            known = {}
        clean = {
            name: {f: s for f, s in v.items() if f in FIELDS and s in SOURCES}
            for name, v in known.items() if isinstance(v, dict)
        }
        # A probe sweep records where each host's region and zone came from.
        hosts = fabric.meta.get("hosts")
        if isinstance(hosts, dict):
            for d in fabric.devices:
                info = hosts.get(d.host)
                where = info.get("location_source") if isinstance(info, dict) else None
                found = _PROBE_SOURCES.get(where) if isinstance(where, str) else None
                if found is not None:
                    entry = clean.setdefault(d.name, {})
                    for f in ("region", "zone"):
                        entry.setdefault(f, found)
        try:
            return cls.from_devices(fabric.devices, source, clean)
        except LabelError as exc:
            raise LabelError(f"{fabric.source}: devices: {exc}") from None

    # -- JSON ------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "hosts": {h: {f: lab.to_json() for f, lab in v.items()} for h, v in sorted(self.hosts.items()) if v},
            "gpus": [
                {"host": h, "gpu": g, "labels": {f: lab.to_json() for f, lab in v.items()}}
                for (h, g), v in sorted(self.gpus.items()) if v
            ],
        }

    @classmethod
    def from_json(cls, doc: Any, where: str = "labels") -> "LabelSet":
        """Parse ``to_json`` output; LabelError naming ``where`` and the entry on bad input."""
        if not isinstance(doc, dict):
            raise LabelError(f"{where}: expected an object with 'hosts' and 'gpus'")
        out = cls()
        hosts = doc.get("hosts", {})
        if not isinstance(hosts, dict):
            raise LabelError(f"{where}.hosts: expected an object keyed by host name")
        for host, labels in hosts.items():
            out.hosts[str(host)] = _parse_labels(labels, f"{where}.hosts.{host}")
        gpus = doc.get("gpus", [])
        if not isinstance(gpus, list):
            raise LabelError(f"{where}.gpus: expected a list")
        for k, entry in enumerate(gpus):
            at = f"{where}.gpus[{k}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("host"), str) or not entry["host"]:
                raise LabelError(f"{at}: expected an object with a host name")
            gpu = entry.get("gpu")
            if isinstance(gpu, bool) or not isinstance(gpu, int) or gpu < 0:
                raise LabelError(f"{at}.gpu: expected a GPU index >= 0, got {gpu!r}")
            out.gpus[(entry["host"], gpu)] = _parse_labels(entry.get("labels", {}), at)
        return out


def apply_suggestions(labels: LabelSet, devices: Sequence[Device], changes,
                      include_contradicting: bool = True) -> tuple[int, list[str]]:
    """Accept suggested network groups (solver.suggest RowSuggestion list) into ``labels``.

    Missing labels are filled; contradicting ones replaced when ``include_contradicting``,
    except an operator's. Set per host when every GPU of the host gets the same group.
    Returns ``(labels set, notes on what was kept)``.
    """
    wanted: dict[str, dict[int | None, str]] = {}
    kept: list[str] = []
    for c in changes:
        d = devices[c.row]
        current = labels.get(d.host, "network_group", d.gpu)
        if c.status == "contradicts" and not include_contradicting:
            continue
        if current is not None and current.source == "operator":
            kept.append(f"{d.name}: kept the operator's network group {current.value} (measured: {c.suggested})")
            continue
        wanted.setdefault(d.host, {})[d.gpu] = c.suggested
    count = 0
    host_gpus: dict[str, set] = {}
    for d in devices:
        host_gpus.setdefault(d.host, set()).add(d.gpu)
    for host, per_gpu in wanted.items():
        values = set(per_gpu.values())
        if set(per_gpu) == host_gpus[host] and len(values) == 1:
            labels.set(host, "network_group", values.pop(), "suggested")
            for g in per_gpu:
                if g is not None and (host, g) in labels.gpus:
                    labels.gpus[(host, g)].pop("network_group", None)
            count += len(per_gpu)
            continue
        for g, v in per_gpu.items():
            labels.set(host, "network_group", v, "suggested", g)
            count += 1
    return count, kept
