"""Probe sweep wall time: tournament rounds against one pair at a time, in one run.

Builds an emulated fleet (network namespaces, real sshd, tbf-shaped veth mesh; needs
root, see tests/fleetlib.py), then sweeps it twice with the same settings: once in
tournament rounds (disjoint host pairs concurrently) and once one pair at a time.
Reports, for each: total wall time, set-up (connect, discovery, worker start with its
``import torch``), the measuring phase, and per pair the overhead beyond the transfers
(pair wall time seen by the console minus the worker's time inside the transfer loops:
the JSON round trips over SSH, TCPStore rendezvous, process-group set-up and tear-down).

    sudo .venv/bin/python benchmarks/probe_sweep.py [--hosts 4] [--reps 3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fleetlib import TCP_PAYLOAD_SHARE, EmulatedFleet, fleet_unavailable  # noqa: E402
from geoconsole.inventory import load_inventory  # noqa: E402
from probes.ssh import SSHPool  # noqa: E402
from probes.sweep import PairMeasured, ProbeSettings, RoundStarted, Sweep, SweepDone  # noqa: E402


async def one_sweep(fleet, hosts, settings: ProbeSettings) -> dict:
    async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
        sweep = Sweep(hosts, pool=pool, settings=settings)
        started = time.perf_counter()
        first_round = None
        pairs: dict[tuple[int, int], PairMeasured] = {}
        errors = []
        async for ev in sweep.events():
            if isinstance(ev, RoundStarted) and first_round is None:
                first_round = time.perf_counter() - started
            elif isinstance(ev, PairMeasured):
                pairs[(min(ev.i, ev.j), max(ev.i, ev.j))] = ev
                expected = fleet.rates_mbit[(ev.src, ev.dst)] * TCP_PAYLOAD_SHARE / 1000
                errors.append(abs(ev.beta_gbps / expected - 1))
            elif isinstance(ev, SweepDone):
                total = ev.elapsed_s
                failed = ev.failed
        imports = [w.hello.get("import_s", float("nan")) for w in sweep.workers.values()]
    overhead = [p.wall_s - p.transfer_s for p in pairs.values()]
    walls = [p.wall_s for p in pairs.values()]
    return {
        "schedule": "sequential" if settings.sequential else "tournament",
        "rounds": len(sweep.rounds), "pairs": len(pairs), "failed_directions": failed,
        "total_s": total, "setup_s": first_round, "measure_s": total - (first_round or 0.0),
        "pair_wall_median_s": statistics.median(walls),
        "pair_overhead_median_s": statistics.median(overhead),
        "pair_overhead_mean_s": statistics.fmean(overhead),
        "pair_overhead_share": sum(overhead) / sum(walls),
        "import_torch_median_s": statistics.median(imports),
        "beta_error_max": max(errors),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args()
    why = fleet_unavailable()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    fleet = EmulatedFleet(hosts=args.hosts).build()
    try:
        hosts = load_inventory(fleet.inventory_path, ssh_config=None).hosts
        results = []
        for sequential in (False, True):
            settings = ProbeSettings(reps=args.reps, sequential=sequential)
            results.append(asyncio.run(one_sweep(fleet, hosts, settings)))
    finally:
        fleet.teardown()
    tour, seq = results
    summary = {
        "hosts": args.hosts, "reps": args.reps,
        "ratio_total": seq["total_s"] / tour["total_s"],
        "ratio_measuring": seq["measure_s"] / tour["measure_s"],
        "runs": results,
    }
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    print(f"emulated fleet: {args.hosts} hosts, {tour['pairs']} host pairs, rates "
          f"{sorted(set(fleet.rates_mbit.values()))} Mbit, reps {args.reps}")
    print(f"{'schedule':<11} {'rounds':>6} {'total s':>8} {'setup s':>8} {'measure s':>9} "
          f"{'pair s':>7} {'overhead s':>10} {'share':>6} {'max beta err':>12}")
    for r in results:
        print(f"{r['schedule']:<11} {r['rounds']:>6} {r['total_s']:>8.2f} {r['setup_s']:>8.2f} "
              f"{r['measure_s']:>9.2f} {r['pair_wall_median_s']:>7.3f} {r['pair_overhead_median_s']:>10.3f} "
              f"{r['pair_overhead_share']:>6.1%} {r['beta_error_max']:>12.1%}")
    print(f"one-pair-at-a-time / tournament: {summary['ratio_total']:.2f}x total, "
          f"{summary['ratio_measuring']:.2f}x measuring phase")
    print(f"import torch per worker (median): {tour['import_torch_median_s']:.2f} s, paid once per device "
          f"per sweep (a process per pair would pay it {2 * tour['pairs']} times)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
