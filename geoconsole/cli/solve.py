"""Headless sub-commands of the placement engine: solve, score, demo, selftest.

Only numpy/scipy, rich and the solver are imported here: ``solve`` never pulls in
asyncssh or textual.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer

from geoconsole.cli.advice import COMPARE_SEEDS, EXCLUDE, NO_ADVICE, STEP_COMPUTE
from geoconsole.cli.errors import UserError, cli_errors, silence_stdout
from geoconsole.cli.exitcodes import ExitCode

from geoconsole.cli.options import (C_DP, C_PP, DP, DP_MSG, ESTIMATE, FILL_MISSING, GROUP_LOCALITY,
                                    JSON_OUT, LEARN, MATRIX, PP, PP_MSG, RANK_MAP, RECORD, REGIONS,
                                    DP_OF_MAP, PP_OF_MAP, check_rank_map, load_fabric)
from geoconsole.prepare import workload_for
from geoconsole.solving import MAX_BASELINE_SAMPLES, MAX_BUDGET, MAX_RESTARTS, MAX_SEED, MAX_TIME_LIMIT_S, MIN_TIME_LIMIT_S


def prepare_flags(fabric, workload, *, group_locality, regions, fill, estimates, learn, exclude=None):
    """``prepare_for_solve`` from the flags (solve, validate); errors carry their flag."""
    from geoconsole.prepare import parse_regions, prepare_for_solve

    if estimates and not fill:
        raise UserError("--estimate: applies only with --fill-missing")
    return prepare_for_solve(fabric, workload.n_devices, fill_missing=fill, estimates=estimates or (),
                             learn=learn, group_locality=group_locality, regions=parse_regions(regions),
                             exclude=exclude or ())


@contextmanager
def _interruptible():
    """While active, Ctrl-C (SIGINT) or SIGTERM asks the work to stop (``state["stop"]``;
    the solver sees it through its callback) instead of killing it, so the best so far is
    printed and recorded. The wind-down is bounded, and a second signal during it only
    says so; a third quits at once, without the result.

    Signals are counted by delivery, not by handler call: two that arrive while the main
    thread is inside one long C call (a loaded machine, a quick double tap) run the
    handler once, so each delivery also writes a byte to a wakeup pipe. The count is the
    larger of the bytes read and the handler's calls: a call may read the byte of a
    delivery whose own call comes next, or run before its byte is written."""
    state = {"stop": False, "signals": 0}
    counted = {"bytes": 0, "calls": 0}
    wakeup = _wakeup_pipe()

    def handler(signum, frame):
        counted["bytes"] += _deliveries(wakeup)
        counted["calls"] += 1
        before, state["signals"] = state["signals"], max(counted["bytes"], counted["calls"])
        state["stop"] = True
        if before < 2 and state["signals"] == 2:  # os.write: print() here could re-enter a write under way
            os.write(2, b"stopping: the best placement so far is printed in a moment "
                        b"(Ctrl-C again quits without it)\n")
        elif state["signals"] > 2:
            raise KeyboardInterrupt

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[signum] = signal.signal(signum, handler)
        except ValueError:  # not the main thread (tests): no handler
            pass
    try:
        yield state
    finally:
        for signum, old in previous.items():
            # once stopped, the process is on its way out with exit 130: a second SIGTERM
            # a moment after the first (a group kill and a timeout) ended it as killed
            signal.signal(signum, signal.SIG_IGN if state["stop"] else old)
        if wakeup is not None:
            signal.set_wakeup_fd(wakeup[2])
            os.close(wakeup[0])
            os.close(wakeup[1])


def _wakeup_pipe() -> tuple[int, int, int] | None:
    """``(read end, write end, previous wakeup fd)`` of a non-blocking pipe set as the
    signal wakeup fd (one byte, the signal number, per delivery); None off the main
    thread or where it cannot be made."""
    try:
        r, w = os.pipe()
    except OSError:
        return None
    for fd in (r, w):
        os.set_blocking(fd, False)
    try:
        return r, w, signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        os.close(r)
        os.close(w)
        return None


def _deliveries(wakeup: tuple[int, int, int] | None) -> int:
    """SIGINT and SIGTERM deliveries written to the wakeup pipe since the last call (0
    when none is there yet); 1 without a pipe (one per call, as Python calls it)."""
    if wakeup is None:
        return 1
    try:
        data = os.read(wakeup[0], 256)
    except OSError:  # nothing there (BlockingIOError) or closed
        return 0
    return sum(b in (signal.SIGINT, signal.SIGTERM) for b in data)


def run_solve(model, options, *, progress: bool, seed_orders=None, state=None):
    """The core solve with an optional rich progress bar on stderr.

    Ctrl-C asks the search to stop (the best so far is kept) and skips the baselines
    still to draw (``_interruptible``; ``state``: a caller's own, already active).
    """
    from contextlib import nullcontext

    from geoconsole.solving import run_placement

    with (nullcontext(state) if state is not None else _interruptible()) as state:
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
                if options.time_limit:
                    done = max(done, p.elapsed_s / options.time_limit)
                floor = f", bound {p.bound:.3f}" if getattr(p, "bound", None) is not None else ""
                bar.update(task, completed=min(done, 1.0), best=f"best {p.fun:.3f} s{floor} ({p.phase})")

        try:
            return run_placement(model, options, seed_orders=seed_orders, callback=callback,
                                 should_stop=lambda: state["stop"])
        finally:
            if bar is not None:
                bar.stop()


def _emit(doc: dict, as_json: bool, text: str) -> str | None:
    """Print the result; why standard output failed (full disk, closed pipe, closed by
    the shell: cli_errors' ClosedStdout), or None."""
    try:
        typer.echo(json.dumps(doc, indent=1) if as_json else text)
        return None
    except OSError as exc:
        silence_stdout()
        return exc.strerror or str(exc)


def solve_command(
    matrix: Path = MATRIX,
    pp: Optional[int] = PP,
    dp: Optional[int] = DP,
    c_pp: float = C_PP,
    c_dp: float = C_DP,
    pp_messages: float = PP_MSG,
    dp_messages: float = DP_MSG,
    baseline_samples: int = typer.Option(200, "--baseline-samples", min=0, max=MAX_BASELINE_SAMPLES,
                                         help="Random placements per baseline (they count against --time-limit)."),
    seed: int = typer.Option(0, "--seed", min=0, max=MAX_SEED, help="Random seed (same inputs + seed = same output)."),
    budget: Optional[int] = typer.Option(None, "--budget", min=0, max=MAX_BUDGET, help="Most swaps to score (default grows with N)."),
    restarts: int = typer.Option(3, "--restarts", min=0, max=MAX_RESTARTS, help="Without --time-limit: stop after this many anytime rounds without improvement (0: topology starts only)."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", min=MIN_TIME_LIMIT_S, max=MAX_TIME_LIMIT_S, help="Keep improving for this many seconds, then print the best."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, max=1024, help="Search processes (default: the cores this process may use)."),
    as_json: bool = JSON_OUT,
    record: Optional[Path] = RECORD,
    progress: Optional[bool] = typer.Option(None, "--progress/--no-progress", help="Progress bar on stderr (default: when it is a terminal)."),
    group_locality: Optional[str] = GROUP_LOCALITY,
    regions: Optional[str] = REGIONS,
    fill_missing: bool = FILL_MISSING,
    estimate: Optional[list[str]] = ESTIMATE,
    learn: bool = LEARN,
    exclude: Optional[list[str]] = EXCLUDE,
    compare_seeds: int = COMPARE_SEEDS,
    step_compute_s: Optional[float] = STEP_COMPUTE,
    no_advice: bool = NO_ADVICE,
) -> None:
    """Solve the placement: print Comm, baselines, lower bound, locality and rank_map=(...)."""
    from geoconsole.report import format_solve, solve_json
    from geoconsole.solving import SolveOptions, cost_model

    if seed + compare_seeds - 1 > MAX_SEED:  # the compared seeds must be ones --seed takes
        raise UserError(f"--compare-seeds {compare_seeds}: with --seed {seed} it runs seeds up to "
                        f"{seed + compare_seeds - 1}, past the largest seed {MAX_SEED}")
    if record is not None:  # before the search, not after it
        from geoconsole.records import check_record_path

        check_record_path(record, [("--matrix", matrix)])
    fabric = load_fabric(matrix)
    workload = workload_for(fabric.n, str(fabric.source), pp, dp, c_pp, c_dp, pp_messages, dp_messages)
    prepared = prepare_flags(fabric, workload, group_locality=group_locality, regions=regions,
                             fill=fill_missing, estimates=estimate, learn=learn, exclude=exclude)
    model = cost_model(prepared.fabric, workload)
    show = sys.stderr.isatty() if progress is None else progress
    options = SolveOptions(seed, budget, restarts, time_limit, baseline_samples, workers)
    prepare = dict(group_locality=group_locality, regions=regions, fill_missing=fill_missing,
                   estimates=estimate or (), learn=learn, exclude=exclude or ())
    with _interruptible() as state:  # through the advice's reruns and the output
        outcome = run_solve(model, options, progress=show, seed_orders=prepared.seed_orders, state=state)
        doc = solve_json(prepared.fabric, model, outcome.result, outcome.baselines, outcome.bound,
                         samples_asked=baseline_samples)
        doc.update(prepared.to_json())
        doc["baselines_cut"] = outcome.baselines_cut
        if outcome.baselines_cut:
            typer.echo("note: random baselines stopped early (Ctrl-C or --time-limit): fewer samples than asked",
                       err=True)
        if not no_advice:
            doc.update(_solve_advice(fabric, prepared, model, outcome, options, compare_seeds, step_compute_s,
                                     prepare, lambda: state["stop"]))
        text = "".join(line + "\n" for line in prepared.lines()) + format_solve(doc)
        lost = _emit(doc, as_json, text)
        if record is not None:  # written even when standard output failed
            _record_solve(record, doc, matrix)
        if lost is not None:
            kept = f"the run record in {record} holds it" if record is not None else "rerun with --record to keep it"
            raise UserError(f"standard output: cannot write the result ({lost}); {kept}", ExitCode.FAILED)
        if outcome.stopped or state["stop"]:  # Ctrl-C: the best so far was printed and recorded
            raise typer.Exit(int(ExitCode.INTERRUPTED))


def _solve_advice(fabric, prepared, model, outcome, options, compare_seeds, step_compute_s, prepare,
                  should_stop=lambda: False) -> dict:
    """``{"advice": [...]}`` (and ``"seeds"`` with --compare-seeds) for the solve's document."""
    from geoconsole import advice
    from geoconsole.cli.advice import with_hints
    from geoconsole.prepare import parse_regions

    comms = {}
    if compare_seeds > 1 and not should_stop():
        comms = {options.seed: float(outcome.result.fun), **advice.rerun_seeds(
            model, range(options.seed + 1, options.seed + compare_seeds), budget=options.budget,
            restarts=options.restarts, seed_orders=prepared.seed_orders, time_limit=options.time_limit,
            workers=options.workers, should_stop=should_stop)}
    prepare["regions"] = parse_regions(prepare["regions"])
    items = advice.for_solve(prepared.fabric, model, outcome.result, outcome.baselines, outcome.bound,
                             seed_comms=comms, step_compute_s=step_compute_s, check_device=not should_stop(),
                             without=advice.spare_without(fabric, model.workload, **prepare),
                             time_limit=options.time_limit)
    doc: dict = {"advice": with_hints(items)}
    if comms:
        doc["seeds"] = [{"seed": k, "comm_s": v} for k, v in sorted(comms.items())]
    return doc


def _record_solve(path: Path, doc: dict, matrix: Path) -> None:
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
        "lower_bound_method": doc["lower_bound"]["method"],
        "lower_bound_elapsed_s": doc["lower_bound"]["elapsed_s"],
        "workers": doc["search"]["workers"],
        "found_by": doc["search"]["best_start"],
        "trace": doc["search"]["trace"],
        "baselines": doc["baselines"],
        "rank_map": doc["rank_map"],
        "estimated_pairs": doc.get("estimated_pairs", 0),
    }
    if "selection" in doc:
        record["selection"] = doc["selection"]
    for key in ("advice", "seeds"):  # the spec: record the seed distribution with the run
        if key in doc:
            record[key] = doc[key]
    try:
        append_record(path, record, [("--matrix", matrix)])
    except OSError as exc:
        raise UserError(f"{path}: cannot write run record: {exc.strerror or exc}") from None


def score_command(
    matrix: Path = MATRIX,
    rank_map: str = RANK_MAP,
    pp: Optional[int] = PP_OF_MAP,
    dp: Optional[int] = DP_OF_MAP,
    c_pp: float = C_PP,
    c_dp: float = C_DP,
    pp_messages: float = PP_MSG,
    dp_messages: float = DP_MSG,
    as_json: bool = JSON_OUT,
) -> None:
    """Score a given rank map on a fabric, as launched (to compare placements)."""

    from geoconsole.report import format_rank_map, format_score, score_json

    from geoconsole.rank_maps import shape_for, solution_with_document
    from geoconsole.solving import cost_model
    from solver.files import shown

    fabric = load_fabric(matrix)
    fabric, ranks, doc = solution_with_document(rank_map, fabric)
    pp, dp = shape_for(doc, shown(rank_map), pp, dp)  # a solve --json document: its shape
    workload = workload_for(fabric.n, str(fabric.source), pp, dp, c_pp, c_dp, pp_messages, dp_messages)
    model = cost_model(fabric, workload)
    check_rank_map(ranks, workload)
    doc = score_json(fabric, model.score_rank_map(ranks))
    # echoed, not _emit()ted: a failed write is the command's failure (cli_errors: exit 1)
    typer.echo(json.dumps(doc, indent=1) if as_json else "\n".join(format_score(doc) + [format_rank_map(doc["rank_map"])]))


def demo_command(
    baseline_samples: int = typer.Option(200, "--baseline-samples", min=0, max=MAX_BASELINE_SAMPLES,
                                         help="Random placements per baseline."),
    seed: int = typer.Option(7, "--seed", min=0, max=MAX_SEED, help="Random seed."),
    as_json: bool = JSON_OUT,
) -> None:
    """Solve the built-in world-wide DT-FM fabric and a synthetic two-datacenter one."""
    from geoconsole.demo_fabrics import DEMOS
    from geoconsole.prepare import prepare_for_solve
    from geoconsole.report import gap_words, solve_json
    from geoconsole.solving import SolveOptions, cost_model

    docs = {}
    with _interruptible() as state:  # Ctrl-C or SIGTERM: print what is done, exit 130
        for name, (make, workload) in DEMOS.items():
            if state["stop"]:
                break
            prepared = prepare_for_solve(make(), workload.n_devices)
            fabric = prepared.fabric
            model = cost_model(fabric, workload)
            # topology starts only: the demo shows the reference layouts, at once
            outcome = run_solve(model, SolveOptions(seed=seed, restarts=0, baseline_samples=baseline_samples),
                                progress=False, seed_orders=prepared.seed_orders, state=state)
            docs[name] = solve_json(fabric, model, outcome.result, outcome.baselines, outcome.bound,
                                    samples_asked=baseline_samples)
            docs[name]["synthetic"] = bool(fabric.meta.get("synthetic"))
            docs[name]["baselines_cut"] = outcome.baselines_cut
    if as_json:
        typer.echo(json.dumps(docs, indent=1))
    else:
        for name, doc in docs.items():
            tag = "  [SYNTHETIC example, made up for the demo]" if doc["synthetic"] else ""
            typer.echo(f"{name}{tag}: {doc['fabric']['source']}")
            typer.echo(f"  placement score  {doc['score']['comm_s']:.2f} s")
            for b in doc["baselines"]:
                typer.echo(f"  {b['name']:<20} median {b['median']:.2f} s  ->  {b['ratio_median']:.2f}x")
            typer.echo(f"  lower bound      {doc['lower_bound']['comm_s']:.2f} s; {gap_words(doc['lower_bound'])}")
    if state["stop"]:
        skipped = [name for name in DEMOS if name not in docs]
        left = f"; not run: {', '.join(skipped)}" if skipped else ""
        typer.echo(f"interrupted: baselines stopped early{left}", err=True)
        raise typer.Exit(int(ExitCode.INTERRUPTED))


def selftest_command() -> None:
    """Check the exact solvers against brute force, symmetrisation and input validation."""
    from geoconsole.selftest import run_selftest

    ok = run_selftest(typer.echo)
    if not ok:
        raise typer.Exit(int(ExitCode.FAILED))


def register(app: typer.Typer) -> None:
    """Add solve, score, demo and selftest to ``app``."""
    app.command("solve")(cli_errors(solve_command))
    app.command("score")(cli_errors(score_command))
    app.command("demo")(cli_errors(demo_command))
    app.command("selftest")(cli_errors(selftest_command))
