"""Launch benchmarks: plan and export cost at 1024 GPUs; launch and abort latency on the
emulated fleet (needs root and ``ip netns``; that part is skipped with a reason otherwise).

Run: ``.venv/bin/python benchmarks/launch.py`` (about half a minute). One line per figure.

- plan / export: build the plan for a random rank map over 128 hosts x 8 GPUs, export it
  in every format and parse it back; median of 5.
- launch: 4 emulated hosts, ``--mode env``, a program that prints and exits: from the call
  to every rank's supervisor reporting in, and to the last exit; median of 3.
- abort: rank 2 exits 3 while the others sleep; from that exit to the last process of the
  job gone on every host (``--grace 2``; the sleepers honour SIGTERM).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402

from geoconsole.launch.export import FORMATS, export, parse  # noqa: E402
from geoconsole.launch.plan import LaunchHost, build_plan  # noqa: E402
from solver.fabric import Device  # noqa: E402


def bench_plan_export() -> None:
    devices = [Device(f"node{i // 8:03d}", i % 8) for i in range(1024)]
    hosts = [LaunchHost(f"node{h:03d}", f"10.0.{h // 256}.{h % 256}") for h in range(128)]
    rank_map = np.random.default_rng(0).permutation(1024).tolist()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        build_plan(rank_map, devices, hosts, ["train.py"])
        times.append(time.perf_counter() - t)
    print(f"plan, 1024 GPUs on 128 hosts: {statistics.median(times) * 1e3:.1f} ms")
    plan = build_plan(rank_map, devices, hosts, ["train.py"])
    for fmt in FORMATS:
        times = []
        for _ in range(5):
            t = time.perf_counter()
            parse(export(plan, fmt), fmt)
            times.append(time.perf_counter() - t)
        print(f"export + parse back, {fmt}, 1024 ranks: {statistics.median(times) * 1e3:.1f} ms")


async def _launch_once(fleet, inv, hosts, prog, port, env=None, grace=2.0):
    from geoconsole.launch.run import run_plan
    from probes.ssh import SSHPool

    devices = [Device(h.name) for h in inv.hosts]
    plan = build_plan([0, 1, 2, 3], devices, hosts, [prog], mode="env", backend="gloo",
                      port=port, env=env or {})
    marks: dict[str, float] = {}
    async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
        sessions = {h.name: await pool.session(h) for h in inv.hosts}

        def sink(p, stream, line):
            if line.startswith("FAILING"):
                marks["fail"] = time.perf_counter()

        t0 = time.perf_counter()
        result = await run_plan(plan, sessions, sink=sink, grace_s=grace)
        marks["done"] = time.perf_counter()
    return t0, marks, result


def bench_fleet() -> None:
    from fleetlib import EmulatedFleet, fleet_unavailable

    from geoconsole.inventory import load_inventory

    why = fleet_unavailable()
    if why:
        print(f"launch / abort on the emulated fleet: skipped ({why})")
        return
    fleet = EmulatedFleet(hosts=4).build()
    try:
        inv = load_inventory(fleet.inventory_path, ssh_config=None)
        hosts = {h.name: LaunchHost.from_inventory(h) for h in inv.hosts}
        quick = fleet.dir / "quick.py"
        quick.write_text("import os\nprint('hi', os.environ['RANK'])\n")
        spans = []
        for k in range(3):
            t0, marks, result = asyncio.run(_launch_once(fleet, inv, hosts, str(quick), 29900 + 2 * k))
            assert result.ok, result.to_json()
            spans.append(marks["done"] - t0)
        print(f"launch 4 ranks on 4 hosts (SSH connect + start + exit): median {statistics.median(spans):.2f} s")
        token = uuid.uuid4().hex[:8]
        hang = fleet.dir / f"hang-{token}.py"
        hang.write_text("import os, sys, time\nif os.environ['RANK'] == '2':\n    time.sleep(1)\n"
                        "    print('FAILING', flush=True)\n    sys.exit(3)\ntime.sleep(300)\n")
        t0, marks, result = asyncio.run(_launch_once(fleet, inv, hosts, str(hang), 29950))
        assert result.aborted
        while any(token in cmd for h in fleet.hosts for _p, cmd in fleet.processes(h.name)):
            time.sleep(0.02)
        gone = time.perf_counter()
        print(f"abort on a failing rank: every process gone {gone - marks['fail']:.2f} s after it failed "
              f"(launcher returned after {marks['done'] - marks['fail']:.2f} s)")
    finally:
        fleet.teardown()


if __name__ == "__main__":
    bench_plan_export()
    bench_fleet()
