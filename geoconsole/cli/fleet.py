"""Headless sub-commands for the fleet: ``inventory`` (discovery table) and ``probe``.

asyncssh and the probes package are imported inside the commands (asyncssh plus
cryptography cost ~0.3 s), so other commands never pay for them.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from solver.files import check_not_input, shown

from geoconsole.cli.errors import UserError, cli_errors, flag
from geoconsole.cli.exitcodes import ExitCode
from geoconsole.solving import MAX_SEED

from geoconsole.cli.options import ACCEPT_NEW, INVENTORY_REQUIRED as INVENTORY, JSON_OUT, KNOWN_HOSTS, given_on_the_command_line, known_hosts_flag, path_option
SSH_CONFIG = path_option(Path("~/.ssh/config"), "--ssh-config", help="OpenSSH client config whose Host aliases the inventory may use.")
REGION = typer.Option(None, "--region", help="Region for hosts that have none (inventory, GCE metadata).")
ZONE = typer.Option(None, "--zone", help="Zone for hosts that have none.")
GROUP = typer.Option(None, "--network-group", help="Network group for hosts that have none.")
CONNECT_TIMEOUT = typer.Option(10.0, "--connect-timeout", min=0.1, help="Seconds to connect and log in to a host.")


def _load_inventory(path: Path, ssh_config: Path):
    """The inventory, with ``--ssh-config``: a folder is refused; a missing file named on
    the command line is read as no config, with a note (a typo dropped every HostName,
    User and Port without a word; the default ~/.ssh/config may be absent unsaid)."""
    from geoconsole.inventory import DEFAULT_SSH_CONFIG, load_inventory

    config = ssh_config.expanduser()
    if config.is_dir():
        raise UserError(f"--ssh-config: {shown(ssh_config)}: is a folder; name an OpenSSH client config file")
    if not config.exists() and config != Path(DEFAULT_SSH_CONFIG).expanduser():
        typer.echo(f"note: --ssh-config: {shown(ssh_config)}: no such file; no ssh config is read", err=True)
    return load_inventory(path, ssh_config=ssh_config)


def _pool(known_hosts: str, accept_new: bool, connect_timeout: float):
    from probes.ssh import SSHPool  # asyncssh: imported only by fleet commands

    return SSHPool(known_hosts=known_hosts_flag(known_hosts), accept_new=accept_new,
                   connect_timeout=connect_timeout)


def _report_accepted(pool) -> None:
    for address, algorithm, fingerprint in pool.accepted:
        print(f"note: recorded new host key for {address} ({algorithm} {fingerprint}) in {pool.known_hosts_path}",
              file=sys.stderr)


def _labels(region, zone, group) -> dict[str, Optional[str]]:
    """The location flags, checked as labels are where loaded (a probe wrote a fabric with
    --region a,b that no command could read back)."""
    from solver import names

    given = {"region": region, "zone": zone, "network_group": group}
    for field, value in given.items():
        why = names.label_problem(value) if value is not None else None
        if why:
            raise UserError(f"--{field.replace('_', '-')}: {why}")
    return given


def inventory_command(
    inventory: Path = INVENTORY,
    as_json: bool = JSON_OUT,
    known_hosts: str = KNOWN_HOSTS,
    accept_new: bool = ACCEPT_NEW,
    ssh_config: Path = SSH_CONFIG,
    region: Optional[str] = REGION,
    zone: Optional[str] = ZONE,
    network_group: Optional[str] = GROUP,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> None:
    """Connect to every host and show what it has: GPUs, links, versions, network, location."""
    import asyncio

    from probes.discovery import discover_fleet

    inv = _load_inventory(inventory, ssh_config)
    pool = _pool(known_hosts, accept_new, connect_timeout)

    async def run():
        async with pool:
            return await discover_fleet(pool, inv.hosts, labels=_labels(region, zone, network_group))

    results = asyncio.run(run())
    _report_accepted(pool)
    failures = [r for r in results if isinstance(r, Exception)]
    if as_json:
        doc = {"inventory": str(inventory), "hosts": [
            {"name": h.name, "error": str(r)} if isinstance(r, Exception) else r.to_json()
            for h, r in zip(inv.hosts, results)]}
        typer.echo(json.dumps(doc, indent=1))
    else:
        _print_inventory(inv.hosts, results)
    if failures:
        raise UserError(f"{len(failures)} of {len(results)} hosts failed: {failures[0]}", ExitCode.REMOTE)


def _print_inventory(hosts, results) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Fleet", show_lines=False)
    for col in ("host", "hostname", "devices", "links", "torch", "NCCL", "interface", "TCP cc", "location"):
        table.add_column(col, overflow="fold")
    for host, r in zip(hosts, results):
        if isinstance(r, Exception):
            table.add_row(Text(host.name), "-", Text(str(r).split(": ", 1)[-1], style="red"), "", "", "", "", "", "")
            continue
        if r.cpu_host:
            devices = "CPU (gloo)" if len(r.devices) == 1 else f"{len(r.devices)} CPU slots (gloo)"
        else:
            names = sorted({g.name for g in r.gpus})
            devices = f"{len(r.devices)}/{len(r.gpus)}x {', '.join(names)}"
        links = r.topo.summary() if r.topo else ("-" if r.cpu_host else (r.topo_error or "?"))
        nics = f"; NICs {', '.join(r.topo.nics)}" if r.topo and r.topo.nics else ""
        where = "/".join(x for x in (r.region, r.zone, r.network_group) if x) or "-"
        if r.location_source:
            where += f" ({r.location_source})"
        iface = f"{r.interface or '?'} mtu {r.mtu or '?'}"
        # Text, never markup: every cell holds what a host reported or an inventory named
        table.add_row(*map(Text, (r.name, r.hostname, devices, links + nics, r.torch or "-", r.nccl or "-",
                                  iface, r.congestion_control or "?", where)))
    shown_table = io.StringIO()  # echoed: a failed write is one line (cli_errors)
    Console(file=shown_table, width=max(120, Console().width), force_terminal=sys.stdout.isatty()).print(table)
    typer.echo(shown_table.getvalue(), nl=False)
    for host, r in zip(hosts, results):
        if not isinstance(r, Exception):
            for note in r.notes:
                print(f"note: {host.name}: {note}", file=sys.stderr)


def probe_command(
    ctx: typer.Context,
    inventory: Path = INVENTORY,
    out: Optional[Path] = path_option(None, "--out", "-o", help="Write the measured fabric JSON here (with --refresh: that fabric with the re-measured links)."),
    known_hosts: str = KNOWN_HOSTS,
    accept_new: bool = ACCEPT_NEW,
    ssh_config: Path = SSH_CONFIG,
    sizes_mb: str = typer.Option("0.25,1,4,16", "--sizes-mb", help="Payload sizes in MiB, comma separated (scaled down on slow links)."),
    reps: int = typer.Option(3, "--reps", min=1, help="Timed repetitions per size."),
    warmup: int = typer.Option(3, "--warmup", min=0, help="Untimed small transfers before each direction."),
    max_transfer_s: float = typer.Option(0.25, "--max-transfer-s", min=0.001, help="Scale sizes so the largest transfer takes about this long."),
    pair_timeout: float = typer.Option(60.0, "--pair-timeout", min=1.0, help="Seconds allowed for one pair (both directions)."),
    host_timeout: float = typer.Option(90.0, "--host-timeout", min=1.0, help="Seconds allowed for one host's set-up (connect, discovery, worker start)."),
    sequential: bool = typer.Option(False, "--sequential", help="Probe one pair at a time instead of tournament rounds."),
    events: Optional[Path] = path_option(None, "--events", help="Also write every sweep event as a JSON line here."),
    strategy: Optional[str] = typer.Option(None, "--strategy", help="all: every device pair; sampled: a few per host pair plus one concurrent test, the rest inferred (default when a host has several devices)."),
    refresh: Optional[Path] = path_option(None, "--refresh", help="Re-measure a sample of this fabric's links (bottlenecks of --solution, else the slowest, plus --share at random) and report their drift."),
    solution: Optional[Path] = path_option(None, "--solution", help="With --refresh: a solve --json document or a console session whose bottleneck links to re-measure."),
    share: float = typer.Option(0.1, "--share", min=0.0, max=1.0, help="With --refresh: share of the other links re-measured at random."),
    drift_threshold: float = typer.Option(0.2, "--drift", min=0.0, help="With --refresh: relative beta change that counts as drift."),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, help="With --refresh: seed of the random share."),
    region: Optional[str] = REGION,
    zone: Optional[str] = ZONE,
    network_group: Optional[str] = GROUP,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> None:
    """Measure latency and bandwidth between device pairs; write a fabric JSON (or --refresh one)."""
    import asyncio

    from probes.sweep import STRATEGIES, ProbeSettings

    if refresh is None:  # said, not silently dropped: a full sweep ran instead
        unused = [flag for flag, name in (("--solution", "solution"), ("--share", "share"), ("--drift", "drift_threshold"),
                                          ("--seed", "seed")) if name in given_on_the_command_line(ctx)]
        if unused:
            raise UserError(f"{', '.join(unused)}: only with --refresh")
    inv = _load_inventory(inventory, ssh_config)
    labels = _labels(region, zone, network_group)
    # every file this command reads: --out and --events may be none of them
    inputs = [("--inventory", inventory), ("--ssh-config", ssh_config.expanduser()),
              ("--known-hosts", Path(known_hosts).expanduser()), ("--refresh", refresh), ("--solution", solution)]
    if out is not None:
        # --refresh F -o F updates the fabric in place (an atomic write); the rest are inputs only
        check_not_input(out, [i for i in inputs if i[0] != "--refresh"] + [("--events", events)],
                        error=lambda why: UserError(f"--out: {why}"))
    if strategy is not None and strategy not in STRATEGIES:
        raise UserError(f"--strategy: expected one of {', '.join(STRATEGIES)}, got {strategy!r}")
    settings = ProbeSettings(
        sizes_bytes=_sizes(sizes_mb), reps=reps, warmup=warmup, max_transfer_s=max_transfer_s,
        pair_timeout_s=pair_timeout, host_timeout_s=host_timeout, sequential=sequential,
        command=" ".join(["geoconsole", *sys.argv[1:]]) if sys.argv else None, strategy=strategy,
    )
    if out is None and refresh is None:
        raise UserError("--out: give the file to write the fabric to")
    if out is not None and not out.parent.exists():
        raise UserError(f"--out: folder {out.parent} does not exist")
    pool = _pool(known_hosts, accept_new, connect_timeout)
    if refresh is not None:
        _refresh(inv.hosts, pool, settings, labels, refresh, solution, out, events,
                 share=share, threshold=drift_threshold, seed=seed, inputs=inputs)
        return
    events_file = _open_events(events, inputs + [("--out", out)]) if events else None
    try:
        fabric, done, interrupted, lost = asyncio.run(_probe(inv.hosts, pool, settings, labels, out, events_file))
    finally:
        if events_file:
            events_file.close()
    _report_accepted(pool)
    _summary(fabric, done, out)
    if interrupted:
        raise UserError(f"interrupted; partial fabric written to {out}", ExitCode.INTERRUPTED)
    from probes.result import unmeasured_message

    message = unmeasured_message(fabric)
    if message:
        raise UserError(f"{message}; fabric written to {out} with nulls", ExitCode.REMOTE)
    if lost:  # a host lost before it had a pair to measure leaves no null behind
        raise UserError(f"{len(lost)} host(s) lost, first {lost[0]}; fabric written to {out} without them",
                        ExitCode.REMOTE)


def _open_events(path: Path, inputs):
    """The ``--events`` file, emptied and open for appending: a regular file or a new
    path only (a folder, FIFO or device is one line naming the flag, exit 2)."""
    from solver.files import FileError, write_text

    try:
        target = write_text(path, "", inputs=inputs)
        return open(target, "a", encoding="utf-8")
    except (FileError, OSError) as exc:
        raise UserError(f"--events: {getattr(exc, 'strerror', None) or exc}") from None


def _refresh(hosts, pool, settings, labels, path: Path, solution: Optional[Path], out: Optional[Path],
             events: Optional[Path], *, share: float, threshold: float, seed: int, inputs=()) -> None:
    """``probe --refresh``: re-measure a sample of links, print each one's drift; exit 1 on drift."""
    import asyncio

    from probes.refresh import RefreshError, choose_links, drift, merged
    from solver.fabric import FabricError, load_fabric

    try:
        fabric = load_fabric(path)
    except FabricError as exc:
        raise UserError(f"--refresh: {exc}") from None
    if fabric.devices is None:
        raise UserError(f"--refresh: {path}: has no device records (host per row) to re-measure")
    try:
        links = choose_links(fabric, _solution_bottlenecks(fabric, solution), share=share, seed=seed)
    except RefreshError as exc:
        raise UserError(f"--solution: {exc}") from None
    names = {h.name for h in hosts}
    lost = sorted({fabric.devices[k].host for link in links for k in (link.i, link.j)} - names)
    if lost:
        raise UserError(f"--refresh: {path}: host {lost[0]} is not in the inventory")
    wanted = {fabric.devices[k].host for link in links for k in (link.i, link.j)}
    events_file = _open_events(events, [*inputs, ("--out", out)]) if events else None
    try:
        new, done, interrupted, _lost = asyncio.run(_probe([h for h in hosts if h.name in wanted], pool, settings, labels,
                                                    None, events_file, only=[(x.src, x.dst) for x in links]))
    finally:
        if events_file:
            events_file.close()
    _report_accepted(pool)
    drifts = drift(fabric, new, links, threshold=threshold)
    moved = [d for d in drifts if d.drifted]
    print(f"re-measured {sum(d.change == d.change for d in drifts)} of {len(links)} links of {path}"
          f" ({sum(x.why == 'bottleneck' for x in links)} bottleneck, {sum(x.why == 'slowest' for x in links)} "
          f"slowest, {sum(x.why == 'random' for x in links)} random); drift beyond {threshold:.0%}: {len(moved)}")
    for d in drifts:
        # a link not re-measured is neither ok nor drifted (all 7 read "ok" with every host down)
        print(("  DRIFT " if d.drifted else "  ok    " if d.change == d.change else "  --    ") + d.words())
    if interrupted:
        raise UserError("interrupted; drift shown for what was re-measured, nothing written",
                        ExitCode.INTERRUPTED)
    if out is not None:
        merged(fabric, new, drifts).save(out, inputs=[("--solution", solution)])
        print(f"wrote {shown(out)}")
    if any(d.change != d.change for d in drifts):
        raise UserError("some links could not be re-measured (see above)", ExitCode.REMOTE)
    if moved:
        bottleneck = [d for d in moved if d.link.why == "bottleneck"]
        what = f"{len(moved)} links drifted" + (f", {len(bottleneck)} of them bottlenecks of the solution: "
                                                  "solve again" if bottleneck else "")
        raise UserError(what, ExitCode.FAILED)


def _solution_bottlenecks(fabric, solution: Optional[Path]):
    """Bottleneck links of a solve --json document or of a session's current solution."""
    if solution is None:
        return None
    from probes.refresh import bottlenecks_for_rank_map, bottlenecks_from_solve_json
    from solver.files import load_json

    with flag("--solution"):
        doc = load_json(solution, "solve --json document or session")
    if isinstance(doc, dict) and "solutions" in doc and "score" not in doc:
        from geoconsole.session import SessionError, session_from_json

        try:
            current = session_from_json(doc, str(solution)).current
        except SessionError as exc:
            raise UserError(f"--solution: {exc}") from None
        if current is None:
            raise UserError(f"--solution: {solution}: the session has no solution yet")
        return bottlenecks_for_rank_map(fabric, current.rank_map, current.workload)
    return bottlenecks_from_solve_json(fabric, doc, str(solution))


def _sizes(text: str) -> tuple[int, ...]:
    if any(not x.strip() for x in text.split(",")):  # 1,,2: a typo, not a list
        raise UserError(f"--sizes-mb: an empty item in {text!r}; expected numbers separated by commas")
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise UserError(f"--sizes-mb: expected numbers separated by commas, got {text!r}") from None
    if len(set(values)) < 2 or any(v <= 0 for v in values):
        raise UserError(f"--sizes-mb: need at least 2 distinct positive sizes, got {text!r}")
    return tuple(sorted({int(v * (1 << 20)) for v in values}))


async def _probe(hosts, pool, settings, labels, out: Optional[Path], events_file, only=None):
    import asyncio

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from probes.sweep import (Discovered, GroupMeasured, HostLost, PairFailed, PairMeasured, RoundStarted,
                              Sweep, SweepDone)

    console = Console(stderr=True)
    interrupted = False
    done = None
    lost: list[str] = []
    async with pool:
        sweep = Sweep(hosts, pool=pool, settings=settings, labels=labels, only=only)
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console, transient=False)
        task = progress.add_task("connecting", total=None)
        with progress:
            try:
                async for ev in sweep.events():
                    if events_file is not None:
                        events_file.write(json.dumps(_event_json(ev)) + "\n")
                        events_file.flush()
                    if isinstance(ev, Discovered):
                        progress.update(task, total=2 * ev.pairs, description=f"{len(ev.devices)} devices, {ev.strategy}")
                    elif isinstance(ev, RoundStarted):
                        progress.update(task, description=f"round {ev.index + 1}/{ev.total}")
                    elif isinstance(ev, PairMeasured):
                        progress.advance(task, 1)
                    elif isinstance(ev, PairFailed):
                        progress.advance(task, 2)
                        progress.console.print(f"pair {ev.src} - {ev.dst} failed: {ev.reason}", soft_wrap=True)
                    elif isinstance(ev, GroupMeasured):
                        progress.console.print(_group_words(ev))
                    elif isinstance(ev, HostLost):
                        progress.console.print(f"host {ev.host} lost: {ev.reason}", soft_wrap=True)
                        lost.append(f"{ev.host}: {' '.join(str(ev.reason).split())}")
                    elif isinstance(ev, SweepDone):
                        done = ev
            except (asyncio.CancelledError, KeyboardInterrupt):
                interrupted = True
                await sweep.cancel()
    fabric = sweep.fabric
    if out is not None:
        fabric.save(out)
    return fabric, done, interrupted, lost


def _group_words(ev) -> str:
    a, b = ev.hosts
    if ev.error:
        return f"concurrent test {a} - {b} failed: {ev.error}"
    share = "one shared link" if ev.shared else "not one shared link"
    return (f"concurrent test {a} - {b}: {ev.flows} device pairs at once {ev.gbps[0]:.3g}/{ev.gbps[1]:.3g} Gbps "
            f"in all, one pair {ev.single_gbps[0]:.3g}/{ev.single_gbps[1]:.3g}: {share}")


def _event_json(ev: Any) -> dict[str, Any]:
    from dataclasses import fields

    from probes.sweep import Discovered, SweepDone

    name = type(ev).__name__
    if isinstance(ev, SweepDone):
        return {"event": name, "elapsed_s": ev.elapsed_s, "measured": ev.measured,
                "failed": ev.failed, "cancelled": ev.cancelled, "inferred": ev.inferred}
    if isinstance(ev, Discovered):
        return {"event": name, "devices": [d.to_json() for d in ev.devices],
                "hosts": [h.name for h in ev.hosts], "rounds": ev.rounds, "pairs": ev.pairs,
                "strategy": ev.strategy, "groups": ev.groups}
    doc = {"event": name}
    doc.update({f.name: getattr(ev, f.name) for f in fields(ev)})
    return _finite(json.loads(json.dumps(doc, default=str)))


def _finite(value: Any) -> Any:
    """JSON without NaN/inf (not JSON): null in their place."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def _summary(fabric, done, out: Path) -> None:
    import math

    from probes.result import poor_fits, unmeasured_pairs

    n = fabric.n
    inferred = fabric.extras.get("inferred") or [[False] * n for _ in range(n)]
    measured = [(i, j) for i in range(n) for j in range(n)
                if i != j and math.isfinite(fabric.beta_gbps[i, j]) and not inferred[i][j]]
    elapsed = f" in {done.elapsed_s:.1f} s" if done else ""
    probe = fabric.meta.get("probe", {})
    guessed = sum(bool(x) for row in inferred for x in row)
    also = f", {guessed} inferred (not measured)" if guessed else ""
    print(f"measured {len(measured)} of {n * (n - 1)} directional pairs{also} on {n} devices{elapsed}"
          f" ({probe.get('rounds')} rounds, strategy {probe.get('strategy', 'all')})"
          + (f"; wrote {shown(out)}" if out is not None else ""))
    slowest = sorted(measured, key=lambda p: fabric.beta_gbps[p])[:5]
    if slowest:
        print("slowest links:")
        r2 = fabric.extras.get("fit_r2")
        for i, j in slowest:
            fit = f"  R^2 {r2[i][j]:.4f}" if isinstance(r2, list) and r2[i][j] is not None else ""
            print(f"  {fabric.device_name(i)} -> {fabric.device_name(j)}: "
                  f"{fabric.beta_gbps[i, j]:.3f} Gbps, {fabric.alpha_ms[i, j]:.3f} ms{fit}")
    poor = poor_fits(fabric)
    if poor:
        print("poor fits (kept, flagged):")
        for src, dst, r2v, why in poor:
            print(f"  {src} -> {dst}: {why}")
    missing = unmeasured_pairs(fabric)
    if missing:
        print("unmeasured:")
        for m in missing:
            print(f"  {m.src} - {m.dst}: {m.reason or 'unknown'}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.command("inventory")(cli_errors(inventory_command))
    app.command("probe")(cli_errors(probe_command))
