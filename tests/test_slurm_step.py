"""The Slurm step without a cluster: the task script run by a real shell as each task,
the exact dry-run lines, srun's status lines read, hostile names refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from geoconsole.cli import app
from geoconsole.launch import slurm
from geoconsole.launch.plan import LaunchError, LaunchHost, build_plan
from geoconsole.launch.run import RankOutcome
from solver.fabric import Device

PROG = ("import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in "
        "('RANK', 'CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER', 'MASTER_ADDR')} | {'argv': sys.argv[1:]}))")
HOSTS = [LaunchHost("a", "10.0.0.1"), LaunchHost("b", "10.0.0.2")]
DEVICES = [Device("a", 0), Device("a", 1), Device("b", 2)]


def _plan(command=(sys.executable, "-c", PROG, "it's", "$HOME")):
    return build_plan([2, 0, 1], DEVICES, HOSTS, list(command), mode="env")


def run_task(step, procid, node):
    env = {**os.environ, "SLURM_PROCID": str(procid), "SLURMD_NODENAME": node}
    return subprocess.run(step.argv[-3:], env=env, capture_output=True, text=True, timeout=60)


def test_each_task_runs_its_rank_with_its_gpu():
    plan = _plan()
    step = slurm.build_step(plan, {"b": "gpu-b"})
    assert step.nodes == ("a", "gpu-b", "a") and step.hostfile == "a\ngpu-b\na\n"
    for p in plan.processes:
        out = run_task(step, p.rank, step.nodes[p.rank])
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert doc == {"RANK": str(p.rank), "CUDA_VISIBLE_DEVICES": str(p.gpu),
                       "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "MASTER_ADDR": "10.0.0.1",
                       "argv": ["it's", "$HOME"]}  # values are data: quoted, never expanded


def test_a_task_on_the_wrong_node_refuses_to_start():
    step = slurm.build_step(_plan())
    out = run_task(step, 1, "a")
    assert out.returncode == slurm.MISPLACED_STATUS and "rank 1 planned on b but started on a" in out.stderr
    assert run_task(step, 7, "a").returncode == 96


def test_step_options_and_sbatch_script():
    step = slurm.build_step(_plan())
    assert step.argv[:7] == ("srun", "--ntasks=3", "--distribution=arbitrary", "--label", "-v",
                             "--kill-on-bad-exit=1", "--job-name=geoconsole")
    text = slurm.sbatch_script(step)
    assert "#SBATCH --nodelist=a,b\n" in text and "#SBATCH --ntasks-per-node=2\n" in text
    assert "printf '%s\\n' a b a > \"$hostfile\"" in text
    assert subprocess.run(["sh", "-n", "-c", text]).returncode == 0
    assert "--kill-on-bad-exit=0" in slurm.build_step(_plan(), abort_on_failure=False).argv


@pytest.mark.parametrize("name", ["-rf", "a,b", "a b", "x*2", "n$(id)"])
def test_node_names_slurm_would_misread_are_refused(name):
    with pytest.raises(LaunchError, match="not a Slurm node name"):
        slurm.build_step(_plan(), {"a": name})


def test_srun_status_lines_fill_the_outcomes():
    plan = _plan()
    result = slurm.SlurmResult([RankOutcome(p.rank, p.host) for p in plan.processes])
    notes = []
    state = slurm._State(plan, result, lambda p, s, line: notes.append((p.rank, line)), notes.append, 0.0)
    for line in ["srun: launching StepId=41.3 on host a, 2 tasks: [0,2]",
                 "srun: launch/slurm: _task_finish: a: task 0: Completed",
                 "srun: error: b: task 1: Exited with exit code 3",
                 "srun: error: a: tasks 2: Killed",
                 " 2: hello"]:
        state.line("stderr", line.encode())
    assert (result.job_id, result.step_id) == ("41", "41.3")
    assert [o.exit_status for o in result.outcomes] == [0, 3, 137]
    assert state.failed.is_set() and (2, "hello") in notes


def test_checking_nodes_names_every_unknown_one():
    step = slurm.build_step(_plan(), {"a": "n1", "b": "n9"})

    def fake(argv):
        return subprocess.CompletedProcess(argv, 0, "n1\nn2\n", "")
    with pytest.raises(LaunchError, match=r"Slurm has no node n9 \(host b\)"):
        slurm.check_nodes(step, env={}, run=fake)


def test_cli_dry_run_prints_the_exact_lines(tmp_path):
    fabric = {"labels": ["a", "a", "b"], "alpha_ms": [[0, 1, 1], [1, 0, 1], [1, 1, 0]],
              "beta_gbps": [[0, 9, 9], [9, 0, 9], [9, 9, 0]],
              "devices": [{"host": "a", "gpu": 0}, {"host": "a", "gpu": 1}, {"host": "b", "gpu": 2}]}
    (tmp_path / "f.json").write_text(json.dumps(fabric))
    base = ["--headless", "launch", "--via", "slurm", "-m", str(tmp_path / "f.json"), "-r", "2,0,1", "--dry-run"]
    r = CliRunner().invoke(app, [*base, "--", "train.py"])
    assert r.exit_code == 0, r.output
    assert "SLURM_HOSTFILE=hostfile srun --ntasks=3 --distribution=arbitrary" in r.stdout
    r = CliRunner().invoke(app, [*base, "--submit", "--", "train.py"])
    assert r.exit_code == 0 and "#SBATCH --nodelist=a,b" in r.stdout
    r = CliRunner().invoke(app, [*base, "--via", "ssh", "--submit", "--", "train.py"])
    assert r.exit_code == 2 and "--submit: needs --via slurm" in r.output


def test_hostile_values_stay_data(tmp_path):
    """Arguments, environment values and the working directory reach the task unchanged."""
    hostile = ["a\nb", "`touch PWNED`", "$(touch PWNED)", "'; touch PWNED; '", "--", "*"]
    workdir = tmp_path / "dir with 'quotes' $(x)"
    workdir.mkdir()
    plan = build_plan([0, 1, 2], DEVICES, HOSTS, [sys.executable, "-c", PROG, *hostile], mode="env",
                      workdir=str(workdir), env={"EXTRA": "$(touch PWNED) `x`"})
    step = slurm.build_step(plan)
    for p in plan.processes:
        env = {**os.environ, "SLURM_PROCID": str(p.rank), "SLURMD_NODENAME": step.nodes[p.rank]}
        out = subprocess.run(step.argv[-3:], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["argv"] == hostile
    assert "$(touch PWNED) `x`" in step.script and not list(tmp_path.rglob("PWNED"))
    batch = tmp_path / "job.sh"
    batch.write_text(slurm.sbatch_script(step))
    assert subprocess.run(["sh", "-n", str(batch)]).returncode == 0


def test_inventory_node_fields_are_names_per_host(tmp_path):
    from geoconsole.inventory import InventoryError, load_inventory

    path = tmp_path / "hosts.toml"
    path.write_text('[[hosts]]\nname = "a"\naddress = "10.0.0.1"\nslurm_node = "gpu-1"\nk8s_node = "node-1"\n')
    inv = load_inventory(path, ssh_config=None)
    assert (inv.hosts[0].slurm_node, inv.hosts[0].k8s_node) == ("gpu-1", "node-1")
    assert slurm.node_map(inv) == {"a": "gpu-1"} and slurm.node_map(inv, "k8s_node") == {"a": "node-1"}
    path.write_text('[[hosts]]\naddress = "10.0.0.1"\nslurm_node = "-x"\n')
    with pytest.raises(InventoryError, match=r"hosts\[0\]\.slurm_node: a node name may not start with '-'"):
        load_inventory(path, ssh_config=None)
    path.write_text('[defaults]\nk8s_node = "n"\n[[hosts]]\naddress = "10.0.0.1"\n')
    with pytest.raises(InventoryError, match=r"defaults\.k8s_node: unknown field"):
        load_inventory(path, ssh_config=None)
