"""Connect failures are one host's error line, in bounded time, on every path.

No emulated fleet needed: a name under ``.invalid`` (RFC 6761: never resolves), a
loopback port where nothing listens, and a resolver that never answers (patched).
The fleet tests (test_probes_ssh.py, test_app_fleet.py) repeat this beside good hosts.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geoconsole.cli import app
from probes.ssh import ConnectError, SSHPool, SSHTarget, read_known_hosts
from solver.files import FileError

UNRESOLVABLE = "no-such-host.invalid"
FABRIC = {
    "labels": ["a", "a", "b", "b"],
    "alpha_ms": [[0, 1, 30, 30], [1, 0, 30, 30], [30, 30, 0, 1], [30, 30, 1, 0]],
    "beta_gbps": [[0, 10, 1, 1], [10, 0, 1, 1], [1, 1, 0, 10], [1, 1, 10, 0]],
    "devices": [{"host": "a", "gpu": 0}, {"host": "a", "gpu": 1},
                {"host": "b", "gpu": 0}, {"host": "b", "gpu": 1}],
}
# A known_hosts entry for an IP and one for a name: matching must handle both.
KNOWN = ("198.51.100.7 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHHc5Nyo0e/4oAaqzfJ2ww2lZSQn0GKm1/EPXDl4dE6x\n"
         "named.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHHc5Nyo0e/4oAaqzfJ2ww2lZSQn0GKm1/EPXDl4dE6x\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def bad_inventory(tmp_path) -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text(f'[[hosts]]\nname = "a"\naddress = "{UNRESOLVABLE}"\n\n'
                    f'[[hosts]]\nname = "b"\naddress = "127.0.0.1"\nport = {free_port()}\n')
    return path


@pytest.fixture
def known(tmp_path) -> Path:
    path = tmp_path / "known_hosts"
    path.write_text(KNOWN)
    return path


def run(*args):
    return CliRunner().invoke(app, ["--headless", *args])


def error_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def connect(host, **options) -> BaseException:
    async def go():
        async with SSHPool(**options) as pool:
            await pool.session(host)

    try:
        asyncio.run(go())
    except BaseException as exc:  # noqa: BLE001 - the test looks at what came out
        return exc
    raise AssertionError("connected to a host that cannot be reached")


def test_a_name_that_does_not_resolve_is_the_hosts_error(known):
    start = time.monotonic()
    exc = connect(SSHTarget("a", UNRESOLVABLE), known_hosts=known, connect_timeout=2)
    assert isinstance(exc, ConnectError) and exc.kind == "resolve", repr(exc)
    assert str(exc).startswith(f"a: name does not resolve: {UNRESOLVABLE}")
    assert exc.reason.startswith("name does not resolve") and "\n" not in str(exc)
    assert time.monotonic() - start < 20


def test_a_refused_port_is_the_hosts_error(known):
    port = free_port()
    exc = connect(SSHTarget("b", "127.0.0.1", port), known_hosts=known, connect_timeout=2)
    assert isinstance(exc, ConnectError) and exc.kind == "refused", repr(exc)
    assert str(exc) == f"b: connection refused at 127.0.0.1:{port} (no SSH server listening)"


def test_a_host_that_accepts_but_never_speaks_ssh_times_out_within_the_connect_timeout(known):
    with socket.socket() as listener:  # the kernel accepts; no banner ever comes
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        start = time.monotonic()
        exc = connect(SSHTarget("mute", "127.0.0.1", port), known_hosts=known, connect_timeout=1)
        elapsed = time.monotonic() - start
    assert isinstance(exc, ConnectError) and exc.kind == "timeout", repr(exc)
    assert str(exc) == f"mute: connect to 127.0.0.1:{port} timed out after 1 s"
    assert elapsed < 20


def test_a_resolver_that_never_answers_times_out_within_the_connect_timeout(monkeypatch, known):
    release = threading.Event()

    def hang(*_args, **_kwargs):
        release.wait(60)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hang)
    try:
        start = time.monotonic()
        exc = connect(SSHTarget("slow", "slow.example"), known_hosts=known, connect_timeout=1)
        elapsed = time.monotonic() - start
    finally:
        release.set()
    assert isinstance(exc, ConnectError) and exc.kind == "timeout", repr(exc)
    assert str(exc) == "slow: name slow.example did not resolve within 1 s"
    assert elapsed < 20  # asyncio.run returned: the stuck lookup holds no executor


def test_known_hosts_matching_takes_a_name_or_an_ip(known):
    pool = SSHPool(known_hosts=known)
    assert pool._recorded_keys(SSHTarget("n", "named.example"), "named.example", 22)
    assert pool._recorded_keys(SSHTarget("n", "other.example"), "198.51.100.7", 22)
    assert not pool._recorded_keys(SSHTarget("n", UNRESOLVABLE), UNRESOLVABLE, 2222)


@pytest.mark.parametrize("kind", ["dir", "fifo", "garbage", "binary"])
def test_a_known_hosts_that_cannot_be_used_is_one_line(tmp_path, kind):
    path = tmp_path / "known_hosts"
    if kind == "dir":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "garbage":
        path.write_text("justonefield\n")
    else:
        path.write_bytes(b"\xff\xfe host key\n")
    with pytest.raises(FileError) as info:
        read_known_hosts(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    exc = connect(SSHTarget("k", "127.0.0.1", free_port()), known_hosts=path, connect_timeout=2)
    assert isinstance(exc, ConnectError) and exc.kind == "known_hosts", repr(exc)


def test_a_missing_known_hosts_trusts_nothing(tmp_path):
    assert not SSHPool(known_hosts=tmp_path / "none")._recorded_keys(SSHTarget("x", "10.0.0.1"), "10.0.0.1", 22)


# -- the headless commands ---------------------------------------------------------------


def test_inventory_reports_each_bad_host_and_exits_3(bad_inventory, known):
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "geoconsole.cli", "--headless", "inventory", "-i", str(bad_inventory),
         "--known-hosts", str(known), "--ssh-config", "/nonexistent", "--connect-timeout", "2", "--json"],
        capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - start
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: 2 of 2 hosts failed: a: name does not resolve: {UNRESOLVABLE}")
    hosts = {h["name"]: h["error"] for h in json.loads(proc.stdout)["hosts"]}
    assert hosts["a"].startswith("a: name does not resolve")
    assert hosts["b"].startswith("b: connection refused at 127.0.0.1:")
    assert elapsed < 30


def test_launch_names_every_host_it_cannot_reach(tmp_path, bad_inventory, known):
    fabric = tmp_path / "fabric.json"
    fabric.write_text(json.dumps(FABRIC))
    r = run("launch", "-m", str(fabric), "-r", "0,1,2,3", "-i", str(bad_inventory),
            "--known-hosts", str(known), "--", "true")
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output
    [line] = error_lines(r)
    assert "a: name does not resolve" in line or "b: connection refused" in line
    assert "(and 1 more:" in line


def test_validate_names_the_host_it_cannot_reach(tmp_path, bad_inventory, known):
    fabric = tmp_path / "fabric.json"
    fabric.write_text(json.dumps(FABRIC))
    r = run("validate", "-m", str(fabric), "-i", str(bad_inventory), "--c-pp", "0.01", "--c-dp", "0.01",
            "--known-hosts", str(known), "--random", "0")
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output
    [line] = error_lines(r)
    assert "name does not resolve" in line or "connection refused" in line


def test_probe_reports_each_bad_host_as_lost_and_exits_3(tmp_path, bad_inventory, known):
    out, events = tmp_path / "fabric.json", tmp_path / "events.jsonl"
    r = run("probe", "-i", str(bad_inventory), "-o", str(out), "--known-hosts", str(known),
            "--ssh-config", "/nonexistent", "--connect-timeout", "2", "--events", str(events))
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output and len(error_lines(r)) == 1
    lost = {e["host"]: e["reason"] for e in map(json.loads, events.read_text().splitlines())
            if e["event"] == "HostLost"}
    assert lost["a"].startswith(f"name does not resolve: {UNRESOLVABLE}")
    assert lost["b"].startswith("connection refused at 127.0.0.1:")
    assert json.loads(out.read_text())["beta_gbps"][0][1] is None  # written, the pair null


@pytest.mark.parametrize("command", ["inventory", "probe", "launch", "validate"])
def test_known_hosts_that_is_a_folder_is_refused_before_connecting(tmp_path, bad_inventory, command):
    fabric = tmp_path / "fabric.json"
    fabric.write_text(json.dumps(FABRIC))
    folder = tmp_path / "kh"
    folder.mkdir()
    args = {
        "inventory": ["inventory", "-i", str(bad_inventory)],
        "probe": ["probe", "-i", str(bad_inventory), "-o", str(tmp_path / "out.json")],
        "launch": ["launch", "-m", str(fabric), "-r", "0,1,2,3", "-i", str(bad_inventory)],
        "validate": ["validate", "-m", str(fabric), "-i", str(bad_inventory), "--c-pp", "0.01", "--c-dp", "0.01"],
    }[command]
    r = run(*args, "--known-hosts", str(folder), *(["--", "true"] if command == "launch" else []))
    assert r.exit_code == 2, r.output
    assert error_lines(r) == [f"error: --known-hosts: {folder}: is a directory, expected a known_hosts file"]
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("kind", ["dir", "fifo", "inventory"])
def test_probe_events_that_cannot_be_written_is_refused_before_connecting(tmp_path, bad_inventory, known, kind):
    events = tmp_path / "events"
    if kind == "dir":
        events.mkdir()
    elif kind == "fifo":
        os.mkfifo(events)
    else:
        events = bad_inventory
    before = bad_inventory.read_text()
    r = run("probe", "-i", str(bad_inventory), "-o", str(tmp_path / "out.json"), "--known-hosts", str(known),
            "--events", str(events))
    assert r.exit_code == 2, r.output
    [line] = error_lines(r)
    assert line.startswith(f"error: --events: {events}: ")
    assert not (tmp_path / "out.json").exists() and bad_inventory.read_text() == before


# -- ssh command lines built by the project -----------------------------------------------


def test_exported_script_puts_the_destination_after_double_dash(tmp_path):
    fabric = tmp_path / "fabric.json"
    fabric.write_text(json.dumps(FABRIC))
    script = tmp_path / "launch.sh"
    r = run("export", "-m", str(fabric), "-r", "0,1,2,3", "--format", "torchrun", "-o", str(script),
            "--", "train.py")
    assert r.exit_code == 0, r.output
    log = tmp_path / "ssh-argv"
    log.mkdir()
    stub = tmp_path / "ssh"
    stub.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}/$$\n')
    stub.chmod(0o755)
    proc = subprocess.run(["bash", str(script)], env=dict(os.environ, SSH=str(stub)),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = [p.read_text().splitlines() for p in log.iterdir()]
    assert len(calls) == 4
    for argv in calls:
        k = argv.index("--")
        assert all(a.startswith("-") or argv[i - 1] in ("-o", "-p") for i, a in enumerate(argv[:k]))
        assert argv[k + 1] in ("a", "b") and len(argv) == k + 3 and "--node-rank=" in argv[k + 2]
