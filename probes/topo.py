"""Parse ``nvidia-smi topo -m`` into per-pair link classes, NIC columns and affinities.

The matrix looks like this (tab separated; the header is often wrapped in ANSI
underline codes; copies pasted from a terminal have runs of spaces instead of tabs)::

    \tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
    GPU0\t X \tNV4\tPXB\t0-31\t0\t\tN/A
    GPU1\tNV4\t X \tPXB\t0-31\t0\t\tN/A
    NIC0\tPXB\tPXB\t X

    Legend:
      X    = Self
      SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
      ...
    NIC Legend:
      NIC0: mlx5_0

Link classes, fastest first: ``NV<n>`` (n bonded NVLinks), ``PIX`` (at most one PCIe
bridge), ``PXB`` (several bridges), ``PHB`` (through a PCIe host bridge), ``NODE``
(between host bridges of one NUMA node), ``SYS`` (across the inter-socket link).
Row/column ``GPU<k>`` is nvidia-smi's index ``k`` (PCI bus order). Older drivers name
NIC columns directly (``mlx5_0``) and lack the NUMA columns; both forms are read.
Parsing is O(rows x columns).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SPLIT = re.compile(r"\t+|\s{2,}")
_LINK = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_TRAILERS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_ORDER = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}


class TopoError(ValueError):
    """``nvidia-smi topo -m`` output that cannot be read; the message names the line."""


def link_rank(link: str) -> tuple[int, int]:
    """Sort key, fastest first: NV18 < NV4 < PIX < PXB < PHB < NODE < SYS."""
    if link.startswith("NV"):
        return (0, -int(link[2:]))
    if link == "X":
        return (-1, 0)
    return (_ORDER[link], 0)


@dataclass(frozen=True)
class Topology:
    """One machine's GPU/NIC matrix. Tuples throughout; indices are GPU indices."""

    gpus: tuple[str, ...]
    #: NIC device names (``mlx5_0``), resolved through the NIC legend when present.
    nics: tuple[str, ...]
    #: ``links[i][j]``: class of GPU i <-> GPU j (``"X"`` on the diagonal).
    links: tuple[tuple[str, ...], ...]
    #: ``nic_links[i][k]``: class of GPU i <-> NIC k.
    nic_links: tuple[tuple[str, ...], ...]
    cpu_affinity: tuple[str | None, ...]
    numa_affinity: tuple[int | None, ...]
    gpu_numa_id: tuple[int | None, ...]

    @property
    def n(self) -> int:
        return len(self.gpus)

    def link(self, i: int, j: int) -> str:
        return self.links[i][j]

    def nvlinks(self, i: int, j: int) -> int:
        """Number of bonded NVLinks between GPUs i and j (0 without NVLink)."""
        link = self.links[i][j]
        return int(link[2:]) if link.startswith("NV") else 0

    def classes(self) -> dict[str, int]:
        """How many unordered GPU pairs have each link class."""
        out: dict[str, int] = {}
        for i in range(self.n):
            for j in range(i + 1, self.n):
                out[self.links[i][j]] = out.get(self.links[i][j], 0) + 1
        return dict(sorted(out.items(), key=lambda kv: link_rank(kv[0])))

    def nearest_nic(self, i: int) -> str | None:
        """The NIC closest to GPU i (first of the fastest class), or None."""
        if not self.nics:
            return None
        k = min(range(len(self.nics)), key=lambda k: (link_rank(self.nic_links[i][k]), k))
        return self.nics[k]

    def summary(self) -> str:
        """One short line: ``4x NV12, 12x SYS`` style counts (``1 GPU`` for one)."""
        if self.n == 1:
            return "1 GPU"
        return ", ".join(f"{count}x {cls}" for cls, count in self.classes().items())

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": list(self.gpus),
            "nics": list(self.nics),
            "links": [list(r) for r in self.links],
            "nic_links": [list(r) for r in self.nic_links],
            "cpu_affinity": list(self.cpu_affinity),
            "numa_affinity": list(self.numa_affinity),
            "gpu_numa_id": list(self.gpu_numa_id),
        }


def _fields(line: str) -> list[str]:
    return [f.strip() for f in _SPLIT.split(_ANSI.sub("", line).strip()) if f.strip()]


def _numa(value: str | None, where: str) -> int | None:
    if value is None or value in ("N/A", ""):
        return None
    if not value.isdigit():
        raise TopoError(f"{where}: NUMA id {value!r} is not a number")
    return int(value)


def parse_topo(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m`` output. Raises :class:`TopoError` naming the line."""
    lines = text.splitlines()
    header_at = next((k for k, l in enumerate(lines) if re.search(r"\bGPU0\b", _ANSI.sub("", l))), None)
    if header_at is None:
        raise TopoError("no GPU0 column header found in nvidia-smi topo -m output")
    header = _fields(lines[header_at])
    columns = [c for c in header if c not in _TRAILERS]
    trailers = [c for c in header if c in _TRAILERS]
    if header[: len(columns)] != columns:
        raise TopoError(f"line {header_at + 1}: affinity columns before device columns")
    legend = _nic_legend(lines)
    rows: dict[str, list[str]] = {}
    for k in range(header_at + 1, len(lines)):
        raw = _ANSI.sub("", lines[k]).strip()
        if not raw:
            continue
        if raw.startswith("Legend") or raw.startswith("NIC Legend"):
            break
        fields = _fields(lines[k])
        name, rest = fields[0], fields[1:]
        if name not in columns:
            raise TopoError(f"line {k + 1}: row {name!r} is not one of the columns {columns}")
        if len(rest) < len(columns):
            raise TopoError(f"line {k + 1}: {name} has {len(rest)} fields, expected at least {len(columns)}")
        for value in rest[: len(columns)]:
            if not _LINK.match(value):
                raise TopoError(f"line {k + 1}: {name}: unknown link class {value!r}")
        rows[name] = rest
    gpus = [c for c in columns if re.fullmatch(r"GPU\d+", c)]
    nic_cols = [c for c in columns if c not in gpus]
    for c in gpus:
        if c not in rows:
            raise TopoError(f"no row for {c}")
    idx = {c: columns.index(c) for c in columns}
    links, nic_links, cpu, numa, gnid = [], [], [], [], []
    for g in gpus:
        row = rows[g]
        links.append(tuple(row[idx[h]] for h in gpus))
        nic_links.append(tuple(row[idx[c]] for c in nic_cols))
        extra = dict(zip(trailers, row[len(columns):]))
        where = f"{g} row"
        cpu.append(extra.get("CPU Affinity") if extra.get("CPU Affinity") not in (None, "N/A") else None)
        numa.append(_numa(extra.get("NUMA Affinity"), where))
        gnid.append(_numa(extra.get("GPU NUMA ID"), where))
    for i, g in enumerate(gpus):
        if links[i][i] != "X":
            raise TopoError(f"{g}: diagonal entry is {links[i][i]!r}, expected X")
    return Topology(
        gpus=tuple(gpus),
        nics=tuple(legend.get(c, c) for c in nic_cols),
        links=tuple(links),
        nic_links=tuple(nic_links),
        cpu_affinity=tuple(cpu),
        numa_affinity=tuple(numa),
        gpu_numa_id=tuple(gnid),
    )


def _nic_legend(lines: list[str]) -> dict[str, str]:
    out = {}
    in_legend = False
    for line in lines:
        clean = _ANSI.sub("", line).strip()
        if clean.startswith("NIC Legend"):
            in_legend = True
            continue
        if in_legend:
            m = re.fullmatch(r"(NIC\d+):\s*(\S+)", clean)
            if m:
                out[m.group(1)] = m.group(2)
    return out
