"""Headless sub-commands: launch, export, validate.

asyncssh is imported inside the commands that reach the fleet (``launch`` without
``--dry-run``, ``validate``); ``export`` and ``launch --dry-run`` never touch it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from geoconsole.errors import UserError, cli_errors
from geoconsole.exitcodes import ExitCode

MATRIX = typer.Option(..., "--matrix", "-m", help="Fabric JSON whose devices name a host (and GPU) per row.")
INVENTORY = typer.Option(None, "--inventory", "-i", help="Fleet inventory (TOML or hostfile): addresses, users, keys, python.")
RANK_MAP = typer.Option(..., "--rank-map", "-r", help="rank_map=(...) / '0,1,..' / a file holding either (or solve --json output).")
MODE = typer.Option("torchrun", "--mode", help="torchrun (static rendezvous, one agent per GPU) or env (RANK, WORLD_SIZE, ... set directly).")
BACKEND = typer.Option(None, "--backend", help="nccl, gloo or nccl+gloo: which *_SOCKET_IFNAME to set (default: nccl on GPUs, gloo on CPU hosts).")
PORT = typer.Option(29500, "--port", help="Rendezvous port on rank 0's host.")
INTERFACE = typer.Option(None, "--interface", help="Data interface for every host (else the inventory's; gloo: found with ip route get).")
ENV = typer.Option(None, "--env", help="Extra KEY=VALUE for every rank (repeatable).")
WORKDIR = typer.Option(None, "--workdir", help="Directory to cd into on every host.")
KNOWN_HOSTS = typer.Option("~/.ssh/known_hosts", "--known-hosts", help="known_hosts file checked for host keys.")
ACCEPT_NEW = typer.Option(False, "--accept-new", help="Trust and record unknown host keys (changed keys are always refused).")
JSON_OUT = typer.Option(False, "--json", help="Print JSON instead of text.")


def _fabric(path: Path):
    from solver.fabric import FabricError, load_fabric

    try:
        fabric = load_fabric(path)
    except FabricError as exc:
        raise UserError(str(exc)) from None
    if fabric.devices is None:
        raise UserError(f"{path}: devices: the fabric names no host per row; measure it with the fleet or add devices")
    return fabric


def _solution(text: str, fabric):
    """(fabric, ranks). A solve --json output that selected a subset of the fabric's
    devices (``selection.rows``) applies to those rows: the fabric is narrowed to them."""
    import json

    from geoconsole.cli_solve import parse_rank_map, rank_map_argument

    body, source = rank_map_argument(text)
    ranks = parse_rank_map(body, source)
    if len(ranks) != fabric.n and body.lstrip().startswith("{"):
        rows = (json.loads(body).get("selection") or {}).get("rows")
        if isinstance(rows, list) and len(rows) == len(ranks) and all(
            isinstance(r, int) and 0 <= r < fabric.n for r in rows
        ):
            fabric = fabric.subset(rows)
    if len(ranks) != fabric.n:
        raise UserError(f"{source}: {len(ranks)} ranks for {fabric.n} devices in the fabric")
    return fabric, ranks


def _inventory(path: Optional[Path]):
    """(inventory or None, LaunchHost per name). Without an inventory, names are addresses."""
    from geoconsole.inventory import load_inventory
    from geoconsole.launch_plan import LaunchHost

    if path is None:
        return None, {}
    inv = load_inventory(path)
    return inv, {h.name: LaunchHost.from_inventory(h) for h in inv.hosts}


def _hosts_for(fabric, hosts: dict, required: bool, inventory: Optional[Path]):
    from geoconsole.launch_plan import LaunchHost

    names = sorted({d.host for d in fabric.devices})
    missing = [n for n in names if n not in hosts]
    if missing and required:
        where = f"{inventory}" if inventory else "--inventory"
        raise UserError(f"{where}: host {missing[0]!r} of the fabric is not in the inventory")
    return {**{n: LaunchHost(n, n) for n in missing}, **hosts}


def _env(pairs: Optional[List[str]]) -> dict[str, str]:
    out = {}
    for item in pairs or []:
        if "=" not in item:
            raise UserError(f"--env {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def _plan(fabric, ranks, hosts, command, *, mode, backend, port, workdir, env, interface, interfaces=None):
    from geoconsole.launch_plan import LaunchError, build_plan

    ifaces = dict(interfaces or {})
    if interface:
        ifaces["*"] = interface
    try:
        return build_plan(ranks, fabric.devices, hosts, command, mode=mode, backend=backend,
                          port=port, workdir=workdir, env=env, interfaces=ifaces)
    except LaunchError as exc:
        raise UserError(str(exc)) from None


def launch_cmd(
    command: List[str] = typer.Argument(None, help="The training command, after '--' (e.g. -- train.py --steps 100)."),
    matrix: Path = MATRIX,
    rank_map: str = RANK_MAP,
    inventory: Optional[Path] = INVENTORY,
    mode: str = MODE,
    backend: Optional[str] = BACKEND,
    port: int = PORT,
    interface: Optional[str] = INTERFACE,
    env: Optional[List[str]] = ENV,
    workdir: Optional[str] = WORKDIR,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan; start nothing."),
    as_json: bool = JSON_OUT,
    abort_on_failure: bool = typer.Option(True, "--abort-on-failure/--no-abort-on-failure", help="Stop every rank when one fails."),
    grace: float = typer.Option(5.0, "--grace", min=0.0, help="Seconds between SIGTERM and SIGKILL when stopping ranks."),
    record: Optional[Path] = typer.Option(None, "--record", help="Append a run record (JSON line) to this file."),
    known_hosts: str = KNOWN_HOSTS,
    accept_new: bool = ACCEPT_NEW,
) -> None:
    """Launch the training command with the rank map: one process per GPU, explicit ranks."""
    from geoconsole.launch_plan import describe

    fabric = _fabric(matrix)
    fabric, ranks = _solution(rank_map, fabric)
    if not dry_run and inventory is None:
        raise UserError("--inventory: needed to reach the hosts (use --dry-run to only print the plan)")
    inv, hosts = _inventory(inventory)
    hosts = _hosts_for(fabric, hosts, not dry_run, inventory)
    opts = dict(mode=mode, backend=backend, port=port, workdir=workdir, env=_env(env), interface=interface)
    plan = _plan(fabric, ranks, hosts, command or [], **opts)
    if dry_run:
        if as_json:
            typer.echo(json.dumps(plan.to_json(), indent=1))
        else:
            typer.echo("\n".join(describe(plan)))
        return
    import asyncio

    result, plan = asyncio.run(_launch(fabric, ranks, hosts, inv, command or [], opts,
                                       abort_on_failure, grace, known_hosts, accept_new, as_json))
    if record is not None:
        from geoconsole.launch_run import launch_record
        from geoconsole.records import append_record

        try:
            append_record(record, launch_record(plan, result, fabric_sha256=fabric.sha256()))
        except OSError as exc:
            raise UserError(f"{record}: cannot write run record: {exc.strerror or exc}") from None
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=1))
    else:
        for o in result.outcomes:
            state = "ok" if o.ok else (o.error or f"exit {o.exit_status}")
            typer.echo(f"rank {o.rank} {o.host}: {state}", err=True)
        if result.reason:
            typer.echo(f"aborted: {result.reason}", err=True)
    if result.interrupted:
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    if not result.ok:
        # a rank that could not start or lost its connection is remote trouble; a rank
        # that ran and exited non-zero is a failed result
        remote = any(o.error for o in result.outcomes)
        raise typer.Exit(int(ExitCode.REMOTE if remote else ExitCode.FAILED))


async def _connect(inv, names, known_hosts: str, accept_new: bool):
    from probes.ssh import SSHError, SSHPool  # asyncssh: only for commands that reach hosts

    pool = SSHPool(known_hosts=known_hosts, accept_new=accept_new)
    import asyncio

    wanted = [h for h in inv.hosts if h.name in names]
    try:
        sessions = await asyncio.gather(*(pool.session(h) for h in wanted))
    except SSHError as exc:
        await pool.close()
        raise UserError(str(exc), ExitCode.REMOTE) from None
    return pool, {h.name: s for h, s in zip(wanted, sessions)}


async def _launch(fabric, ranks, hosts, inv, command, opts, abort_on_failure, grace,
                  known_hosts, accept_new, as_json):
    from geoconsole.launch_run import (
        close_sessions,
        default_sink,
        rank_sessions,
        resolve_interfaces,
        run_plan,
    )
    from probes.ssh import SSHError

    names = {d.host for d in fabric.devices}
    pool, sessions = await _connect(inv, names, known_hosts, accept_new)
    try:
        plan = _plan(fabric, ranks, hosts, command, **opts)
        if "gloo" in plan.backend and any(p.interface is None for p in plan.processes):
            try:
                found = await resolve_interfaces(plan, sessions)
            except (RuntimeError, SSHError) as exc:
                raise UserError(str(exc), ExitCode.REMOTE) from None
            plan = _plan(fabric, ranks, hosts, command, **opts, interfaces=found)
        sink = default_sink
        if as_json:  # keep stdout for the JSON document
            def sink(p, stream, line):
                print(f"[rank {p.rank} {p.host}] {line}", file=sys.stderr, flush=True)
        by_name = {h.name: h for h in inv.hosts}
        try:
            channels = await rank_sessions(pool, by_name, plan)
        except SSHError as exc:
            raise UserError(str(exc), ExitCode.REMOTE) from None
        try:
            result = await run_plan(plan, channels, abort_on_failure=abort_on_failure, sink=sink, grace_s=grace)
        finally:
            close_sessions(channels)
        return result, plan
    finally:
        await pool.close()


def export_cmd(
    matrix: Path = MATRIX,
    rank_map: str = RANK_MAP,
    fmt: str = typer.Option("json", "--format", "-f", help="torchrun | slurm | rankfile | json"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write here (default: standard output)."),
    command: List[str] = typer.Argument(None, help="The training command, after '--' (torchrun and json formats)."),
    inventory: Optional[Path] = INVENTORY,
    mode: str = MODE,
    backend: Optional[str] = BACKEND,
    port: int = PORT,
    interface: Optional[str] = INTERFACE,
    env: Optional[List[str]] = ENV,
    workdir: Optional[str] = WORKDIR,
) -> None:
    """Export the rank map for other launchers: torchrun script, Slurm hostfile, rankfile, JSON."""
    from geoconsole.launch_export import FORMATS, ExportError, export, parse, plan_slots
    from solver.fabric import write_atomic

    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if fmt == "torchrun" and mode != "torchrun":
        raise UserError("--format torchrun: needs --mode torchrun")
    fabric = _fabric(matrix)
    fabric, ranks = _solution(rank_map, fabric)
    _inv, hosts = _inventory(inventory)
    hosts = _hosts_for(fabric, hosts, False, inventory)
    if not command and fmt in ("torchrun", "json"):
        if fmt == "torchrun":
            raise UserError("command: give the training command after '--' for a torchrun script")
        command = ["<command>"]
    plan = _plan(fabric, ranks, hosts, command or ["<command>"], mode=mode, backend=backend,
                 port=port, workdir=workdir, env=_env(env), interface=interface)
    try:
        text = export(plan, fmt)
        if parse(text, fmt) != plan_slots(plan):  # an export must read back to the same mapping
            raise ExportError(f"--format {fmt}: the export does not read back to the plan")
    except ExportError as exc:
        raise UserError(str(exc)) from None
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        write_atomic(output, text)
        if fmt == "torchrun":
            output.chmod(0o755)
    except OSError as exc:
        raise UserError(f"{output}: cannot write: {exc.strerror or exc}") from None
    typer.echo(f"wrote {output} ({fmt}, {plan.world_size} ranks)", err=True)


def validate_cmd(
    matrix: Path = MATRIX,
    inventory: Path = typer.Option(..., "--inventory", "-i", help="Fleet inventory (TOML or hostfile)."),
    c_pp: float = typer.Option(..., "--c-pp", min=0.0, help="Activation payload per stage boundary, decimal GB."),
    c_dp: float = typer.Option(..., "--c-dp", min=0.0, help="Stage gradient buffer entering the exchange, decimal GB."),
    pp: Optional[int] = typer.Option(None, "--pp", min=1, help="Pipeline stages D_PP."),
    dp: Optional[int] = typer.Option(None, "--dp", min=1, help="Data-parallel replicas D_DP."),
    pp_messages: float = typer.Option(1.0, "--pp-messages", min=0.0, help="Transfers carrying c_pp."),
    dp_messages: float = typer.Option(1.0, "--dp-messages", min=0.0, help="Transfers per peer per exchange round."),
    rank_map: Optional[str] = typer.Option(None, "--rank-map", "-r", help="The solution to check (default: solve with --seed)."),
    scale: float = typer.Option(1.0, "--scale", help="Multiply both payloads (e.g. 0.01 for a quick check)."),
    steps: int = typer.Option(5, "--steps", min=1, help="Measured steps per placement (median reported)."),
    warmup: int = typer.Option(1, "--warmup", min=0, help="Unmeasured steps first."),
    random_maps: int = typer.Option(2, "--random", min=0, help="Random rank maps to measure."),
    seed: int = typer.Option(0, "--seed", help="Solver seed (the alternate uses seed + 1) and random-map seed."),
    backend: Optional[str] = typer.Option(None, "--backend", help="gloo or nccl (default: nccl on GPUs, gloo on CPU hosts)."),
    port: int = PORT,
    timeout: float = typer.Option(300.0, "--timeout", min=1.0, help="Seconds one placement may take."),
    as_json: bool = JSON_OUT,
    record: Optional[Path] = typer.Option(None, "--record", help="Append a run record (JSON line) to this file."),
    known_hosts: str = KNOWN_HOSTS,
    accept_new: bool = ACCEPT_NEW,
) -> None:
    """Measure the proxy step for several placements; compare with the model's ranking."""
    import asyncio

    from geoconsole.cli_solve import _workload
    from geoconsole.validate import format_report

    fabric = _fabric(matrix)
    solution = None
    if rank_map:
        fabric, solution = _solution(rank_map, fabric)
    workload = _workload(fabric, pp, dp, c_pp, c_dp, pp_messages, dp_messages)
    missing = fabric.missing_pairs()
    if missing:
        raise UserError(f"{matrix}: {len(missing)} unmeasured pair(s); measure them before validating")
    inv, hosts = _inventory(inventory)
    hosts = _hosts_for(fabric, hosts, True, inventory)
    if not (scale > 0):
        raise UserError(f"--scale: must be > 0, got {scale}")

    async def go():
        from probes.ssh import SSHError

        from collections import Counter

        from geoconsole.launch_run import close_sessions, sessions_for_counts

        pool, _first = await _connect(inv, {d.host for d in fabric.devices}, known_hosts, accept_new)
        sessions: dict = {}
        try:
            from geoconsole.validate import run_validation

            counts = Counter(d.host for d in fabric.devices)
            sessions = await sessions_for_counts(pool, {h.name: h for h in inv.hosts}, counts)

            return await run_validation(
                fabric, workload, hosts, sessions, scale=scale, steps=steps, warmup=warmup,
                seed=seed, random_maps=random_maps, solution=solution, backend=backend,
                port=port, timeout_s=timeout, progress=lambda m: typer.echo(m, err=True),
            )
        except (SSHError, RuntimeError) as exc:  # RuntimeError: no route found on a host
            raise UserError(str(exc), ExitCode.REMOTE) from None
        except ValueError as exc:
            raise UserError(str(exc)) from None
        finally:
            close_sessions(sessions)
            await pool.close()

    report, notes = asyncio.run(go())
    if record is not None:
        from geoconsole.records import append_record

        try:
            append_record(record, {"kind": "validate", "fabric_sha256": fabric.sha256(), **report.to_json()})
        except OSError as exc:
            raise UserError(f"{record}: cannot write run record: {exc.strerror or exc}") from None
    if as_json:
        typer.echo(json.dumps({**report.to_json(), "notes": list(notes)}, indent=1))
    else:
        typer.echo("\n".join(format_report(report, notes)))
    if any(p.error == "interrupted" for p in report.placements):
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    if any(p.error for p in report.placements):
        raise typer.Exit(int(ExitCode.REMOTE))
    if report.warning:
        raise typer.Exit(int(ExitCode.FAILED))


def register(app: typer.Typer) -> None:
    """Add launch, export and validate to ``app``."""
    ctx = {"allow_extra_args": False, "ignore_unknown_options": False}
    app.command("launch", context_settings=ctx)(cli_errors(launch_cmd))
    app.command("export")(cli_errors(export_cmd))
    app.command("validate")(cli_errors(validate_cmd))
