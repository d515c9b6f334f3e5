"""launch --via slurm against a real Slurm 22.05 on the emulated fleet (tests/slurmlib.py).

Every rank prints what it sees (SLURM_PROCID, host name, RANK, GPU variables, rendezvous);
the test compares each with the plan. Host names of the fabric differ from Slurm's node
names here, so the inventory's ``slurm_node`` is what places them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import require_fleet
from geoconsole.inventory import load_inventory
from geoconsole.launch.plan import LaunchHost, build_plan
from slurmlib import SlurmCluster, slurm_unavailable

pytestmark = [pytest.mark.fleet, pytest.mark.slow]

NAMES = {"h0": "alpha", "h1": "beta", "h2": "gamma"}
#: fabric rows: host, GPU index (CPU hosts: the index the plan gives the rank)
ROWS = [("alpha", 0), ("alpha", 1), ("beta", 0), ("beta", 1), ("gamma", 3)]
RANK_MAP = [3, 0, 4, 1, 2]

REPORT = """\
import json, os, socket, sys, time
keys = ("SLURM_PROCID", "SLURM_JOB_ID", "SLURM_STEP_ID", "RANK", "WORLD_SIZE", "MASTER_ADDR",
        "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "GEOCONSOLE_HOST_ADDR")
doc = {k: os.environ.get(k) for k in keys}
doc["hostname"] = socket.gethostname()
print("REPORT " + json.dumps(doc), flush=True)
if sys.argv[1:] and int(os.environ["RANK"]) == int(sys.argv[1]):
    print("FAILING %f" % time.time(), flush=True)
    sys.exit(3)
if sys.argv[2:]:
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture(scope="module")
def cluster(emulated_fleet):
    require_fleet()
    why = slurm_unavailable()
    if why:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)
    c = SlurmCluster(emulated_fleet).start()
    try:
        yield c
    finally:
        c.stop()
        assert c.leftovers() == []


@pytest.fixture
def files(tmp_path, emulated_fleet, cluster):
    fabric = {"labels": [h for h, _ in ROWS],
              "alpha_ms": [[0 if i == j else 1 for j in range(5)] for i in range(5)],
              "beta_gbps": [[0 if i == j else 10 for j in range(5)] for i in range(5)],
              "devices": [{"host": h, "gpu": g} for h, g in ROWS]}
    (tmp_path / "fabric.json").write_text(json.dumps(fabric))
    inv = emulated_fleet.write_inventory(tmp_path / "hosts.toml", names=NAMES, hosts=list(NAMES),
                                         extra={h: {"slurm_node": h} for h in NAMES})
    (tmp_path / "report.py").write_text(REPORT)
    return tmp_path, inv


def expected(inv_path):
    inv = load_inventory(inv_path)
    hosts = {h.name: LaunchHost.from_inventory(h) for h in inv.hosts}
    from solver.fabric import Device

    devices = [Device(host=h, gpu=g) for h, g in ROWS]
    return build_plan(RANK_MAP, devices, hosts, ["x"], mode="env")


def geoconsole(*args):
    return [sys.executable, "-m", "geoconsole.cli", "--headless", *args]


def launch_args(tmp, inv, *extra, program_args=()):
    return geoconsole("launch", "--via", "slurm", "-m", str(tmp / "fabric.json"), "-r",
                      ",".join(map(str, RANK_MAP)), "-i", str(inv), "--mode", "env", *extra,
                      "--", sys.executable, str(tmp / "report.py"), *program_args)


def reports(text: str) -> dict[int, dict]:
    out = {}
    for line in text.splitlines():
        head, sep, doc = line.partition("REPORT ")
        if sep:
            d = json.loads(doc)
            out[int(d["SLURM_PROCID"])] = {**d, "label": head.strip()}
    return out


def check_placement(got: dict[int, dict], plan, names) -> int:
    """Ranks whose task saw exactly what the plan says; asserts each one."""
    master = plan.master_addr
    for p in plan.processes:
        r = got[p.rank]
        assert r["RANK"] == str(p.rank) and r["WORLD_SIZE"] == str(plan.world_size)
        assert r["hostname"] == names[p.host], (p.rank, r)
        assert r["CUDA_VISIBLE_DEVICES"] == str(p.gpu) and r["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert r["MASTER_ADDR"] == master
    assert sorted(got) == list(range(plan.world_size))
    return len(got)


def no_strays(fleet, token: str) -> list[str]:
    return [f"{h}: {cmd}" for h in NAMES for _pid, cmd in fleet.processes(h) if token in cmd]


def test_step_places_every_rank_on_its_node(cluster, files):
    tmp, inv = files
    record = tmp / "runs.jsonl"
    t0 = time.monotonic()
    r = cluster.run("salloc", "-N3", "-w", "h0,h1,h2", *launch_args(tmp, inv, "--record", str(record)),
                    timeout=120)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    plan = expected(inv)
    got = reports(r.stdout)
    placed = check_placement(got, plan, {v: k for k, v in NAMES.items()})
    for p in plan.processes:
        assert got[p.rank]["label"] == f"[rank {p.rank} {p.host}]"  # streamed per rank
    rec = json.loads(record.read_text().splitlines()[-1])
    assert rec["via"] == "slurm" and rec["ok"] is True
    assert rec["slurm_step_id"] == f"{rec['slurm_job_id']}.{got[0]['SLURM_STEP_ID']}"
    assert rec["slurm_job_id"] == got[0]["SLURM_JOB_ID"]
    assert rec["nodes"] == {str(p.rank): NAMES_INV[p.host] for p in plan.processes}
    print(f"\nFIGURE slurm step: ranks placed exactly {placed}/{plan.world_size}; "
          f"srun start to all tasks started {rec['startup_s']:.2f} s; salloc wall {wall:.2f} s")
    assert cluster.wait_clean() == []


NAMES_INV = {v: k for k, v in NAMES.items()}


def test_a_failing_rank_cancels_the_step(cluster, files, emulated_fleet):
    tmp, inv = files
    token = f"sleep-{uuid.uuid4().hex[:8]}"
    (tmp / f"{token}.py").write_text(REPORT)
    args = launch_args(tmp, inv, "--record", str(tmp / "runs.jsonl"))
    args[-1] = str(tmp / f"{token}.py")
    r = cluster.run("salloc", "-N3", "-w", "h0,h1,h2", *args, "2", "300", timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "aborted: rank 2 on gamma failed" in r.stderr
    failed_at = float(r.stdout.split("FAILING ")[1].split()[0])
    assert cluster.wait_clean() == []
    deadline = time.monotonic() + 30
    while (left := no_strays(emulated_fleet, token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left == []
    rec = json.loads((tmp / "runs.jsonl").read_text().splitlines()[-1])
    assert rec["aborted"] and rec["exit_status"]["2"] == 3 and rec["slurm_step_id"]
    print(f"\nFIGURE slurm abort: failing rank to empty squeue and no process left {time.time() - failed_at:.2f} s")


def test_ctrl_c_cancels_the_step(cluster, files, emulated_fleet):
    tmp, inv = files
    token = f"sleep-{uuid.uuid4().hex[:8]}"
    (tmp / f"{token}.py").write_text(REPORT)
    alloc = cluster.run("salloc", "-N3", "-w", "h0,h1,h2", "--no-shell")
    job = alloc.stderr.split("Granted job allocation ")[1].split()[0]
    try:
        args = launch_args(tmp, inv, "--record", str(tmp / "ctrl-c.jsonl"))
        args[-1] = str(tmp / f"{token}.py")
        env = {**cluster.env, "SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": "h[0-2]"}
        proc = subprocess.Popen([*args, "99", "300"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while len(no_strays(emulated_fleet, token)) < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, out + err
        assert "aborted: interrupted" in err, err
        deadline = time.monotonic() + 30
        while (steps := job_steps(cluster, job)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert steps == []
        while (left := no_strays(emulated_fleet, token)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left == []
        rec = json.loads((tmp / "ctrl-c.jsonl").read_text().splitlines()[-1])
        assert rec["interrupted"] and rec["slurm_job_id"] == job and rec["slurm_step_id"].startswith(job + ".")
    finally:
        cluster.run("scancel", job)
    assert cluster.wait_clean() == []


def job_steps(cluster, job: str) -> list[str]:
    """The job's srun steps squeue still lists (not its extern or interactive step)."""
    ids = cluster.run("squeue", "-h", "-s", "-o", "%i").stdout.split()
    return [i for i in ids if i.startswith(job + ".") and i.split(".")[1].isdigit()]


def test_submit_runs_to_completion(cluster, files):
    tmp, inv = files
    script = tmp / "job.sbatch"
    r = subprocess.run(launch_args(tmp, inv, "--submit", "--sbatch-script", str(script),
                                   "--record", str(tmp / "submit.jsonl")),
                       env=cluster.env, cwd=tmp, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    job = r.stdout.split("submitted batch job ")[1].split()[0]
    assert "--nodelist=h0,h1,h2" in script.read_text()
    assert "--ntasks-per-node=2" in script.read_text()
    assert cluster.wait_clean(timeout=90) == []
    out = (tmp / f"slurm-{job}.out").read_text()
    got = reports(out)
    assert check_placement(got, expected(inv), NAMES_INV) == 5
    assert "Exited with exit code" not in out
    rec = json.loads((tmp / "submit.jsonl").read_text().splitlines()[-1])
    assert rec["kind"] == "submit" and rec["slurm_job_id"] == job and rec["nodes"] == ["h0", "h1", "h2", "h0", "h1"]


def test_unknown_node_is_one_error_naming_it(cluster, files, emulated_fleet):
    tmp, _inv = files
    inv = emulated_fleet.write_inventory(tmp / "bad.toml", names=NAMES, hosts=list(NAMES),
                                         extra={"h0": {"slurm_node": "h0"}, "h1": {"slurm_node": "nosuch-1"},
                                                "h2": {"slurm_node": "h2"}})
    r = subprocess.run(launch_args(tmp, inv, "--submit"), env=cluster.env, cwd=tmp,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: Slurm has no node nosuch-1 (host beta); name each host's node with "
                      "slurm_node in the inventory"]
    assert cluster.queue() == []


async def test_console_launches_one_step_in_its_allocation(cluster, emulated_fleet, monkeypatch):
    """The Launch screen's Slurm step (v) runs the same step from inside an allocation."""
    from support import wait_until
    from test_app_fleet import fleet_app

    from screens.dialogs import ConfirmDialog
    from textual.widgets import Input

    rank_map = [2, 0, 3, 1]
    alloc = cluster.run("salloc", "-N4", "--no-shell")
    job = alloc.stderr.split("Granted job allocation ")[1].split()[0]
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    monkeypatch.setenv("SLURM_JOB_ID", job)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "h[0-3]")
    try:
        app, python = fleet_app(emulated_fleet, rank_map)
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.press("6")
            screen = app.screen
            screen.query_one("#launch-command", Input).value = (
                f"{python} -c 'import os, socket; print(\"hello\", os.environ[\"RANK\"], "
                f"os.environ[\"SLURM_PROCID\"], socket.gethostname())'")
            await pilot.press("enter", "m", "v")
            await pilot.pause()
            assert screen.via == "slurm" and screen.plan.mode == "env"
            await pilot.press("l")
            await pilot.pause()
            assert isinstance(app.screen, ConfirmDialog)
            await pilot.press("y")
            await wait_until(lambda: screen.result is not None, 120)
            assert screen.result.ok, screen.result.to_json()
            assert screen.result.step_id.startswith(job + ".")
            lines = list(screen.query_one("#launch-plan").lines)
            for row, rank in enumerate(rank_map):
                host = emulated_fleet.hosts[row].name
                assert f"[rank {rank} {host}] hello {rank} {rank} {host}" in lines, lines
    finally:
        cluster.run("scancel", job)
    assert cluster.wait_clean() == []


def test_gloo_ranks_find_their_interface_and_all_reduce(cluster, emulated_fleet, tmp_path):
    """A real gloo job placed by Slurm: each task finds the link towards its peer (the
    SSH launcher's ``ip route get`` rule) and the all-reduce sums over both ranks."""
    from test_launch_fleet import PLAIN_PROGRAM

    fabric = {"labels": ["x", "y"], "alpha_ms": [[0, 1], [1, 0]], "beta_gbps": [[0, 1], [1, 0]],
              "devices": [{"host": "h2"}, {"host": "h3"}]}
    (tmp_path / "f.json").write_text(json.dumps(fabric))
    (tmp_path / "plain.py").write_text(PLAIN_PROGRAM)
    inv = emulated_fleet.write_inventory(tmp_path / "hosts.toml", hosts=["h2", "h3"])
    r = cluster.run("salloc", "-N2", "-w", "h2,h3", *geoconsole(
        "launch", "--via", "slurm", "-m", str(tmp_path / "f.json"), "-r", "1,0", "-i", str(inv),
        "--mode", "env", "--port", "29650", "--", sys.executable, str(tmp_path / "plain.py")), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    got = {}
    for line in r.stdout.splitlines():
        if "REPORT " in line:
            fields = dict(kv.split("=", 1) for kv in line.split("REPORT ")[1].split())
            got[int(fields["rank"])] = fields
    assert got[0]["host"] == "h3" and got[1]["host"] == "h2"
    assert got[0]["ifname"] == emulated_fleet.host("h3").links["h2"]
    assert got[1]["ifname"] == emulated_fleet.host("h2").links["h3"]
    assert got[0]["sum"] == got[1]["sum"] == "2"


def test_nodes_outside_the_allocation_are_one_error(cluster, files):
    tmp, inv = files
    r = cluster.run("salloc", "-N1", "-w", "h0", *launch_args(tmp, inv), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert [line for line in r.stderr.splitlines() if line.startswith("error:")] == [
        f"error: nodes h1, h2 are not in allocation {r.stderr.split('Granted job allocation ')[1].split()[0]} (h0)"]
    assert "REPORT" not in r.stdout
