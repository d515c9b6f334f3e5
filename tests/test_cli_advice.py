"""Advice through the CLI: solve text and --json, --no-advice, --exclude, --compare-seeds,
--step-compute-s; launch's warning before starting and --strict; validate's notes."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from advice_fabrics import random_fabric, region_fabric
from typer.testing import CliRunner

from geoconsole.cli import app

W44 = ["--pp", "4", "--dp", "4", "--c-pp", "0.5", "--c-dp", "0.5", "--baseline-samples", "30", "--budget", "5000"]


def run(*args):
    return CliRunner().invoke(app, ["--headless", *map(str, args)])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("advice")
    out = {
        "uniform": region_fabric(jitter=0.005, regions=0),
        "regions": region_fabric(),
        "slow17": region_fabric(17, slow=5),
        "random": random_fabric(),
        "stale": replace(region_fabric(), measured_at="2026-01-01T00:00:00+00:00",
                         meta={"hosts": {"h0": {"gpus": ["A100"]}, "h1": {"gpus": ["A100"]}}}),
    }
    for name, fabric in out.items():
        fabric.save(d / f"{name}.json")
    return {name: d / f"{name}.json" for name in out}


def test_solve_on_a_nearly_uniform_fabric_says_so_in_text_and_json(files):
    text = run("solve", "-m", files["uniform"], *W44)
    assert text.exit_code == 0, text.output
    assert "advice     warning barely-beats-random:" in text.stdout
    assert "advice     info uniform-fabric:" in text.stdout
    doc = json.loads(run("solve", "-m", files["uniform"], *W44, "--json").stdout)
    assert [a["code"] for a in doc["advice"]] == ["barely-beats-random", "uniform-fabric"]
    assert set(doc["advice"][0]) == {"code", "severity", "message", "subject"}
    assert "--compare-seeds" in doc["advice"][0]["message"]  # the CLI's hint


def test_solve_on_a_fabric_of_regions_gives_no_advice(files):
    doc = json.loads(run("solve", "-m", files["regions"], *W44, "--json").stdout)
    assert doc["advice"] == []


def test_no_advice_silences_it(files):
    r = run("solve", "-m", files["uniform"], *W44, "--no-advice", "--json")
    assert r.exit_code == 0 and "advice" not in json.loads(r.stdout)
    assert "advice " not in run("solve", "-m", files["uniform"], *W44, "--no-advice").stdout


def test_a_poor_device_is_named_and_exclude_leaves_it_out(files):
    doc = json.loads(run("solve", "-m", files["slow17"], *W44, "--json").stdout)
    poor = [a for a in doc["advice"] if a["code"] == "poor-device"]
    assert poor and poor[0]["subject"] == "h5:0" and "solve --exclude h5:0" in poor[0]["message"]
    again = json.loads(run("solve", "-m", files["slow17"], *W44, "--json", "--exclude", "h5:0").stdout)
    assert 5 not in again["selection"]["rows"]
    assert {"row": 5, "reason": "left out by the operator"} in again["selection"]["left_out"]
    assert again["score"]["comm_s"] < doc["score"]["comm_s"] * 0.85
    assert not [a for a in again["advice"] if a["code"] == "poor-device"]


def test_exclude_a_host_name_and_select_exclude(files):
    r = run("select", "-m", files["slow17"], "--pp", "4", "--dp", "4", "--exclude", "h5", "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert "h5:0" not in doc["devices"] and len(doc["devices"]) == 16
    for name in ("H5", "H5:0"):  # host names in any case, as DNS
        upper = json.loads(run("select", "-m", files["slow17"], "--pp", "4", "--dp", "4", "--exclude", name,
                               "--json").stdout)
        assert "h5:0" not in upper["devices"] and len(upper["devices"]) == 16


@pytest.mark.parametrize("cmd", ["solve", "select"])
def test_exclude_an_unknown_device_is_a_one_line_error(files, cmd):
    args = W44[:4] if cmd == "select" else W44
    r = run(cmd, "-m", files["slow17"], *args, "--exclude", "h99")
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --exclude: 'h99' matches no device")


@pytest.mark.parametrize("cmd", ["solve", "select"])
def test_exclude_refuses_a_name_that_is_both_a_host_and_a_device(files, tmp_path, cmd):
    """Host names may hold ':' (IPv6 addresses do): host "h1:0" and GPU 0 of host "h1" are
    both written h1:0, and --exclude h1:0 must not silently leave out both."""
    doc = json.loads(Path(files["slow17"]).read_text())
    first = doc["devices"][0]
    doc["devices"][1] = {**doc["devices"][1], "host": f"{first['host']}:{first['gpu']}", "gpu": 0}
    path = tmp_path / "colon.json"
    path.write_text(json.dumps(doc))
    name = f"{first['host']}:{first['gpu']}"
    args = W44[:4] if cmd == "select" else W44
    r = run(cmd, "-m", str(path), *args, "--exclude", name)
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: --exclude: {name!r} names both host {name!r} and a device")
    r = run(cmd, "-m", str(path), *args, "--exclude", f"{name}:0")  # the colon host's own GPU is unambiguous
    assert r.exit_code == 0, r.output


def test_exclude_ambiguity_names_the_other_host_even_beside_a_cpu_row(tmp_path):
    """Host "a:1" as a CPU row (its device name is "a:1" too) and GPU 1 of host "a": the
    message names host 'a', not the CPU row's own host."""
    n = 4
    doc = {"labels": ["x"] * n, "alpha_ms": [[0 if i == j else 1 for j in range(n)] for i in range(n)],
           "beta_gbps": [[0 if i == j else 10 for j in range(n)] for i in range(n)],
           "devices": [{"host": "a:1", "gpu": None}, {"host": "a", "gpu": 1}, {"host": "a", "gpu": 0},
                       {"host": "b", "gpu": 0}]}
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(doc))
    r = run("select", "-m", str(path), "--pp", "1", "--dp", "2", "--exclude", "a:1")
    assert r.exit_code == 2, r.output
    assert "'a:1' names both host 'a:1' and a device of host 'a' in" in r.stderr


def test_exclude_without_a_spare_says_the_shortfall(files):
    r = run("solve", "-m", files["regions"], *W44, "--exclude", "h5:0")
    assert r.exit_code == 2 and "1 left out by the operator, the workload needs 16" in r.stderr
    assert "(--pp, --dp)" not in r.stderr  # the shortfall is the exclusion's, not the shape's
    assert "Traceback" not in r.output


def test_compare_seeds_records_each_seed(files):
    doc = json.loads(run("solve", "-m", files["regions"], *W44, "--json", "--compare-seeds", "3").stdout)
    assert [s["seed"] for s in doc["seeds"]] == [0, 1, 2]
    assert doc["seeds"][0]["comm_s"] == doc["score"]["comm_s"]
    assert doc["advice"] == []  # the fabric's regions lead every seed to the same layout


def test_compare_seeds_stay_within_the_seed_range(files):
    top = 2**64 - 1
    r = run("solve", "-m", files["regions"], *W44, "--seed", str(top - 1), "--compare-seeds", "3")
    assert r.exit_code == 2 and r.stderr.startswith("error: --compare-seeds 3: with --seed") and "Traceback" not in r.output
    doc = json.loads(run("solve", "-m", files["regions"], *W44, "--json", "--seed", str(top - 1), "--budget", "2000",
                         "--compare-seeds", "2").stdout)
    assert [s["seed"] for s in doc["seeds"]] == [top - 1, top]


def test_seeds_that_land_apart_are_reported(files):
    r = run("solve", "-m", files["random"], "--pp", "4", "--dp", "8", "--c-pp", "0.5", "--c-dp", "0.5",
            "--baseline-samples", "0", "--budget", "5000", "--compare-seeds", "4", "--json")
    doc = json.loads(r.stdout)
    comms = [s["comm_s"] for s in doc["seeds"]]
    assert (max(comms) - min(comms)) / min(comms) > 0.05
    assert [a["code"] for a in doc["advice"] if a["code"] == "seeds-vary"] == ["seeds-vary"]


def test_step_compute_far_below_comm_advises_less_frequent_sync(files):
    doc = json.loads(run("solve", "-m", files["regions"], *W44, "--json", "--step-compute-s", "1").stdout)
    assert [a["code"] for a in doc["advice"]] == ["sync-too-slow"]
    doc = json.loads(run("solve", "-m", files["regions"], *W44, "--json", "--step-compute-s", "1000").stdout)
    assert doc["advice"] == []


# -- launch ----------------------------------------------------------------------------
RANKS = "rank_map=(" + " ".join(map(str, range(16))) + ")"


def test_launch_dry_run_warns_about_a_stale_fabric_and_goes_on(files):
    r = run("launch", "-m", files["stale"], "-r", RANKS, "--dry-run", "--", "train.py")
    assert r.exit_code == 0, r.output
    assert "warning: stale-measurement: the fabric was measured" in r.stderr
    assert "rendezvous h0:29500" in r.stdout


def test_launch_dry_run_json_carries_the_advice(files):
    r = run("launch", "-m", files["stale"], "-r", RANKS, "--dry-run", "--json", "--", "train.py")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [a["code"] for a in doc["advice"]] == ["stale-measurement"] and doc["world_size"] == 16
    assert "advice" not in json.loads(run("launch", "-m", files["stale"], "-r", RANKS, "--dry-run", "--json",
                                          "--no-advice", "--", "train.py").stdout)


def test_launch_strict_refuses_a_stale_fabric(files):
    r = run("launch", "-m", files["stale"], "-r", RANKS, "--dry-run", "--strict", "--", "train.py")
    assert r.exit_code == 1
    assert "stale-measurement" in r.stderr and "nothing was started" in r.stderr
    assert "rendezvous" not in r.stdout


def test_launch_strict_on_a_fresh_fabric_and_no_advice(files):
    r = run("launch", "-m", files["regions"], "-r", RANKS, "--dry-run", "--strict", "--", "train.py")
    assert r.exit_code == 0 and "warning" not in r.stderr
    r = run("launch", "-m", files["stale"], "-r", RANKS, "--dry-run", "--no-advice", "--strict", "--", "train.py")
    assert r.exit_code == 0 and "stale" not in r.stderr


@pytest.mark.fleet
@pytest.mark.parametrize("strict", [True, False])
def test_launch_compares_the_record_with_discovery_before_starting(emulated_fleet, tmp_path, strict):
    """The fabric records MTU 1234 for h0; discovery finds the real one: a warning before any
    rank starts, and with --strict exit 1 with nothing started."""
    from test_validate import _fleet_fabric

    fleet = emulated_fleet
    fabric = _fleet_fabric(fleet)
    fabric.meta = {**fabric.meta, "hosts": {"h0": {"mtu": 1234}}}
    matrix = tmp_path / "fleet.json"
    fabric.save(matrix)
    marker = fleet.dir / f"ran-{uuid.uuid4().hex[:8]}"
    prog = fleet.dir / f"touch-{uuid.uuid4().hex[:8]}.py"
    prog.write_text(f"import os, pathlib\npathlib.Path({str(marker)!r} + os.environ['RANK']).touch()\n")
    proc = subprocess.run(
        [sys.executable, "-m", "geoconsole.cli", "--headless", "launch", "-m", str(matrix),
         "-i", str(fleet.inventory_path), "-r", "0,1,2,3", "--mode", "env", "--port", "29671",
         "--known-hosts", str(fleet.known_hosts_path), *(["--strict"] if strict else []), "--", str(prog)],
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent)
    assert "measurement-mismatch: h0: MTU 1234 then" in proc.stderr, proc.stderr
    started = sorted(p.name for p in fleet.dir.glob(marker.name + "*"))
    if strict:
        assert proc.returncode == 1 and started == []
    else:
        assert proc.returncode == 0, proc.stderr
        assert len(started) == 4


@pytest.mark.fleet
def test_validate_carries_the_advice(emulated_fleet, tmp_path):
    """A stale fabric validated on the fleet: the notes and --json name stale-measurement."""
    from test_validate import _fleet_fabric

    fleet = emulated_fleet
    matrix = tmp_path / "fleet.json"
    replace(_fleet_fabric(fleet), measured_at="2025-01-01T00:00:00+00:00").save(matrix)
    proc = subprocess.run(
        [sys.executable, "-m", "geoconsole.cli", "--headless", "validate", "-m", str(matrix),
         "-i", str(fleet.inventory_path), "--pp", "2", "--dp", "2", "--c-pp", "0.002", "--c-dp", "0.001",
         "--steps", "1", "--warmup", "0", "--random", "0", "--port", "29681",
         "--known-hosts", str(fleet.known_hosts_path), "--json"],
        capture_output=True, text=True, timeout=240, cwd=Path(__file__).parent.parent)
    doc = json.loads(proc.stdout)
    assert [a["code"] for a in doc["advice"]] == ["stale-measurement"], proc.stderr
    assert any(n.startswith("advice warning stale-measurement") for n in doc["notes"])
