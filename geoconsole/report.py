"""Solve reports: one JSON document (for --json, records and the console) and its text form."""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

import numpy as np

from solver.baselines import Distribution
from solver.bounds import Bound
from solver.cost import CostModel, Score
from solver.fabric import Fabric
from solver.search import UNLIMITED_BUDGET, PlacementResult


def label_summary(fabric: Fabric, devices: Sequence[int]) -> str:
    """Where a set of devices lies, by fabric label ("same label Oregon", "spans 3 labels")."""
    counts = Counter(fabric.labels[d] for d in devices)
    if len(counts) == 1:
        return f"same label {next(iter(counts))}"
    parts = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    return f"spans {len(counts)} labels ({parts})"


def locality_summaries(fabric: Fabric, grid: np.ndarray) -> tuple[list[str], list[str]]:
    """Words for each stage group (column) and each pipeline (row) of a grid."""
    try:  # region/zone/network-group words when the fabric knows its devices
        from solver.locality import solution_locality

        if fabric.devices is not None:
            words = solution_locality(fabric.devices, grid)
            return list(words["stage_groups"]), list(words["pipelines"])
    except ImportError:
        pass
    stages = [label_summary(fabric, grid[:, s]) for s in range(grid.shape[1])]
    pipes = [label_summary(fabric, grid[r, :]) for r in range(grid.shape[0])]
    return stages, pipes


def score_json(fabric: Fabric, score: Score) -> dict[str, Any]:
    stages, pipes = locality_summaries(fabric, score.grid)
    grid = score.grid
    return {
        "comm_s": score.comm,
        "data_p_s": score.data_p,
        "pipeline_s": score.pipeline,
        "worst_device": {"row": score.worst_device, "name": fabric.device_name(score.worst_device)},
        "stage_groups": [
            {
                "stage": s,
                "devices": grid[:, s].tolist(),
                "names": [fabric.device_name(d) for d in grid[:, s]],
                "data_p_s": float(score.stage_data_p[s]),
                "locality": stages[s],
            }
            for s in range(grid.shape[1])
        ],
        "pipeline_edges": [
            {
                "from_stage": s,
                "to_stage": s + 1,
                "cost_s": float(score.edge_s[s]),
                "bottleneck": [fabric.device_name(a), fabric.device_name(b)],
            }
            for s, (a, b) in enumerate(score.bottlenecks)
        ],
        "pipelines": [
            {"replica": r, "devices": grid[r].tolist(), "locality": pipes[r]}
            for r in range(grid.shape[0])
        ],
        "rank_map": score.rank_map.tolist(),
    }


def solve_json(
    fabric: Fabric,
    model: CostModel,
    result: PlacementResult,
    baselines: list[Distribution],
    bound: Bound,
    samples_asked: int | None = None,
) -> dict[str, Any]:
    """Everything ``solve`` reports, as plain JSON types; ``samples_asked``: the random
    placements asked for each baseline (``samples_asked`` in each, so that one the time
    limit or a stop cut short says so)."""
    doc = {
        "fabric": {"source": fabric.source, "devices": fabric.n, "sha256": fabric.sha256()},
        "workload": model.workload.to_json(),
        "score": score_json(fabric, result.score),
        "baselines": [
            {**d.to_json(), "ratio_median": d.median / result.fun if result.fun > 0 else None,
             **({"samples_asked": samples_asked} if samples_asked is not None else {})}
            for d in baselines
        ],
        "lower_bound": {
            "comm_s": min(bound.value, result.fun),  # a bound meeting Comm may exceed it by rounding
            "data_p_s": bound.data_p,
            "pipeline_s": bound.pipeline,
            "method": bound.method,
            "elapsed_s": round(bound.elapsed_s, 4),
            "gap": bound.gap(result.fun),  # (Comm - bound) / Comm
            "at_most_above": bound.above(result.fun) if bound.value > 0 else None,  # Comm / bound - 1
        },
        "search": {
            "status": int(result.status),
            "message": result.message,
            "seed": result.seed,
            "budget": result.budget if result.budget < UNLIMITED_BUDGET else None,  # None: a time limit only
            "restarts": result.restarts,
            "nit": result.nit,
            "nfev": result.nfev,
            "elapsed_s": round(result.elapsed_s, 4),
            "best_start": result.start,
            "worker": result.worker,
            "workers": result.workers,
            "rounds": result.rounds,
            "worker_errors": list(result.worker_errors),
            "exact_pipeline_order": result.exact_path,
            "trace": [[round(t, 4), v] for t, v in result.history],  # (elapsed s, best Comm)
        },
        "rank_map": result.x.tolist(),
    }
    return doc


def gap_words(b: dict[str, Any]) -> str:
    """The gap in both conventions, each named: (Comm - bound) / Comm and Comm / bound - 1."""
    if b["gap"] <= 1e-9:
        return "Comm equals the bound: optimal"
    above = "unbounded" if b["at_most_above"] is None else f"{100 * b['at_most_above']:.1f}%"
    return f"gap (Comm - bound) / Comm = {100 * b['gap']:.1f}%; Comm is at most {above} above the optimum"


def _trace_points(trace: list, keep: int = 8) -> list:
    """At most ``keep`` points of the anytime trace: the first, the last and some between."""
    if len(trace) <= keep:
        return trace
    idx = sorted({round(k * (len(trace) - 1) / (keep - 1)) for k in range(keep)})
    return [trace[i] for i in idx]


def format_rank_map(rank_map: Sequence[int]) -> str:
    return "rank_map=(" + " ".join(str(int(x)) for x in rank_map) + ")"


def format_score(doc: dict[str, Any]) -> list[str]:
    """Text lines for a score document (``score_json``)."""
    lines = [
        f"Comm       {doc['comm_s']:.3f} s  (DataP {doc['data_p_s']:.3f} s + "
        f"Pipeline {doc['pipeline_s']:.3f} s)",
        f"DataP is set by {doc['worst_device']['name']}" if doc["data_p_s"] > 0 else "DataP is 0: no device sets it",
        "stage groups:",
    ]
    for g in doc["stage_groups"]:
        lines.append(f"  stage {g['stage']:>2}  DataP {g['data_p_s']:8.3f} s  {g['locality']}")
    if doc["pipeline_edges"]:
        lines.append("pipeline edges (bottleneck link):")
        for e in doc["pipeline_edges"]:
            a, b = e["bottleneck"]
            lines.append(
                f"  stage {e['from_stage']:>2} -> {e['to_stage']:>2}  {e['cost_s']:8.3f} s  {a} - {b}"
            )
    return lines


def format_solve(doc: dict[str, Any]) -> str:
    """The human form of ``solve_json``."""
    w = doc["workload"]
    f = doc["fabric"]
    lines = [
        f"fabric     {f['source']}  ({f['devices']} devices, sha256 {f['sha256'][:12]})",
        f"workload   D_PP {w['d_pp']} x D_DP {w['d_dp']}; c_pp {w['c_pp']:g} GB x "
        f"{w['pp_messages']:g} msg; c_dp {w['c_dp']:g} GB x {w['dp_messages']:g} msg",
    ]
    lines += format_score(doc["score"])
    comm = doc["score"]["comm_s"]
    for d in doc["baselines"]:
        ratio = f"{d['ratio_median']:.2f}x" if d["ratio_median"] else "n/a"
        asked = d.get("samples_asked")
        cut = f" of {asked} samples, cut short" if isinstance(asked, int) and d["samples"] < asked else " samples"
        lines.append(
            f"{d['name']:<20} ({d['samples']}{cut}): min {d['min']:.2f}  median "
            f"{d['median']:.2f}  max {d['max']:.2f} s; median / Comm = {ratio}"
        )
    b = doc["lower_bound"]
    lines.append(f"lower bound {b['comm_s']:.3f} s ({b['method']}; {b['elapsed_s']:.2f} s); {gap_words(b)}")
    s = doc["search"]
    order = "exact" if s["exact_pipeline_order"] else "approximate (D_PP > 16)"
    lost = len(s.get("worker_errors") or ())
    started = f"{s['workers']} worker(s){f' started, {lost} lost' if lost else ''}"
    lines.append(
        f"search     {s['message']}; {s['nit']} descent moves, {s['nfev']} swaps scored, "
        f"{s['elapsed_s']:.2f} s, seed {s['seed']}, {started}, {s['rounds']} rounds, "
        f"best from \"{s['best_start']}\"; pipeline order {order}"
    )
    lines.append("trace      " + ", ".join(f"{t:.2f} s: {v:.3f}" for t, v in _trace_points(s["trace"])))
    lines.append(f"model score {comm:.3f} s (a communication model, not a wall-clock time)")
    lines += [f"advice     {a['severity']} {a['code']}: {a['message']}" for a in doc.get("advice", [])]
    lines.append(format_rank_map(doc["rank_map"]))
    return "\n".join(lines)
