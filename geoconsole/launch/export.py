"""Export a launch plan for launchers the console does not drive, and read exports back.

Formats (every one carries, per global rank, the host, the GPU and the fabric row, so
that a parse gives back the same mapping, and the rank map itself):

``torchrun``
    A bash script that starts one torchrun per GPU over ``ssh -tt`` (static rendezvous,
    ``--nproc-per-node=1``, ``--node-rank`` = global rank), prefixes every line of output
    with the rank and host, and kills every rank when interrupted. ``-tt`` gives each
    remote torchrun a terminal, so closing ssh hangs it up and torchrun stops its worker.
``slurm``
    A ``SLURM_HOSTFILE`` for ``srun --distribution=arbitrary``: line ``r`` (counting only
    host lines) is the node of task ``r``. Slurm's reader ends a line at ``#``; the GPU and
    fabric row of each task are kept in ``#`` comment lines. Slurm binds GPUs to tasks
    itself, so the GPU column is for review; the file fixes which node runs which rank.
``rankfile``
    An Open MPI rankfile, ``rank N=host slot=S`` per rank, with ``S`` the GPU index
    (the process ordinal on CPU hosts). Open MPI reads ``slot`` as the CPU slot it binds
    the rank to; the trailing ``# gpu=G device=I`` comment (the lexer skips ``#`` to end
    of line) carries the GPU for the job to select.
``json``
    The plan itself (``geoconsole-launch/1``), commands included; exported without a
    training command, ``command`` and each process's ``argv`` and ``shell`` are null
    (the mapping, environment and rendezvous only: nothing that could be run).
``k8s``
    Kubernetes manifests: one Pod per node pinned by ``kubernetes.io/hostname``, a
    headless Service for rank 0 (:mod:`geoconsole.launch.k8s`).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Mapping

from geoconsole.errors import InputError
from geoconsole.launch.plan import LaunchPlan, quote

FORMATS = ("torchrun", "slurm", "rankfile", "json", "k8s")

# Host names the two foreign formats read back unchanged: Slurm splits at ',' and reads
# '*N' as repetition, and needs a leading letter or digit; Open MPI's rankfile lexer takes
# hostnames, IPv4 addresses and plain [A-Za-z0-9_-] strings.
_SLURM_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*\Z")
_RANKFILE_HOST = re.compile(r"(?:[A-Za-z][A-Za-z0-9_.\-]*|[0-9]{1,3}(?:\.[0-9]{1,3}){3})\Z")
_RANKFILE_LINE = re.compile(
    r"\s*rank\s+(\d+)\s*=\s*(\S+)\s+slots?\s*=\s*(\S+)\s*(?:#(.*))?\Z"
)


class ExportError(InputError):
    """An export cannot be written or read back; one line naming the file and line."""


@dataclass(frozen=True)
class RankSlot:
    """Where one global rank runs, as an export states it."""

    rank: int
    host: str
    gpu: int | None
    device: int | None = None


def plan_slots(plan: LaunchPlan) -> list[RankSlot]:
    """The mapping a plan fixes, by rank (what every export must round-trip)."""
    return [RankSlot(p.rank, p.host, p.gpu, p.device) for p in plan.processes]


def rank_map_of(slots: list[RankSlot]) -> list[int]:
    """``rank_map[device] = rank`` from parsed slots (all must carry their device row)."""
    n = len(slots)
    out = [-1] * n
    for s in slots:
        if s.device is None or not 0 <= s.device < n or out[s.device] != -1:
            raise ExportError(f"rank {s.rank}: missing or repeated device row {s.device}")
        out[s.device] = s.rank
    return out


def export(plan: LaunchPlan, fmt: str, *, image: str | None = None, name: str = "geoconsole",
           nodes: dict[str, str] | None = None, with_command: bool = True) -> str:
    """The plan in format ``fmt``; ``image`` and ``name`` are the k8s format's, ``nodes``
    (host -> node name: the inventory's ``k8s_node`` or ``slurm_node``) the k8s and slurm
    formats'; ``with_command=False`` (json only: the plan was built around a stand-in
    command) nulls the commands."""
    if fmt not in FORMATS:
        raise ExportError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt in ("torchrun", "k8s"):  # scripts, read back line by line
        from geoconsole.launch.plan import check_one_line

        check_one_line(plan)
    if fmt == "k8s":
        from geoconsole.launch.k8s import export_k8s

        return export_k8s(plan, image=image, name=name, nodes=nodes)
    if fmt == "slurm":
        return export_slurm(plan, nodes)
    if fmt == "json":
        return export_json(plan, with_command)
    return {"torchrun": export_torchrun, "rankfile": export_rankfile}[fmt](plan)


def parse(text: str, fmt: str, source: str = "<export>") -> list[RankSlot]:
    if fmt not in FORMATS:
        raise ExportError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "k8s":
        from geoconsole.launch.k8s import parse_k8s

        return parse_k8s(text, source)
    return {"torchrun": parse_torchrun, "slurm": parse_slurm,
            "rankfile": parse_rankfile, "json": parse_json}[fmt](text, source)


def _gpu_text(gpu: int | None) -> str:
    return "-" if gpu is None else str(gpu)


def _gpu_value(text: str, where: str) -> int | None:
    if text == "-":
        return None
    if not text.isdigit():
        raise ExportError(f"{where}: gpu {text!r}: expected an index or '-'")
    return int(text)


def _check_complete(slots: list[RankSlot], source: str) -> list[RankSlot]:
    slots = sorted(slots, key=lambda s: s.rank)
    if not slots:
        raise ExportError(f"{source}: no ranks found")
    for want, s in enumerate(slots):
        if s.rank != want:
            raise ExportError(f"{source}: rank {want} missing or repeated (found {s.rank})")
    return slots


# --- torchrun script -------------------------------------------------------------------

_SCRIPT_HEAD = """\
#!/usr/bin/env bash
# One torchrun per GPU with its explicit global rank (static rendezvous,
# --nproc-per-node=1, --node-rank = global rank). Written by geoconsole export.
# Rendezvous: {master_addr} port {port} on {master_host}, the host of rank 0.
# rank_map (fabric row -> global rank): {rank_map}
set -u -o pipefail
pids=()
stop() {{
    trap - INT TERM
    kill "${{pids[@]}}" 2>/dev/null
    wait
    exit 130
}}
trap stop INT TERM
# prefix TEXT: copy standard input to standard output, TEXT and a space before each
# line (TEXT is data: it is printed, never interpreted), a trailing CR dropped.
prefix() {{
    local line
    while IFS= read -r line || [ -n "$line" ]; do
        printf '%s %s\\n' "$1" "${{line%$'\\r'}}"
    done
}}
# launch RANK HOST GPU DEVICE DESTINATION SSH_PORT REMOTE_COMMAND [IDENTITY_FILE]
# SSH overrides the ssh command and its options, e.g. SSH="ssh -o ConnectTimeout=10";
# the inventory's identity of a host comes as the eighth argument (ssh -i).
launch() {{
    ${{SSH:-ssh}} ${{8:+-i "$8"}} -tt -o BatchMode=yes -p "$6" -- "$5" "$7" \\
        > >(prefix "[rank $1 $2]") 2>&1 < /dev/null &
    pids+=($!)
}}
"""

_SCRIPT_TAIL = """\
failed=0
for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
done
exit "$failed"
"""


def export_torchrun(plan: LaunchPlan) -> str:
    if plan.mode != "torchrun":
        raise ExportError("the plan uses mode env; a torchrun script needs mode torchrun")
    lines = [
        _SCRIPT_HEAD.format(
            master_addr=quote(plan.master_addr), port=plan.master_port, master_host=quote(plan.master_host),
            rank_map=" ".join(str(r) for r in plan.rank_map),
        )
    ]
    for p in plan.processes:
        h = plan.hosts.get(p.host)
        dest = f"{h.user}@{h.address}" if h is not None and h.user else p.address
        port = h.port if h is not None else 22
        args = [str(p.rank), p.host, _gpu_text(p.gpu), str(p.device), dest, str(port),
                p.shell_command(plan.workdir)] + ([h.identity] if h is not None and h.identity else [])
        lines.append("launch " + " ".join(quote(a) for a in args) + "\n")
    lines.append(_SCRIPT_TAIL)
    return "".join(lines)


def _torchrun_flags(argv: list[str]) -> dict[str, str]:
    flags = {}
    for a in argv:
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            flags.setdefault(k.replace("_", "-"), v)
    return flags


def parse_torchrun(text: str, source: str = "<torchrun script>") -> list[RankSlot]:
    """Read a script written by :func:`export_torchrun` back to its rank slots.

    Checks what makes the mapping hold: ``--node-rank`` equals the rank, one process per
    node, the static backend, one world size and rendezvous for all, and the GPU in
    ``CUDA_VISIBLE_DEVICES``.
    """
    slots, world, rdzv = [], set(), set()
    for no, line in enumerate(text.splitlines(), 1):
        if not line.startswith("launch "):
            continue
        where = f"{source}:{no}"
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise ExportError(f"{where}: {exc}") from None
        if len(words) not in (8, 9):
            raise ExportError(f"{where}: expected launch RANK HOST GPU DEVICE DEST PORT COMMAND [IDENTITY]")
        _, rank, host, gpu, device, _dest, _port, remote = words[:8]
        if not rank.isdigit() or not device.isdigit():
            raise ExportError(f"{where}: rank and device must be whole numbers")
        try:
            argv = shlex.split(remote)
        except ValueError as exc:
            raise ExportError(f"{where}: remote command: {exc}") from None
        env = dict(a.split("=", 1) for a in argv if re.match(r"[A-Za-z_][A-Za-z0-9_]*=", a))
        flags = _torchrun_flags(argv)
        if flags.get("node-rank") != rank:
            raise ExportError(f"{where}: --node-rank {flags.get('node-rank')} differs from rank {rank}")
        if flags.get("nproc-per-node") != "1" or flags.get("rdzv-backend") != "static":
            raise ExportError(f"{where}: expected --nproc-per-node=1 and --rdzv-backend=static")
        gpu_v = _gpu_value(gpu, where)
        visible = env.get("CUDA_VISIBLE_DEVICES")
        if (visible or None) != (None if gpu_v is None else str(gpu_v)):
            raise ExportError(f"{where}: CUDA_VISIBLE_DEVICES {visible!r} differs from gpu {gpu}")
        world.add(flags.get("nnodes"))
        rdzv.add((flags.get("master-addr"), flags.get("master-port")))
        slots.append(RankSlot(int(rank), host, gpu_v, int(device)))
    if len(world) > 1 or len(rdzv) > 1:
        raise ExportError(f"{source}: ranks disagree on --nnodes or the rendezvous address")
    slots = _check_complete(slots, source)
    if world and world != {str(len(slots))}:
        raise ExportError(f"{source}: --nnodes {world.pop()} for {len(slots)} ranks")
    return slots


# --- Slurm hostfile --------------------------------------------------------------------


def export_slurm(plan: LaunchPlan, nodes: Mapping[str, str] | None = None) -> str:
    """``SLURM_HOSTFILE`` contents: one node name per line, line r = task (rank) r; a
    host's node is ``nodes[host]`` (the inventory's ``slurm_node``, as ``launch --via
    slurm`` takes it), else its name, and the table then names both."""
    nodes = nodes or {}
    named = [nodes.get(p.host) or p.host for p in plan.processes]
    for p, node in zip(plan.processes, named):
        if not _SLURM_HOST.match(node):
            raise ExportError(f"host {p.host!r}: {'node ' + repr(node) + ' is ' if node != p.host else ''}"
                              "not a name Slurm's hostfile reader keeps (set slurm_node in the inventory)")
    out = [
        "# SLURM_HOSTFILE for: srun --distribution=arbitrary --ntasks=%d" % plan.world_size,
        "# Host line r (comments skipped) runs task r, the global rank r.",
        "# Written by geoconsole export. Columns of the table below: rank host gpu device [node]",
    ]
    out += [f"#@ {p.rank} {p.host} {_gpu_text(p.gpu)} {p.device}{' ' + node if node != p.host else ''}"
            for p, node in zip(plan.processes, named)]
    out += named
    return "\n".join(out) + "\n"


def parse_slurm(text: str, source: str = "<slurm hostfile>") -> list[RankSlot]:
    """Read a Slurm hostfile the way ``slurm_read_hostfile`` does, plus our GPU table.

    A host line ends at ``#``; names are split at ``,`` and ``name*N`` repeats a name N
    times; a non-empty line must start with a letter or digit.
    """
    hosts: list[str] = []
    table: dict[int, RankSlot] = {}
    node_of: dict[int, str] = {}  # the table's node column, where the node is not the host
    for no, raw in enumerate(text.splitlines(), 1):
        where = f"{source}:{no}"
        if raw.startswith("#@"):
            parts = raw[2:].split()
            if len(parts) not in (4, 5) or not parts[0].isdigit() or not parts[3].isdigit():
                raise ExportError(f"{where}: expected '#@ RANK HOST GPU DEVICE [NODE]'")
            table[int(parts[0])] = RankSlot(int(parts[0]), parts[1], _gpu_value(parts[2], where), int(parts[3]))
            node_of[int(parts[0])] = parts[4] if len(parts) == 5 else parts[1]
        line = raw.split("#", 1)[0]
        if not line:
            continue
        if not line[0].isalnum():
            raise ExportError(f"{where}: a host line must start with a letter or digit")
        for name in line.split(","):
            name = name.strip()
            if "*" in name:
                base, count = name.split("*", 1)
                if count.isdigit() and int(count) > 0:
                    hosts.extend([base] * int(count))
                    continue
            hosts.append(name)
    if not hosts:
        raise ExportError(f"{source}: no host lines")
    slots = []
    for rank, host in enumerate(hosts):
        t = table.get(rank)
        if t is not None and node_of[rank] != host:
            raise ExportError(f"{source}: task {rank} runs on {host} but the table says {node_of[rank]}")
        slots.append(RankSlot(rank, t.host if t else host, t.gpu if t else None, t.device if t else None))
    return slots


# --- Open MPI rankfile -----------------------------------------------------------------


def export_rankfile(plan: LaunchPlan) -> str:
    """``rank N=host slot=S`` per rank (``mpirun --map-by rankfile:file=F`` / ``-rf F``)."""
    out = [
        "# Open MPI rankfile written by geoconsole export: rank N=host slot=S.",
        "# slot is the GPU index on that host (process ordinal on CPU hosts); Open MPI binds",
        "# the rank to that CPU slot. The comment after each line names the GPU and fabric row.",
    ]
    for p in plan.processes:
        if not _RANKFILE_HOST.match(p.host):
            raise ExportError(f"host {p.host!r}: not a name Open MPI's rankfile accepts")
        slot = p.gpu if p.gpu is not None else p.local_index
        out.append(f"rank {p.rank}={p.host} slot={slot} # gpu={_gpu_text(p.gpu)} device={p.device}")
    return "\n".join(out) + "\n"


def parse_rankfile(text: str, source: str = "<rankfile>") -> list[RankSlot]:
    slots = []
    for no, raw in enumerate(text.splitlines(), 1):
        where = f"{source}:{no}"
        stripped = raw.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("//"):
            continue
        m = _RANKFILE_LINE.match(raw)
        if not m:
            raise ExportError(f"{where}: expected 'rank N=host slot=S'")
        rank, host, slot, comment = m.groups()
        if not _RANKFILE_HOST.match(host.split("@")[-1]):
            raise ExportError(f"{where}: host {host!r}: not a rankfile host name")
        info = dict(kv.split("=", 1) for kv in (comment or "").split() if "=" in kv)
        gpu = _gpu_value(info["gpu"], where) if "gpu" in info else (int(slot) if slot.isdigit() else None)
        device = int(info["device"]) if info.get("device", "").isdigit() else None
        slots.append(RankSlot(int(rank), host.split("@")[-1], gpu, device))
    return _check_complete(slots, source)


# --- JSON ------------------------------------------------------------------------------


def export_json(plan: LaunchPlan, with_command: bool = True) -> str:
    doc = plan.to_json()
    if not with_command:  # a stand-in command is no command: never written where it could be run
        doc["command"] = None
        for p in doc["processes"]:
            p["argv"] = p["shell"] = None
    return json.dumps(doc, indent=1) + "\n"


def parse_json(text: str, source: str = "<launch json>") -> list[RankSlot]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExportError(f"{source}: invalid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(doc, dict) or doc.get("format") != "geoconsole-launch/1":
        raise ExportError(f"{source}: not a geoconsole launch plan (format geoconsole-launch/1)")
    procs = doc.get("processes")
    if not isinstance(procs, list):
        raise ExportError(f"{source}: processes: expected a list")
    slots = []
    for i, p in enumerate(procs):
        if not isinstance(p, dict):
            raise ExportError(f"{source}: processes[{i}]: expected an object")
        rank, host, gpu, device = (p.get(k) for k in ("rank", "host", "gpu", "device"))
        if not isinstance(rank, int) or not isinstance(host, str) or not isinstance(device, int):
            raise ExportError(f"{source}: processes[{i}]: needs rank, host and device")
        if gpu is not None and not isinstance(gpu, int):
            raise ExportError(f"{source}: processes[{i}].gpu: expected an index or null")
        slots.append(RankSlot(rank, host, gpu, device))
    return _check_complete(slots, source)
