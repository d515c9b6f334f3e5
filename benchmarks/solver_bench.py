"""Placement engine benchmarks (run on demand; prints figures, asserts nothing).

    .venv/bin/python benchmarks/solver_bench.py [worldwide|dtfm|scale|path|all] [--sizes 256,1024,4096]

worldwide  the world-wide demo: score, both random medians and ratios, bound, wall time
dtfm       time to reach the spec's 51.50 s layout (DT-FM's genetic search: 625-830 s here)
scale      random geo fabrics of 256 (8 x 32), 1024 (16 x 64), 4096 (32 x 128) GPUs:
           time to the default stop rule's answer, peak memory, ratio over random (one
           subprocess each)
path       approximate path solver against Held-Karp, sizes 2..12: worst observed gap
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from geoconsole.demo_fabrics import random_geo_fabric, worldwide_fabric  # noqa: E402
from solver.baselines import random_rank_maps, random_stage_groups  # noqa: E402
from solver.bounds import lower_bound  # noqa: E402
from solver.cost import CostModel  # noqa: E402
from solver.path import approximate_path, held_karp_path  # noqa: E402
from solver.search import solve  # noqa: E402
from solver.workload import DTFM_WORKLOAD, Workload  # noqa: E402

DTFM_GA_SECONDS = (625.0, 830.0)
SPEC_LAYOUT = 51.50
SCALES = {256: (8, 32, 8, 32), 1024: (16, 64, 16, 64), 4096: (32, 128, 32, 128)}


def worldwide() -> None:
    model = CostModel.from_fabric(worldwide_fabric(), DTFM_WORKLOAD)
    t0 = time.perf_counter()
    result = solve(model, seed=7, restarts=0)  # what `demo` runs: the topology starts
    wall = time.perf_counter() - t0
    rsg = random_stage_groups(model, 200, seed=7)
    rrm = random_rank_maps(model, 200, seed=7)
    bound = lower_bound(model)
    print(f"world-wide 64 GPUs: Comm {result.fun:.3f} s (spec layout {SPEC_LAYOUT:.2f}), {result.message}")
    print(f"  wall {wall:.2f} s, {result.nfev} swaps scored, best from {result.start!r}")
    print(f"  random stage groups median {rsg.median:.2f} s -> {rsg.median / result.fun:.2f}x; "
          f"random rank map median {rrm.median:.2f} s -> {rrm.median / result.fun:.2f}x")
    print(f"  lower bound {bound.value:.3f} s ({bound.method}, {bound.elapsed_s:.2f} s); gap (Comm - bound) / Comm "
          f"{100 * bound.gap(result.fun):.1f}%; Comm at most {100 * bound.above(result.fun):.1f}% above the optimum")
    wide = random_stage_groups(model, 2000, seed=99)
    print(f"  random stage groups median over 2000 samples: {wide.median:.2f} s")
    best = min(solve(model, seed=s, time_limit=10).fun for s in range(5))
    print(f"  best over 5 seeds x 10 s: {best:.4f} s")


def dtfm() -> None:
    model = CostModel.from_fabric(worldwide_fabric(), DTFM_WORKLOAD)
    reached = {}

    def callback(p):
        if p.fun <= SPEC_LAYOUT + 5e-3:
            reached["t"] = p.elapsed_s
            raise StopIteration

    times = []
    for seed in range(5):
        reached.clear()
        solve(model, seed=seed, callback=callback)
        times.append(reached.get("t", float("nan")))
    t = float(np.median(times))
    print(f"time to reach <= {SPEC_LAYOUT} s: median {t * 1e3:.1f} ms over 5 seeds {[round(x * 1e3, 1) for x in times]}")
    print(f"  vs DT-FM genetic search {DTFM_GA_SECONDS[0]:.0f}-{DTFM_GA_SECONDS[1]:.0f} s: "
          f"{DTFM_GA_SECONDS[0] / t:,.0f}x-{DTFM_GA_SECONDS[1] / t:,.0f}x faster")
    # Without labels and with the rows shuffled, the search has only the measurement.
    rng = np.random.default_rng(0)
    perm = rng.permutation(model.n)
    blind = CostModel(model.t_pp[np.ix_(perm, perm)], model.t_dp[np.ix_(perm, perm)], model.workload)
    times = []
    for seed in range(5):
        reached.clear()
        solve(blind, seed=seed, callback=callback)
        times.append(reached.get("t", float("nan")))
    t = float(np.median(times))
    print(f"  unlabelled, rows shuffled: median {t * 1e3:.1f} ms over 5 seeds {[round(x * 1e3, 1) for x in times]} "
          f"-> {DTFM_GA_SECONDS[0] / t:,.0f}x faster than DT-FM's lower figure")


def scale_one(n: int, time_limit: float) -> dict:
    regions, per, d_pp, d_dp = SCALES[n]
    model = CostModel.from_fabric(random_geo_fabric(regions, per, seed=1), Workload(d_pp, d_dp, 0.512, 0.65))
    t0 = time.perf_counter()
    result = solve(model, seed=0, time_limit=time_limit or None)  # 0: the default stop rule
    wall = time.perf_counter() - t0
    samples = 20 if n <= 1024 else 5
    rsg = random_stage_groups(model, samples, seed=1)
    rrm = random_rank_maps(model, 200, seed=1)
    first = result.history[0] if result.history else (0, result.fun)
    last = result.history[-1] if result.history else (0, result.fun)
    return {
        "best_s": last[0], "nfev": result.nfev,
        "n": n, "shape": f"D_PP {d_pp} x D_DP {d_dp}", "comm": result.fun, "status": result.message,
        "wall_s": wall, "first_s": first[0], "first_comm": first[1],
        "bound": lower_bound(model).value,
        "rsg_median": rsg.median, "rsg_samples": samples, "rrm_median": rrm.median,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "exact_order": result.exact_path,
    }


def scale(sizes: list[int]) -> None:
    for n in sizes:
        limit = 0.0  # the default stop rule; the targets are 60 s at 1024 and 300 s at 4096
        out = subprocess.run([sys.executable, __file__, "_scale_one", str(n), str(limit)],
                             capture_output=True, text=True)
        if out.returncode:
            print(f"{n}: failed: {out.stderr.strip().splitlines()[-1:]}")
            continue
        r = json.loads(out.stdout)
        print(f"{r['n']} GPUs ({r['shape']}): Comm {r['comm']:.2f} s, reached at {r['best_s']:.1f} s; search ended "
              f"at {r['wall_s']:.1f} s ({r['status']}, {r['nfev']:,} swaps scored); "
              f"first seed {r['first_comm']:.2f} s at {r['first_s']:.1f} s; peak RSS {r['peak_mib']:.0f} MiB; "
              f"random stage groups median ({r['rsg_samples']}) {r['rsg_median']:.2f} s -> {r['rsg_median'] / r['comm']:.2f}x; "
              f"random rank map median {r['rrm_median']:.2f} -> {r['rrm_median'] / r['comm']:.2f}x; "
              f"bound {r['bound']:.2f} s; pipeline order {'exact' if r['exact_order'] else 'approximate'}")


def path() -> None:
    rng = np.random.default_rng(11)
    worst = 0.0
    for k in range(2, 13):
        for _ in range(50):
            c = rng.random((k, k))
            c = (c + c.T) / 2
            np.fill_diagonal(c, 0)
            exact, _ = held_karp_path(c)
            approx, _ = approximate_path(c)
            worst = max(worst, (approx - exact) / exact)
    print(f"approximate path vs Held-Karp, sizes 2..12 x 50 instances: worst gap {100 * worst:.3f}%")


if __name__ == "__main__":
    if sys.argv[1:2] == ["_scale_one"]:  # one scale run, in its own process (scale)
        print(json.dumps(scale_one(int(sys.argv[2]), float(sys.argv[3]))))
        sys.exit(0)

    def _sizes(text: str) -> list[int]:
        try:
            sizes = [int(x) for x in text.split(",")]
        except ValueError:
            raise argparse.ArgumentTypeError(f"not comma-separated whole numbers: {text!r}") from None
        unknown = [n for n in sizes if n not in SCALES]
        if unknown:
            raise argparse.ArgumentTypeError(f"no scale fabric of {unknown[0]} GPUs (known: "
                                             f"{','.join(map(str, SCALES))})")
        return sizes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="all", choices=("worldwide", "dtfm", "scale", "path", "all"),
                        help="which benchmark (default: all)")
    parser.add_argument("--sizes", type=_sizes, default=[256, 1024, 4096],
                        help="GPU counts of the scale runs, comma-separated (default: all of "
                             f"{','.join(map(str, SCALES))})")
    args = parser.parse_args()
    for name, fn in (("worldwide", worldwide), ("dtfm", dtfm), ("path", path)):
        if args.what in (name, "all"):
            fn()
    if args.what in ("scale", "all"):
        scale(args.sizes)
