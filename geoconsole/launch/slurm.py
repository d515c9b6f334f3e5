"""Launch a plan through Slurm: one ``srun`` job step that places rank r on line r's node.

Inside an allocation (``SLURM_JOB_ID`` set) :func:`run_step` runs one step::

    SLURM_HOSTFILE=<file> srun --ntasks=<world> --distribution=arbitrary --label -v \\
        --kill-on-bad-exit=1 --job-name=geoconsole /bin/sh -c <task script>

- ``--distribution=arbitrary`` reads ``SLURM_HOSTFILE``: line r names the node of task r,
  so task r (``SLURM_PROCID``) is global rank r exactly where the rank map put it;
- the task script is a ``case`` on ``SLURM_PROCID``: each task checks that it runs on its
  planned node (``SLURMD_NODENAME``) and ``exec``\\s its rank's command with the plan's
  environment (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, ``CUDA_VISIBLE_DEVICES``, rendezvous on
  rank 0's node). The script travels inside the step request: no shared file system;
- ``--label`` output is streamed per rank as the SSH launcher does; ``-v`` makes srun say
  the job and step id (``launching StepId=J.S``) and each task's exit, which fill the
  result and the launch record;
- a failed rank or Ctrl-C cancels the step with ``scancel J.S``; Slurm's process tracking
  ends every process of the step on every node.

Outside an allocation :func:`sbatch_script` wraps the same step in a batch script
(``--nodelist`` of the plan's nodes, ``--ntasks-per-node`` from the rank map) that writes
the hostfile on the batch node, and :func:`submit` hands it to ``sbatch``.

Every value that reaches a command line or script is quoted with :func:`shlex.quote`;
node names are checked against what Slurm's hostfile reader keeps.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from geoconsole.errors import RemoteError
from geoconsole.launch.plan import LaunchError, LaunchPlan, Process
from geoconsole.launch.run import LaunchResult, LineSink, RankOutcome, default_sink

#: Node names Slurm's hostfile reader and ``--nodelist`` keep as they are.
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,252}\Z")
#: Longest task script passed inline (Linux caps one argument at 128 KiB).
MAX_SCRIPT_BYTES = 120_000
#: Exit status of a task that finds itself on another node than planned.
MISPLACED_STATUS = 97
#: Exit status of a gloo task that finds no route towards its peer.
NO_ROUTE_STATUS = 98
JOB_NAME = "geoconsole"


@dataclass(frozen=True)
class SlurmStep:
    """One job step for a plan: the node of every rank, the srun argv, the task script."""

    plan: LaunchPlan
    nodes: tuple[str, ...]  #: node of global rank r, by r (the hostfile's lines)
    argv: tuple[str, ...]  #: srun and its options, then ``/bin/sh -c <script>``
    script: str  #: what each task runs

    @property
    def hostfile(self) -> str:
        return "".join(f"{n}\n" for n in self.nodes)

    @property
    def tasks_per_node(self) -> dict[str, int]:
        return dict(Counter(self.nodes))

    def srun_line(self, hostfile_path: str = "$SLURM_HOSTFILE") -> str:
        """The shell line that runs the step (``SLURM_HOSTFILE=... srun ...``)."""
        # a "$variable" is the script's own, expanded there; a path is data, quoted
        where = f'"{hostfile_path}"' if hostfile_path.startswith("$") else shlex.quote(hostfile_path)
        return f"SLURM_HOSTFILE={where} " + " ".join(shlex.quote(a) for a in self.argv)


@dataclass
class SlurmResult(LaunchResult):
    """A launch result with the Slurm job and step that ran it."""

    job_id: str | None = None
    step_id: str | None = None
    startup_s: float | None = None  #: srun start to every task started

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "via": "slurm", "slurm_job_id": self.job_id,
                "slurm_step_id": self.step_id,
                "startup_s": None if self.startup_s is None else round(self.startup_s, 3)}


# --- building ---------------------------------------------------------------------------


def node_names(plan: LaunchPlan, names: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Slurm's node of every rank: ``names[host]`` (the inventory's ``slurm_node``), else
    the host name. Raises :class:`LaunchError` for a name Slurm would read differently."""
    names = names or {}
    out = []
    for p in plan.processes:
        node = names.get(p.host) or p.host
        if not _NODE.match(node):
            raise LaunchError(f"host {p.host}: {node!r} is not a Slurm node name "
                              "(letters, digits, '_', '.', '-'; set slurm_node in the inventory)")
        out.append(node)
    return tuple(out)


#: Finds the interface towards an address on the task's node (``ip route get``), as the
#: SSH launcher does before it starts gloo ranks; the output is split into words, never
#: given to a program.
_ROUTE_DEV = """\
route_dev() {
    set -f
    set -- $(ip -o route get "$1" 2>/dev/null)
    while [ "$#" -gt 1 ]; do
        [ "$1" = dev ] && { printf '%s\\n' "$2"; return 0; }
        shift
    done
    return 1
}"""


def route_targets(plan: LaunchPlan) -> dict[str, str | None]:
    """Per host whose gloo interface the plan leaves open: the address to route towards
    (rank 0's; rank 0's host routes towards the next host in rank order; ``None``: a
    one-host plan, which uses ``lo``)."""
    if "gloo" not in plan.backend:
        return {}
    order = list(dict.fromkeys(p.host for p in plan.processes))
    addr = {p.host: plan.hosts[p.host].rendezvous_address if p.host in plan.hosts else p.address
            for p in plan.processes}
    out: dict[str, str | None] = {}
    for p in plan.processes:
        if p.interface is None and p.host not in out:
            peers = [h for h in order if h != p.host]
            out[p.host] = None if not peers else addr[plan.master_host if p.host != plan.master_host else peers[0]]
    return out


def _task_line(p: Process, node: str, common: set[str], workdir: str | None, backend: str,
               targets: Mapping[str, str | None]) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in p.env if k not in common)
    found = ""
    if p.host in targets:
        target = targets[p.host]
        pick = "ifname=lo" if target is None else (
            f"ifname=$(route_dev {shlex.quote(target)}) || noroute {shlex.quote(target)}")
        found = pick + "; "
        env = " ".join(filter(None, ['GLOO_SOCKET_IFNAME="$ifname"',
                                     'NCCL_SOCKET_IFNAME="=$ifname"' if "nccl" in backend else "", env]))
    argv = " ".join(shlex.quote(a) for a in p.argv)
    run = f"exec env {env} {argv}" if env else f"exec {argv}"
    if workdir:
        run = f"cd -- {shlex.quote(workdir)} && {run}"
    check = (f'[ "${{SLURMD_NODENAME:-}}" = {shlex.quote(node)} ] || '
             f'misplaced {p.rank} {shlex.quote(node)}')
    return f"{p.rank}) {check}; {found}{run} ;;"


def task_script(plan: LaunchPlan, nodes: Sequence[str]) -> str:
    """The ``sh`` program every task runs: its rank's command, chosen by ``SLURM_PROCID``.

    Environment values every rank shares are exported once; the rest is per rank.
    """
    common = {k for k, _v in set.intersection(*(set(p.env) for p in plan.processes))}
    first = dict(plan.processes[0].env)
    lines = [
        "# geoconsole step: task r (SLURM_PROCID) is global rank r on line r of SLURM_HOSTFILE",
        "misplaced() {",
        '    echo "geoconsole: rank $1 planned on $2 but started on ${SLURMD_NODENAME:-?}" >&2',
        f"    exit {MISPLACED_STATUS}",
        "}",
    ]
    targets = route_targets(plan)
    if any(t is not None for t in targets.values()):
        lines += [_ROUTE_DEV, "noroute() {",
                  '    echo "geoconsole: no route from ${SLURMD_NODENAME:-?} to $1" >&2',
                  f"    exit {NO_ROUTE_STATUS}", "}"]
    lines += [f"export {k}={shlex.quote(first[k])}" for k in first if k in common]
    lines.append('case "${SLURM_PROCID:-}" in')
    lines += [_task_line(p, nodes[p.rank], common, plan.workdir, plan.backend, targets)
              for p in plan.processes]
    lines.append('*) echo "geoconsole: no rank for task ${SLURM_PROCID:-?}" >&2; exit 96 ;;')
    lines.append("esac")
    return "\n".join(lines) + "\n"


def build_step(plan: LaunchPlan, names: Mapping[str, str] | None = None, *,
               abort_on_failure: bool = True, extra_args: Sequence[str] = ()) -> SlurmStep:
    """The step that runs ``plan``; ``names`` maps host name to Slurm node name."""
    nodes = node_names(plan, names)
    script = task_script(plan, nodes)
    if len(script.encode()) > MAX_SCRIPT_BYTES:
        raise LaunchError(f"the step's task script is {len(script.encode())} bytes for "
                          f"{plan.world_size} ranks; at most {MAX_SCRIPT_BYTES} fit in one argument")
    argv = (
        "srun", f"--ntasks={plan.world_size}", "--distribution=arbitrary", "--label", "-v",
        f"--kill-on-bad-exit={1 if abort_on_failure else 0}", f"--job-name={JOB_NAME}",
        *extra_args, "/bin/sh", "-c", script,
    )
    return SlurmStep(plan, nodes, argv, script)


def sbatch_script(step: SlurmStep, *, extra_directives: Sequence[str] = ()) -> str:
    """A batch script that runs ``step`` on exactly its nodes (``sbatch`` it)."""
    counts = step.tasks_per_node
    nodes = list(counts)
    lines = [
        "#!/bin/sh",
        f"#SBATCH --job-name={JOB_NAME}",
        f"#SBATCH --nodelist={','.join(nodes)}",
        f"#SBATCH --nodes={len(nodes)}",
        f"#SBATCH --ntasks={step.plan.world_size}",
        f"#SBATCH --ntasks-per-node={max(counts.values())}",
        *(f"#SBATCH {d}" for d in extra_directives),
        f"# rank_map (fabric row -> global rank): {' '.join(map(str, step.plan.rank_map))}",
        f"# tasks per node: {' '.join(f'{n}={c}' for n, c in counts.items())}",
        'hostfile="$(mktemp)" || exit 1',
        "# line r = node of global rank r",
        "printf '%s\\n' " + " ".join(shlex.quote(n) for n in step.nodes) + ' > "$hostfile"',
        step.srun_line("$hostfile"),
        "status=$?",
        'rm -f -- "$hostfile"',
        'exit "$status"',
    ]
    return "\n".join(lines) + "\n"


def describe_step(step: SlurmStep, *, submit: bool = False) -> list[str]:
    """The lines ``launch --via slurm --dry-run`` prints: hostfile and exact command."""
    if submit:
        return ["# sbatch script (submitted with: sbatch --parsable SCRIPT)", *sbatch_script(step).splitlines()]
    lines = ["# hostfile (line r = node of global rank r)", *step.nodes, "# step, inside the allocation"]
    lines.append(step.srun_line("hostfile"))
    return lines


# --- checking nodes ---------------------------------------------------------------------

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> "subprocess.CompletedProcess[str]":
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise RemoteError(f"{argv[0]}: not found; Slurm's client commands must be on PATH") from None
    except subprocess.TimeoutExpired:
        raise RemoteError(f"{argv[0]}: no answer from Slurm within 60 s") from None


def _checked(argv: Sequence[str], run: Runner) -> str:
    r = run(argv)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        raise RemoteError(f"{argv[0]}: {tail}")
    return r.stdout


def check_nodes(step: SlurmStep, *, env: Mapping[str, str] | None = None, run: Runner = _run) -> None:
    """Every node is one Slurm knows (``sinfo``) and, inside an allocation, one of it.

    Raises :class:`LaunchError` naming every unknown node and its host."""
    env = os.environ if env is None else env
    known = set(_checked(["sinfo", "-h", "-N", "-o", "%N"], run).split())
    host_of = {n: p.host for n, p in zip(step.nodes, step.plan.processes)}
    unknown = [n for n in dict.fromkeys(step.nodes) if n not in known]
    if unknown:
        named = ", ".join(n if host_of[n] == n else f"{n} (host {host_of[n]})" for n in unknown)
        raise LaunchError(f"Slurm has no node {named}; name each host's node with slurm_node "
                          "in the inventory")
    job, nodelist = env.get("SLURM_JOB_ID"), env.get("SLURM_JOB_NODELIST")
    if job and nodelist:
        mine = set(_checked(["scontrol", "show", "hostnames", nodelist], run).split())
        outside = [n for n in dict.fromkeys(step.nodes) if n not in mine]
        if outside:
            verb = "node {} is" if len(outside) == 1 else "nodes {} are"
            raise LaunchError(f"{verb.format(', '.join(outside))} not in allocation {job} ({nodelist})")


# --- running ----------------------------------------------------------------------------

_LABEL = re.compile(r"\s*(\d+): ?(.*)\Z")
_STEP = re.compile(r"srun: launching StepId=(\d+)\.(\d+)")
_STARTED = re.compile(r"srun: .*_task_start: Node (\S+), (\d+) tasks started")
_FINISH = re.compile(r"srun: (?:error: )?(?:[\w/]+: _task_finish: )?(\S+): tasks? ([\d,\-]+): (.+)\Z")
_SIGNALS = {signal.strsignal(s): 128 + int(s) for s in signal.Signals if signal.strsignal(s)}
#: srun messages worth showing the operator (the rest of ``-v`` is bookkeeping).
_NOTE = re.compile(r"srun: (error|fatal|warning|Job step aborted|Force Terminated|forcing)", re.I)


def _task_ids(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def _status(text: str) -> int | None:
    if text == "Completed":
        return 0
    m = re.match(r"Exited with exit code (\d+)", text)
    if m:
        return int(m.group(1))
    return _SIGNALS.get(text.strip())


def _stderr_note(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


@dataclass
class _State:
    plan: LaunchPlan
    result: SlurmResult
    sink: LineSink
    note: Callable[[str], None]
    t0: float
    started_tasks: int = 0
    all_started: asyncio.Event = field(default_factory=asyncio.Event)
    failed: asyncio.Event = field(default_factory=asyncio.Event)
    last_error: str = ""

    def srun_line(self, line: str) -> None:
        if (m := _STEP.search(line)) and self.result.step_id is None:
            self.result.job_id, self.result.step_id = m.group(1), f"{m.group(1)}.{m.group(2)}"
            return
        if m := _STARTED.search(line):
            self.started_tasks += int(m.group(2))
            if self.started_tasks >= self.plan.world_size and not self.all_started.is_set():
                self.result.startup_s = time.monotonic() - self.t0
                self.all_started.set()
            return
        if m := _FINISH.match(line):
            status = _status(m.group(3))
            for t in _task_ids(m.group(2)):
                if 0 <= t < len(self.result.outcomes):
                    o = self.result.outcomes[t]
                    o.exit_status = status
                    if status is None:
                        o.error = m.group(3)
                    if status != 0:
                        self.failed.set()
        if _NOTE.match(line):
            if re.match(r"srun: (error|fatal)", line):
                self.last_error = line[len("srun: "):]
            self.note(line)

    def line(self, stream: str, raw: bytes) -> None:
        text = raw.decode(errors="replace").rstrip("\r\n")
        m = _LABEL.match(text)
        if m and int(m.group(1)) < self.plan.world_size:
            self.sink(self.plan.processes[int(m.group(1))], stream, m.group(2))
        elif text.startswith("srun: "):
            self.srun_line(text)
        elif text:
            self.note(text)


async def _pump(stream: asyncio.StreamReader, name: str, state: _State) -> None:
    while line := await stream.readline():
        state.line(name, line)


async def scancel(step_id: str, env: Mapping[str, str] | None = None) -> None:
    proc = await asyncio.create_subprocess_exec(
        "scancel", step_id, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, env=dict(env) if env is not None else None)
    await proc.wait()


async def run_step(step: SlurmStep, *, sink: LineSink = default_sink,
                   note: Callable[[str], None] = _stderr_note, env: Mapping[str, str] | None = None,
                   grace_s: float = 30.0, started: Callable[[], Any] | None = None) -> SlurmResult:
    """Run the step inside the current allocation and wait for it.

    A rank that exits non-zero (with ``--kill-on-bad-exit``) or cancelling the task
    (Ctrl-C) cancels the step with ``scancel``; the result then has ``aborted`` (and
    ``interrupted``) set. Raises :class:`RemoteError` when srun cannot start the step.
    """
    env = dict(os.environ if env is None else env)
    if not env.get("SLURM_JOB_ID"):
        raise LaunchError("not inside a Slurm allocation (SLURM_JOB_ID is not set); "
                          "run inside salloc or sbatch, or submit a batch job")
    plan = step.plan
    result = SlurmResult([RankOutcome(p.rank, p.host) for p in plan.processes])
    state = _State(plan, result, sink, note, time.monotonic())
    abort_on_failure = "--kill-on-bad-exit=1" in step.argv
    with tempfile.TemporaryDirectory(prefix="geoconsole-slurm-") as tmp:
        hostfile = os.path.join(tmp, "hostfile")
        with open(hostfile, "w") as f:
            f.write(step.hostfile)
        try:
            # its own session: Ctrl-C reaches this process only, which cancels the step
            proc = await asyncio.create_subprocess_exec(
                *step.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env={**env, "SLURM_HOSTFILE": hostfile},
                start_new_session=True, limit=1 << 20)
        except FileNotFoundError:
            raise RemoteError("srun: not found; Slurm's client commands must be on PATH") from None
        pumps = asyncio.gather(_pump(proc.stdout, "stdout", state), _pump(proc.stderr, "stderr", state))
        notify = asyncio.ensure_future(_when(state.all_started, started)) if started else None
        try:
            waiter = asyncio.ensure_future(state.failed.wait())
            done, _ = await asyncio.wait({pumps, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if waiter in done and abort_on_failure and not pumps.done():
                bad = next(o for o in result.outcomes if o.exit_status not in (None, 0) or o.error)
                result.aborted, result.reason = True, f"rank {bad.rank} on {bad.host} failed"
                if result.step_id:
                    await scancel(result.step_id, env)
            await pumps
            await proc.wait()
        except asyncio.CancelledError:
            result.interrupted = result.aborted = True
            result.reason = "interrupted"
            await _stop(proc, result, env, grace_s)
            try:  # srun has ended: read what it said last (the tasks' exits)
                await asyncio.wait_for(pumps, 5)
            except (asyncio.TimeoutError, TimeoutError):
                pass
        finally:
            if notify is not None:
                notify.cancel()
    code = proc.returncode
    if result.step_id is None and not result.interrupted:
        raise RemoteError(f"srun could not start the step (exit {code})" + _last_error(state))
    for o in result.outcomes:
        if o.exit_status is None and o.error is None:
            o.error = "no exit status from srun"
    result.elapsed_s = time.monotonic() - state.t0
    if not result.aborted and code not in (0, None) and all(o.ok for o in result.outcomes):
        result.aborted, result.reason = True, f"srun exited {code}"
    return result


async def _when(event: asyncio.Event, callback: Callable[[], Any]) -> None:
    await event.wait()
    maybe = callback()
    if asyncio.iscoroutine(maybe):
        await maybe


def _last_error(state: _State) -> str:
    return f": {state.last_error}" if state.last_error else ""


async def _stop(proc, result: SlurmResult, env: Mapping[str, str], grace_s: float) -> None:
    """Cancel the step (or, before it has an id, srun itself) and wait for srun to end."""
    if result.step_id:
        await scancel(result.step_id, env)
    else:
        for _ in range(2):  # two SIGINTs within a second: srun cancels what it started
            _signal(proc, signal.SIGINT)
            await asyncio.sleep(0.2)
    try:
        await asyncio.wait_for(proc.wait(), grace_s + 10)
    except (asyncio.TimeoutError, TimeoutError):
        _signal(proc, signal.SIGKILL)
        await proc.wait()


def _signal(proc, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass


# --- submitting -------------------------------------------------------------------------


def submit(script_path: str, *, run: Runner = _run) -> str:
    """``sbatch --parsable`` the script; the job id. Raises :class:`RemoteError`."""
    out = _checked(["sbatch", "--parsable", "--", script_path], run)
    job = out.strip().split(";")[0]
    if not job.isdigit():
        raise RemoteError(f"sbatch: expected a job id, got {out.strip()[:80]!r}")
    return job


# --- the one path for the CLI and the console -------------------------------------------


def node_map(inventory: Any, field_name: str = "slurm_node", names: Iterable[str] = ()) -> dict[str, str]:
    """Host name -> scheduler node name from an inventory's ``slurm_node`` / ``k8s_node``,
    also under each of ``names`` (the plan's hosts, the fabric's spelling) that names an
    inventory host in another case (host names ignore case, as DNS)."""
    if inventory is None:
        return {}
    out = {h.name: getattr(h, field_name) for h in inventory.hosts if getattr(h, field_name, None)}
    by_key = {name.lower(): node for name, node in out.items()}
    for name in names:
        if name not in out and name.lower() in by_key:
            out[name] = by_key[name.lower()]
    return out


async def launch_step(step: SlurmStep, **kwargs: Any) -> SlurmResult:
    """Check the nodes against Slurm and the allocation, then :func:`run_step`."""
    env = kwargs.get("env")
    await asyncio.to_thread(check_nodes, step, env=env)
    return await run_step(step, **kwargs)


def submit_step(step: SlurmStep, script_path: str | os.PathLike[str] | None = None,
                inputs: Sequence[tuple[str, Any]] = ()) -> tuple[str, str]:
    """Check the nodes, write the batch script (to ``script_path``, else a file that is
    removed once sbatch has read it) and submit it: ``(job id, script path or "")``."""
    from solver.files import write_text

    check_nodes(step, env={})
    text = sbatch_script(step)
    if script_path is not None:
        write_text(script_path, text, inputs=inputs, mode=0o755)
        return submit(str(script_path)), str(script_path)
    with tempfile.TemporaryDirectory(prefix="geoconsole-sbatch-") as tmp:
        path = os.path.join(tmp, "geoconsole.sbatch")
        with open(path, "w") as f:
            f.write(text)
        return submit(path), ""
