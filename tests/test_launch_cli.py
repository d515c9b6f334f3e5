"""The launch, export and validate commands: exit codes, one-line errors, the real path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geoconsole.cli import app
from geoconsole.launch.export import parse

FABRIC = {
    "labels": ["a", "a", "b", "b"],
    "alpha_ms": [[0, 1, 30, 30], [1, 0, 30, 30], [30, 30, 0, 1], [30, 30, 1, 0]],
    "beta_gbps": [[0, 10, 1, 1], [10, 0, 1, 1], [1, 1, 0, 10], [1, 1, 10, 0]],
    "devices": [{"host": "a", "gpu": 0}, {"host": "a", "gpu": 1},
                {"host": "b", "gpu": 0}, {"host": "b", "gpu": 1}],
}


@pytest.fixture
def fabric(tmp_path) -> Path:
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps(FABRIC))
    return path


def run(*args):
    return CliRunner().invoke(app, ["--headless", *args])


def test_dry_run_prints_the_plan(fabric):
    r = run("launch", "-m", str(fabric), "-r", "rank_map=(2, 3, 0, 1)", "--dry-run", "--", "train.py", "--lr", "0.1")
    assert r.exit_code == 0, r.output
    assert "rendezvous b:29500 on b" in r.output
    assert "--node-rank=3" in r.output and "train.py --lr 0.1" in r.output


def test_dry_run_json_is_the_plan(fabric):
    r = run("launch", "-m", str(fabric), "-r", "2,3,0,1", "--dry-run", "--json", "--mode", "env",
            "--", "train.py")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["rank_map"] == [2, 3, 0, 1] and doc["master_host"] == "b"
    assert doc["processes"][0]["env"]["RANK"] == "0"


@pytest.mark.parametrize(
    "args, message",
    [
        (["-r", "2,3,0,0", "--dry-run"], "rank 0 appears twice"),
        (["-r", "2,3,0", "--dry-run"], "3 ranks for 4 devices"),
        (["-r", "2,3,0,1"], "--inventory: needed"),
        (["-r", "nosuchfile.txt", "--dry-run"], "no such rank map file"),
        (["-r", "2,3,0,1", "--dry-run", "--mode", "mpi"], "--mode 'mpi'"),
        (["-r", "2,3,0,1", "--dry-run", "--env", "NOEQUALS"], "KEY=VALUE"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(fabric, args, message):
    r = run("launch", "-m", str(fabric), *args, "--", "train.py")
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
    assert len([line for line in r.stderr.splitlines() if line.startswith("error:")]) == 1


def test_fabric_without_devices_is_refused(tmp_path):
    path = tmp_path / "bare.json"
    path.write_text(json.dumps({k: FABRIC[k] for k in ("labels", "alpha_ms", "beta_gbps")}))
    r = run("launch", "-m", str(path), "-r", "0,1,2,3", "--dry-run", "--", "t.py")
    assert r.exit_code == 2 and "devices" in r.output


@pytest.mark.parametrize("fmt", ["torchrun", "slurm", "rankfile", "json"])
def test_export_writes_a_file_that_reads_back(fabric, tmp_path, fmt):
    out = tmp_path / f"out.{fmt}"
    r = run("export", "-m", str(fabric), "-r", "1,0,3,2", "--format", fmt, "-o", str(out), "--", "train.py")
    assert r.exit_code == 0, r.output
    slots = parse(out.read_text(), fmt)
    assert [(s.rank, s.host, s.gpu, s.device) for s in slots] == [
        (0, "a", 1, 1), (1, "a", 0, 0), (2, "b", 1, 3), (3, "b", 0, 2)]
    if fmt == "torchrun":
        assert os.access(out, os.X_OK)


def test_json_export_without_a_command_holds_no_command_to_run(fabric):
    """It held a stand-in ``<command>`` inside every rank's argv and shell line."""
    r = run("export", "-m", str(fabric), "-r", "1,0,3,2", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["command"] is None and "<command>" not in r.stdout
    assert all(p["argv"] is None and p["shell"] is None for p in doc["processes"])
    assert [(s.rank, s.host, s.device) for s in parse(r.stdout, "json")] == [
        (0, "a", 1), (1, "a", 0), (2, "b", 3), (3, "b", 2)]
    given = json.loads(run("export", "-m", str(fabric), "-r", "1,0,3,2", "--format", "json", "--", "t.py").stdout)
    assert given["command"] == ["t.py"] and all("t.py" in p["shell"] for p in given["processes"])


def test_inventory_names_match_the_fabric_in_any_case(fabric, tmp_path):
    """An inventory naming ``A`` for the fabric's host ``a`` was ignored: the plan reached
    ``a`` by its bare name, not the inventory's address, user or node."""
    inventory = tmp_path / "hosts.toml"
    inventory.write_text('[[hosts]]\nname = "A"\naddress = "10.255.255.1"\nslurm_node = "node-a"\n'
                         '[[hosts]]\nname = "B"\naddress = "10.255.255.2"\n')
    r = run("launch", "-m", str(fabric), "-r", "0,1,2,3", "-i", str(inventory), "--dry-run", "--json", "--", "t.py")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["master_addr"] == "10.255.255.1"
    assert [p["host"] for p in doc["processes"]] == ["a", "a", "b", "b"]  # the fabric's spelling
    assert [p["address"] for p in doc["processes"]] == ["10.255.255.1"] * 2 + ["10.255.255.2"] * 2
    r = run("export", "-m", str(fabric), "-r", "0,1,2,3", "-i", str(inventory), "-f", "slurm")
    assert r.exit_code == 0, r.output
    assert [x for x in r.stdout.splitlines() if not x.startswith("#")] == ["node-a", "node-a", "b", "b"]


def test_a_fabric_host_missing_from_the_inventory_is_noted(fabric, tmp_path):
    inventory = tmp_path / "hosts.toml"
    inventory.write_text('[[hosts]]\nname = "a"\naddress = "10.255.255.1"\n')
    r = run("export", "-m", str(fabric), "-r", "0,1,2,3", "-i", str(inventory), "-f", "json", "--", "t.py")
    assert r.exit_code == 0, r.output
    assert f"note: {inventory}: host 'b' of the fabric not in it: reached by name, ssh defaults" in r.stderr
    r = run("launch", "-m", str(fabric), "-r", "0,1,2,3", "-i", str(inventory), "--", "t.py")
    assert r.exit_code == 2 and "host 'b' of the fabric is not in the inventory" in r.stderr


def test_export_unknown_format(fabric):
    r = run("export", "-m", str(fabric), "-r", "1,0,3,2", "--format", "pbs")
    assert r.exit_code == 2 and "--format 'pbs'" in r.output


@pytest.mark.parametrize("args", [["export", "--format", "slurm"], ["launch", "--dry-run", "--", "t.py"]])
def test_export_and_dry_run_never_import_asyncssh(fabric, args):
    code = (
        "import sys, json; from geoconsole.cli import app\n"
        "try:\n app(['--headless', *json.loads(sys.argv[2])[:1], '-m', sys.argv[1], '-r', '1,0,3,2',"
        " *json.loads(sys.argv[2])[1:]])\n"
        "except SystemExit as e: assert not e.code, e.code\n"
        "print('asyncssh' in sys.modules, 'textual' in sys.modules, 'torch' in sys.modules, file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(fabric), json.dumps(args)],
                          capture_output=True, text=True)
    assert proc.stderr.strip().splitlines()[-1] == "False False False", proc.stderr


# --- the real path on the emulated fleet -----------------------------------------------


def _fleet_fabric_file(fleet, tmp_path) -> Path:
    from test_validate import _fleet_fabric

    path = tmp_path / "fleet.json"
    _fleet_fabric(fleet).save(path)
    return path


def _cli(fleet, *args):
    return [sys.executable, "-m", "geoconsole.cli", "--headless", *args]


@pytest.mark.fleet
def test_cli_launch_records_and_fails_when_a_rank_fails(emulated_fleet, tmp_path):
    fleet = emulated_fleet
    matrix = _fleet_fabric_file(fleet, tmp_path)
    prog = fleet.dir / f"cli-{uuid.uuid4().hex[:8]}.py"
    prog.write_text("import os, socket, sys\nprint('I am', os.environ['RANK'], socket.gethostname())\n"
                    "sys.exit(4 if os.environ['RANK'] == '1' else 0)\n")
    record = tmp_path / "runs.jsonl"
    proc = subprocess.run(
        _cli(fleet, "launch", "-m", str(matrix), "-i", str(fleet.inventory_path), "-r", "3,2,1,0",
             "--mode", "env", "--known-hosts", str(fleet.known_hosts_path), "--record", str(record),
             "--port", "29660", "--no-abort-on-failure", "--", str(prog)),
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "[rank 0 h3] I am 0 h3" in proc.stdout
    assert "rank 1 h2: exit 4" in proc.stderr
    rec = json.loads(record.read_text().splitlines()[-1])
    assert rec["kind"] == "launch" and rec["rank_map"] == [3, 2, 1, 0]
    assert rec["exit_status"] == {"0": 0, "1": 4, "2": 0, "3": 0} and rec["ok"] is False
    assert rec["aborted"] is False  # --no-abort-on-failure: the other ranks ran to the end


@pytest.mark.fleet
def test_cli_launch_reaches_hosts_the_inventory_spells_in_another_case(emulated_fleet, tmp_path):
    """The plan keeps the fabric's spelling (h0), the inventory may write H0: the launch
    looked the plan's names up in the inventory as written and ended in a KeyError."""
    fleet = emulated_fleet
    matrix = _fleet_fabric_file(fleet, tmp_path)
    upper = fleet.write_inventory(tmp_path / "upper.toml", names={h.name: h.name.upper() for h in fleet.hosts})
    prog = fleet.dir / f"cli-{uuid.uuid4().hex[:8]}.py"
    prog.write_text("import os, socket\nprint('I am', os.environ['RANK'], socket.gethostname())\n")
    proc = subprocess.run(
        _cli(fleet, "launch", "-m", str(matrix), "-i", str(upper), "-r", "0,1,2,3", "--mode", "env",
             "--known-hosts", str(fleet.known_hosts_path), "--port", "29690", "--", str(prog)),
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout.count("I am") == 4


@pytest.mark.fleet
def test_cli_ctrl_c_stops_every_rank_and_exits_130(emulated_fleet, tmp_path):
    fleet = emulated_fleet
    matrix = _fleet_fabric_file(fleet, tmp_path)
    token = uuid.uuid4().hex[:10]
    prog = fleet.dir / f"sleepy-{token}.py"
    prog.write_text("import os, time\nprint('UP', os.environ['RANK'], flush=True)\ntime.sleep(300)\n")
    cli = subprocess.Popen(
        _cli(fleet, "launch", "-m", str(matrix), "-i", str(fleet.inventory_path), "-r", "0,1,2,3",
             "--mode", "env", "--known-hosts", str(fleet.known_hosts_path), "--grace", "2",
             "--port", "29670", "--", str(prog)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parent.parent,
    )
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 4 and time.monotonic() < deadline:
        line = cli.stdout.readline()
        seen += line.startswith("[rank") and " UP " in line
    assert seen == 4
    cli.send_signal(signal.SIGINT)
    out, err = cli.communicate(timeout=60)
    assert cli.returncode == 130, err
    left = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        left = [cmd for h in fleet.hosts for _pid, cmd in fleet.processes(h.name) if token in cmd]
        if not left:
            break
        time.sleep(0.2)
    assert left == []


@pytest.mark.fleet
def test_cli_validate_reports_model_beside_measurement(emulated_fleet, tmp_path):
    fleet = emulated_fleet
    matrix = _fleet_fabric_file(fleet, tmp_path)
    record = tmp_path / "runs.jsonl"
    proc = subprocess.run(
        _cli(fleet, "validate", "-m", str(matrix), "-i", str(fleet.inventory_path),
             "--pp", "2", "--dp", "2", "--c-pp", "0.6", "--c-dp", "0.2", "--scale", "0.01",
             "--steps", "2", "--random", "1", "--known-hosts", str(fleet.known_hosts_path),
             "--port", "29720", "--record", str(record), "--json"),
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent.parent,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["scale"] == 0.01 and doc["workload"]["c_pp"] == pytest.approx(0.006)
    names = [p["name"] for p in doc["placements"]]
    assert names[0] == "solution (seed 0)" and "random rank map 1" in names
    for p in doc["placements"]:
        assert p["measured_median_s"] > 0 and p["model_s"] > 0 and len(p["steps_s"]) == 2
    assert doc["warning"] is None
    assert json.loads(record.read_text().splitlines()[-1])["kind"] == "validate"


@pytest.mark.fleet
def test_cli_launch_refuses_unknown_host_keys_with_exit_3(emulated_fleet, tmp_path):
    fleet = emulated_fleet
    matrix = _fleet_fabric_file(fleet, tmp_path)
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    proc = subprocess.run(
        _cli(fleet, "launch", "-m", str(matrix), "-i", str(fleet.inventory_path), "-r", "0,1,2,3",
             "--known-hosts", str(empty), "--", "t.py"),
        capture_output=True, text=True, timeout=120, cwd=Path(__file__).parent.parent,
    )
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: h") and "not in" in lines[0]
    assert "Traceback" not in proc.stderr and empty.read_text() == ""


def test_a_solution_over_selected_devices_launches_on_those_devices(tmp_path):
    from geoconsole.demo_fabrics import worldwide_fabric

    path = tmp_path / "ww.json"
    worldwide_fabric().save(path)
    solved = run("solve", "-m", str(path), "--pp", "2", "--dp", "2", "--c-pp", "0.5", "--c-dp", "0.6",
                 "--regions", "Tokyo", "--baseline-samples", "0", "--json")
    assert solved.exit_code == 0, solved.output
    solution = tmp_path / "solution.json"
    solution.write_text(solved.stdout)
    rows = json.loads(solved.stdout)["selection"]["rows"]
    r = run("launch", "-m", str(path), "-r", str(solution), "--dry-run", "--json", "--", "train.py")
    assert r.exit_code == 0, r.output
    hosts = {p["host"] for p in json.loads(r.stdout)["processes"]}
    assert hosts == {worldwide_fabric().devices[i].host for i in rows}
    assert all(h.startswith("tokyo-") for h in hosts)
