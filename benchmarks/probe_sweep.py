"""Probe sweep wall time on the emulated fleet: schedules, strategies, and a projection.

Builds an emulated fleet (network namespaces, real sshd, tbf-shaped veth mesh; needs
root, see tests/fleetlib.py) and sweeps it with the same settings:

1. **Schedules**, ``H`` hosts of one device: tournament slots (disjoint host pairs at
   once, each slot starting as soon as its hosts are free) against one pair at a
   time. The ideal speed-up of the measuring phase is ``H / 2`` (``H (H - 1) / 2``
   pairs in ``H - 1`` rounds); reported with the share of it reached, for the whole
   sweep and for the measuring phase (from the first slot to the end).
2. **Devices** (``--devices G`` > 1): ``H x 1`` with ``all`` against ``H x G`` (CPU
   slots, one gloo process each) with ``sampled`` and with ``all``: the wall-time ratio
   ``H x G sampled / H x 1``, every measured inter-host beta against its tbf rate, and
   every inferred pair of the sampled sweep against the same pair of the full sweep.
3. **Projection** from the measured per-pair costs (the median console wall time of an
   inter-host pair in a full sweep and in a sampled one, of a concurrent test, and the
   set-up): sweep time of 16, 64 and 128 hosts of 8 GPUs, ``all`` against ``sampled``.

Per pair, the overhead beyond the transfers is the pair's console wall time minus the
worker's time inside the transfer loops (JSON round trips over SSH, TCPStore
rendezvous, process-group set-up and tear-down).

    sudo nice .venv/bin/python benchmarks/probe_sweep.py [--hosts 6] [--devices 3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fleetlib import TCP_PAYLOAD_SHARE, EmulatedFleet, fleet_unavailable  # noqa: E402
from geoconsole.inventory import load_inventory  # noqa: E402
from probes.ssh import SSHPool  # noqa: E402
from probes.sweep import (GroupMeasured, PairMeasured, PairStarted, ProbeSettings, Sweep,  # noqa: E402
                          SweepDone)


async def one_sweep(fleet, hosts, settings: ProbeSettings) -> dict:
    async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
        sweep = Sweep(hosts, pool=pool, settings=settings)
        started = time.perf_counter()
        first = None
        pairs: dict[tuple[int, int], PairMeasured] = {}
        groups: list[GroupMeasured] = []
        errors = []
        async for ev in sweep.events():
            if isinstance(ev, PairStarted) and first is None:
                first = time.perf_counter() - started
            elif isinstance(ev, PairMeasured):
                pairs[(min(ev.i, ev.j), max(ev.i, ev.j))] = ev
                a, b = ev.src.split(":")[0], ev.dst.split(":")[0]
                if a != b:
                    expected = fleet.rates_mbit[(a, b)] * TCP_PAYLOAD_SHARE / 1000
                    errors.append(abs(ev.beta_gbps / expected - 1))
            elif isinstance(ev, GroupMeasured):
                groups.append(ev)
            elif isinstance(ev, SweepDone):
                done = ev
    inter = [p for p in pairs.values() if p.src.split(":")[0] != p.dst.split(":")[0]]
    walls = [p.wall_s for p in inter] or [math.nan]
    overhead = [p.wall_s - p.transfer_s for p in inter] or [math.nan]
    return {
        "strategy": sweep.strategy, "schedule": "sequential" if settings.sequential else "tournament",
        "devices": len(sweep.devices), "rounds": len(sweep.rounds), "pairs": len(pairs),
        "measured_directions": done.measured, "inferred_directions": done.inferred,
        "failed_directions": done.failed,
        "total_s": done.elapsed_s, "setup_s": first, "measure_s": done.elapsed_s - (first or 0.0),
        "pair_wall_median_s": statistics.median(walls),
        "pair_overhead_median_s": statistics.median(overhead),
        "pair_overhead_share": sum(overhead) / sum(walls),
        "group_wall_median_s": statistics.median([g.wall_s for g in groups]) if groups else None,
        "groups_shared": sum(g.shared for g in groups), "groups": len(groups),
        "beta_error_max": max(errors) if errors else None,
        "fabric": done.fabric,
    }


def run(fleet, inventory, settings: ProbeSettings) -> dict:
    hosts = load_inventory(inventory, ssh_config=None).hosts
    return asyncio.run(one_sweep(fleet, hosts, settings))


def inferred_vs_all(sampled, full) -> float | None:
    """Largest relative beta difference of an inferred pair from the same pair measured."""
    mask = sampled.extras.get("inferred")
    if not mask:
        return None
    worst = 0.0
    for i in range(sampled.n):
        for j in range(sampled.n):
            if mask[i][j]:
                worst = max(worst, abs(sampled.beta_gbps[i, j] / full.beta_gbps[i, j] - 1))
    return worst


def projection(pair_s: float, sampled_pair_s: float, group_s: float, setup_s: float) -> list[dict]:
    """Sweep hours for H hosts of 8 GPUs: all (64 pairs a host pair) vs sampled (2 or 8 pairs
    covering the NICs, plus one concurrent test); inside hosts: 28 pairs vs one per link class
    (three classes assumed)."""
    out = []
    for h in (16, 64, 128):
        rounds = h - 1 if h % 2 == 0 else h
        full = setup_s + 28 * pair_s + rounds * 64 * pair_s
        row = {"hosts": h, "gpus": 8 * h, "all_h": full / 3600}
        for nics in (2, 8):
            row[f"sampled_{nics}nic_h"] = (setup_s + 3 * sampled_pair_s
                                           + rounds * (nics * sampled_pair_s + group_s)) / 3600
        out.append(row)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--devices", type=int, default=1, help="devices per host for the strategy comparison")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-sequential", action="store_true", help="skip the one-pair-at-a-time baseline")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    why = fleet_unavailable()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    fleet = EmulatedFleet(hosts=args.hosts).build()
    runs: dict[str, dict] = {}
    try:
        one = fleet.inventory_path
        runs["1 all"] = run(fleet, one, ProbeSettings(reps=args.reps))
        if not args.no_sequential:
            runs["1 all sequential"] = run(fleet, one, ProbeSettings(reps=args.reps, sequential=True))
        if args.devices > 1:
            many = fleet.write_inventory(fleet.dir / "many.toml",
                                         extra={h.name: {"gpus": list(range(args.devices))} for h in fleet.hosts})
            runs[f"{args.devices} sampled"] = run(fleet, many, ProbeSettings(reps=args.reps, strategy="sampled"))
            runs[f"{args.devices} all"] = run(fleet, many, ProbeSettings(reps=args.reps, strategy="all"))
    finally:
        fleet.teardown()
    summary = summarise(args, runs)
    if args.json:
        print(json.dumps(summary, indent=1, default=str))
        return 0
    report(args, fleet, runs, summary)
    return 0


def summarise(args, runs: dict[str, dict]) -> dict:
    ideal = args.hosts / 2
    out: dict = {"hosts": args.hosts, "devices": args.devices, "reps": args.reps, "ideal_speedup": ideal,
                 "runs": {k: {x: y for x, y in v.items() if x != "fabric"} for k, v in runs.items()}}
    tour, seq = runs["1 all"], runs.get("1 all sequential")
    if seq is not None:
        out["speedup_total"] = seq["total_s"] / tour["total_s"]
        out["speedup_measuring"] = seq["measure_s"] / tour["measure_s"]
        out["share_of_ideal_total"] = out["speedup_total"] / ideal
        out["share_of_ideal_measuring"] = out["speedup_measuring"] / ideal
    sampled, full = runs.get(f"{args.devices} sampled"), runs.get(f"{args.devices} all")
    if sampled is not None:
        out["ratio_sampled_to_1"] = sampled["total_s"] / tour["total_s"]
        out["ratio_all_to_1"] = full["total_s"] / tour["total_s"]
        out["inferred_vs_all_max"] = inferred_vs_all(sampled["fabric"], full["fabric"])
        out["projection"] = projection(full["pair_wall_median_s"], sampled["pair_wall_median_s"],
                                       sampled["group_wall_median_s"] or 0.0, sampled["setup_s"])
    return out


def report(args, fleet, runs: dict[str, dict], s: dict) -> None:
    print(f"emulated fleet: {args.hosts} hosts, rates {sorted(set(fleet.rates_mbit.values()))} Mbit, "
          f"reps {args.reps}")
    print(f"{'run':<18} {'devices':>7} {'rounds':>6} {'total s':>8} {'setup s':>8} {'measure s':>9} "
          f"{'pair s':>7} {'overhead s':>10} {'share':>6} {'inferred':>8} {'max beta err':>12}")
    for name, r in runs.items():
        err = "-" if r["beta_error_max"] is None else f"{r['beta_error_max']:.1%}"
        print(f"{name:<18} {r['devices']:>7} {r['rounds']:>6} {r['total_s']:>8.2f} {r['setup_s']:>8.2f} "
              f"{r['measure_s']:>9.2f} {r['pair_wall_median_s']:>7.3f} {r['pair_overhead_median_s']:>10.3f} "
              f"{r['pair_overhead_share']:>6.1%} {r['inferred_directions']:>8} {err:>12}")
    if "speedup_total" in s:
        print(f"one pair at a time / tournament: {s['speedup_total']:.2f}x total "
              f"({s['share_of_ideal_total']:.2f} of the ideal {s['ideal_speedup']:g}x), "
              f"{s['speedup_measuring']:.2f}x measuring ({s['share_of_ideal_measuring']:.2f} of ideal)")
    if "ratio_sampled_to_1" in s:
        d = args.devices
        print(f"{args.hosts}x{d} sampled / {args.hosts}x1: {s['ratio_sampled_to_1']:.2f}x wall time "
              f"({args.hosts}x{d} all: {s['ratio_all_to_1']:.2f}x); inferred vs all: max "
              f"{s['inferred_vs_all_max']:.1%} beta difference")
        print("projection (hours; 8 GPUs a host; sampled with 2 or 8 NICs a host):")
        for row in s["projection"]:
            print(f"  {row['hosts']:>4} x 8: all {row['all_h']:.2f} h, sampled {row['sampled_2nic_h']:.3f} h "
                  f"(2 NICs) / {row['sampled_8nic_h']:.3f} h (8 NICs)")


if __name__ == "__main__":
    sys.exit(main())
