"""Headless sub-commands: ``labels show|suggest|fill`` and ``select``.

numpy/scipy and the solver only: nothing here imports textual or asyncssh.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer

from geoconsole.errors import UserError, cli_errors
from geoconsole.exitcodes import ExitCode
from solver.fabric import Fabric, FabricError, load_fabric

MATRIX = typer.Option(..., "--matrix", "-m", help="Fabric JSON (labels, alpha_ms, beta_gbps, devices).")
JSON_OUT = typer.Option(False, "--json", help="Print one JSON document instead of text.")

labels_app = typer.Typer(
    name="labels",
    help="Locality labels: show and set them, suggest network groups from the measurement, "
         "fill unmeasured pairs.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def _load(path: Path) -> Fabric:
    try:
        return load_fabric(path)
    except FabricError as exc:
        raise UserError(str(exc)) from None


def _save(fabric: Fabric, path: Path) -> None:
    try:
        fabric.save(path)
    except OSError as exc:
        raise UserError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[c]) for r in rows)) if rows else len(h) for c, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _devices(fabric: Fabric):
    from solver.selection import fabric_devices

    return fabric_devices(fabric)


def torch_versions_of(fabric: Fabric) -> list[str | None] | None:
    """Torch version per row as a probe sweep recorded it (solver.selection)."""
    from solver.selection import torch_versions_of as from_meta

    return from_meta(fabric)


# -- labels show ---------------------------------------------------------------------
def _cell(labels, d, field: str) -> str:
    lab = labels.get(d.host, field, d.gpu)
    return "-" if lab is None else f"{lab.value} ({lab.source})"


@labels_app.command("show")
@cli_errors
def show(matrix: Path = MATRIX, json_out: bool = JSON_OUT) -> None:
    """List every device's region, zone and network group with where each came from."""
    from geoconsole.labels import FIELDS, LabelSet
    from solver.estimate import estimated_pair_count, inferred_pair_count
    from solver.locality import group_locality

    fabric = _load(matrix)
    devices = _devices(fabric)
    labels = LabelSet.from_fabric(fabric)
    whole = group_locality(devices, range(fabric.n))
    missing = len(fabric.missing_pairs())
    estimated = _estimated_count(fabric, estimated_pair_count)
    inferred = _estimated_count(fabric, inferred_pair_count)
    if json_out:
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
def suggest(
    matrix: Path = MATRIX,
    json_out: bool = JSON_OUT,
    apply: bool = typer.Option(False, "--apply",
                               help="Accept the suggestions and write the labelled fabric to --out."),
    out: Optional[Path] = typer.Option(None, "--out", "-o",
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
    fabric = _load(matrix)
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
        _save(labels.apply(fabric), out)
    if json_out:
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
        typer.echo(f"applied {applied} suggested network groups; wrote {out}")


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
def set_labels(
    matrix: Path = MATRIX,
    out: Path = typer.Option(..., "--out", "-o", help="Fabric JSON to write (may be --matrix)."),
    host: list[str] = typer.Option(..., "--host", help="Host to label; repeatable."),
    gpu: Optional[int] = typer.Option(None, "--gpu", min=0, help="Only this GPU of the host(s) (an override)."),
    region: Optional[str] = typer.Option(None, "--region", help="Region; '' clears it."),
    zone: Optional[str] = typer.Option(None, "--zone", help="Zone; '' clears it."),
    network_group: Optional[str] = typer.Option(None, "--network-group", help="Network group; '' clears it."),
) -> None:
    """Set labels as the operator (source: operator) on whole hosts, replacing
    per-GPU values, or with --gpu on one GPU of them."""
    from geoconsole.labels import LabelSet, validate_label

    fabric = _load(matrix)
    if fabric.devices is None:
        raise UserError(f"{matrix}: devices: the fabric lists no devices to label")
    changes = {f: v for f, v in (("region", region), ("zone", zone), ("network_group", network_group))
               if v is not None}
    if not changes:
        raise UserError("nothing to set: give --region, --zone or --network-group")
    for field, value in changes.items():
        validate_label(field, value, "--" + field.replace("_", "-"))
    known = {(d.host, d.gpu) for d in fabric.devices}
    for h in host:
        if not any(kh == h and (gpu is None or kg == gpu) for kh, kg in known):
            what = f"{h}:{gpu}" if gpu is not None else h
            raise UserError(f"{matrix}: no device {what} in the fabric")
    labels = LabelSet.from_fabric(fabric)
    for field, value in changes.items():
        labels.set_many([(h, gpu) for h in host], field, value, "operator", replace_gpus=True)
    _save(labels.apply(fabric, keep_unset=False), out)
    what = ", ".join(f"{f}={v or '(cleared)'}" for f, v in changes.items())
    typer.echo(f"set {what} on {len(host)} host{'s' if len(host) != 1 else ''}"
               f"{f' (GPU {gpu})' if gpu is not None else ''}; wrote {out}")


# -- labels fill ---------------------------------------------------------------------
@labels_app.command("fill")
@cli_errors
def fill(
    matrix: Path = MATRIX,
    out: Path = typer.Option(..., "--out", "-o", help="Fabric JSON to write with the estimates."),
    estimate: list[str] = typer.Option(
        [], "--estimate",
        help="LEVEL=ALPHA_MS,BETA_GBPS for host, network_group, zone, region, any, or a link class "
             "(NV1, PIX, PXB, PHB, NODE, SYS); repeatable. Example: --estimate zone=0.5,5"),
    learn: bool = typer.Option(True, "--learn/--no-learn",
                               help="Where no --estimate is set, use medians of measured pairs at the same level."),
    json_out: bool = JSON_OUT,
) -> None:
    """Fill unmeasured pairs from labels and GPU links; every filled pair is marked estimated."""
    from solver.estimate import defaults_from_flags, estimated_pair_count, fill_missing

    fabric = _load(matrix)
    try:
        defaults = defaults_from_flags(estimate, learn)
    except ValueError as exc:
        raise UserError(f"--estimate: {exc}") from None
    try:
        filled, count = fill_missing(fabric, defaults)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    _save(filled, out)
    total = estimated_pair_count(filled)
    if json_out:
        typer.echo(json.dumps({"out": str(out), "filled_pairs": count, "estimated_pairs": total}))
        return
    typer.echo(f"filled {count} unmeasured pairs ({total} estimated in all); wrote {out}")


# -- select --------------------------------------------------------------------------
def select(
    matrix: Path = MATRIX,
    pp: int = typer.Option(..., "--pp", min=1, help="Pipeline stages D_PP."),
    dp: int = typer.Option(..., "--dp", min=1, help="Data-parallel replicas D_DP."),
    group_locality: str = typer.Option(
        "prefer", "--group-locality",
        help="prefer (tightest available), network_group, zone, region (required), or any."),
    regions: Optional[str] = typer.Option(
        None, "--regions", help="Comma-separated regions or zones; only devices in them take part."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the selected sub-fabric here."),
    json_out: bool = JSON_OUT,
) -> None:
    """Choose which D_PP x D_DP devices take part (ADR-0021 group_locality) and say why
    the others are left out."""
    from solver.estimate import links_from_meta
    from solver.selection import POLICIES, SelectionError, select_devices

    if group_locality not in POLICIES:
        raise UserError(f"--group-locality: expected one of {', '.join(POLICIES)}, got {group_locality!r}")
    wanted = _regions(regions)
    fabric = _load(matrix)
    try:
        chosen = select_devices(fabric, pp * dp, group_locality, wanted, torch_versions_of(fabric),
                                links_from_meta(fabric))
    except SelectionError as exc:
        raise UserError(f"{matrix}: {exc}", ExitCode.FAILED) from None
    if out is not None:
        _save(selected_fabric(fabric, chosen), out)
    if json_out:
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
        typer.echo(f"wrote {out} ({len(chosen.rows)} devices)")


def _regions(text: str | None) -> list[str] | None:
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise UserError(f"--regions: empty name in {text!r}; expected names separated by commas")
    return parts


def selected_fabric(fabric: Fabric, chosen) -> Fabric:
    """The sub-fabric of the chosen rows, recording the selection in ``meta``."""
    sub = fabric.subset(list(chosen.rows))
    meta: dict[str, Any] = dict(sub.meta)
    meta["selection"] = {
        "from": fabric.source,
        "from_sha256": fabric.sha256(),
        "rows": list(chosen.rows),
        "policy": chosen.policy,
        "level": chosen.level,
        "summary": chosen.summary,
        "left_out": len(chosen.left_out),
    }
    sub.meta = meta
    return sub


@dataclass(eq=False)
class Prepared:
    """A fabric made ready for ``solve``: selected, filled, with label seed orders.

    fabric:
        What to solve on (the selected rows, estimates filled).
    selection:
        The Selection when rows were chosen (``fabric.subset`` of them), else None.
    filled_pairs:
        Pairs of ``fabric`` that are estimated, not measured (counted after selection).
    seed_orders:
        ``seed_orders_for(fabric)`` for ``solve(..., seed_orders=...)``.
    """

    fabric: Fabric
    selection: Any
    filled_pairs: int
    seed_orders: list[list[int]]

    def to_json(self) -> dict[str, Any]:
        return {
            "selection": None if self.selection is None else self.selection.to_json(),
            "estimated_pairs": self.filled_pairs,
        }

    def lines(self) -> list[str]:
        """Text for solve's output: what was selected and estimated."""
        out = []
        if self.selection is not None:
            sel = self.selection
            out.append(f"selected   {len(sel.rows)} devices (group_locality={sel.policy}, level {sel.level}): "
                       f"{sel.summary}; {len(sel.left_out)} left out")
        if self.filled_pairs:
            out.append(f"estimated  {self.filled_pairs} pairs filled from labels and links, not measured")
        return out


def prepare_for_solve(
    fabric: Fabric,
    size: int,
    *,
    fill: bool = False,
    estimates: list[str] | None = None,
    learn: bool = True,
    group_locality: str | None = None,
    regions: str | None = None,
) -> Prepared:
    """Fill (when ``fill``) on the whole fabric, then choose ``size`` devices when the
    fabric has more (or ``regions``/``group_locality`` ask), then seed orders.

    Estimates learn from every measured pair, so filling comes before selecting; the
    count is of estimated pairs among the selected rows. UserError (one line) for bad
    flags, a fabric with unmeasured pairs and no ``fill``, or a policy that cannot be met.
    """
    from solver.estimate import (
        defaults_from_flags,
        estimated_pair_count,
        fill_missing,
        links_from_meta,
        measured_mask,
    )
    from solver.orders import seed_orders_for
    from solver.selection import POLICIES, SelectionError, select_devices

    if estimates and not fill:
        raise UserError("--estimate applies only with --fill-missing")
    if group_locality is not None and group_locality not in POLICIES:
        raise UserError(f"--group-locality: expected one of {', '.join(POLICIES)}, got {group_locality!r}")
    if fill:
        try:
            defaults = defaults_from_flags(list(estimates or []), learn)
        except ValueError as exc:
            raise UserError(f"--estimate: {exc}") from None
        try:
            fabric, _ = fill_missing(fabric, defaults)
        except ValueError as exc:
            raise UserError(str(exc)) from None
    selection = None
    if fabric.n > size or regions is not None or group_locality is not None:
        try:
            selection = select_devices(fabric, size, group_locality or "prefer", _regions(regions),
                                       torch_versions_of(fabric), links_from_meta(fabric))
        except SelectionError as exc:
            raise UserError(f"{fabric.source}: {exc}", ExitCode.FAILED) from None
        fabric = selected_fabric(fabric, selection)
    missing = fabric.missing_pairs()
    if missing:
        shown = ", ".join(f"{fabric.device_name(i)}-{fabric.device_name(j)}" for i, j in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise UserError(f"{fabric.source}: {len(missing)} unmeasured pairs ({shown}{more}); "
                        f"measure them or pass --fill-missing")
    try:
        count = estimated_pair_count(fabric)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return Prepared(fabric, selection, count, seed_orders_for(fabric, measured_mask(fabric)))


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.add_typer(labels_app, name="labels")
    app.command("select")(cli_errors(select))
