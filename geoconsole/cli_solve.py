"""Headless sub-commands of the placement engine: solve, score, demo, selftest.

Only numpy/scipy, rich and the solver are imported here: ``solve`` never pulls in
asyncssh or textual.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from geoconsole.errors import UserError, cli_errors
from geoconsole.exitcodes import ExitCode
from solver.fabric import Fabric, FabricError, load_fabric
from solver.workload import Workload

MATRIX = typer.Option(..., "--matrix", "-m", help="Fabric JSON (labels, alpha_ms, beta_gbps).")
PP = typer.Option(None, "--pp", min=1, help="Pipeline stages D_PP (default: devices / D_DP, or 8).")
DP = typer.Option(None, "--dp", min=1, help="Data-parallel replicas D_DP (default: devices / D_PP).")
C_PP = typer.Option(..., "--c-pp", min=0.0, help="Activation payload per stage boundary, decimal GB.")
C_DP = typer.Option(..., "--c-dp", min=0.0, help="Stage gradient buffer entering the exchange, decimal GB.")
PP_MSG = typer.Option(1.0, "--pp-messages", min=0.0, help="Transfers carrying c_pp.")
DP_MSG = typer.Option(1.0, "--dp-messages", min=0.0, help="Transfers per peer per exchange round.")
JSON_OUT = typer.Option(False, "--json", help="Print one JSON document instead of text.")


def _load(path: Path) -> Fabric:
    try:
        return load_fabric(path)
    except FabricError as exc:
        raise UserError(str(exc)) from None


def _workload(fabric: Fabric, pp, dp, c_pp, c_dp, pp_messages, dp_messages) -> Workload:
    n = fabric.n
    if pp is not None and dp is not None and pp * dp < n:  # a subset is selected later
        n = pp * dp
    if pp is None and dp is None:
        pp = 8 if n % 8 == 0 else n
    if pp is None:
        pp = n // dp if n % dp == 0 else 0
    if dp is None:
        dp = n // pp if n % pp == 0 else 0
    if pp < 1 or dp < 1 or pp * dp != n:
        raise UserError(
            f"{fabric.source}: {fabric.n} devices cannot hold D_PP {pp or '?'} x D_DP {dp or '?'}; "
            f"choose --pp and --dp with D_PP x D_DP <= {fabric.n}"
        )
    try:
        return Workload(pp, dp, c_pp, c_dp, pp_messages, dp_messages)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _prepare(fabric: Fabric, workload: Workload, *, group_locality, regions, fill, estimates, learn):
    """Select the devices that take part and fill unmeasured pairs, as asked.

    Returns ``(fabric, selection or None, pairs filled)``.
    """
    selection = None
    if fabric.n > workload.n_devices or group_locality is not None or regions:
        from geoconsole.cli_labels import selected_fabric
        from solver.selection import select_devices

        wanted = [r.strip() for r in (regions or "").split(",") if r.strip()] or None
        try:
            selection = select_devices(fabric, workload.n_devices, group_locality or "prefer", wanted)
        except ValueError as exc:
            raise UserError(f"{fabric.source}: {exc}") from None
        fabric = selected_fabric(fabric, selection)
    filled = 0
    if fill:
        from solver.estimate import defaults_from_flags, fill_missing

        try:
            fabric, filled = fill_missing(fabric, defaults_from_flags(list(estimates or []), learn=learn))
        except ValueError as exc:
            raise UserError(f"--estimate: {exc}") from None
    elif estimates:
        raise UserError("--estimate: needs --fill-missing")
    return fabric, selection, filled


def _model(fabric: Fabric, workload: Workload):
    from solver.cost import CostModel

    try:
        return CostModel.from_fabric(fabric, workload)
    except ValueError as exc:
        raise UserError(str(exc)) from None


@contextmanager
def _interruptible():
    """While active, Ctrl-C asks the solver to stop (via its callback) instead of killing it."""
    state = {"stop": False}

    def handler(signum, frame):
        if state["stop"]:  # a second Ctrl-C: stop at once
            raise KeyboardInterrupt
        state["stop"] = True

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread (tests): no handler
        previous = None
    try:
        yield state
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def run_solve(model, *, seed, budget, restarts, time_limit, progress: bool, seed_orders=None):
    """Solve with an optional rich progress bar on stderr; Ctrl-C keeps the best so far."""
    from solver.search import solve

    with _interruptible() as state:
        bar = task = None
        if progress:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            bar = Progress(
                TextColumn("solving"), BarColumn(), TextColumn("{task.fields[best]}"),
                TimeElapsedColumn(), console=Console(stderr=True), transient=True,
            )
            bar.start()
            task = bar.add_task("solve", total=1.0, best="")

        def callback(p):
            if bar is not None:
                done = p.nfev / max(p.budget, 1)
                if time_limit:
                    done = max(done, p.elapsed_s / time_limit)
                bar.update(task, completed=min(done, 1.0), best=f"best {p.fun:.3f} s ({p.phase})")
            if state["stop"]:
                raise StopIteration

        try:
            return solve(model, seed=seed, budget=budget, restarts=restarts,
                         time_limit=time_limit, callback=callback, seed_orders=seed_orders)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        finally:
            if bar is not None:
                bar.stop()


def baselines_for(model, samples: int, seed: int):
    from solver.baselines import random_rank_maps, random_stage_groups

    if samples <= 0:
        return []
    return [random_stage_groups(model, samples, seed), random_rank_maps(model, samples, seed)]


def _emit(doc: dict, as_json: bool, text: str) -> None:
    typer.echo(json.dumps(doc, indent=1) if as_json else text)


def solve_cmd(
    matrix: Path = MATRIX,
    pp: Optional[int] = PP,
    dp: Optional[int] = DP,
    c_pp: float = C_PP,
    c_dp: float = C_DP,
    pp_messages: float = PP_MSG,
    dp_messages: float = DP_MSG,
    baseline_samples: int = typer.Option(200, "--baseline-samples", min=0, help="Random placements per baseline."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same inputs + seed = same output)."),
    budget: Optional[int] = typer.Option(None, "--budget", min=0, help="Most swaps to score (default grows with N)."),
    restarts: int = typer.Option(8, "--restarts", min=0, help="Perturbed and random restarts after the topology seeds."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", min=0.001, help="Wall-clock limit in seconds; best so far is kept."),
    as_json: bool = JSON_OUT,
    record: Optional[Path] = typer.Option(None, "--record", help="Append a run record (JSON line) to this file."),
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress bar on stderr (default: when it is a terminal)."),
    group_locality: Optional[str] = typer.Option(None, "--group-locality", help="When the fabric has more devices than D_PP x D_DP: prefer (default), network_group, zone, region or any."),
    regions: Optional[str] = typer.Option(None, "--regions", help="Only devices whose region or zone is in this comma-separated list."),
    fill_missing: bool = typer.Option(False, "--fill-missing", help="Estimate unmeasured pairs from labels and topology (marked estimated)."),
    estimate: Optional[list[str]] = typer.Option(None, "--estimate", help="LEVEL=ALPHA_MS,BETA_GBPS default for estimates (host, network_group, zone, region, any, or a link class NV1/PIX/PXB/PHB/NODE/SYS); repeatable."),
    learn: bool = typer.Option(True, "--learn/--no-learn", help="Estimate from measured pairs at the same level before the defaults."),
) -> None:
    """Solve the placement: print Comm, baselines, lower bound, locality and rank_map=(...)."""
    from solver.bounds import lower_bound
    from solver.orders import seed_orders_for

    from geoconsole.report import format_solve, solve_json

    fabric = _load(matrix)
    workload = _workload(fabric, pp, dp, c_pp, c_dp, pp_messages, dp_messages)
    fabric, selection, filled = _prepare(fabric, workload, group_locality=group_locality,
                                         regions=regions, fill=fill_missing, estimates=estimate,
                                         learn=learn)
    model = _model(fabric, workload)
    show = sys.stderr.isatty() if progress is None else progress
    result = run_solve(model, seed=seed, budget=budget, restarts=restarts,
                       time_limit=time_limit, progress=show, seed_orders=seed_orders_for(fabric))
    doc = solve_json(fabric, model, result, baselines_for(model, baseline_samples, seed),
                     lower_bound(model))
    doc["estimated_pairs"] = filled
    doc["inferred_pairs"] = _inferred_count(fabric)
    if selection is not None:
        doc["selection"] = selection.to_json()
    inferred = (f"inferred   {doc['inferred_pairs']} pair(s) inferred from sampled pairs of the same hosts "
                "(not measured)\n" if doc["inferred_pairs"] else "")
    _emit(doc, as_json, _selection_lines(selection, filled) + inferred + format_solve(doc))
    if record is not None:
        _record_solve(record, doc)
    if result.status == 3:  # cancelled by Ctrl-C: the best so far was printed
        raise typer.Exit(int(ExitCode.INTERRUPTED))


def _inferred_count(fabric: Fabric) -> int:
    from solver.estimate import inferred_pair_count

    try:
        return inferred_pair_count(fabric)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _selection_lines(selection, filled: int) -> str:
    lines = []
    if selection is not None:
        lines.append(f"selected   {len(selection.rows)} devices ({selection.policy}): {selection.summary}")
        reasons: dict[str, int] = {}
        for _, why in selection.left_out:
            reasons[why] = reasons.get(why, 0) + 1
        for why, count in sorted(reasons.items()):
            lines.append(f"left out   {count} device(s): {why}")
    if filled:
        lines.append(f"estimated  {filled} unmeasured pair(s) filled from labels/topology (marked estimated)")
    return "".join(line + "\n" for line in lines)


def _record_solve(path: Path, doc: dict) -> None:
    from geoconsole.records import append_record

    record = {
        "kind": "solve",
        "matrix_sha256": doc["fabric"]["sha256"],
        "matrix": doc["fabric"]["source"],
        "workload": doc["workload"],
        "seed": doc["search"]["seed"],
        "budget": doc["search"]["budget"],
        "restarts": doc["search"]["restarts"],
        "status": doc["search"]["message"],
        "score_s": doc["score"]["comm_s"],
        "data_p_s": doc["score"]["data_p_s"],
        "pipeline_s": doc["score"]["pipeline_s"],
        "lower_bound_s": doc["lower_bound"]["comm_s"],
        "baselines": doc["baselines"],
        "rank_map": doc["rank_map"],
        "estimated_pairs": doc.get("estimated_pairs", 0),
    }
    if "selection" in doc:
        record["selection"] = doc["selection"]
    try:
        append_record(path, record)
    except OSError as exc:
        raise UserError(f"{path}: cannot write run record: {exc.strerror or exc}") from None


_RANK_MAP_TEXT = re.compile(r"rank_map=\(([^)]*)\)")


def rank_map_argument(value: str) -> tuple[str, str]:
    """``(text, source)`` of a --rank-map value: the value itself, or the file it names."""
    if not re.fullmatch(r"[\d,\s]+", value) and "rank_map=" not in value:
        path = Path(value)
        if not path.is_file():
            raise UserError(f"{value}: no such rank map file")
        return path.read_text(), str(path)
    return value, "--rank-map"


def parse_rank_map(text: str, source: str) -> list[int]:
    """Rank map from ``rank_map=(...)``, a JSON list, solve's --json output, or "0,1,2"."""
    text = text.strip()
    found = _RANK_MAP_TEXT.search(text)
    try:
        if found:
            return [int(x) for x in found.group(1).replace(",", " ").split()]
        if text.startswith("[") or text.startswith("{"):
            doc = json.loads(text)
            doc = doc.get("rank_map") if isinstance(doc, dict) else doc
            if not isinstance(doc, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in doc):
                raise ValueError
            return doc
        return [int(x) for x in text.replace(",", " ").split()]
    except (ValueError, json.JSONDecodeError):
        raise UserError(f"{source}: expected rank_map=(...), a JSON list of ranks, or solve --json output") from None


def score_cmd(
    matrix: Path = MATRIX,
    rank_map: str = typer.Option(..., "--rank-map", "-r", help="rank_map=(...) / '0,1,..' / a file holding either (or solve --json output)."),
    pp: Optional[int] = PP,
    dp: Optional[int] = DP,
    c_pp: float = C_PP,
    c_dp: float = C_DP,
    pp_messages: float = PP_MSG,
    dp_messages: float = DP_MSG,
    as_json: bool = JSON_OUT,
) -> None:
    """Score a given rank map on a fabric, as launched (to compare placements)."""
    from solver.cost import grid_from_rank_map

    from geoconsole.report import format_rank_map, format_score, score_json

    fabric = _load(matrix)
    workload = _workload(fabric, pp, dp, c_pp, c_dp, pp_messages, dp_messages)
    model = _model(fabric, workload)
    text, source = rank_map_argument(rank_map)
    ranks = parse_rank_map(text, source)
    try:
        grid_from_rank_map(ranks, workload.d_pp, workload.d_dp)
    except ValueError as exc:
        raise UserError(f"{source}: {exc}") from None
    doc = score_json(fabric, model.score_rank_map(ranks))
    _emit(doc, as_json, "\n".join(format_score(doc) + [format_rank_map(doc["rank_map"])]))


def demo_cmd(
    baseline_samples: int = typer.Option(200, "--baseline-samples", min=0, help="Random placements per baseline."),
    seed: int = typer.Option(7, "--seed", help="Random seed."),
    as_json: bool = JSON_OUT,
) -> None:
    """Solve the built-in world-wide DT-FM fabric and a synthetic two-datacenter one."""
    from solver.bounds import lower_bound

    from geoconsole.demo_fabrics import DEMOS
    from geoconsole.report import solve_json

    docs = {}
    for name, (make, workload) in DEMOS.items():
        fabric = make()
        model = _model(fabric, workload)
        result = run_solve(model, seed=seed, budget=None, restarts=8, time_limit=None, progress=False)
        docs[name] = solve_json(fabric, model, result, baselines_for(model, baseline_samples, seed),
                                lower_bound(model))
        docs[name]["synthetic"] = bool(fabric.meta.get("synthetic"))
    if as_json:
        typer.echo(json.dumps(docs, indent=1))
        return
    for name, doc in docs.items():
        tag = "  [SYNTHETIC example, made up for the demo]" if doc["synthetic"] else ""
        typer.echo(f"{name}{tag}: {doc['fabric']['source']}")
        typer.echo(f"  placement score  {doc['score']['comm_s']:.2f} s")
        for b in doc["baselines"]:
            typer.echo(f"  {b['name']:<20} median {b['median']:.2f} s  ->  {b['ratio_median']:.2f}x")
        typer.echo(f"  lower bound      {doc['lower_bound']['comm_s']:.2f} s")


def selftest_cmd() -> None:
    """Check the exact solvers against brute force, symmetrisation and input validation."""
    from geoconsole.selftest import run_selftest

    ok = run_selftest(typer.echo)
    if not ok:
        raise typer.Exit(int(ExitCode.FAILED))


def register(app: typer.Typer) -> None:
    """Add solve, score, demo and selftest to ``app``."""
    app.command("solve")(cli_errors(solve_cmd))
    app.command("score")(cli_errors(score_cmd))
    app.command("demo")(cli_errors(demo_cmd))
    app.command("selftest")(cli_errors(selftest_cmd))
