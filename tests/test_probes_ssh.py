"""SSH sessions against real sshd hosts: host keys, quoting, reconnect-once."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from typer.testing import CliRunner

from conftest import require_fleet
from geoconsole.cli import app
from geoconsole.inventory import load_inventory
from probes.ssh import CommandTimeout, ConnectError, HostKeyError, SSHPool

pytestmark = pytest.mark.fleet


def inventory_cmd(fleet, known_hosts, *extra):
    return CliRunner().invoke(app, [
        "--headless", "inventory", "--inventory", str(fleet.inventory_path),
        "--known-hosts", str(known_hosts), "--ssh-config", "/nonexistent/ssh_config", *extra])


def test_unknown_host_key_is_refused_and_accept_new_records_it(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    known = tmp_path / "known_hosts"
    known.write_text("")
    refused = inventory_cmd(fleet, known)
    assert refused.exit_code == 3
    error = [line for line in refused.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1
    assert "4 of 4 hosts failed" in error[0] and "host key ssh-ed25519 SHA256:" in error[0]
    assert "--accept-new" in error[0]
    assert known.read_text() == ""  # nothing recorded without --accept-new

    accepted = inventory_cmd(fleet, known, "--accept-new")
    assert accepted.exit_code == 0, accepted.output
    lines = known.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(h.address for h in fleet.hosts)
    expected = {h.address: (fleet.dir / h.name / "ssh_host_ed25519_key.pub").read_text().split()[1]
                for h in fleet.hosts}
    assert {line.split()[0]: line.split()[2] for line in lines} == expected
    assert accepted.output.count("note: recorded new host key") == 4

    again = inventory_cmd(fleet, known)  # now trusted without the flag
    assert again.exit_code == 0


def test_changed_host_key_is_refused_even_with_accept_new(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    h0, h1 = fleet.hosts[0], fleet.hosts[1]
    other_key = (fleet.dir / h1.name / "ssh_host_ed25519_key.pub").read_text().split()
    known = tmp_path / "known_hosts"
    known.write_text(fleet.known_hosts_path.read_text().replace(
        next(l for l in fleet.known_hosts_path.read_text().splitlines() if l.startswith(h0.address + " ")),
        f"{h0.address} {other_key[0]} {other_key[1]}"))
    before = known.read_text()
    result = inventory_cmd(fleet, known, "--accept-new")
    assert result.exit_code == 3
    assert "1 of 4 hosts failed: h0: host key CHANGED: offered ssh-ed25519 SHA256:" in result.output
    assert known.read_text() == before


def test_shell_metacharacters_reach_the_remote_shell_quoted(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    canary = tmp_path / "pwned"
    nasty = [f"$(touch {canary})", f"`touch {canary}`", f"; touch {canary}", f"a'b\"c|touch {canary}",
             "new\nline", "$HOME", "*", ""]
    host = load_inventory(fleet.inventory_path, ssh_config=None).host("h1")

    async def run():
        async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
            session = await pool.session(host)
            echoed = await session.run(["printf", r"%s\0", *nasty], check=True)
            env = await session.run(["sh", "-c", 'printf %s "$NASTY"'], env={"NASTY": nasty[0]}, check=True)
            return echoed.stdout, env.stdout

    echoed, env = asyncio.run(run())
    assert echoed.split("\0")[:-1] == nasty
    assert env == nasty[0]
    assert not canary.exists()


def test_reconnects_once_after_the_connection_drops(emulated_fleet):
    require_fleet()
    fleet = emulated_fleet
    host = load_inventory(fleet.inventory_path, ssh_config=None).host("h2")

    async def run():
        async with SSHPool(known_hosts=fleet.known_hosts_path, connect_timeout=3) as pool:
            session = await pool.session(host)
            assert (await session.run(["hostname"])).stdout.strip() == "h2"
            fleet.stop_sshd("h2")  # kills the open session too
            fleet.start_sshd("h2")
            second = await session.run(["hostname"])
            reconnects = session.reconnects
            fleet.stop_sshd("h2")
            try:
                with pytest.raises(ConnectError, match="h2: connection refused at .*:22"):
                    await session.run(["hostname"])
            finally:
                fleet.start_sshd("h2")
            return second.stdout.strip(), reconnects

    hostname, reconnects = asyncio.run(run())
    assert hostname == "h2" and reconnects == 1


def test_pool_refuses_unknown_key_with_fingerprint(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    host = load_inventory(fleet.inventory_path, ssh_config=None).host("h3")
    pub = (fleet.dir / "h3" / "ssh_host_ed25519_key.pub").read_text()

    async def run():
        async with SSHPool(known_hosts=tmp_path / "absent" / "known_hosts") as pool:
            await pool.session(host)

    with pytest.raises(HostKeyError) as info:
        asyncio.run(run())
    import asyncssh

    fingerprint = asyncssh.import_public_key(pub).get_fingerprint("sha256")
    assert info.value.kind == "unknown" and info.value.fingerprint == fingerprint
    assert not (tmp_path / "absent").exists()


def test_changed_key_of_another_type_is_refused_as_changed(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    host = load_inventory(fleet.inventory_path, ssh_config=None).host("h1")
    import asyncssh

    rsa = asyncssh.generate_private_key("ssh-rsa", key_size=2048).export_public_key().decode().split()
    known = tmp_path / "known_hosts"
    known.write_text(f"{host.address} {rsa[0]} {rsa[1]}\n")

    async def run():
        async with SSHPool(known_hosts=known, accept_new=True) as pool:
            await pool.session(host)

    with pytest.raises(HostKeyError) as info:
        asyncio.run(run())
    assert info.value.kind == "changed"
    assert "host key CHANGED" in str(info.value)
    assert known.read_text().count("\n") == 1


def test_command_timeout_raises_and_the_session_stays_usable(emulated_fleet):
    require_fleet()
    fleet = emulated_fleet
    host = load_inventory(fleet.inventory_path, ssh_config=None).host("h0")

    async def run():
        async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
            session = await pool.session(host)
            with pytest.raises(CommandTimeout, match=r"h0: command timed out after 0.5 s: sh -c"):
                await session.run(["sh", "-c", "read line; sleep 30"], timeout=0.5)
            return (await session.run(["echo", "still usable"])).stdout

    assert asyncio.run(run()) == "still usable\n"
    for pid, cmd in fleet.processes("h0"):  # the closed command may linger; tidy up
        if "sleep 30" in cmd:
            os.kill(pid, signal.SIGKILL)


def test_bad_hosts_beside_good_ones_are_each_one_error_line_and_exit_3(emulated_fleet, tmp_path):
    """A name that does not resolve, a port that refuses, a host that never answers the
    handshake: each is reported with its reason within the connect timeout, the good
    hosts are discovered, exit 3, one summary line, no traceback."""
    import json
    import socket
    import time

    require_fleet()
    fleet = emulated_fleet
    inventory = fleet.write_inventory(tmp_path / "hosts.toml")
    with socket.socket() as mute:  # accepts TCP, never sends an SSH banner
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        inventory.write_text(inventory.read_text() + "\n".join([
            "", "[[hosts]]", 'name = "ghost"', 'address = "ghost.invalid"',
            "", "[[hosts]]", 'name = "closed"', f'address = "{fleet.hosts[0].address}"', "port = 2222",
            "", "[[hosts]]", 'name = "mute"', 'address = "127.0.0.1"', f"port = {mute.getsockname()[1]}", ""]))
        start = time.monotonic()
        r = CliRunner().invoke(app, [
            "--headless", "inventory", "-i", str(inventory), "--known-hosts", str(fleet.known_hosts_path),
            "--ssh-config", "/nonexistent/ssh_config", "--connect-timeout", "2", "--json"])
        elapsed = time.monotonic() - start
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: 3 of 7 hosts failed: ghost: name does not resolve")
    rows = {h["name"]: h for h in json.loads(r.stdout)["hosts"]}
    for h in fleet.hosts:
        assert rows[h.name].get("hostname") == h.name, rows[h.name]
    assert rows["ghost"]["error"].startswith("ghost: name does not resolve: ghost.invalid")
    assert rows["closed"]["error"] == f"closed: connection refused at {fleet.hosts[0].address}:2222 (no SSH server listening)"
    assert rows["mute"]["error"].startswith("mute: connect to 127.0.0.1:") and "timed out after 2 s" in rows["mute"]["error"]
    assert elapsed < 60, elapsed  # discovery of the good hosts included; the bad ones take <= 2 s each
