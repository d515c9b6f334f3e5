"""Per-host discovery over SSH: GPUs, topology, versions, network, location.

One SSH command per host runs a fixed shell script (inventory values enter it only
through ``shlex.quote``) that prints marked sections; :func:`parse_discovery` turns
them into a :class:`HostInfo`:

* ``hostname``;
* GPUs from ``nvidia-smi --query-gpu=index,name,uuid,memory.total,pci.bus_id``; a host
  without ``nvidia-smi`` (or where it fails) is a CPU host: as many devices as the
  inventory's ``slots``/``gpus`` count (else one), one gloo process each;
* ``nvidia-smi topo -m`` parsed by :mod:`probes.topo` (link classes, NIC columns,
  CPU and NUMA affinity);
* the remote python's torch and NCCL versions, read from package metadata (no
  ``import torch`` here: that costs seconds, and the probe workers report the
  imported versions anyway);
* the data interface (the inventory's, else the device ``ip route get <peer>`` names)
  and its MTU; TCP congestion control (current and available);
* location: region and zone from the GCE metadata server, asked only when
  ``/sys/class/dmi/id/product_name`` says Google, with a 1 s timeout. Precedence:
  the host's inventory entry, then GCE, then the command's ``--region/--zone/
  --network-group`` flags.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from probes.ssh import HostSession, SSHError, SSHPool
from probes.topo import Topology, TopoError, parse_topo

#: ``python -c`` puts the current directory (the login's home) first on the module path,
#: so a ``json.py`` there would replace the standard module; ``-I``/``-P`` would also drop
#: the ``PYTHONPATH`` torch may be found on (or need Python 3.11), so the snippets drop
#: just that entry. ``sys`` is built in and cannot be replaced.
_NO_CWD = "import sys\nif sys.path[:1] == ['']:\n    del sys.path[0]\n"

_VERSIONS_PY = _NO_CWD + (
    "import json, platform\n"
    "from importlib import metadata\n"
    "def version(name):\n"
    "    try:\n"
    "        return metadata.version(name)\n"
    "    except Exception:\n"
    "        return None\n"
    "nccl = None\n"
    "for dist in metadata.distributions():\n"
    "    if (dist.metadata['Name'] or '').lower().startswith('nvidia-nccl'):\n"
    "        nccl = dist.version\n"
    "print(json.dumps({'python': platform.python_version(), 'torch': version('torch'), 'nccl': nccl}))\n"
)

_GCE_PY = _NO_CWD + (
    "import urllib.request\n"
    "request = urllib.request.Request('http://169.254.169.254/computeMetadata/v1/instance/zone',"
    " headers={'Metadata-Flavor': 'Google'})\n"
    "try:\n"
    "    print(urllib.request.urlopen(request, timeout=1).read().decode())\n"
    "except Exception as exc:\n"
    "    print('error', type(exc).__name__)\n"
)


@dataclass(frozen=True)
class GPUInfo:
    index: int
    name: str
    uuid: str
    memory_mib: int | None
    pci_bus_id: str


@dataclass(frozen=True)
class HostInfo:
    """What discovery learnt about one host. ``devices``: GPU indices to use, or one
    ``None`` per CPU slot."""

    name: str
    address: str
    hostname: str
    gpus: tuple[GPUInfo, ...]
    devices: tuple[int | None, ...]
    topo: Topology | None
    topo_error: str | None
    python: str
    python_version: str | None
    torch: str | None
    nccl: str | None
    interface: str | None
    mtu: int | None
    congestion_control: str | None
    congestion_available: tuple[str, ...]
    product: str | None
    region: str | None
    zone: str | None
    network_group: str | None
    location_source: str | None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def cpu_host(self) -> bool:
        return not self.gpus

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["topo"] = self.topo.to_json() if self.topo else None
        doc["cpu_host"] = self.cpu_host
        return doc


def discovery_script(python: str, peer: str | None, interface: str | None) -> str:
    """The shell script run on a host; every variable part is quoted."""
    py = shlex.quote(python)
    route = f"ip -o route get {shlex.quote(peer)}" if peer else "ip -o route show default"
    iface = f"echo {shlex.quote(interface)}" if interface else "true"
    return "\n".join([
        "export LC_ALL=C",
        "echo @@hostname; hostname 2>/dev/null || cat /proc/sys/kernel/hostname",
        "if command -v nvidia-smi >/dev/null 2>&1; then",
        "  echo @@gpus; nvidia-smi --query-gpu=index,name,uuid,memory.total,pci.bus_id"
        " --format=csv,noheader,nounits 2>&1; echo \"@@gpus-rc $?\"",
        "  echo @@topo; nvidia-smi topo -m 2>&1",
        "fi",
        f"echo @@route; {route} 2>&1",
        f"echo @@interface; {iface}",
        "echo @@mtu; for f in /sys/class/net/*/mtu; do d=${f%/mtu}; echo \"${d##*/} $(cat \"$f\")\"; done",
        "echo @@cc; cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null",
        "echo @@cc-available; cat /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null",
        "echo @@product; cat /sys/class/dmi/id/product_name 2>/dev/null",
        f"echo @@versions; {py} -c {shlex.quote(_VERSIONS_PY)} 2>&1 | tail -n 1",
        "case \"$(cat /sys/class/dmi/id/product_name 2>/dev/null)\" in",
        f"  *Google*) echo @@gce; {py} -c {shlex.quote(_GCE_PY)} 2>&1 ;;",
        "esac",
        "echo @@end",
    ])


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@@"):
            key, _, rest = line[2:].partition(" ")
            current = key
            out.setdefault(key, [])
            if rest:
                out[key].append(rest)
            continue
        if current is not None:
            out[current].append(line)
    return out


def _parse_gpus(lines: list[str], rc: str | None) -> tuple[list[GPUInfo], str | None]:
    if rc not in (None, "0"):
        return [], f"nvidia-smi failed ({' '.join(lines)[:120]}); treated as a CPU host"
    gpus = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5 or not parts[0].isdigit():
            return [], f"unreadable nvidia-smi line {line!r}; treated as a CPU host"
        memory = int(parts[3]) if parts[3].isdigit() else None
        gpus.append(GPUInfo(int(parts[0]), parts[1], parts[2], memory, parts[4]))
    return gpus, None


def parse_discovery(host: Any, text: str, *, labels: dict[str, str | None] | None = None) -> HostInfo:
    """Build a HostInfo from the script's output. Raises SSHError on bad GPU selection."""
    sec = _sections(text)
    notes: list[str] = []
    gpus, note = _parse_gpus(sec.get("gpus", []), (sec.get("gpus-rc") or [None])[0])
    if note:
        notes.append(note)
    topo, topo_error = None, None
    if gpus and sec.get("topo"):
        try:
            topo = parse_topo("\n".join(sec["topo"]))
        except TopoError as exc:
            topo_error = str(exc)
            notes.append(f"topo -m unreadable: {exc}")
    wanted = getattr(host, "gpus", None)
    if gpus:
        have = [g.index for g in gpus]
        if wanted is not None:
            missing = [g for g in wanted if g not in have]
            if missing:
                raise SSHError(host.name, f"gpus: index {missing[0]} not on this host (it has {len(have)} GPUs: {have})")
            devices: tuple[int | None, ...] = tuple(wanted)
        else:
            devices = tuple(have)
    else:  # a CPU host: one gloo process per slot (hostfile slots=N, TOML gpus = [...])
        devices = (None,) * max(len(wanted or ()), 1)
    interface = (sec.get("interface") or [""])[0].strip() or None
    if interface is None:
        words = " ".join(sec.get("route", [])).split()
        if "dev" in words:
            interface = words[words.index("dev") + 1]
    mtus = {}
    for line in sec.get("mtu", []):
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            mtus[parts[0]] = int(parts[1])
    versions: dict[str, Any] = {}
    raw = " ".join(sec.get("versions", [])).strip()
    try:
        versions = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        notes.append(f"python {getattr(host, 'python', 'python3')!r} failed: {raw[:120]}")
    product = " ".join(sec.get("product", [])).strip() or None
    region, zone, source = _location(host, sec.get("gce"), labels or {}, notes)
    cc_avail = tuple(" ".join(sec.get("cc-available", [])).split())
    return HostInfo(
        name=host.name,
        address=host.address,
        hostname=(sec.get("hostname") or [""])[0].strip(),
        gpus=tuple(gpus),
        devices=devices,
        topo=topo,
        topo_error=topo_error,
        python=getattr(host, "python", "python3"),
        python_version=versions.get("python"),
        torch=versions.get("torch"),
        nccl=versions.get("nccl"),
        interface=interface,
        mtu=mtus.get(interface) if interface else None,
        congestion_control=" ".join(sec.get("cc", [])).strip() or None,
        congestion_available=cc_avail,
        product=product,
        region=region,
        zone=zone,
        network_group=getattr(host, "network_group", None) or (labels or {}).get("network_group"),
        location_source=source,
        notes=tuple(notes),
    )


def _location(host: Any, gce: list[str] | None, labels: dict[str, str | None],
              notes: list[str]) -> tuple[str | None, str | None, str | None]:
    region, zone = getattr(host, "region", None), getattr(host, "zone", None)
    if region or zone:
        return region, zone, "inventory"
    if gce:
        answer = " ".join(gce).strip()
        if answer.startswith("error") or "/zones/" not in answer:
            notes.append(f"GCE metadata server: {answer or 'no answer'}")
        else:
            zone = answer.rsplit("/", 1)[-1]
            return zone.rsplit("-", 1)[0], zone, "gce"
    if labels.get("region") or labels.get("zone"):
        return labels.get("region"), labels.get("zone"), "flags"
    return None, None, None


async def discover_host(session: HostSession, host: Any, *, peer: str | None,
                        labels: dict[str, str | None] | None = None,
                        timeout: float = 30.0) -> HostInfo:
    """Run the discovery script on one host and parse it."""
    script = discovery_script(getattr(host, "python", "python3"), peer, getattr(host, "interface", None))
    result = await session.run_shell(script, timeout=timeout)
    if "@@end" not in result.stdout:
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise SSHError(host.name, f"discovery script failed (exit {result.exit_status}): {tail}")
    return parse_discovery(host, result.stdout, labels=labels)


def peer_for(hosts: Sequence[Any], k: int) -> str | None:
    """Another host's address, to ask the kernel which interface leads into the fleet."""
    for m in range(1, len(hosts)):
        other = hosts[(k + m) % len(hosts)]
        if other.address != hosts[k].address:
            return other.address
    return None


async def discover_fleet(pool: SSHPool, hosts: Sequence[Any], *,
                         labels: dict[str, str | None] | None = None,
                         timeout: float = 30.0) -> list[HostInfo | SSHError]:
    """Discover every host concurrently; failures come back as SSHError values, in order."""

    async def one(k: int) -> HostInfo | SSHError:
        host = hosts[k]
        try:
            session = await pool.session(host)
            return await discover_host(session, host, peer=peer_for(hosts, k), labels=labels, timeout=timeout)
        except SSHError as exc:
            return exc

    return list(await asyncio.gather(*(one(k) for k in range(len(hosts)))))
