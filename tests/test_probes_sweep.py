"""Probe sweeps on the emulated fleet, through the ``geoconsole probe`` command.

Each link of the fleet is shaped by tbf at its own rate; TCP carries 1448 payload
bytes per 1514-byte frame, so a correct probe measures rate x 1448/1514.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import require_fleet
from fleetlib import TCP_PAYLOAD_SHARE, EmulatedFleet, fleet_unavailable
from geoconsole.cli import app

pytestmark = pytest.mark.fleet

GEOCONSOLE = [sys.executable, "-m", "geoconsole.cli"]


def probe_args(fleet, inventory: Path, out: Path, events: Path, *extra: str) -> list[str]:
    return ["--headless", "probe", "--inventory", str(inventory), "--out", str(out), "--events", str(events),
            "--known-hosts", str(fleet.known_hosts_path), "--ssh-config", str(out.parent / "no_config"), *extra]


def start_probe(fleet, tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, Path, Path]:
    """``geoconsole --headless probe`` on the fleet in the background: (process, fabric, events)."""
    out, events = tmp_path / "fabric.json", tmp_path / "events.jsonl"
    proc = subprocess.Popen(GEOCONSOLE + probe_args(fleet, fleet.inventory_path, out, events, *extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out, events


def read_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def workers_left(fleet) -> dict[str, list[str]]:
    """Probe worker processes still running, per host."""
    out = {}
    for host in fleet.hosts:
        found = [cmd for _pid, cmd in fleet.processes(host.name) if "worker-" in cmd]
        if found:
            out[host.name] = found
    return out


def device_children(fleet, name: str) -> list[int]:
    """Pids of the per-device children of the host's probe worker process."""
    workers = {pid for pid, cmd in fleet.processes(name) if "worker-" in cmd and not cmd.startswith("setsid")}
    children = []
    for pid in workers:
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid in workers:
            children.append(pid)
    return children


def wait_no_workers(fleet, seconds: float = 5.0) -> dict[str, list[str]]:
    deadline = time.monotonic() + seconds
    while True:
        left = workers_left(fleet)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def test_probe_measures_every_link_at_its_tbf_rate(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    out, events = tmp_path / "fabric.json", tmp_path / "events.jsonl"
    result = CliRunner().invoke(app, probe_args(fleet, fleet.inventory_path, out, events))
    assert result.exit_code == 0, result.output
    assert "measured 12 of 12 directional pairs on 4 devices" in result.output
    doc = json.loads(out.read_text())
    names = [d["host"] for d in doc["devices"]]
    assert names == ["h0", "h1", "h2", "h3"] and all(d["gpu"] is None for d in doc["devices"])
    report = []
    for i, src in enumerate(names):
        for j, dst in enumerate(names):
            if i == j:
                continue
            expected = fleet.rates_mbit[(src, dst)] * TCP_PAYLOAD_SHARE / 1000
            beta, r2 = doc["beta_gbps"][i][j], doc["fit_r2"][i][j]
            report.append(f"{src}->{dst} {beta:.4f}/{expected:.4f} R^2={r2:.4f}")
            assert doc["fit_flag"][i][j] is None
            assert doc["probe_interface"][i][j] == fleet.host(src).links[dst]
            assert doc["alpha_ms"][i][j] >= 0
    for i, src in enumerate(names):
        for j, dst in enumerate(names):
            if i != j:
                expected = fleet.rates_mbit[(src, dst)] * TCP_PAYLOAD_SHARE / 1000
                assert doc["beta_gbps"][i][j] == pytest.approx(expected, rel=0.10), report
                assert doc["fit_r2"][i][j] >= 0.98, report
    meta = doc["meta"]
    assert meta["torch"].startswith("2.13.0") and meta["backend"] == "gloo" and meta["nccl"] is None
    assert meta["mtu"] == 1500 and isinstance(meta["congestion_control"], str)
    assert meta["probe"]["schedule"] == "tournament" and meta["probe"]["rounds"] == 3
    assert meta["hosts"]["h2"]["hostname"] == "h2" and doc["measured_at"].endswith("+00:00")

    evs = read_events(events)
    assert evs[0]["event"] == "Discovered" and evs[-1]["event"] == "SweepDone"
    started = [e for e in evs if e["event"] == "PairStarted"]
    assert len(started) == 6 and len([e for e in evs if e["event"] == "PairMeasured"]) == 12
    by_round: dict[int, list[str]] = {}
    for e in started:
        by_round.setdefault(e["round"], []).extend([e["src"], e["dst"]])
    assert len(by_round) == 3
    for hosts in by_round.values():  # no host is in two pairs of one round
        assert len(hosts) == len(set(hosts)) == 4
    assert not wait_no_workers(fleet, 0.0)


def test_sshd_stopped_mid_sweep_nulls_that_hosts_pairs_and_the_rest_completes(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    proc, out, events = start_probe(fleet, tmp_path, "--pair-timeout", "30")
    try:
        deadline = time.monotonic() + 120
        while not any(e["event"] == "RoundStarted" and e["index"] == 1 for e in read_events(events)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        measured_before = {(e["src"], e["dst"]) for e in read_events(events) if e["event"] == "PairMeasured"}
        fleet.stop_sshd("h3")
        stdout, stderr = proc.communicate(timeout=180)
        left = wait_no_workers(fleet)
    finally:
        if proc.poll() is None:
            proc.kill()
        fleet.start_sshd("h3")
    assert proc.returncode == 3, stdout + stderr
    assert "host h3 lost" in stderr
    assert "fabric written to" in stderr and "with nulls" in stderr
    doc = json.loads(out.read_text())
    names = [d["host"] for d in doc["devices"]]
    nulls = []
    for i, src in enumerate(names):
        for j, dst in enumerate(names):
            if i == j:
                continue
            beta, flag = doc["beta_gbps"][i][j], doc["fit_flag"][i][j]
            if "h3" not in (src, dst):
                assert beta is not None and flag is None, (src, dst, flag)
            elif beta is None:
                assert doc["alpha_ms"][i][j] is None and flag.startswith("host-lost: h3"), flag
                nulls.append((src, dst))
            else:
                assert (src, dst) in measured_before  # measured before sshd stopped
    assert nulls, "stopping sshd left no pair unmeasured"
    assert doc["meta"]["hosts"]["h3"]["lost"]
    assert not left, f"worker processes left behind: {left}"


def test_ctrl_c_cancels_and_kills_every_remote_worker(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    proc, out, events = start_probe(fleet, tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not any(e["event"] == "PairMeasured" for e in read_events(events)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        assert workers_left(fleet), "expected running workers mid-sweep"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = workers_left(fleet)  # no waiting: cancel must have killed them before exiting
    assert proc.returncode == 130, stdout + stderr
    assert "error: interrupted; partial fabric written to" in stderr
    assert not left, f"worker processes left behind: {left}"
    doc = json.loads(out.read_text())
    flags = [f for row in doc["fit_flag"] for f in row if f]
    assert "cancelled" in flags
    assert any(b is not None for i, row in enumerate(doc["beta_gbps"]) for j, b in enumerate(row) if i != j)
    sweep_id = doc["meta"]["probe"]["sweep_id"]
    assert not list((Path.home() / ".cache/geoconsole/run").glob(f"{sweep_id}-*.pid"))


def test_cancel_stops_every_slot_before_the_cleanup_kills_the_workers(emulated_fleet, tmp_path):
    """In process: once cancel() returns, no pair is still running (a running pair would
    see its worker killed by the cleanup and start it again, leaving a pid file)."""
    import asyncio

    from geoconsole.inventory import load_inventory
    from probes.ssh import SSHPool
    from probes.sweep import PairMeasured, ProbeSettings, Sweep

    require_fleet()
    fleet = emulated_fleet
    inv = load_inventory(fleet.inventory_path, ssh_config=tmp_path / "no_config")

    async def main():
        pool = SSHPool(known_hosts=str(fleet.known_hosts_path), accept_new=False, connect_timeout=10)
        async with pool:
            sweep = Sweep(inv.hosts, pool=pool, settings=ProbeSettings(strategy="all"), labels={})
            seen = []
            async for ev in sweep.events():
                seen.append(type(ev).__name__)
                if isinstance(ev, PairMeasured):
                    break
            await sweep.cancel()
            names = {t.get_coro().__qualname__ for t in asyncio.all_tasks() if not t.done()}
            return sweep, names, seen

    sweep, names, seen = asyncio.run(main())
    assert "PairMeasured" in seen
    assert not {n for n in names if n.startswith("Sweep.")}, names
    assert sweep.fabric is not None and sweep._cancelled
    # the worker is killed by then; its `setsid -w` wrapper outside the killed process
    # group exits a moment after it (a restarted worker would stay)
    assert not wait_no_workers(fleet)
    left = list((Path.home() / ".cache/geoconsole/run").glob(f"{sweep.sweep_id}-*.pid"))
    assert not left, left


def test_shell_metacharacters_in_names_labels_and_paths_reach_no_shell(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    canary = tmp_path / "pwned"
    relative = f"geoconsole-pwned-{os.getpid()}"  # a path component cannot hold "/"
    weird_dir = tmp_path / f"py dir;$(touch {relative})"
    weird_dir.mkdir()
    python = weird_dir / f"python`touch {relative}`"
    python.write_text(f"#!/bin/sh\nexec {fleet.python} \"$@\"\n")
    python.chmod(0o755)
    # names and labels hold no whitespace (refused where loaded), so ${IFS} stands for it
    names = {"h2": f"h2;touch${{IFS}}{canary}", "h3": f"$(touch${{IFS}}{canary})&h3"}
    inventory = fleet.write_inventory(
        tmp_path / "weird.toml", names=names, hosts=["h2", "h3"],
        extra={"h2": {"region": "`touch${IFS}x`", "network_group": "';touch${IFS}x;'"},
               "h3": {"python": str(python), "zone": "z|touch${IFS}x"}})
    out, events = tmp_path / "fabric.json", tmp_path / "events.jsonl"
    result = CliRunner().invoke(app, probe_args(fleet, inventory, out, events, "--sizes-mb", "0.25,0.5,1",
                                                "--max-transfer-s", "0.05", "--reps", "2"))
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert [d["host"] for d in doc["devices"]] == [names["h2"], names["h3"]]
    assert doc["devices"][0]["region"] == "`touch${IFS}x`"
    assert doc["devices"][1]["zone"] == "z|touch${IFS}x"
    assert doc["meta"]["hosts"][names["h3"]]["python"] == str(python)
    assert doc["beta_gbps"][0][1] is not None and doc["beta_gbps"][1][0] is not None
    assert not canary.exists()
    assert not (Path.cwd() / relative).exists() and not (Path.home() / relative).exists()


def test_fleet_teardown_leaves_no_namespace_link_or_process():
    why = fleet_unavailable()
    if why:
        require_fleet()
    fleet = EmulatedFleet(hosts=2).build()
    namespaces = [h.namespace for h in fleet.hosts]
    folder = fleet.dir
    sshd_pids = [h.sshd.pid for h in fleet.hosts]
    assert all(ns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
               for ns in namespaces)
    fleet.teardown()
    assert fleet.leftovers() == []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in namespaces)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert fleet.tag not in links
    assert not folder.exists()
    for pid in sshd_pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    mentions = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(folder).encode() in (entry / "cmdline").read_bytes():
                    mentions.append(entry.name)
            except OSError:
                pass
    assert not mentions, f"processes of the torn-down fleet: {mentions}"


def test_a_killed_worker_is_restarted_and_its_pair_retried(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    proc, out, events = start_probe(fleet, tmp_path)
    try:
        deadline = time.monotonic() + 120
        # Slots start as soon as their hosts are ready: wait for one of h1's own pairs.
        while not any(e["event"] == "PairStarted" and "h1" in (e["src"], e["dst"]) for e in read_events(events)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        victims = device_children(fleet, "h1")
        assert len(victims) == 1, fleet.processes("h1")  # h1 has one device: one child of its worker
        os.kill(victims[0], signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout + stderr
    assert "measured 12 of 12 directional pairs" in stdout
    doc = json.loads(out.read_text())
    assert all(f is None for row in doc["fit_flag"] for f in row)
    measured = [e for e in read_events(events) if e["event"] == "PairMeasured"]
    assert any(e["attempts"] == 2 for e in measured if "h1" in (e["src"], e["dst"]))
    assert not wait_no_workers(fleet)


def test_unreachable_host_keeps_its_row_with_null_pairs(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    inventory = fleet.write_inventory(tmp_path / "three.toml", hosts=["h0", "h2", "h3"])
    out, events = tmp_path / "fabric.json", tmp_path / "events.jsonl"
    fleet.stop_sshd("h0")
    try:
        result = CliRunner().invoke(app, probe_args(fleet, inventory, out, events, "--connect-timeout", "3",
                                                    "--max-transfer-s", "0.1"))
    finally:
        fleet.start_sshd("h0")
    assert result.exit_code == 3, result.output
    assert "host h0 lost: connection refused at" in result.output
    doc = json.loads(out.read_text())
    assert [d["host"] for d in doc["devices"]] == ["h0", "h2", "h3"]
    assert doc["beta_gbps"][1][2] is not None and doc["beta_gbps"][2][1] is not None
    for k in (1, 2):
        for i, j in ((0, k), (k, 0)):
            assert doc["beta_gbps"][i][j] is None
            assert doc["fit_flag"][i][j].startswith("host-lost: h0: connection refused at")
    assert "2 device pairs unmeasured: h0 - h2 (host-lost: h0: connection refused" in result.output
    assert not wait_no_workers(fleet)
