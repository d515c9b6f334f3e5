"""Launch plan: from a rank map, the devices it places and the training command, every
process's host, global rank, environment and command line. Pure: no I/O, no SSH.

The plan follows the placement spec's "4. Launch" section, generalised to hosts with
several GPUs:

- rank 0's host is the rendezvous address (``MASTER_ADDR``, with ``MASTER_PORT``);
  a rendezvous anywhere else hangs the job;
- one process per device, each with its explicit global rank ``rank_map[i]``. In
  ``torchrun`` mode every GPU runs its own torchrun agent with the static rendezvous
  backend (the only backend that honours ``--node-rank``), ``--nnodes`` = world size,
  ``--nproc-per-node=1`` and ``--node-rank`` = the global rank, so torchrun's
  ``RANK = node_rank * 1 + 0`` is exactly the planned rank. The spec's one-process-per-host
  template would permute node ranks of whole hosts, which mis-ranks multi-GPU hosts;
- ``CUDA_VISIBLE_DEVICES`` is the device's GPU index (with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
  so the index means what nvidia-smi and the probes meant), every process sees one GPU
  as ``cuda:0`` and ``LOCAL_RANK`` is 0 in both modes;
- ``env`` mode sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
  ``MASTER_ADDR`` and ``MASTER_PORT`` directly, for programs that read them;
- ``NCCL_SOCKET_IFNAME`` uses the exact-name form ``=iface`` (a bare name is a prefix
  match); ``GLOO_SOCKET_IFNAME`` is set when the job uses gloo (gloo binds 127.0.0.1
  without it on hosts whose hostname resolves to loopback).

Every process also gets ``GEOCONSOLE_HOST_ADDR`` (its host's data address, for programs
that bind a gloo device to an explicit address) and ``PYTHONUNBUFFERED=1`` (so output
streams line by line).

sshd drops environment variables sent over the channel, so the environment is part of
the command line; every value is quoted with :func:`shlex.quote`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from geoconsole.errors import InputError
from solver.names import INTERFACE_NAME

MODES = ("torchrun", "env")
BACKENDS = ("nccl", "gloo", "nccl+gloo")
DEFAULT_PORT = 29500
#: Runs torchrun with the host's own Python, so a virtual environment needs no PATH.
TORCHRUN_MODULE = ("-m", "torch.distributed.run")

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class LaunchError(InputError):
    """A launch plan cannot be built; the message is one line naming the field or host.

    ``field`` names the plan option at fault (mode, backend, port, env, interface,
    command), so the command line can name the flag it came from.
    """


@dataclass(frozen=True)
class LaunchHost:
    """How to reach one host and what runs there.

    address:
        Where SSH connects, and the rendezvous address when this host runs rank 0.
    data_address:
        The address other ranks use to reach this host, when it differs from ``address``.
    identity:
        The private key file ssh offers (the inventory's ``identity``); exported
        scripts pass it with ``-i``, the console's own SSH takes it from the inventory.
    interface:
        The data interface (``NCCL_SOCKET_IFNAME`` / ``GLOO_SOCKET_IFNAME``); ``None``
        leaves it to the libraries, or to the launcher's ``ip route get`` lookup.
    """

    name: str
    address: str
    user: str | None = None
    port: int = 22
    python: str = "python3"
    interface: str | None = None
    data_address: str | None = None
    #: The private key ssh offers (the inventory's ``identity``), for exported scripts.
    identity: str | None = None

    @property
    def rendezvous_address(self) -> str:
        return self.data_address or self.address

    @classmethod
    def from_inventory(cls, host: Any) -> "LaunchHost":
        """Adapt an inventory host (any object with ``name`` and ``address``)."""
        return cls(
            name=str(host.name),
            address=str(getattr(host, "address", None) or host.name),
            user=getattr(host, "user", None),
            port=int(getattr(host, "port", None) or 22),
            python=str(getattr(host, "python", None) or "python3"),
            interface=getattr(host, "interface", None),
            data_address=getattr(host, "data_address", None),
            identity=getattr(host, "identity", None),
        )


def hosts_of_fabric(devices: Sequence[Any], inventory: Mapping[str, LaunchHost]) -> tuple[dict[str, LaunchHost], list[str]]:
    """``(LaunchHost per host name of the fabric, names the inventory lacks)``. A fabric
    host is the inventory's host of the same name in any case (as DNS; an inventory never
    holds two that differ only in case), under the fabric's spelling; one the inventory
    lacks is reached by its name (address = name, ssh defaults). O(hosts)."""
    by_key = {name.lower(): h for name, h in inventory.items()}
    out: dict[str, LaunchHost] = {}
    missing: list[str] = []
    for name in dict.fromkeys(d.host for d in devices):
        found = by_key.get(name.lower())
        if found is None:
            missing.append(name)
            out[name] = LaunchHost(name=name, address=name)
        else:
            out[name] = replace(found, name=name)
    return out, missing


@dataclass(frozen=True)
class Process:
    """One rank: where it runs, what it sees and the exact command."""

    rank: int
    device: int  #: the fabric row (matrix index) this rank runs on
    host: str
    address: str
    gpu: int | None
    local_index: int  #: ordinal of this process among the host's processes, by rank
    interface: str | None
    env: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]

    def shell_command(self, workdir: str | None = None) -> str:
        """The command line for ``sh -c`` on the host: ``cd``, ``exec env K=V ... argv``."""
        parts = ["exec", "env"]
        parts += [f"{k}={quote(v)}" for k, v in self.env]
        parts += [quote(a) for a in self.argv]
        cmd = " ".join(parts)
        return f"cd -- {quote(workdir)} && {cmd}" if workdir else cmd

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "device": self.device,
            "host": self.host,
            "address": self.address,
            "gpu": self.gpu,
            "local_index": self.local_index,
            "interface": self.interface,
            "env": dict(self.env),
            "argv": list(self.argv),
        }


@dataclass(frozen=True)
class LaunchPlan:
    """Every rank's process, sorted by rank, and the rendezvous they share."""

    mode: str
    backend: str
    master_host: str
    master_addr: str
    master_port: int
    world_size: int
    processes: tuple[Process, ...]
    command: tuple[str, ...]
    workdir: str | None = None
    hosts: Mapping[str, LaunchHost] = field(default_factory=dict)

    @property
    def rank_map(self) -> list[int]:
        """``rank_map[i]`` = global rank of device row ``i`` (the solver's convention)."""
        out = [0] * self.world_size
        for p in self.processes:
            out[p.device] = p.rank
        return out

    def by_host(self) -> dict[str, list[Process]]:
        out: dict[str, list[Process]] = {}
        for p in self.processes:
            out.setdefault(p.host, []).append(p)
        return out

    def shell_command(self, rank: int) -> str:
        return self.processes[rank].shell_command(self.workdir)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "geoconsole-launch/1",
            "mode": self.mode,
            "backend": self.backend,
            "master_host": self.master_host,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "world_size": self.world_size,
            "workdir": self.workdir,
            "command": list(self.command),
            "rank_map": self.rank_map,
            "processes": [
                {**p.to_json(), "shell": p.shell_command(self.workdir)} for p in self.processes
            ],
        }


def quote(value: object) -> str:
    """``shlex.quote``, plus quotes around ``=iface`` so the exact-name form reads clearly."""
    text = str(value)
    q = shlex.quote(text)
    return f"'{text}'" if q == text and text.startswith("=") else q


def _check_rank_map(rank_map: Sequence[int], n: int) -> list[int]:
    try:
        ranks = [int(r) for r in rank_map]
    except (TypeError, ValueError):
        raise LaunchError("rank map: ranks must be whole numbers") from None
    if any(isinstance(r, bool) or int(r) != r for r in rank_map):
        raise LaunchError("rank map: ranks must be whole numbers")
    if len(ranks) != n:
        raise LaunchError(f"rank map: {len(ranks)} ranks for {n} devices")
    seen: set[int] = set()
    for i, r in enumerate(ranks):
        if not 0 <= r < n:
            raise LaunchError(f"rank map[{i}]: rank {r} outside 0..{n - 1}")
        if r in seen:
            raise LaunchError(f"rank map[{i}]: rank {r} appears twice")
        seen.add(r)
    return ranks


#: Variables the plan sets itself (rank, world, rendezvous, GPU, interface): an --env
#: value for one would silently replace the rank map's placement.
PLAN_ENV = frozenset({"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                      "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
                      "GEOCONSOLE_HOST_ADDR"})


def _check_env(env: Mapping[str, str]) -> None:
    for k in env:
        if not _ENV_NAME.match(k):
            raise LaunchError(f"env {k!r}: not a valid environment variable name", "env")
        if k in PLAN_ENV:
            raise LaunchError(f"env {k}: the plan sets it for each rank (from the rank map, the fabric and "
                              "the inventory); it cannot be given", "env")


def _check_interface(value: str | None, where: str) -> None:
    if value is not None and not INTERFACE_NAME.match(value):
        raise LaunchError(f"{where}: {value!r}: not an interface name", "interface")


def check_one_line(plan: "LaunchPlan") -> None:
    """LaunchError unless the command, ``--workdir`` and ``--env`` values hold no line
    break or NUL. An SSH launch or a Slurm step passes such values through quoted, as
    data; a script export (torchrun script, k8s pod script) is read back line by line and
    cannot hold them (it failed with "No closing quotation"). A line break is any that
    ``str.splitlines`` cuts at (``\\v``, ``\\f``, ``\\x1c``-``\\x1e``, U+0085, U+2028 and U+2029
    too: the read-back splits there)."""
    bad = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029\0"
    for k, arg in enumerate(plan.command):
        if any(c in arg for c in bad):
            raise LaunchError(f"command: argument {k + 1} holds a line break or NUL, "
                              "which an exported script cannot hold", "command")
    if plan.workdir is not None and any(c in plan.workdir for c in bad):
        raise LaunchError("workdir: holds a line break or NUL, which an exported script cannot hold", "workdir")
    for key, value in (plan.processes[0].env if plan.processes else ()):
        if any(c in str(value) for c in bad):
            raise LaunchError(f"env {key}: the value holds a line break or NUL, "
                              "which an exported script cannot hold", "env")


def default_backend(devices: Sequence[Any]) -> str:
    """nccl when every device is a GPU, gloo for CPU hosts."""
    return "nccl" if all(getattr(d, "gpu", None) is not None for d in devices) else "gloo"


def build_plan(
    rank_map: Sequence[int],
    devices: Sequence[Any],
    hosts: Mapping[str, LaunchHost] | Iterable[LaunchHost],
    command: Sequence[str],
    *,
    mode: str = "torchrun",
    backend: str | None = None,
    port: int = DEFAULT_PORT,
    workdir: str | None = None,
    env: Mapping[str, str] | None = None,
    interfaces: Mapping[str, str] | None = None,
    torchrun: Sequence[str] | None = None,
) -> LaunchPlan:
    """Build the plan for ``rank_map`` over ``devices`` (``solver.fabric.Device`` rows).

    ``hosts`` maps host name to :class:`LaunchHost`; every device's host must be there.
    ``interfaces`` overrides the data interface per host name (``"*"`` for all).
    ``torchrun`` is the launcher argv; by default ``<host python> -m torch.distributed.run``.
    Raises :class:`LaunchError` with a one-line message.
    """
    if mode not in MODES:
        raise LaunchError(f"mode {mode!r}: expected one of {', '.join(MODES)}", "mode")
    backend = backend or default_backend(devices)
    if backend not in BACKENDS:
        raise LaunchError(f"backend {backend!r}: expected one of {', '.join(BACKENDS)}", "backend")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise LaunchError(f"port {port!r}: expected a TCP port 1..65535", "port")
    command = tuple(str(a) for a in command)
    if not command or not command[0]:
        raise LaunchError("command: give the training command, e.g. train.py --steps 10", "command")
    env = dict(env or {})
    _check_env(env)
    interfaces = dict(interfaces or {})
    for name, iface in interfaces.items():
        _check_interface(iface, "interface" if name == "*" else f"interface of {name}")
    if not isinstance(hosts, Mapping):
        hosts = {h.name: h for h in hosts}
    n = len(devices)
    if n == 0:
        raise LaunchError("fabric: no devices to launch on")
    ranks = _check_rank_map(rank_map, n)

    seen_slots: dict[tuple[str, int | None], int] = {}
    for i, d in enumerate(devices):
        host = getattr(d, "host", None)
        if not host:
            raise LaunchError(f"devices[{i}]: no host; the fabric must name a host for every row")
        if host not in hosts:
            raise LaunchError(f"devices[{i}]: host {host!r} is not in the inventory")
        _check_interface(hosts[host].interface, f"inventory host {host}")
        gpu = getattr(d, "gpu", None)
        if gpu is not None and (key := (host, gpu)) in seen_slots:
            raise LaunchError(
                f"devices[{i}]: {host} GPU {gpu} is also devices[{seen_slots[key]}]"
            )
        seen_slots[(host, gpu)] = i

    order = sorted(range(n), key=lambda i: ranks[i])  # device rows by rank
    master_dev = order[0]
    master_host = hosts[devices[master_dev].host]
    master_addr = master_host.rendezvous_address
    local_counter: dict[str, int] = {}
    processes = []
    for i in order:
        d = devices[i]
        h = hosts[d.host]
        iface = interfaces.get(d.host, interfaces.get("*", h.interface))
        local = local_counter.get(d.host, 0)
        local_counter[d.host] = local + 1
        proc_env = _process_env(mode, backend, ranks[i], n, d.gpu, iface, master_addr, port)
        proc_env["GEOCONSOLE_HOST_ADDR"] = h.rendezvous_address
        proc_env["PYTHONUNBUFFERED"] = "1"
        proc_env.update(env)
        argv = _process_argv(mode, h, ranks[i], n, master_addr, port, command, torchrun)
        processes.append(
            Process(
                rank=ranks[i], device=i, host=d.host, address=h.address, gpu=d.gpu,
                local_index=local, interface=iface, env=tuple(proc_env.items()), argv=argv,
            )
        )
    return LaunchPlan(
        mode=mode, backend=backend, master_host=master_host.name, master_addr=master_addr,
        master_port=port, world_size=n, processes=tuple(processes), command=command,
        workdir=workdir, hosts=dict(hosts),
    )


def _process_env(mode, backend, rank, world, gpu, iface, master_addr, port) -> dict[str, str]:
    env: dict[str, str] = {}
    if gpu is not None:
        # GPU indices are nvidia-smi's (PCI bus order), as the probes measured them;
        # CUDA's own default order (fastest first) can differ on mixed machines.
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    if iface:
        if "nccl" in backend:
            env["NCCL_SOCKET_IFNAME"] = f"={iface}"
        if "gloo" in backend:
            env["GLOO_SOCKET_IFNAME"] = iface
    if mode == "env":
        env.update(
            RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
            MASTER_ADDR=master_addr, MASTER_PORT=str(port),
        )
    return env


def _process_argv(mode, host, rank, world, master_addr, port, command, torchrun) -> tuple[str, ...]:
    is_script = command[0].endswith(".py")
    if mode == "env":
        return ((host.python,) if is_script else ()) + command
    launcher = tuple(torchrun) if torchrun else (host.python, *TORCHRUN_MODULE)
    args = (
        f"--nnodes={world}",
        "--nproc-per-node=1",
        f"--node-rank={rank}",
        "--rdzv-backend=static",
        f"--master-addr={master_addr}",
        f"--master-port={port}",
        "--max-restarts=0",
    )
    # torchrun runs a .py file with its own Python; anything else (a binary, "python -m x")
    # needs --no-python.
    return launcher + args + (() if is_script else ("--no-python",)) + command


def describe(plan: LaunchPlan) -> list[str]:
    """Human-readable lines for ``launch --dry-run``."""
    lines = [
        f"rendezvous {plan.master_addr}:{plan.master_port} on {plan.master_host} (rank 0's host)",
        f"mode {plan.mode}, backend {plan.backend}, world size {plan.world_size}, "
        f"{len(plan.by_host())} host(s)",
    ]
    for p in plan.processes:
        gpu = "-" if p.gpu is None else str(p.gpu)
        iface = p.interface or ("ip route get at launch" if "gloo" in plan.backend else "library default")
        lines.append(
            f"rank {p.rank:>4}  {p.host:<20} gpu {gpu:>2}  device {p.device:>4}  interface: {iface}"
        )
        lines.append(f"    {p.shell_command(plan.workdir)}")
    return lines
