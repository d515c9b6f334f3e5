"""Benchmarks for locality and device selection (ADR-0021 figures, on this machine).

1. Selection cost: ``select_devices`` for an 8-device job on fleets of 30, 120 and
   500 single-GPU workers in 5 zones of 2 regions (3 + 2 zones, a network group in
   every zone, one worker in ten on another torch version), half of them busy (only
   the free half is offered); median microseconds per call, and the locality of the
   chosen group with ``any`` (the ADR's "before") and ``prefer`` ("after").
2. ``pick_devices``: a 4-GPU task on the DGX-1 NVLink cube mesh with GPU 0 busy,
   against taking the lowest free indices.
3. Placement quality on the DT-FM world-wide fabric with and without label seeds:
   rows shuffled and the fabric's ``labels`` blanked, so the solver's own seeds come
   from measurement only (its clustering order); then the same with
   ``seed_orders_for`` (region/zone/network-group orders). Also with noisy
   measurements (each entry times exp(N(0, sigma))), scoring the answer on the
   noise-free fabric. Comm seconds per solver seed at budgets 0 (seeds and polish
   only), 2000 and 20000 swaps (--quick: fewer); the reference layout scores 51.50 s.
4. The same fabric with 20 / 50 / 80 % of the pairs unmeasured, filled by
   ``fill_missing`` with the devices' region labels and without any labels, solved,
   and scored on the complete fabric.
5. Cost of fill_missing and suggest_network_groups at 64, 256 and 512 devices.

Run: ``.venv/bin/python benchmarks/selection.py [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from geoconsole.demo_fabrics import worldwide_fabric  # noqa: E402
from solver.devices import pick_devices  # noqa: E402
from solver.fabric import Device, Fabric  # noqa: E402
from solver.selection import select_devices  # noqa: E402

ZONES = (("us-east1", "us-east1-b"), ("us-east1", "us-east1-c"), ("us-east1", "us-east1-d"),
         ("europe-west1", "europe-west1-b"), ("europe-west1", "europe-west1-c"))


def fleet(n: int, seed: int = 0) -> tuple[Fabric, list[str]]:
    """``n`` workers round-robin over ZONES, two network groups per zone; torch versions."""
    rng = np.random.default_rng(seed)
    devices = []
    for i in range(n):
        region, zone = ZONES[i % len(ZONES)]
        devices.append(Device(f"w{i:03d}", 0, region, zone, f"{zone}-rack{(i // len(ZONES)) % 2}"))
    order = rng.permutation(n)
    devices = [devices[i] for i in order]
    versions = ["2.4.1" if rng.random() < 0.9 else "2.3.0" for _ in range(n)]
    a = np.ones((n, n))
    np.fill_diagonal(a, 0.0)
    return Fabric(a, a.copy(), [d.region for d in devices], tuple(devices)), versions


def time_call(fn, repeat: int) -> float:
    """Median microseconds of ``fn()`` over ``repeat`` batches of 20 calls."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(20):
            fn()
        samples.append((time.perf_counter() - t0) / 20 * 1e6)
    return statistics.median(samples)


def bench_selection(repeat: int) -> None:
    print("1. select_devices, 8-device job, half the fleet busy (5 zones in 2 regions)")
    print(f"{'workers':>8} {'free':>5} {'us/call any':>12} {'us/call prefer':>15}  before (any) -> after (prefer)")
    for n in (30, 120, 500):
        f, versions = fleet(n)
        free = sorted(np.random.default_rng(1).choice(n, n // 2, replace=False).tolist())
        sub = f.subset(free)
        tv = [versions[i] for i in free]
        t_any = time_call(lambda: select_devices(sub, 8, "any", torch_versions=tv), repeat)
        t_pref = time_call(lambda: select_devices(sub, 8, "prefer", torch_versions=tv), repeat)
        before = select_devices(sub, 8, "any", torch_versions=tv)
        after = select_devices(sub, 8, "prefer", torch_versions=tv)
        print(f"{n:>8} {len(free):>5} {t_any:>12.0f} {t_pref:>15.0f}  {before.summary} -> {after.summary}")


DGX1 = [row.split() for row in (
    "X NV1 NV1 NV2 NV2 SYS SYS SYS", "NV1 X NV2 NV1 SYS NV2 SYS SYS",
    "NV1 NV2 X NV2 SYS SYS NV1 SYS", "NV2 NV1 NV2 X SYS SYS SYS NV1",
    "NV2 SYS SYS SYS X NV1 NV1 NV2", "SYS NV2 SYS SYS NV1 X NV2 NV1",
    "SYS SYS NV1 SYS NV1 NV2 X NV2", "SYS SYS SYS NV1 NV2 NV1 NV2 X")]


def bench_pick(repeat: int) -> None:
    print("\n2. pick_devices, DGX-1 cube mesh, 4 GPUs with GPU 0 busy")
    t_pick = time_call(lambda: pick_devices(DGX1, range(1, 8), 4), repeat)
    t_low = time_call(lambda: pick_devices(None, range(1, 8), 4), repeat)
    print(f"   topology-aware {pick_devices(DGX1, range(1, 8), 4)}: {t_pick:.0f} us/call;"
          f" lowest indices {pick_devices(None, range(1, 8), 4)}: {t_low:.1f} us/call")


def bench_quality(seeds: range, budgets: list[int | None], sigmas: tuple[float, ...]) -> None:
    try:
        from solver.cost import CostModel
        from solver.search import solve
    except ImportError as exc:  # the placement engine is another module of the project
        print(f"\n3. placement quality: skipped ({exc})")
        return
    from solver.orders import seed_orders_for
    from solver.workload import DTFM_WORKLOAD

    base = worldwide_fabric()
    perm = np.random.default_rng(7).permutation(base.n)
    shuffled = base.subset(perm)
    truth = CostModel.from_fabric(Fabric(shuffled.alpha_ms, shuffled.beta_gbps, ["gpu"] * base.n,
                                         shuffled.devices), DTFM_WORKLOAD)
    print("\n3. world-wide fabric (64 GPUs, 8x8), rows shuffled, fabric labels blanked, restarts 0.")
    print("   'noise': each measured entry times exp(N(0, sigma)); Comm of the answer on the noise-free")
    print("   fabric in seconds (reference layout 51.50); wall time per solve in brackets")
    print(f"{'noise':>5} {'budget':>8} {'seed':>4} {'measured seeds only':>20} {'+ label seeds':>17}  winning start")
    rng = np.random.default_rng(3)
    for sigma in sigmas:
        a = shuffled.alpha_ms * np.exp(rng.normal(0.0, sigma, (base.n, base.n)))
        b = shuffled.beta_gbps * np.exp(rng.normal(0.0, sigma, (base.n, base.n)))
        np.fill_diagonal(a, 0.0)
        np.fill_diagonal(b, 0.0)
        measured = Fabric(a, b, ["gpu"] * base.n, shuffled.devices)
        model = CostModel.from_fabric(measured, DTFM_WORKLOAD)
        t0 = time.perf_counter()
        orders = seed_orders_for(measured)
        t_orders = time.perf_counter() - t0
        for budget in budgets:
            for s in seeds:
                t0 = time.perf_counter()
                plain = solve(model, seed=s, budget=budget, restarts=0)
                t1 = time.perf_counter()
                labelled = solve(model, seed=s, budget=budget, restarts=0, seed_orders=orders)
                t2 = time.perf_counter()
                shown = "default" if budget is None else str(budget)
                p_true = truth.score_rank_map(plain.x).comm
                l_true = truth.score_rank_map(labelled.x).comm
                print(f"{sigma:>5.1f} {shown:>8} {s:>4} {p_true:>13.2f} ({t1 - t0:4.1f}s) "
                      f"{l_true:>10.2f} ({t2 - t1:4.1f}s)  {labelled.start}")
        print(f"      seed_orders_for: {len(orders)} orders in {t_orders * 1e3:.1f} ms")


def bench_partial(fractions: tuple[float, ...], budget: int) -> None:
    """Placement from a partly measured world-wide fabric, filled with and without labels."""
    try:
        from solver.cost import CostModel
        from solver.search import solve
    except ImportError as exc:
        print(f"\n4. partly measured fabric: skipped ({exc})")
        return
    from solver.estimate import fill_missing
    from solver.orders import seed_orders_for
    from solver.workload import DTFM_WORKLOAD

    base = worldwide_fabric()
    perm = np.random.default_rng(7).permutation(base.n)
    shuffled = base.subset(perm)
    truth = CostModel.from_fabric(Fabric(shuffled.alpha_ms, shuffled.beta_gbps, ["gpu"] * base.n,
                                         shuffled.devices), DTFM_WORKLOAD)
    bare = tuple(Device(d.host, d.gpu) for d in shuffled.devices)
    print(f"\n4. world-wide fabric with a share of pairs unmeasured, filled (fill_missing), solved with "
          f"seed_orders_for, budget {budget}, restarts 0;")
    print("   Comm of the answer on the complete fabric (reference 51.50)")
    print(f"{'unmeasured':>10} {'with region labels':>19} {'without labels':>15}")
    rng = np.random.default_rng(5)
    for frac in fractions:
        a, b = shuffled.alpha_ms.copy(), shuffled.beta_gbps.copy()
        hole = np.triu(rng.random((base.n, base.n)) < frac, 1)
        hole |= hole.T
        a[hole] = b[hole] = np.nan
        scores = []
        for devices in (shuffled.devices, bare):
            filled, _ = fill_missing(Fabric(a, b, ["gpu"] * base.n, devices))
            model = CostModel.from_fabric(filled, DTFM_WORKLOAD)
            result = solve(model, seed=0, budget=budget, restarts=0, seed_orders=seed_orders_for(filled))
            scores.append(truth.score_rank_map(result.x).comm)
        print(f"{frac:>10.0%} {scores[0]:>19.2f} {scores[1]:>15.2f}")


def bench_costs(sizes: tuple[int, ...]) -> None:
    """Wall time of fill_missing (30 % unmeasured) and suggest_network_groups."""
    from solver.estimate import fill_missing
    from solver.suggest import suggest_network_groups

    print("\n5. cost: fill_missing with 30 % of pairs unmeasured; suggest_network_groups (fully measured)")
    print(f"{'devices':>8} {'fill ms':>8} {'suggest ms':>11}  suggested groups")
    rng = np.random.default_rng(2)
    for n in sizes:
        per_group = n // 8
        devices = tuple(Device(f"h{i // 4}", i % 4, f"r{i // (n // 2)}", f"z{i // (n // 4)}")
                        for i in range(n))
        group = np.arange(n) // per_group
        a = np.where(group[:, None] == group[None, :], 0.3, 40.0) * rng.uniform(0.9, 1.1, (n, n))
        b = np.where(group[:, None] == group[None, :], 8.0, 0.6) * rng.uniform(0.9, 1.1, (n, n))
        np.fill_diagonal(a, 0.0)
        np.fill_diagonal(b, 0.0)
        full = Fabric(a, b, ["x"] * n, devices)
        hole = rng.random((n, n)) < 0.3
        ha, hb = a.copy(), b.copy()
        ha[hole] = hb[hole] = np.nan
        holed = Fabric(ha, hb, ["x"] * n, devices)
        t0 = time.perf_counter()
        fill_missing(holed)
        t1 = time.perf_counter()
        found = suggest_network_groups(full)
        t2 = time.perf_counter()
        print(f"{n:>8} {(t1 - t0) * 1e3:>8.0f} {(t2 - t1) * 1e3:>11.0f}  {len(found.names)} (planted 8)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and solver runs")
    args = parser.parse_args()
    repeat = 5 if args.quick else 25
    bench_selection(repeat)
    bench_pick(repeat)
    if args.quick:
        bench_quality(range(1), [0, 2000], (0.0, 0.3))
        bench_partial((0.5,), 2000)
        bench_costs((64,))
    else:
        bench_quality(range(2), [0, 2000, 20000], (0.0, 0.3, 0.6))
        bench_partial((0.2, 0.5, 0.8), 20000)
        bench_costs((64, 256, 512))


if __name__ == "__main__":
    main()
