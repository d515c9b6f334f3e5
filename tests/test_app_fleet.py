"""The console on the emulated SSH fleet: connect and discover, then a live sweep."""

from __future__ import annotations


import numpy as np
import pytest

from support import wait_until, demo_app
from textual.widgets import Input
from screens.dialogs import ConfirmDialog
from screens.heatmap_view import Heatmap

pytestmark = pytest.mark.fleet




async def test_connect_discovers_every_host(emulated_fleet):
    f = emulated_fleet
    app = demo_app(inventory=f.inventory_path)
    app.session.known_hosts = str(f.known_hosts_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("c")
        screen = app.screen
        names = [h.name for h in f.hosts]
        await wait_until(lambda: all(screen.fleet.rows[n].state in ("connected", "failed") for n in names), 120)
        for n in names:
            row = screen.fleet.rows[n]
            assert row.state == "connected", row.error
            assert row.gpus == "CPU" and "python" in row.versions


async def test_unreachable_hosts_fail_with_their_reason_within_the_connect_timeout(emulated_fleet, tmp_path):
    import socket

    f = emulated_fleet
    inventory = f.write_inventory(tmp_path / "hosts.toml")
    with socket.socket() as mute:  # accepts TCP, never sends an SSH banner
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        inventory.write_text(inventory.read_text() + "\n".join([
            "", "[[hosts]]", 'name = "ghost"', 'address = "ghost.invalid"',
            "", "[[hosts]]", 'name = "closed"', f'address = "{f.hosts[0].address}"', "port = 2222",
            "", "[[hosts]]", 'name = "mute"', 'address = "127.0.0.1"', f"port = {mute.getsockname()[1]}", ""]))
        app = demo_app(inventory=inventory)
        app.session.known_hosts = str(f.known_hosts_path)
        async with app.run_test(size=(160, 40)) as pilot:
            screen = app.screen
            screen.connect_timeout_s = 2
            await pilot.press("c")
            bad = ("ghost", "closed", "mute")
            # the bad hosts are reported within the 2 s connect timeout (20 s: a busy machine)
            await wait_until(lambda: all(screen.fleet.rows[n].state == "failed" for n in bad), 20)
            rows = screen.fleet.rows
            assert rows["ghost"].error.startswith("name does not resolve: ghost.invalid")
            assert rows["closed"].error == f"connection refused at {f.hosts[0].address}:2222 (no SSH server listening)"
            assert rows["mute"].error.startswith("connect to 127.0.0.1:") and rows["mute"].error.endswith("timed out after 2 s")
            names = [h.name for h in f.hosts]
            await wait_until(lambda: all(rows[n].state in ("connected", "failed") for n in names), 120)
            assert all(rows[n].state == "connected" for n in names), [rows[n].error for n in names]
            await pilot.pause()
            summary = str(screen.query_one("#fleet-summary").render())
            assert f"{len(names)} connected, 3 failed" in summary, summary


async def test_unknown_host_key_waits_for_a_confirmation(emulated_fleet, tmp_path):
    f = emulated_fleet
    app = demo_app(inventory=f.inventory_path)
    app.session.known_hosts = str(tmp_path / "empty_known_hosts")
    name = f.hosts[0].name
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("r")  # retry the first (selected) host
        screen = app.screen
        await wait_until(lambda: screen.fleet.rows[name].state not in ("not connected", "queued", "connecting"), 60)
        row = screen.fleet.rows[name]
        assert row.state == "new host key" and "SHA256:" in row.error
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        assert row.key_error.fingerprint in app.screen.body
        await pilot.press("y")
        await wait_until(lambda: screen.fleet.rows[name].state in ("connected", "failed"), 60)
        assert screen.fleet.rows[name].state == "connected", screen.fleet.rows[name].error
        assert len((tmp_path / "empty_known_hosts").read_text().splitlines()) == 1


async def test_a_changed_host_key_is_refused_and_k_says_what_to_do(emulated_fleet, tmp_path):
    """k on a changed key said 'no new host key waiting', which reads as nothing wrong."""
    f = emulated_fleet
    name = f.hosts[0].name
    lines = [line for line in f.known_hosts_path.read_text().splitlines() if line.strip()]
    other = next(line for line in lines if line.split()[0] != f.hosts[0].address)
    forged = tmp_path / "known_hosts"  # the first host's address with another host's key
    forged.write_text(f"{f.hosts[0].address} {' '.join(other.split()[1:])}\n")
    app = demo_app(inventory=f.inventory_path)
    app.session.known_hosts = str(forged)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("r")
        screen = app.screen
        await wait_until(lambda: screen.fleet.rows[name].state not in ("not connected", "queued", "connecting"), 60)
        assert screen.fleet.rows[name].state == "failed" and "host key CHANGED" in screen.fleet.rows[name].error
        await pilot.press("k")
        await pilot.pause()
        assert not isinstance(app.screen, ConfirmDialog)
        assert any("never accepted here" in n.message for n in app._notifications)


async def test_sweep_fills_the_heatmap_live(emulated_fleet):
    f = emulated_fleet
    app = demo_app(inventory=f.inventory_path)
    app.session.known_hosts = str(f.known_hosts_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("2", "s")
        screen = app.screen
        heatmap = screen.query_one(Heatmap)
        seen_partial = []

        def measured() -> int:
            fab = heatmap.fabric
            if fab is None:
                return 0
            finite = np.isfinite(fab.alpha_ms)
            np.fill_diagonal(finite, False)
            count = int(finite.sum())
            total = fab.n * (fab.n - 1)
            if 0 < count < total:
                seen_partial.append(count)
            return count

        await wait_until(lambda: measured() > 0 or screen.sweep is None and app.session.fabric is not None, 240)
        await wait_until(lambda: screen.sweep is None, 300)
        await pilot.pause()
        fabric = app.session.fabric
        assert fabric is not None and fabric.n == len(f.hosts)
        assert fabric.missing_pairs() == []
        assert seen_partial, "the heatmap never showed a partly measured fabric"
        assert "sweep done" in str(screen.query_one("#sweep-status").render())
        # Measured bandwidth follows the tbf rate of each link (about 95 % of it).
        names = [d.host for d in fabric.devices]
        i, j = names.index("h0"), names.index("h1")
        rate = f.rates_mbit[("h0", "h1")] / 1000
        assert 0.7 * rate < fabric.beta_gbps[i, j] < 1.1 * rate


def fleet_app(f, rank_map):
    """The console on the fleet with a measured-looking fabric and one solution."""
    import sys

    from geoconsole.session import Solution
    from solver.fabric import Device, Fabric
    from solver.workload import Workload

    app = demo_app(inventory=f.inventory_path)
    app.session.known_hosts = str(f.known_hosts_path)
    devices = tuple(Device(h.name, None, "lab") for h in f.hosts)
    n = len(devices)
    alpha, beta = np.full((n, n), 1.0), np.full((n, n), 1.0)
    np.fill_diagonal(alpha, 0)
    np.fill_diagonal(beta, 0)
    app.session.workload = Workload(2, n // 2, 0.1, 0.1)
    app.session.set_fabric(Fabric(alpha, beta, ("lab",) * n, devices, source="fleet"))
    app.session.add_solution(Solution("solve #1", np.asarray(rank_map), 1.0, app.session.workload,
                                      app.session.digest(), "2026-11-29T12:00:00Z"))
    return app, sys.executable


async def test_launch_runs_every_rank_where_planned_and_streams_output(emulated_fleet):
    f = emulated_fleet
    rank_map = [3, 2, 1, 0]
    app, python = fleet_app(f, rank_map)
    app.session.fabric.meta = {"hosts": {f.hosts[0].name: {"mtu": 1234}}}  # unlike the host: a warning
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("6")
        screen = app.screen
        screen.query_one("#launch-command", Input).value = (
            f"{python} -c 'import os, socket; print(\"hello\", os.environ[\"RANK\"], socket.gethostname())'"
        )
        await pilot.press("enter", "m")  # env mode: RANK set directly
        await pilot.pause()
        assert screen.plan is not None and screen.plan.mode == "env"
        await pilot.press("l")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        await wait_until(lambda: screen.result is not None, 120)
        assert screen.result.ok, screen.result.to_json()
        lines = list(screen.query_one("#launch-plan").lines)
        for row, rank in enumerate(rank_map):
            assert any(f"hello {rank} {f.hosts[row].name}" in line for line in lines), lines
        assert any("all ranks finished" in line for line in lines)
        assert any(f"measurement-mismatch: {f.hosts[0].name}: MTU 1234 then" in line for line in lines), lines


async def test_abort_stops_every_rank(emulated_fleet):
    f = emulated_fleet
    app, python = fleet_app(f, [0, 1, 2, 3])
    marker = "geoconsole-abort-test-sleep"
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("6")
        screen = app.screen
        screen.query_one("#launch-command", Input).value = f"{python} -c 'import time; time.sleep(120)' {marker}"
        await pilot.press("enter", "m", "l")
        await pilot.pause()
        await pilot.press("y")
        await wait_until(lambda: all(any(marker in cmd for _pid, cmd in f.processes(h.name)) for h in f.hosts), 60)
        await pilot.press("a")
        await wait_until(lambda: screen.result is not None, 60)
        assert screen.result.aborted
        await wait_until(lambda: not any(marker in cmd for h in f.hosts for _pid, cmd in f.processes(h.name)), 30)


async def test_cancelled_sweep_keeps_what_was_measured(emulated_fleet):
    f = emulated_fleet
    app = demo_app(inventory=f.inventory_path)
    app.session.known_hosts = str(f.known_hosts_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.press("2", "s")
        screen = app.screen
        heatmap = screen.query_one(Heatmap)

        def some_measured() -> bool:
            fab = heatmap.fabric
            return fab is not None and bool(np.isfinite(fab.alpha_ms[~np.eye(fab.n, dtype=bool)]).any())

        await wait_until(some_measured, 240)

        def workers() -> list:
            return [cmd for h in f.hosts for _pid, cmd in f.processes(h.name) if "worker" in cmd and "geoconsole" in cmd]

        assert workers(), "expected the sweep's probe workers to be running"
        await pilot.press("x")
        await wait_until(lambda: screen.sweep is None, 120)
        await pilot.pause()
        assert "sweep cancelled" in str(screen.query_one("#sweep-status").render())
        fabric = app.session.fabric
        assert fabric is not None and fabric.missing_pairs()  # partial, unmeasured pairs stay null
        await wait_until(lambda: not workers(), 30)  # no probe worker left behind


async def test_refresh_marks_the_solution_stale_on_bottleneck_drift_and_offers_to_solve(emulated_fleet):
    from geoconsole.session import Solution
    from solver.fabric import Device, Fabric
    from solver.workload import Workload

    f = emulated_fleet
    app = demo_app(inventory=f.inventory_path)
    app.session.known_hosts = str(f.known_hosts_path)
    devices = tuple(Device(h.name, None, "lab") for h in f.hosts)
    n = len(devices)
    alpha, beta = np.full((n, n), 0.1), np.zeros((n, n))
    for i, a in enumerate(f.hosts):
        for j, b in enumerate(f.hosts):
            if i != j:  # the fabric believes every link twice as fast as its tbf rate
                beta[i, j] = 2 * f.rates_mbit[(a.name, b.name)] / 1000
    np.fill_diagonal(alpha, 0)
    app.session.workload = Workload(2, n // 2, 0.1, 0.1)
    app.session.set_fabric(Fabric(alpha, beta, ("lab",) * n, devices, source="fleet"))
    sol = Solution("solve #1", np.asarray([3, 2, 1, 0]), 1.0, app.session.workload, app.session.digest(),
                   "2026-11-29T12:00:00Z")
    app.session.add_solution(sol)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("2", "f")
        screen = app.screen
        await wait_until(lambda: not screen.refreshing and screen.sweep is None
                         and "STALE" in str(screen.query_one("#sweep-status").render()), 240)
        assert app.session.is_stale(sol)
        fabric = app.session.fabric
        names = [d.host for d in fabric.devices]
        i, j = names.index("h2"), names.index("h3")  # rank 0 -> rank 1: the pipeline bottleneck
        assert fabric.beta_gbps[i, j] == pytest.approx(f.rates_mbit[("h2", "h3")] / 1000, rel=0.15)
        await pilot.press("S")
        await wait_until(lambda: app.current_mode == "solve", 30)
