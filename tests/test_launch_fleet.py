"""Launching through the real path on the emulated fleet: SSH, torchrun, gloo, aborts.

Each emulated host is a network namespace with its own hostname (h0..h3), so a rank that
prints ``socket.gethostname()`` says where it really ran.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from geoconsole.inventory import load_inventory
from geoconsole.launch.plan import LaunchHost, build_plan
from geoconsole.launch.run import resolve_interfaces, run_plan
from probes.ssh import SSHPool
from solver.fabric import Device

pytestmark = pytest.mark.fleet

# A gloo all-reduce over every rank. The fleet's hosts are joined by a mesh of direct
# links, so no single interface reaches every peer: the program binds its gloo device to
# the host's own address (GEOCONSOLE_HOST_ADDR), which every peer routes to.
GLOO_PROGRAM = """\
import os, socket, sys
from datetime import timedelta
import torch
import torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1, world,
                      rank == 0, timedelta(seconds=60))
opts = dist.ProcessGroupGloo._Options()
opts._devices = [dist.ProcessGroupGloo.create_device(hostname=os.environ["GEOCONSOLE_HOST_ADDR"])]
opts._timeout = timedelta(seconds=60)
pg = dist.ProcessGroupGloo(store, rank, world, opts)
t = torch.tensor([float(rank)])
pg.allreduce([t]).wait()
print("REPORT rank=%d world=%d host=%s sum=%d master=%s" % (
    rank, world, socket.gethostname(), int(t.item()), os.environ["MASTER_ADDR"]), flush=True)
pg.barrier().wait()
# Leave without running C++ destructors: a peer that tears down its gloo pairs and store
# while another is still finishing the barrier can abort that one at exit.
sys.stdout.flush()
os._exit(0)
"""

# Plain init_process_group: gloo binds to GLOO_SOCKET_IFNAME, the interface the launcher
# found with `ip route get` (the direct link between the two hosts).
PLAIN_PROGRAM = """\
import os, socket
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([1.0])
dist.all_reduce(t)
print("REPORT rank=%d host=%s sum=%d ifname=%s" % (dist.get_rank(), socket.gethostname(),
      int(t.item()), os.environ.get("GLOO_SOCKET_IFNAME")), flush=True)
dist.destroy_process_group()
"""

# Every rank starts a grandchild that ignores SIGTERM (so only the SIGKILL after the
# grace period stops it) to prove the whole tree is stopped; rank FAIL exits 3 after a
# moment, the others would run for minutes.
HANGING_PROGRAM = """\
import os, subprocess, sys, time
subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300; : " + sys.argv[0]])
print("READY", os.environ["RANK"], flush=True)
if os.environ["RANK"] == os.environ.get("FAIL_RANK"):
    time.sleep(2)
    sys.exit(3)
time.sleep(300)
"""


def _inventory(fleet):
    inv = load_inventory(fleet.inventory_path, ssh_config=None)
    return inv, {h.name: LaunchHost.from_inventory(h) for h in inv.hosts}


def _program(fleet, text: str) -> tuple[str, str]:
    token = uuid.uuid4().hex[:12]
    path = fleet.dir / f"prog-{token}.py"
    path.write_text(text)
    return str(path), token


def _leftovers(fleet, token: str) -> list[str]:
    return [f"{h.name}: {cmd}" for h in fleet.hosts for _pid, cmd in fleet.processes(h.name)
            if token in cmd]


def _wait_gone(fleet, token: str, seconds: float = 15.0) -> list[str]:
    deadline = time.monotonic() + seconds
    while True:
        left = _leftovers(fleet, token)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


class Lines:
    def __init__(self) -> None:
        self.items: list[tuple[int, str, str]] = []

    def __call__(self, p, stream, line) -> None:
        self.items.append((p.rank, p.host, line))

    def reports(self) -> dict[int, dict[str, str]]:
        out = {}
        for rank, host, line in self.items:
            if line.startswith("REPORT"):
                out[rank] = dict(kv.split("=", 1) for kv in line.split()[1:]) | {"_from": host}
        return out


async def _sessions(pool, inv, names=None):
    return {h.name: await pool.session(h) for h in inv.hosts if names is None or h.name in names}


async def test_torchrun_gloo_ranks_run_where_planned(emulated_fleet):
    fleet = emulated_fleet
    inv, hosts = _inventory(fleet)
    devices = [Device(h.name) for h in inv.hosts]
    rank_map = [2, 0, 3, 1]  # h1 runs rank 0: the rendezvous must be on h1
    prog, token = _program(fleet, GLOO_PROGRAM)
    plan = build_plan(rank_map, devices, hosts, [prog], mode="torchrun", backend="gloo", port=29610)
    assert plan.master_host == "h1"
    lines = Lines()
    async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
        result = await run_plan(plan, await _sessions(pool, inv), sink=lines)
    assert result.ok, (result.to_json(), "\n".join(map(str, lines.items)))
    reports = lines.reports()
    assert sorted(reports) == [0, 1, 2, 3]
    for p in plan.processes:
        r = reports[p.rank]
        assert r["host"] == p.host == r["_from"]
        assert r["world"] == "4" and r["sum"] == "6"
        assert r["master"] == fleet.host("h1").address
    assert _wait_gone(fleet, token) == []


async def test_cpu_slots_run_several_gloo_processes_on_each_host(emulated_fleet):
    fleet = emulated_fleet
    inv, hosts = _inventory(fleet)
    devices = [Device(h, slot=k) for h in ("h0", "h2") for k in range(2)]  # hostfile "h0 slots=2"
    rank_map = [3, 0, 1, 2]  # h0's second slot runs rank 0
    prog, token = _program(fleet, GLOO_PROGRAM)
    plan = build_plan(rank_map, devices, hosts, [prog], mode="torchrun", port=29630)
    assert plan.backend == "gloo" and plan.master_host == "h0"
    lines = Lines()
    async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
        result = await run_plan(plan, await _sessions(pool, inv, {"h0", "h2"}), sink=lines)
    assert result.ok, (result.to_json(), "\n".join(map(str, lines.items)))
    reports = lines.reports()
    assert sorted(reports) == [0, 1, 2, 3]
    for p in plan.processes:
        assert reports[p.rank]["host"] == p.host == devices[p.device].host
        assert reports[p.rank]["world"] == "4" and reports[p.rank]["sum"] == "6"
    assert sorted(p.local_index for p in plan.processes if p.host == "h0") == [0, 1]
    assert _wait_gone(fleet, token) == []


async def test_env_mode_plain_init_uses_the_resolved_interface(emulated_fleet):
    fleet = emulated_fleet
    inv, hosts = _inventory(fleet)
    devices = [Device("h2"), Device("h3")]
    prog, token = _program(fleet, PLAIN_PROGRAM)
    lines = Lines()
    async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
        sessions = await _sessions(pool, inv, {"h2", "h3"})
        draft = build_plan([1, 0], devices, hosts, [prog], mode="env", backend="gloo", port=29620)
        ifaces = await resolve_interfaces(draft, sessions)
        assert ifaces == {"h2": fleet.host("h2").links["h3"], "h3": fleet.host("h3").links["h2"]}
        plan = build_plan([1, 0], devices, hosts, [prog], mode="env", backend="gloo",
                          port=29620, interfaces=ifaces)
        result = await run_plan(plan, sessions, sink=lines)
    assert result.ok, (result.to_json(), lines.items[-20:])
    reports = lines.reports()
    assert reports[0]["host"] == "h3" and reports[1]["host"] == "h2"
    assert reports[0]["ifname"] == "to-h2" and reports[0]["sum"] == "2"
    assert _wait_gone(fleet, token) == []


async def test_failing_rank_aborts_every_rank_on_every_host(emulated_fleet):
    fleet = emulated_fleet
    inv, hosts = _inventory(fleet)
    devices = [Device(h.name) for h in inv.hosts]
    prog, token = _program(fleet, HANGING_PROGRAM)
    plan = build_plan([0, 1, 2, 3], devices, hosts, [prog], mode="torchrun", backend="gloo",
                      port=29630, env={"FAIL_RANK": "2"})
    lines = Lines()
    t0 = time.monotonic()
    async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
        result = await run_plan(plan, await _sessions(pool, inv), sink=lines, grace_s=2)
    assert time.monotonic() - t0 < 120
    assert result.aborted and not result.ok
    assert "rank 2 on h2 failed" in result.reason
    status = {o.rank: o.exit_status for o in result.outcomes}
    assert status[2] != 0 and all(status[r] != 0 for r in (0, 1, 3))
    assert _wait_gone(fleet, token) == []


async def test_interrupt_stops_every_rank(emulated_fleet):
    fleet = emulated_fleet
    inv, hosts = _inventory(fleet)
    devices = [Device(h.name) for h in inv.hosts]
    prog, token = _program(fleet, HANGING_PROGRAM)
    plan = build_plan([3, 2, 1, 0], devices, hosts, [prog], mode="env", backend="gloo", port=29640)
    lines = Lines()
    async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
        task = asyncio.ensure_future(run_plan(plan, await _sessions(pool, inv), sink=lines, grace_s=2))
        deadline = time.monotonic() + 60
        while sum(line.startswith("READY") for _r, _h, line in lines.items) < 4:
            assert time.monotonic() < deadline and not task.done(), lines.items
            await asyncio.sleep(0.1)
        assert len(_leftovers(fleet, token)) >= 4 * 3  # supervisor, shell/python, sleep
        task.cancel()
        result = await task
    assert result.interrupted and result.aborted
    assert _wait_gone(fleet, token) == []


async def test_lost_host_aborts_the_job_and_its_ranks_die_with_the_channel(emulated_fleet):
    """A host drops off (sshd and its sessions killed): its rank sees EOF and stops; the
    launcher reports the lost connection and stops every other rank."""
    fleet = emulated_fleet
    inv, hosts = _inventory(fleet)
    devices = [Device(h.name) for h in inv.hosts]
    prog, token = _program(fleet, HANGING_PROGRAM)
    plan = build_plan([0, 1, 2, 3], devices, hosts, [prog], mode="env", backend="gloo", port=29650)
    lines = Lines()
    try:
        async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
            task = asyncio.ensure_future(run_plan(plan, await _sessions(pool, inv), sink=lines, grace_s=2))
            deadline = time.monotonic() + 60
            while sum(line.startswith("READY") for _r, _h, line in lines.items) < 4:
                assert time.monotonic() < deadline and not task.done(), lines.items
                await asyncio.sleep(0.1)
            await asyncio.to_thread(fleet.stop_sshd, "h1")
            result = await asyncio.wait_for(task, 60)
    finally:
        fleet.start_sshd("h1")
    assert result.aborted and not result.ok
    lost = {o.rank: o for o in result.outcomes}[1]
    assert lost.error and "connection lost" in lost.error
    assert "rank 1 on h1 failed" in result.reason
    assert _wait_gone(fleet, token) == []
