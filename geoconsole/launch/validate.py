"""Check the cost model against measured step time on the fleet.

The placement spec ("How to maintain it"): compare model ordering with measured step
time on at least the best solution, an alternate seed and a random map; a cost model
is useful only if it ranks real placements correctly, and a placement is rejected when
the model's ranking and the observed ranking disagree.

:func:`run_validation` launches the proxy step (``probes/validate_worker.py``, shipped
to every host, never imported here) once per placement with the same launch machinery
as ``launch``, and reports, per placement, the model score beside the measured median
step time, Spearman's rank correlation between the two, and the pairs whose order the
model gets wrong.

Payloads can be scaled down (``scale``) for a quick check. The model scores shown are
those of the scaled workload, i.e. of exactly what was measured; latency terms do not
shrink with the payload, so a scaled check says less about a latency-bound fabric.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from geoconsole.launch.plan import LaunchHost, build_plan
from solver.workload import Workload

WORKER_FILE = Path(__file__).resolve().parents[2] / "probes" / "validate_worker.py"
MARKER = "@@geoconsole-validate"
#: Relative difference below which two figures count as equal (measurement noise).
DEFAULT_TOLERANCE = 0.10


@dataclass
class Placement:
    """One measured placement."""

    name: str
    rank_map: list[int]
    model_s: float  #: Comm of the workload as measured (scaled payloads)
    model_full_s: float  #: Comm of the full workload
    steps_s: list[float] = field(default_factory=list)
    pipeline_s: list[float] = field(default_factory=list)
    data_p_s: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def measured_s(self) -> float | None:
        return float(np.median(self.steps_s)) if self.steps_s else None

    def to_json(self) -> dict[str, Any]:
        med = lambda xs: float(np.median(xs)) if xs else None  # noqa: E731
        return {
            "name": self.name, "rank_map": self.rank_map, "model_s": self.model_s,
            "model_full_s": self.model_full_s, "measured_median_s": self.measured_s,
            "measured_pipeline_s": med(self.pipeline_s), "measured_data_p_s": med(self.data_p_s),
            "steps_s": self.steps_s, "error": self.error,
        }


@dataclass
class ValidationReport:
    placements: list[Placement]
    workload: Workload  #: as measured (scaled)
    scale: float
    spearman: float | None
    disagreements: list[str]
    warning: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload.to_json(), "scale": self.scale,
            "placements": [p.to_json() for p in self.placements],
            "spearman": self.spearman, "disagreements": self.disagreements,
            "warning": self.warning,
        }


def check_scale(scale: float) -> None:
    """ValueError unless ``scale`` is a finite number > 0."""
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"--scale: must be a number > 0, got {scale!r}")


def scaled(workload: Workload, scale: float) -> Workload:
    check_scale(scale)
    return replace(workload, c_pp=workload.c_pp * scale, c_dp=workload.c_dp * scale)


def choose_placements(model, full_model, *, seed: int = 0, random_maps: int = 2,
                      solution: Sequence[int] | None = None,
                      solve_kwargs: Mapping[str, Any] | None = None) -> tuple[list[Placement], list[str]]:
    """The solution (given, or solved with ``seed``), an alternate seed, random rank maps.

    Solves on ``full_model`` (the placement an operator would launch); scores on both.
    Identical rank maps are measured once; the notes say which were merged.
    """
    from solver.search import solve

    kw = dict(solve_kwargs or {})
    cands: list[tuple[str, list[int]]] = []
    if solution is None:
        cands.append((f"solution (seed {seed})", solve(full_model, seed=seed, **kw).x.tolist()))
    else:
        cands.append(("solution (given)", [int(r) for r in solution]))
    cands.append((f"alternate seed {seed + 1}", solve(full_model, seed=seed + 1, **kw).x.tolist()))
    rng = np.random.default_rng([seed, 7])
    for k in range(random_maps):
        cands.append((f"random rank map {k + 1}", rng.permutation(model.n).tolist()))
    out, notes, seen = [], [], {}
    for name, rm in cands:
        key = tuple(rm)
        if key in seen:
            notes.append(f"{name}: same rank map as {seen[key]}, measured once")
            continue
        seen[key] = name
        out.append(Placement(name, rm, model.score_rank_map(rm).comm, full_model.score_rank_map(rm).comm))
    return out, notes


def compare(placements: Sequence[Placement], tolerance: float = DEFAULT_TOLERANCE) -> tuple[float | None, list[str]]:
    """Spearman's rho of model vs measured, and the pairs the model orders wrongly.

    A pair disagrees when the model calls one placement faster by more than
    ``tolerance`` (relative) and the measurement calls it slower by more than
    ``tolerance``: differences inside the tolerance are noise, not disagreement.
    """
    done = [p for p in placements if p.measured_s is not None]
    rho = None
    if len(done) >= 3:
        from scipy.stats import spearmanr

        model = [p.model_s for p in done]
        measured = [p.measured_s for p in done]
        if len(set(model)) > 1 and len(set(measured)) > 1:
            rho = float(spearmanr(model, measured).statistic)
    bad = []
    for i, a in enumerate(done):
        for b in done[i + 1:]:
            fast, slow = (a, b) if a.model_s < b.model_s else (b, a)
            if slow.model_s <= fast.model_s * (1 + tolerance):
                continue
            if fast.measured_s > slow.measured_s * (1 + tolerance):
                bad.append(
                    f"model ranks {fast.name} ({fast.model_s:.3f} s) ahead of {slow.name} "
                    f"({slow.model_s:.3f} s), but it measured {fast.measured_s:.3f} s vs "
                    f"{slow.measured_s:.3f} s"
                )
    return rho, bad


def warning_for(rho: float | None, bad: list[str]) -> str | None:
    if not bad:
        return None
    return ("the model's ordering DISAGREES with the measured step time "
            f"({len(bad)} pair(s){'' if rho is None else f', Spearman {rho:+.2f}'}): reject this "
            "placement, trace the real communication graph and re-derive the workload")


def worker_command(remote_path: str, workload: Workload, *, steps: int, warmup: int,
                   backend: str, timeout_s: float) -> list[str]:
    return [
        remote_path,
        f"--d-pp={workload.d_pp}", f"--d-dp={workload.d_dp}",
        f"--c-pp-bytes={int(round(workload.c_pp * 1e9))}",
        f"--c-dp-bytes={int(round(workload.c_dp * 1e9))}",
        f"--pp-messages={max(1, int(round(workload.pp_messages)))}",
        f"--dp-messages={max(1, int(round(workload.dp_messages)))}",
        f"--steps={steps}", f"--warmup={warmup}", f"--backend={backend}",
        f"--timeout={timeout_s:g}",
    ]


def worker_text() -> tuple[str, str]:
    """The worker's source and its remote path (named by content, so versions never mix)."""
    text = WORKER_FILE.read_text()
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return text, f".cache/geoconsole/validate_worker-{digest}.py"


def parse_worker_output(lines: Sequence[str]) -> dict[str, Any] | None:
    for line in reversed(lines):
        if line.startswith(MARKER + " "):
            try:
                doc = json.loads(line[len(MARKER) + 1:])
            except json.JSONDecodeError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


async def run_validation(
    fabric,
    workload: Workload,
    hosts: Mapping[str, LaunchHost],
    sessions: Mapping[str, Any],
    *,
    scale: float = 1.0,
    steps: int = 5,
    warmup: int = 1,
    seed: int = 0,
    random_maps: int = 2,
    solution: Sequence[int] | None = None,
    backend: str | None = None,
    port: int = 29500,
    timeout_s: float = 300.0,
    tolerance: float = DEFAULT_TOLERANCE,
    solve_kwargs: Mapping[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[ValidationReport, list[str]]:
    """Measure every chosen placement on the fleet; returns the report and notes.

    ``sessions`` maps host name to a session, or to a list of them
    (``launch_run.sessions_for_counts``) for hosts with more than 8 devices.
    """
    import asyncio

    from geoconsole.launch.plan import default_backend
    from geoconsole.launch.run import primary, resolve_interfaces, run_plan
    from solver.cost import CostModel

    say = progress or (lambda _m: None)
    measured_w = scaled(workload, scale)
    full_model = CostModel.from_fabric(fabric, workload)
    model = CostModel.from_fabric(fabric, measured_w)
    placements, notes = choose_placements(model, full_model, seed=seed, random_maps=random_maps,
                                          solution=solution, solve_kwargs=solve_kwargs)
    backend = backend or default_backend(fabric.devices)
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"--backend {backend!r}: validate runs on gloo or nccl")
    text, remote = worker_text()
    used = sorted({d.host for d in fabric.devices})
    await asyncio.gather(*(primary(sessions[h]).write_file(remote, text) for h in used))
    command = worker_command(remote, measured_w, steps=steps, warmup=warmup,
                             backend=backend, timeout_s=timeout_s)
    interfaces: dict[str, str] = {}
    for k, pl in enumerate(placements):
        plan = build_plan(pl.rank_map, fabric.devices, hosts, command, mode="env",
                          backend=backend, port=port + 2 * k, interfaces=interfaces)
        if backend == "gloo" and any(p.interface is None for p in plan.processes):
            interfaces.update(await resolve_interfaces(plan, sessions))
            plan = build_plan(pl.rank_map, fabric.devices, hosts, command, mode="env",
                              backend=backend, port=port + 2 * k, interfaces=interfaces)
        say(f"measuring {pl.name}: model {pl.model_s:.3f} s")
        out: list[str] = []
        errors: list[str] = []

        def sink(p, stream, line, out=out, errors=errors):
            (out if p.rank == 0 and stream == "stdout" else errors).append(f"[rank {p.rank} {p.host}] {line}")

        task = asyncio.ensure_future(run_plan(plan, sessions, sink=sink))
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout_s + 60)
        except asyncio.CancelledError:  # Ctrl-C: stop this placement's ranks, report the rest
            task.cancel()
            await task
            pl.error = "interrupted"
            break
        if not done:  # the worker's own timeouts did not end it: stop every rank
            task.cancel()
            await task
            pl.error = f"timed out after {timeout_s + 60:g} s"
            continue
        result = task.result()
        doc = parse_worker_output([line.split("] ", 1)[-1] for line in out])
        if not result.ok or doc is None:
            tail = (errors or out or ["no output"])[-1]
            pl.error = f"{result.reason or 'no measurement'}: {tail}"
            continue
        pl.steps_s = [float(x) for x in doc["step_s"]]
        pl.pipeline_s = [float(x) for x in doc["pipeline_s"]]
        pl.data_p_s = [float(x) for x in doc["data_p_s"]]
        say(f"  measured median {pl.measured_s:.3f} s")
    rho, bad = compare(placements, tolerance)
    report = ValidationReport(placements, measured_w, scale, rho, bad, warning_for(rho, bad))
    return report, notes


def format_report(report: ValidationReport, notes: Sequence[str] = ()) -> list[str]:
    w = report.workload
    lines = [
        f"proxy step: D_PP {w.d_pp} x D_DP {w.d_dp}, c_pp {w.c_pp:g} GB, c_dp {w.c_dp:g} GB"
        f" (payload scale {report.scale:g})",
        f"{'placement':<24} {'model s':>10} {'measured s':>11} {'pipeline s':>11} {'data-par s':>11}",
    ]
    for p in report.placements:
        j = p.to_json()
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        lines.append(
            f"{p.name:<24} {p.model_s:>10.3f} {fmt(j['measured_median_s']):>11} "
            f"{fmt(j['measured_pipeline_s']):>11} {fmt(j['measured_data_p_s']):>11}"
            + (f"  FAILED: {p.error}" if p.error else "")
        )
    lines += [f"note: {n}" for n in notes]
    rho = "n/a (needs 3 measured placements with distinct figures)" if report.spearman is None else f"{report.spearman:+.2f}"
    lines.append(f"Spearman rank correlation, model vs measured: {rho}")
    if report.warning:
        lines.append(f"WARNING: {report.warning}")
        lines += [f"  - {d}" for d in report.disagreements]
    else:
        lines.append("model ordering agrees with the measurement (within "
                     f"{DEFAULT_TOLERANCE:.0%} noise)")
    return lines
