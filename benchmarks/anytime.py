"""Anytime and seed-spread tables on the SYNTHETIC hierarchical suite (prints, asserts nothing).

    .venv/bin/python benchmarks/anytime.py [anytime|spread|sa|bound|all] [--long NAMES] [--workers 2]
                                           [--draw K]

anytime  per instance: the default stop rule's answer and time, then one run with
         --time-limit (120 s for the --long instances, 30 s for the rest) read at
         1, 3, 10, 30, 120 s from its anytime trace, as % above the best known
spread   5 seeds at --time-limit 10: best, mean, worst, spread (worst / best - 1) and
         the worst against the best known
sa       the plain simulated-annealing baseline (benchmarks/sa_baseline.py), 30 s
bound    separate and joint lower bounds and their gaps (Comm - bound) / Comm
all      everything; "best known" is the best Comm over every run of this invocation

``--draw K`` runs another draw of the suite: the same shapes and kind of fabric with other
seeds (benchmarks/hierarchical.py), so the figures can be checked on instances nothing was
tuned on.

Figures depend on machine load; run under ``nice`` and quote ratios from one run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from hierarchical import SUITE, suite_instance  # noqa: E402
from sa_baseline import anneal  # noqa: E402
from solver.bounds import lower_bound, separate_bound  # noqa: E402
from solver.orders import seed_orders_for  # noqa: E402
from solver.search import solve  # noqa: E402

MARKS = (1, 3, 10, 30, 120)
DEFAULT_LONG = ("h48-4x12", "h80-10x8")


def best_at(history, t: float) -> float:
    vals = [v for (s, v) in history if s <= t]
    return min(vals) if vals else float("nan")


def run_anytime(names, long, workers, known, draw=0) -> list[str]:
    rows = []
    for name in names:
        fabric, model = suite_instance(name, draw)
        orders = seed_orders_for(fabric)
        t0 = time.perf_counter()
        default = solve(model, seed=0, seed_orders=orders, workers=workers)
        default_s = time.perf_counter() - t0
        limit = 120.0 if name in long else 30.0
        r = solve(model, seed=0, seed_orders=orders, workers=workers, time_limit=limit)
        for v in (default.fun, r.fun):
            known[name] = min(known.get(name, v), v)
        marks = {t: best_at(r.history, t) for t in MARKS if t <= limit}
        rows.append((name, default.fun, default_s, marks, r.start))
        print(f"  {name}: default {default.fun:.3f} in {default_s:.1f} s; "
              + ", ".join(f"{t}s {v:.3f}" for t, v in marks.items()), flush=True)
    return rows


def run_spread(names, workers, known, draw=0) -> dict:
    out = {}
    for name in names:
        fabric, model = suite_instance(name, draw)
        vals = [solve(model, seed=s, seed_orders=seed_orders_for(fabric), workers=workers,
                      time_limit=10.0).fun for s in range(5)]
        known[name] = min(known.get(name, min(vals)), min(vals))
        out[name] = vals
        print(f"  {name}: 5 seeds at 10 s: {' '.join(f'{v:.3f}' for v in vals)}", flush=True)
    return out


def run_sa(names, known, draw=0) -> dict:
    out = {}
    for name in names:
        _, model = suite_instance(name, draw)
        w = model.workload
        best, _, moves = anneal(model.t_pp, model.t_dp, w.d_pp, w.d_dp, 30.0)
        known[name] = min(known.get(name, best), best)
        out[name] = best
        print(f"  {name}: plain SA 30 s: {best:.3f} ({moves:,} moves)", flush=True)
    return out


def pct(v: float, ref: float) -> str:
    """``v`` above ``ref`` in percent, signed ("+0.0%" for a rounding error below it)."""
    if v != v:
        return "-"
    above = 100 * (v / ref - 1)
    return f"{above:+.1f}%" if round(above, 1) != 0 else "+0.0%"


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n for n in text.split(",") if n)
    unknown = [n for n in names if n not in SUITE]
    if unknown:
        raise argparse.ArgumentTypeError(f"not a suite instance: {', '.join(unknown)} (known: {', '.join(SUITE)})")
    return names


def _count(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be at least {least}: {value}")
    return value


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="all", choices=("anytime", "spread", "sa", "bound", "all"),
                        help="which table (default: all)")
    parser.add_argument("--long", type=_names, default=DEFAULT_LONG, metavar="NAMES",
                        help="instances whose anytime run lasts 120 s, comma-separated "
                             f"(default: {','.join(DEFAULT_LONG)})")
    parser.add_argument("--workers", type=lambda t: _count(t, 1), default=2, help="search workers (default: 2)")
    parser.add_argument("--draw", type=lambda t: _count(t, 0), default=0,
                        help="draw of the suite (default: 0, the README's tables)")
    args = parser.parse_args(argv)
    what, long, workers, draw = args.what, args.long, args.workers, args.draw
    names = list(SUITE)
    known: dict[str, float] = {}
    rows = spread = sa = None
    if what in ("anytime", "all"):
        print("anytime runs:")
        rows = run_anytime(names, long, workers, known, draw)
    if what in ("spread", "all"):
        print("seed spread:")
        spread = run_spread(names, workers, known, draw)
    if what in ("sa", "all"):
        print("plain simulated annealing:")
        sa = run_sa(names, known, draw)
    if rows:
        print("\n| instance | best known | default (time) | " + " | ".join(f"{t} s" for t in MARKS) + " |")
        print("|---|---|---|" + "---|" * len(MARKS))
        for name, dfun, ds, marks, _ in rows:
            ref = known[name]
            cells = [pct(marks[t], ref) if t in marks else "" for t in MARKS]
            print(f"| {name} | {ref:.3f} | {pct(dfun, ref)} ({ds:.1f} s) | " + " | ".join(cells) + " |")
    if spread:
        print("\n| instance | best of 5 | mean | worst of 5 | spread | worst vs best known "
              "| plain SA 30 s |")
        print("|---|---|---|---|---|---|---|")
        for name, vals in spread.items():
            sa_cell = pct(sa[name], known[name]) if sa else ""
            print(f"| {name} | {min(vals):.3f} | {sum(vals) / len(vals):.3f} | {max(vals):.3f} | "
                  f"{100 * (max(vals) / min(vals) - 1):.2f}% | {pct(max(vals), known[name])} "
                  f"| {sa_cell} |")
    if what in ("bound", "all"):
        print("\n| instance | Comm | separate bound (gap) | joint bound (gap) | bound time |")
        print("|---|---|---|---|---|")
        for name in names:
            fabric, model = suite_instance(name, draw)
            comm = known.get(name) or solve(model, seed=0, seed_orders=seed_orders_for(fabric),
                                            workers=workers).fun
            sep, joint = separate_bound(model), lower_bound(model, 1.0)
            print(f"| {name} | {comm:.3f} | {sep.value:.2f} ({100 * sep.gap(comm):.0f}%) | "
                  f"{joint.value:.2f} ({100 * joint.gap(comm):.0f}%) | {joint.elapsed_s:.1f} s |")


if __name__ == "__main__":
    main(sys.argv[1:])
