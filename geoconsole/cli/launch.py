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

from solver.files import shown

from geoconsole.cli.advice import NO_ADVICE, STRICT
from geoconsole.cli.errors import UserError, cli_errors, flag
from geoconsole.cli.exitcodes import ExitCode
from geoconsole.solving import MAX_SEED

from geoconsole.cli.options import (ACCEPT_NEW, C_DP, C_PP, DP_MSG, DP_OF_MAP, PP_MSG, PP_OF_MAP, GROUP_LOCALITY, INVENTORY, INVENTORY_REQUIRED, JSON_OUT, KNOWN_HOSTS, MATRIX,
                                    RANK_MAP, RECORD,
                                    REGIONS, check_rank_map, given_on_the_command_line, known_hosts_flag, load_fabric,
                                    path_option)

MODE = typer.Option("torchrun", "--mode", help="torchrun (static rendezvous, one agent per GPU) or env (RANK, WORLD_SIZE, ... set directly).")
BACKEND = typer.Option(None, "--backend", help="nccl, gloo or nccl+gloo: which *_SOCKET_IFNAME to set (default: nccl on GPUs, gloo on CPU hosts).")
PORT = typer.Option(29500, "--port", min=1, max=65535, help="Rendezvous port on rank 0's host.")
INTERFACE = typer.Option(None, "--interface", help="Data interface for every host (else the inventory's; gloo: found with ip route get).")
ENV = typer.Option(None, "--env", help="Extra KEY=VALUE for every rank (repeatable).")
WORKDIR = typer.Option(None, "--workdir", help="Directory to cd into on every host.")
VIA = typer.Option("ssh", "--via", help="ssh (the console starts every rank) or slurm (one srun step; --submit for a batch job).")
SUBMIT = typer.Option(False, "--submit", help="--via slurm outside an allocation: write an sbatch script with the step and submit it.")
SBATCH_SCRIPT = path_option(None, "--sbatch-script", help="--submit: keep the batch script here (default: a temporary file).")


def _solution(value: str, fabric):
    """(fabric, ranks) of a --rank-map value (geoconsole.rank_maps)."""
    from geoconsole.rank_maps import solution_for

    return solution_for(value, fabric)


def _append_record(path: Path, record: dict, inputs=()) -> None:
    from geoconsole.records import append_record

    append_record(path, record, inputs)


def _check_record(path: Optional[Path], inputs) -> None:
    """A bad ``--record`` (an input, a missing folder, not a record file) fails first."""
    if path is not None:
        from geoconsole.records import check_record_path

        check_record_path(path, inputs)


def _inventory(path: Optional[Path]):
    """(inventory or None, LaunchHost per name). Without an inventory, names are addresses."""
    from geoconsole.inventory import load_inventory
    from geoconsole.launch.plan import LaunchHost

    if path is None:
        return None, {}
    inv = load_inventory(path)
    return inv, {h.name: LaunchHost.from_inventory(h) for h in inv.hosts}


def _hosts_for(fabric, hosts: dict, required: bool, inventory: Optional[Path]):
    """LaunchHost per host of the fabric (plan.hosts_of_fabric: the inventory's, names in
    any case); a host the inventory lacks is refused when ``required`` (a launch), else
    reached by its name, with a note when there is an inventory (export, dry run)."""
    from geoconsole.launch.plan import hosts_of_fabric

    found, missing = hosts_of_fabric(fabric.devices, hosts)
    where = f"{shown(inventory)}" if inventory else "--inventory"
    if missing and required:
        raise UserError(f"{where}: host {missing[0]!r} of the fabric is not in the inventory")
    if missing and inventory:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        typer.echo(f"note: {where}: host {missing[0]!r}{more} of the fabric not in it: reached by name, "
                   f"ssh defaults", err=True)
    return found


def _env(pairs: Optional[List[str]]) -> dict[str, str]:
    out = {}
    for item in pairs or []:
        if "=" not in item:
            raise UserError(f"--env {item!r}: expected KEY=VALUE")
        k, v = item.split("=", 1)
        if k in out:  # the last one won, silently
            raise UserError(f"--env {k}: given twice ({out[k]!r}, {v!r})")
        out[k] = v
    return out


def _plan(fabric, ranks, hosts, command, *, mode, backend, port, workdir, env, interface, interfaces=None):
    from geoconsole.launch.plan import LaunchError, build_plan

    ifaces = dict(interfaces or {})
    if interface:
        ifaces["*"] = interface
    try:
        return build_plan(ranks, fabric.devices, hosts, command, mode=mode, backend=backend,
                          port=port, workdir=workdir, env=env, interfaces=ifaces)
    except LaunchError as exc:
        if exc.field == "command" and not command:
            raise UserError("command: give the training command after '--', e.g. -- train.py --steps 10") from None
        raise


def launch_command(
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
    record: Optional[Path] = RECORD,
    known_hosts: str = KNOWN_HOSTS,
    accept_new: bool = ACCEPT_NEW,
    strict: bool = STRICT,
    no_advice: bool = NO_ADVICE,
    via: str = VIA,
    submit: bool = SUBMIT,
    sbatch_script: Optional[Path] = SBATCH_SCRIPT,
) -> None:
    """Launch the training command with the rank map: one process per GPU, explicit ranks."""
    from geoconsole.launch.plan import describe

    if via not in ("ssh", "slurm"):
        raise UserError(f"--via {via!r}: expected ssh or slurm")
    if (submit or sbatch_script) and via != "slurm":
        raise UserError(f"{'--submit' if submit else '--sbatch-script'}: needs --via slurm")
    if sbatch_script and not submit:
        raise UserError("--sbatch-script: needs --submit")
    inputs = [("--matrix", matrix), ("--rank-map", rank_map), ("--inventory", inventory)]
    _check_record(record, inputs)
    if sbatch_script is not None:  # checked before anything, a dry run too (it was only at the write)
        from solver.files import FileError, check_not_input, write_target

        try:
            check_not_input(sbatch_script, inputs + [("--record", record)])
            write_target(sbatch_script)
        except FileError as exc:
            raise UserError(f"--sbatch-script: {exc}") from None
    fabric = load_fabric(matrix, devices=True)
    fabric, ranks = _solution(rank_map, fabric)
    said: list = []  # the advice given, for --json
    check = None if no_advice else _launch_check(fabric, strict, said)
    if check is not None:
        check(None)  # the measurement's age and GPU kinds, before anything starts
    if via == "slurm":
        return _launch_slurm(fabric, ranks, inventory, command or [], dry_run=dry_run, as_json=as_json,
                             submit=submit, script=sbatch_script, abort_on_failure=abort_on_failure,
                             record=record, rank_map=rank_map, matrix=matrix,
                             opts=dict(mode=mode, backend=backend, port=port, workdir=workdir,
                                       env=_env(env), interface=interface))
    if not dry_run and inventory is None:
        raise UserError("--inventory: needed to reach the hosts (use --dry-run to only print the plan)")
    inv, hosts = _inventory(inventory)
    hosts = _hosts_for(fabric, hosts, not dry_run, inventory)
    opts = dict(mode=mode, backend=backend, port=port, workdir=workdir, env=_env(env), interface=interface)
    plan = _plan(fabric, ranks, hosts, command or [], **opts)
    if dry_run:
        if as_json:
            typer.echo(json.dumps({**plan.to_json(), **({} if no_advice else {"advice": said})}, indent=1))
        else:
            typer.echo("\n".join(describe(plan)))
        return
    import asyncio

    known_hosts = str(known_hosts_flag(known_hosts))
    result, plan = asyncio.run(_launch(plan, fabric, ranks, hosts, inv, command or [], opts,
                                       abort_on_failure, grace, known_hosts, accept_new, as_json, check))
    if record is not None:
        from geoconsole.launch.run import launch_record

        _append_record(record, launch_record(plan, result, fabric_sha256=fabric.sha256()), inputs)
    _report(result, as_json, None if no_advice else said)


def _launch_slurm(fabric, ranks, inventory, command, *, dry_run, as_json, submit, script,
                  abort_on_failure, record, rank_map, matrix, opts) -> None:
    """launch --via slurm: one srun step inside the allocation, or an sbatch submission."""
    import os

    from geoconsole.launch import slurm

    inv, hosts = _inventory(inventory)
    hosts = _hosts_for(fabric, hosts, False, inventory)
    plan = _plan(fabric, ranks, hosts, command, **opts)
    step = slurm.build_step(plan, slurm.node_map(inv, names=plan.by_host()), abort_on_failure=abort_on_failure)
    if dry_run:
        if as_json:
            doc = {**plan.to_json(), "slurm": {"nodes": list(step.nodes), "srun": list(step.argv),
                                               "sbatch": slurm.sbatch_script(step) if submit else None}}
            typer.echo(json.dumps(doc, indent=1))
        else:
            typer.echo("\n".join(slurm.describe_step(step, submit=submit)))
        return
    in_allocation = bool(os.environ.get("SLURM_JOB_ID"))
    if submit:
        inputs = [("--matrix", matrix), ("--inventory", inventory)]
        if Path(rank_map).exists():
            inputs.append(("--rank-map", rank_map))
        job, path = slurm.submit_step(step, script, inputs=inputs)
        rec = {"kind": "submit", "via": "slurm", "slurm_job_id": job, "rank_map": plan.rank_map,
               "world_size": plan.world_size, "nodes": list(step.nodes), "command": list(plan.command)}
        if record is not None:
            _append_record(record, {**rec, "fabric_sha256": fabric.sha256()}, inputs)
        typer.echo(json.dumps(rec, indent=1) if as_json else f"submitted batch job {job}")
        if path and not as_json:
            typer.echo(f"batch script: {path}", err=True)
        return
    if not in_allocation:
        raise UserError("--via slurm: not inside a Slurm allocation (SLURM_JOB_ID is not set); "
                        "run inside salloc/sbatch, or add --submit", ExitCode.USAGE)
    import asyncio

    def to_stderr(p, stream, line):
        print(f"[rank {p.rank} {p.host}] {line}", file=sys.stderr, flush=True)

    from geoconsole.launch.run import default_sink, launch_record

    done = {}

    async def main():
        done["result"] = await slurm.launch_step(step, sink=to_stderr if as_json else default_sink)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        # Ctrl-C cancelled the step (scancel) and the result says so: record it, exit 130
        if "result" not in done:
            raise
    result = done["result"]
    if record is not None:
        _append_record(record, launch_record(plan, result, fabric_sha256=fabric.sha256(), extra={
            "nodes": {str(r): n for r, n in enumerate(step.nodes)}}))
    _report(result, as_json)


def _report(result, as_json: bool, advice: list | None = None) -> None:
    """Print a launch result and exit with its code (shared by both launchers).

    ``advice``: what was advised before the start (None: advice was off), for --json.
    """
    if as_json:
        typer.echo(json.dumps({**result.to_json(), **({} if advice is None else {"advice": advice})}, indent=1))
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


def _advice_json(fabric, workload, placements) -> list[dict]:
    """The advice that applies to validating ``workload`` on ``fabric``: its age, the model's
    assumptions, and how far apart the two seeds validate solved itself landed."""
    from geoconsole.advice import for_launch, seed_spread, validated_seeds
    from geoconsole.cli.advice import with_hints

    return with_hints(for_launch(fabric, workload) + seed_spread(validated_seeds(placements)))


def _launch_check(fabric, strict: bool, said: list):
    """Advice before starting, on stderr: with ``None`` the fabric's own (age, GPU kinds),
    with discovery what differs on the hosts now. --strict: exit 1 on measurement advice."""
    from geoconsole import advice
    from geoconsole.cli.advice import echo_warnings, with_hints

    def check(found) -> None:
        items = advice.for_launch(fabric) if found is None else (
            advice.measurement_mismatch(fabric, found) + advice.mixed_gpus(fabric, found))
        echo_warnings(items)
        said.extend(with_hints(items))
        if strict and any(a.code in advice.MEASUREMENT_CODES for a in items):
            typer.echo("error: --strict: the measurement does not fit the fleet; nothing was started", err=True)
            raise typer.Exit(int(ExitCode.FAILED))

    return check


async def _launch(plan, fabric, ranks, hosts, inv, command, opts, abort_on_failure, grace,
                  known_hosts, accept_new, as_json, check=None):
    from geoconsole.launch.flow import Reach, connect_and_run
    from geoconsole.launch.run import default_sink

    def to_stderr(p, stream, line):  # --json keeps stdout for the JSON document
        print(f"[rank {p.rank} {p.host}] {line}", file=sys.stderr, flush=True)

    sink = to_stderr if as_json else default_sink
    reach = Reach({h.name: h for h in inv.hosts}, known_hosts, accept_new)
    return await connect_and_run(
        plan, reach, lambda found: _plan(fabric, ranks, hosts, command, **opts, interfaces=found),
        sink=sink, abort_on_failure=abort_on_failure, grace_s=grace, check=check)


def export_command(
    ctx: typer.Context,
    matrix: Path = MATRIX,
    rank_map: str = RANK_MAP,
    fmt: str = typer.Option("json", "--format", "-f", help="torchrun | slurm | rankfile | json | k8s"),
    output: Optional[Path] = path_option(None, "--output", "-o", help="Write here (default, or -: standard output)."),
    command: List[str] = typer.Argument(None, help="The training command, after '--' (torchrun and k8s need it; json without it has null commands; slurm and rankfile list only where each rank runs)."),
    inventory: Optional[Path] = INVENTORY,
    mode: str = MODE,
    backend: Optional[str] = BACKEND,
    port: int = PORT,
    interface: Optional[str] = INTERFACE,
    env: Optional[List[str]] = ENV,
    workdir: Optional[str] = WORKDIR,
    image: Optional[str] = typer.Option(None, "--image", help="k8s: the container image every rank runs in."),
    job_name: str = typer.Option("geoconsole", "--job-name", help="k8s: prefix of the Pod and Service names."),
) -> None:
    """Export the rank map for other launchers: torchrun script, Slurm hostfile, rankfile, JSON, Kubernetes."""
    from geoconsole.launch.export import FORMATS, ExportError, export, parse, plan_slots
    from geoconsole.launch.plan import MODES, check_one_line
    from solver.files import write_text

    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if mode not in MODES:
        raise UserError(f"--mode {mode!r}: expected {' or '.join(MODES)}")
    if fmt == "torchrun" and mode != "torchrun":
        raise UserError(f"--mode {mode}: --format torchrun writes torchrun agents; leave out --mode or use --format json")
    given = given_on_the_command_line(ctx)
    unused = [flag for flag, name in (("--mode", "mode"), ("--backend", "backend"), ("--port", "port"),
                                      ("--interface", "interface"), ("--env", "env"), ("--workdir", "workdir"))
              if name in given] if fmt in ("slurm", "rankfile") else []
    unused += [flag for flag, name in (("--image", "image"), ("--job-name", "job_name")) if name in given and fmt != "k8s"]
    if unused:  # said, not silently dropped
        raise UserError(f"--format {fmt}: {', '.join(unused)} {'does' if len(unused) == 1 else 'do'} not apply "
                        f"({'it lists only where each rank runs' if fmt in ('slurm', 'rankfile') else 'k8s only'})")
    if fmt == "k8s":  # checked here so that the error names the flag
        from geoconsole.launch.k8s import image_problem, name_problem

        if not image:
            raise UserError("--format k8s: needs --image, the container image the ranks run in")
        for option, value, problem in (("--image", image, image_problem), ("--job-name", job_name, name_problem)):
            if (why := problem(value)) is not None:
                raise UserError(f"{option} {value[:80]!r}: {why}")
    fabric = load_fabric(matrix, devices=True)
    fabric, ranks = _solution(rank_map, fabric)
    inv, hosts = _inventory(inventory)
    hosts = _hosts_for(fabric, hosts, False, inventory)
    if not command and fmt in ("torchrun", "k8s"):
        raise UserError(f"command: give the training command after '--' for --format {fmt}")
    # slurm, rankfile and a json without a command list only where each rank runs: the
    # plan is built around a stand-in the export leaves out
    plan = _plan(fabric, ranks, hosts, command or ["<command>"], mode=mode, backend=backend,
                 port=port, workdir=workdir, env=_env(env), interface=interface)
    from geoconsole.launch.slurm import node_map

    if fmt in ("torchrun", "k8s"):  # export checks it too; here the error names the flag
        check_one_line(plan)
    with flag(f"--format {fmt}"):
        text = export(plan, fmt, image=image, name=job_name, with_command=bool(command),
                      nodes=node_map(inv, "slurm_node" if fmt == "slurm" else "k8s_node", plan.by_host()))
    if parse(text, fmt) != plan_slots(plan):  # an export must read back to the same mapping
        raise ExportError(f"--format {fmt}: the export does not read back to the plan")
    if output is None or str(output) == "-":  # -o -: standard output, as the help says by default
        typer.echo(text, nl=False)
        return
    inputs = [("--matrix", matrix), ("--inventory", inventory)]
    if Path(rank_map).exists():
        inputs.append(("--rank-map", rank_map))
    write_text(output, text, inputs=inputs, mode=0o755 if fmt == "torchrun" else None)
    typer.echo(f"wrote {shown(output)} ({fmt}, {plan.world_size} ranks)", err=True)


def validate_command(
    matrix: Path = MATRIX,
    inventory: Path = INVENTORY_REQUIRED,
    c_pp: float = C_PP,
    c_dp: float = C_DP,
    pp: Optional[int] = PP_OF_MAP,
    dp: Optional[int] = DP_OF_MAP,
    pp_messages: float = PP_MSG,
    dp_messages: float = DP_MSG,
    rank_map: Optional[str] = typer.Option(None, "--rank-map", "-r", help="The solution to check (default: solve with --seed)."),
    scale: float = typer.Option(1.0, "--scale", help="Multiply both payloads (e.g. 0.01 for a quick check)."),
    steps: int = typer.Option(5, "--steps", min=1, max=1000, help="Measured steps per placement (median reported)."),
    warmup: int = typer.Option(1, "--warmup", min=0, max=100, help="Unmeasured steps first."),
    random_maps: int = typer.Option(2, "--random", min=0, max=100, help="Random rank maps to measure."),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED - 1, help="Solver seed (the alternate uses seed + 1) and random-map seed."),
    backend: Optional[str] = typer.Option(None, "--backend", help="gloo or nccl (default: nccl on GPUs, gloo on CPU hosts)."),
    port: int = PORT,
    timeout: float = typer.Option(300.0, "--timeout", min=1.0, help="Seconds one placement may take."),
    as_json: bool = JSON_OUT,
    record: Optional[Path] = RECORD,
    known_hosts: str = KNOWN_HOSTS,
    accept_new: bool = ACCEPT_NEW,
    group_locality: Optional[str] = GROUP_LOCALITY,
    regions: Optional[str] = REGIONS,
    no_advice: bool = NO_ADVICE,
) -> None:
    """Measure the proxy step for several placements; compare with the model's ranking."""
    import asyncio

    from geoconsole.cli.solve import prepare_flags
    from geoconsole.prepare import workload_for
    from geoconsole.launch.validate import check_scale, format_report, scaled

    try:  # before the fabric is read: the flag is wrong whatever the files hold
        check_scale(scale)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if backend is not None and backend not in ("gloo", "nccl"):  # checked before any host is reached
        raise UserError(f"--backend {backend!r}: validate runs on gloo or nccl")
    inputs = [("--matrix", matrix), ("--rank-map", rank_map), ("--inventory", inventory)]
    _check_record(record, inputs)
    fabric = load_fabric(matrix, devices=True)
    solution = None
    if rank_map:
        from geoconsole.rank_maps import shape_for, solution_with_document

        fabric, solution, doc = solution_with_document(rank_map, fabric)
        pp, dp = shape_for(doc, shown(rank_map), pp, dp)
    workload = workload_for(fabric.n, str(fabric.source), pp, dp, c_pp, c_dp, pp_messages, dp_messages)
    try:  # the payloads as measured must be a workload too (--scale 1e300: not finite)
        scaled(workload, scale)
    except ValueError as exc:
        raise UserError(f"--scale {scale:g}: the scaled payloads are no workload: {exc}") from None
    # the same preparation as solve: select D_PP x D_DP devices, seed orders
    prepared = prepare_flags(fabric, workload, group_locality=group_locality, regions=regions,
                             fill=False, estimates=None, learn=True)
    if prepared.selection is not None and solution is not None:
        raise UserError(f"--rank-map: {len(solution)} ranks for {fabric.n} devices; give the solve --json "
                        "output (it names the selected rows) or --pp/--dp that use every device")
    fabric = prepared.fabric
    if solution is not None:  # before any host is reached, as score checks it
        check_rank_map(solution, workload)
    inv, hosts = _inventory(inventory)
    hosts = _hosts_for(fabric, hosts, True, inventory)
    known_hosts = str(known_hosts_flag(known_hosts))
    report, notes = asyncio.run(_validate(
        fabric, workload, hosts, inv, known_hosts, accept_new, scale=scale, steps=steps, warmup=warmup,
        seed=seed, random_maps=random_maps, solution=solution, backend=backend, port=port,
        timeout_s=timeout, solve_kwargs={"seed_orders": prepared.seed_orders},
        progress=lambda m: typer.echo(m, err=True)))
    if prepared.selection is not None:
        notes = list(prepared.lines()) + list(notes)
    found = [] if no_advice else _advice_json(fabric, workload, report.placements)
    notes = list(notes) + [f"advice {a['severity']} {a['code']}: {a['message']}" for a in found]
    if record is not None:
        _append_record(record, {"kind": "validate", "fabric_sha256": fabric.sha256(), **report.to_json()}, inputs)
    if as_json:
        typer.echo(json.dumps({**report.to_json(), "notes": list(notes), "advice": found}, indent=1))
    else:
        typer.echo("\n".join(format_report(report, notes)))
    if any(p.error == "interrupted" for p in report.placements):
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    if any(p.error for p in report.placements):
        raise typer.Exit(int(ExitCode.REMOTE))
    if report.warning:
        raise typer.Exit(int(ExitCode.FAILED))


async def _validate(fabric, workload, hosts, inv, known_hosts, accept_new, **kwargs):
    from collections import Counter

    from geoconsole.errors import RemoteError
    from geoconsole.launch.flow import Reach, connected
    from geoconsole.launch.validate import run_validation

    reach = Reach({h.name: h for h in inv.hosts}, known_hosts, accept_new)
    async with connected(reach, Counter(d.host for d in fabric.devices)) as sessions:
        try:
            return await run_validation(fabric, workload, hosts, sessions, **kwargs)
        except RuntimeError as exc:  # no route found on a host
            raise RemoteError(str(exc)) from None


def register(app: typer.Typer) -> None:
    """Add launch, export and validate to ``app``."""
    ctx = {"allow_extra_args": False, "ignore_unknown_options": False}
    app.command("launch", context_settings=ctx)(cli_errors(launch_command))
    app.command("export")(cli_errors(export_command))
    app.command("validate")(cli_errors(validate_command))
