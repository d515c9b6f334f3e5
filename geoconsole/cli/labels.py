"""Headless sub-commands: ``labels show|suggest|fill`` and ``select``.

numpy/scipy and the solver only: nothing here imports textual or asyncssh.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from solver.files import shown

from geoconsole.cli.advice import EXCLUDE
from geoconsole.cli.errors import UserError, cli_errors
from geoconsole.cli.options import JSON_OUT, MATRIX, load_fabric, path_option
from solver.fabric import Fabric

labels_app = typer.Typer(
    name="labels",
    help="Locality labels: show and set them, suggest network groups from the measurement, "
         "fill unmeasured pairs.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


@contextmanager
def _edit(matrix: Path, out: Path):
    """The fabric at ``matrix`` and a function that writes the edited one to ``out``.

    When ``out`` is ``matrix`` the file stays locked from read to write, so concurrent
    edits of one fabric queue up instead of losing each other's changes.
    """
    from solver.fabric import FabricError, fabric_from_text
    from solver.files import locked_update

    if os.path.exists(out) and os.path.samefile(out, matrix):
        with locked_update(matrix, "fabric JSON", error=FabricError) as (text, write):
            yield fabric_from_text(text, str(matrix)), lambda f: write(_fabric_text(f))
        return
    yield load_fabric(matrix), lambda f: f.save(out)


def _fabric_text(fabric: Fabric) -> str:
    return json.dumps(fabric.to_json(), indent=1) + "\n"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[c]) for r in rows)) if rows else len(h) for c, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _devices(fabric: Fabric):
    from solver.selection import fabric_devices

    return fabric_devices(fabric)


# -- labels show ---------------------------------------------------------------------
def _cell(labels, d, field: str) -> str:
    lab = labels.get(d.host, field, d.gpu)
    return "-" if lab is None else f"{lab.value} ({lab.source})"


@labels_app.command("show")
@cli_errors
def show_command(matrix: Path = MATRIX, as_json: bool = JSON_OUT) -> None:
    """List every device's region, zone and network group with where each came from."""
    from geoconsole.labels import FIELDS, LabelSet
    from solver.estimate import estimated_pair_count, inferred_pair_count
    from solver.locality import group_locality

    fabric = load_fabric(matrix)
    devices = _devices(fabric)
    labels = LabelSet.from_fabric(fabric)
    whole = group_locality(devices, range(fabric.n))
    missing = len(fabric.missing_pairs())
    estimated = _estimated_count(fabric, estimated_pair_count)
    inferred = _estimated_count(fabric, inferred_pair_count)
    if as_json:
        doc = {
            "fabric": str(matrix),
            "devices": [
                {"row": i, "device": d.name, **{f: _json_label(labels, d, f) for f in FIELDS}}
                for i, d in enumerate(devices)
            ],
            "labels": labels.to_json(),
            "locality": whole.to_json(),
            "missing_pairs": missing,
            "estimated_pairs": estimated,
            "inferred_pairs": inferred,
        }
        typer.echo(json.dumps(doc, indent=1))
        return
    rows = [[str(i), d.name, _cell(labels, d, "region"), _cell(labels, d, "zone"), _cell(labels, d, "network_group")]
            for i, d in enumerate(devices)]
    typer.echo(_table(["row", "device", "region", "zone", "network group"], rows))
    hosts = len({d.host for d in devices})
    typer.echo(f"{fabric.n} devices on {hosts} hosts: {whole.words}; "
               f"{missing} unmeasured pairs, {estimated} estimated pairs"
               + (f", {inferred} inferred pairs" if inferred else ""))


def _json_label(labels, d, field):
    lab = labels.get(d.host, field, d.gpu)
    return None if lab is None else lab.to_json()


def _estimated_count(fabric: Fabric, counter) -> int:
    try:
        return counter(fabric)
    except ValueError as exc:
        raise UserError(str(exc)) from None


# -- labels suggest ------------------------------------------------------------------
@labels_app.command("suggest")
@cli_errors
def suggest_command(
    matrix: Path = MATRIX,
    as_json: bool = JSON_OUT,
    apply: bool = typer.Option(False, "--apply",
                               help="Accept the suggestions and write the labelled fabric to --out."),
    out: Optional[Path] = path_option(None, "--out", "-o",
                                       help="Where --apply writes the fabric (may be --matrix)."),
    min_gap: float = typer.Option(1.5, "--min-gap", min=1.01,
                                  help="Smallest step in transfer time (ratio) that separates groups."),
    keep_contradicting: bool = typer.Option(False, "--keep-contradicting",
                                            help="With --apply, fill only missing network groups."),
) -> None:
    """Cluster the measured transfer times and suggest network groups where labels are
    missing or contradict the measurement (estimated pairs are ignored)."""
    from geoconsole.labels import LabelSet, apply_suggestions
    from solver.estimate import measured_mask
    from solver.suggest import suggest_network_groups

    if apply and out is None:
        raise UserError("--apply needs --out FILE for the labelled fabric")
    if out is not None and not apply:
        raise UserError("--out is written only with --apply")
    if keep_contradicting and not apply:
        raise UserError("--keep-contradicting applies only with --apply")
    if not (min_gap == min_gap and min_gap < float("inf")):  # typer's min= lets inf through, words nan oddly
        raise UserError(f"--min-gap: expected a finite ratio >= 1.01, got {min_gap}")
    with _edit(matrix, out if apply else matrix) as (fabric, save):
        try:
            found = suggest_network_groups(fabric, measured=measured_mask(fabric), min_gap=min_gap)
        except ValueError as exc:
            raise UserError(f"{matrix}: {exc}") from None
        applied, kept = 0, []
        if apply:
            if fabric.devices is None:
                raise UserError(f"{matrix}: devices: the fabric lists no devices to label")
            labels = LabelSet.from_fabric(fabric)
            applied, kept = apply_suggestions(labels, fabric.devices, found.changes, not keep_contradicting)
            save(labels.apply(fabric))
    if as_json:
        doc = found.to_json()
        doc["applied"] = applied
        doc["kept"] = kept
        if apply:
            doc["out"] = str(out)
        typer.echo(json.dumps(doc, indent=1))
        return
    _print_suggestions(fabric, found)
    for note in kept:
        typer.echo(note)
    if apply:
        typer.echo(f"applied {applied} suggested network groups; wrote {shown(out)}")


def _print_suggestions(fabric: Fabric, found) -> None:
    if found.clusters is None:
        typer.echo(f"no network groups to suggest: {found.reason}")
        return
    typer.echo(f"{len(found.names)} groups in the measurement (cut at {found.cut_s:.3g} s for 0.1 GB, "
               f"{found.gap:.2f}x step to the next level)")
    for c, name in enumerate(found.names):
        members = [fabric.device_name(i) for i in range(fabric.n) if found.clusters[i] == c]
        shown = ", ".join(members[:6]) + (f", ... ({len(members)} devices)" if len(members) > 6 else "")
        typer.echo(f"  {name}: {shown}")
    if not found.changes:
        typer.echo(f"all {found.agree} network-group labels agree with the measurement")
        return
    rows = [[str(c.row), c.device, c.current or "-", c.suggested, c.status] for c in found.changes]
    typer.echo(_table(["row", "device", "current", "suggested", "status"], rows))
    typer.echo(f"{len(found.changes)} to change, {found.agree} agree")


# -- labels set ----------------------------------------------------------------------
@labels_app.command("set")
@cli_errors
def set_command(
    matrix: Path = MATRIX,
    out: Path = path_option(..., "--out", "-o", help="Fabric JSON to write (may be --matrix)."),
    host: list[str] = typer.Option(..., "--host", help="Host to label; repeatable."),
    gpu: Optional[int] = typer.Option(None, "--gpu", min=0, help="Only this GPU of the host(s) (an override)."),
    region: Optional[str] = typer.Option(None, "--region", help="Region; '' clears it."),
    zone: Optional[str] = typer.Option(None, "--zone", help="Zone; '' clears it."),
    network_group: Optional[str] = typer.Option(None, "--network-group", help="Network group; '' clears it."),
) -> None:
    """Set labels as the operator (source: operator) on whole hosts, replacing
    per-GPU values, or with --gpu on one GPU of them."""
    from geoconsole.labels import validate_label

    changes = {f: v for f, v in (("region", region), ("zone", zone), ("network_group", network_group))
               if v is not None}
    if not changes:
        raise UserError("nothing to set: give --region, --zone or --network-group")
    for field, value in changes.items():
        validate_label(field, value, "--" + field.replace("_", "-"))
    first: dict[str, str] = {}
    for h in host:  # a host given twice (in any case) is labelled (and counted) once
        first.setdefault(h.lower(), h)
    host = list(first.values())
    for h in host:
        if not h.strip():
            raise UserError(f"--host: expected a host name, got {h!r}")
    with _edit(matrix, out) as (fabric, save):
        _set_labels(fabric, save, matrix, host, gpu, changes)
    what = ", ".join(f"{f}={v or '(cleared)'}" for f, v in changes.items())
    typer.echo(f"set {what} on {len(host)} host{'s' if len(host) != 1 else ''}"
               f"{f' (GPU {gpu})' if gpu is not None else ''}; wrote {shown(out)}")


def _set_labels(fabric, save, matrix, host, gpu, changes) -> None:
    from geoconsole.labels import LabelSet

    if fabric.devices is None:
        raise UserError(f"{matrix}: devices: the fabric lists no devices to label")
    known = {(d.host, d.gpu) for d in fabric.devices}
    named = {kh.lower(): kh for kh, _ in known}  # any case, as DNS: the fabric's own spelling
    for h in host:
        if not any(kh == named.get(h.lower()) and (gpu is None or kg == gpu) for kh, kg in known):
            what = f"{h}:{gpu}" if gpu is not None else h
            raise UserError(f"{matrix}: no device {what} in the fabric")
    host = [named[h.lower()] for h in host]  # the fabric's spelling (set_command made them distinct)
    labels = LabelSet.from_fabric(fabric)
    for field, value in changes.items():
        labels.set_many([(h, gpu) for h in host], field, value, "operator", replace_gpus=True)
    save(labels.apply(fabric, keep_unset=False))


# -- labels fill ---------------------------------------------------------------------
@labels_app.command("fill")
@cli_errors
def fill_command(
    matrix: Path = MATRIX,
    out: Path = path_option(..., "--out", "-o", help="Fabric JSON to write with the estimates."),
    estimate: list[str] = typer.Option(
        [], "--estimate",
        help="LEVEL=ALPHA_MS,BETA_GBPS for host, network_group, zone, region, any, or a link class "
             "(NV1, PIX, PXB, PHB, NODE, SYS); repeatable. Example: --estimate zone=0.5,5"),
    learn: bool = typer.Option(True, "--learn/--no-learn",
                               help="Where no --estimate is set, use medians of measured pairs at the same level."),
    as_json: bool = JSON_OUT,
) -> None:
    """Fill unmeasured pairs from labels and GPU links; every filled pair is marked estimated."""
    from geoconsole.prepare import fill as fill_pairs
    from solver.estimate import estimated_pair_count

    with _edit(matrix, out) as (fabric, save):
        filled, count = fill_pairs(fabric, estimate, learn)  # a bad --estimate names its flag
        save(filled)
    total = estimated_pair_count(filled)
    if as_json:
        typer.echo(json.dumps({"out": str(out), "filled_pairs": count, "estimated_pairs": total}))
        return
    typer.echo(f"filled {count} unmeasured pairs ({total} estimated in all); wrote {shown(out)}")


# -- select --------------------------------------------------------------------------
def select_command(
    matrix: Path = MATRIX,
    pp: int = typer.Option(..., "--pp", min=1, help="Pipeline stages D_PP."),
    dp: int = typer.Option(..., "--dp", min=1, help="Data-parallel replicas D_DP."),
    group_locality: str = typer.Option(
        "prefer", "--group-locality",
        help="prefer (tightest available), network_group, zone, region (required), or any."),
    regions: Optional[str] = typer.Option(
        None, "--regions", help="Comma-separated regions or zones; only devices in them take part."),
    out: Optional[Path] = path_option(None, "--out", "-o", help="Write the selected sub-fabric here."),
    as_json: bool = JSON_OUT,
    exclude: Optional[list[str]] = EXCLUDE,
) -> None:
    """Choose which D_PP x D_DP devices take part (ADR-0021 group_locality) and say why
    the others are left out."""
    from geoconsole.prepare import parse_regions, select as select_rows, selected_fabric
    from solver.selection import POLICIES

    if group_locality not in POLICIES:
        raise UserError(f"--group-locality: expected one of {', '.join(POLICIES)}, got {group_locality!r}")
    wanted = parse_regions(regions)
    fabric = load_fabric(matrix)
    chosen = select_rows(fabric, pp * dp, group_locality, wanted, exclude or ())
    if out is not None:
        selected_fabric(fabric, chosen).save(out, inputs=[("--matrix", matrix)])
    if as_json:
        doc = chosen.to_json()
        doc["devices"] = [fabric.device_name(i) for i in chosen.rows]
        for entry in doc["left_out"]:
            entry["device"] = fabric.device_name(entry["row"])
        if out is not None:
            doc["out"] = str(out)
        typer.echo(json.dumps(doc, indent=1))
        return
    typer.echo(f"selected {len(chosen.rows)} of {fabric.n} devices "
               f"(group_locality={chosen.policy}, level {chosen.level}): {chosen.summary}")
    if chosen.left_out:
        typer.echo(f"left out {len(chosen.left_out)}:")
        for row, why in chosen.left_out:
            typer.echo(f"  {row} {fabric.device_name(row)}: {why}")
    if out is not None:
        typer.echo(f"wrote {shown(out)} ({len(chosen.rows)} devices)")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.add_typer(labels_app, name="labels")
    app.command("select")(cli_errors(select_command))
