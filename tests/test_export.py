"""Exports: each format reads back to the same mapping and matches what its tool reads.

Format references (checked against the tools' own readers):

- Slurm ``slurm_read_hostfile`` (used for ``SLURM_HOSTFILE`` with
  ``--distribution=arbitrary``): one NodeName per line, task ``i`` on line ``i``; a
  ``#`` ends the line unless escaped; empty lines are skipped; a non-empty line must
  start with a letter or digit; ``,`` separates names and ``name*N`` repeats one.
- Open MPI rankfile (``rmaps_rank_file_lex.l``): ``rank N=host slot=S``; ``#`` to the
  end of a line is a comment; hosts are hostnames, IPv4 addresses or plain strings.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from geoconsole.launch.export import (
    FORMATS,
    ExportError,
    export,
    parse,
    parse_rankfile,
    parse_slurm,
    parse_torchrun,
    plan_slots,
    rank_map_of,
)
from geoconsole.launch.plan import LaunchHost, build_plan
from solver.fabric import Device

HOSTS = [LaunchHost(f"node{i}", f"10.1.0.{i}", user="train") for i in range(3)]


def _plan(rank_map=None, seed=0):
    devices = [Device(f"node{i // 2}", (i % 2) * 2) for i in range(6)]
    rank_map = rank_map or np.random.default_rng(seed).permutation(6).tolist()
    return build_plan(rank_map, devices, HOSTS, ["train.py", "--config", "a b.yaml"])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_format_round_trips_to_the_same_mapping(fmt, seed):
    plan = _plan(seed=seed)
    slots = parse(export(plan, fmt, image="registry.example/train:1"), fmt)
    assert slots == plan_slots(plan)
    assert rank_map_of(slots) == plan.rank_map


def test_slurm_hostfile_lines_are_the_tasks_in_rank_order():
    plan = _plan([5, 4, 3, 2, 1, 0])
    text = export(plan, "slurm")
    host_lines = [line.split("#", 1)[0] for line in text.splitlines()]
    host_lines = [line for line in host_lines if line]
    assert host_lines == [p.host for p in plan.processes]  # task r on line r
    for line in host_lines:  # what slurm_read_hostfile accepts as a name line
        assert line[0].isalnum() and "," not in line and "*" not in line and " " not in line
    # Slurm's own reader semantics: comments ignored, name*N repeats
    assert [s.host for s in parse_slurm("# x\nn1*2\nn2 # c\n\nn3,n1\n")] == ["n1", "n1", "n2", "n3", "n1"]
    with pytest.raises(ExportError, match="letter or digit"):
        parse_slurm("-bad\n")


def test_slurm_hostfile_names_the_inventorys_slurm_nodes():
    """As ``launch --via slurm`` does: a host's ``slurm_node`` is the line Slurm reads,
    the table keeps the host, and the file reads back to the plan's hosts."""
    plan = _plan([5, 4, 3, 2, 1, 0])
    nodes = {"node0": "gpu-017", "node2": "gpu-002"}
    text = export(plan, "slurm", nodes=nodes)
    host_lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert host_lines == [nodes.get(p.host, p.host) for p in plan.processes]
    assert parse(text, "slurm") == plan_slots(plan)
    with pytest.raises(ExportError, match="runs on gpu-002 but the table says gpu-017"):
        parse_slurm(text.replace("\ngpu-017\n", "\ngpu-002\n", 1))
    with pytest.raises(ExportError, match="node 'bad name'"):
        export(plan, "slurm", nodes={"node1": "bad name"})
    bad = [LaunchHost("a'b", "10.1.0.9")]  # a host Slurm cannot read, given a node it can
    odd = build_plan([0, 1], [Device("a'b", 0), Device("a'b", 1)], bad, ["t"])
    assert [s.host for s in parse(export(odd, "slurm", nodes={"a'b": "n1"}), "slurm")] == ["a'b", "a'b"]


def test_rankfile_lines_follow_open_mpis_grammar():
    plan = _plan()
    text = export(plan, "rankfile")
    rules = re.compile(r"rank (\d+)=([A-Za-z][A-Za-z0-9_.\-]*) slot=(\d+)( #.*)?")
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(body) == 6
    for line, p in zip(body, plan.processes):
        m = rules.fullmatch(line)
        assert m, line
        assert int(m.group(1)) == p.rank and m.group(2) == p.host and int(m.group(3)) == p.gpu
    # documented examples read without our comments (GPU falls back to the slot)
    slots = parse_rankfile("rank 0=aa slot=1\nrank 1=bb slot=0\n")
    assert [(s.rank, s.host, s.gpu) for s in slots] == [(0, "aa", 1), (1, "bb", 0)]
    with pytest.raises(ExportError, match="rank 1 missing"):
        parse_rankfile("rank 0=aa slot=1\nrank 2=bb slot=0\n")


def test_torchrun_script_is_valid_bash_with_one_launch_per_rank():
    plan = _plan()
    text = export(plan, "torchrun")
    assert text.startswith("#!/usr/bin/env bash")
    if shutil.which("bash"):
        proc = subprocess.run(["bash", "-n"], input=text, text=True, capture_output=True)
        assert proc.returncode == 0, proc.stderr
    launches = [line for line in text.splitlines() if line.startswith("launch ")]
    assert len(launches) == 6 and "train@10.1.0." in launches[0]
    assert "--rdzv-backend=static" in text and "--nproc-per-node=1" in text


def test_tampered_torchrun_script_is_refused():
    text = export(_plan([0, 1, 2, 3, 4, 5]), "torchrun")
    bad = text.replace("--node-rank=3", "--node-rank=4", 1)
    with pytest.raises(ExportError, match="--node-rank 4 differs from rank 3"):
        parse_torchrun(bad)
    missing = "\n".join(line for line in text.splitlines() if not line.startswith("launch 5 "))
    with pytest.raises(ExportError, match="--nnodes 6 for 5 ranks"):
        parse_torchrun(missing)


def test_host_names_a_format_cannot_carry_are_refused():
    hosts = [LaunchHost("bad,name", "10.0.0.1"), LaunchHost("ok", "10.0.0.2")]
    plan = build_plan([0, 1], [Device("bad,name", 0), Device("ok", 0)], hosts, ["t.py"])
    for fmt in ("slurm", "rankfile"):
        with pytest.raises(ExportError, match="bad,name"):
            export(plan, fmt)


def test_json_parse_rejects_other_documents():
    with pytest.raises(ExportError, match="geoconsole launch plan"):
        parse('{"labels": []}', "json")
    with pytest.raises(ExportError, match="invalid JSON"):
        parse("{", "json")


# --- the exported torchrun script on the emulated fleet ---------------------------------


def _export_script(fleet, tmp_path, program_text: str, rank_map: str, port: int):
    import json as _json
    import uuid

    from typer.testing import CliRunner

    from geoconsole.cli import app

    names = [h.name for h in fleet.hosts]
    fabric = tmp_path / "fleet.json"
    n = len(names)
    fabric.write_text(_json.dumps({
        "labels": names,
        "alpha_ms": [[0 if i == j else 1 for j in range(n)] for i in range(n)],
        "beta_gbps": [[0 if i == j else 1 for j in range(n)] for i in range(n)],
        "devices": [{"host": h} for h in names],
    }))
    token = uuid.uuid4().hex[:10]
    prog = fleet.dir / f"exported-{token}.py"
    prog.write_text(program_text)
    script = tmp_path / "launch.sh"
    r = CliRunner().invoke(app, ["--headless", "export", "-m", str(fabric), "-i", str(fleet.inventory_path),
                                 "-r", rank_map, "--format", "torchrun", "--port", str(port),
                                 "-o", str(script), "--", str(prog)])
    assert r.exit_code == 0, r.output
    env = dict(os.environ, SSH=f"ssh -i {fleet.client_key_path} -o UserKnownHostsFile={fleet.known_hosts_path} "
                              "-o StrictHostKeyChecking=yes")
    return script, env, token


@pytest.mark.fleet
def test_exported_torchrun_script_runs_every_rank_where_planned(emulated_fleet, tmp_path):
    if shutil.which("ssh") is None:
        pytest.skip("needs the OpenSSH client")
    fleet = emulated_fleet
    program = ("import os, socket\n"
               "print('REPORT', os.environ['RANK'], os.environ['WORLD_SIZE'], socket.gethostname(), flush=True)\n")
    script, env, _token = _export_script(fleet, tmp_path, program, "1,3,0,2", 29680)
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    reports = {line.split()[4]: line for line in proc.stdout.splitlines() if " REPORT " in line}
    # rank_map 1,3,0,2: h0 runs rank 1, h1 rank 3, h2 rank 0, h3 rank 2
    for rank, host in (("0", "h2"), ("1", "h0"), ("2", "h3"), ("3", "h1")):
        assert reports[rank] == f"[rank {rank} {host}] REPORT {rank} 4 {host}", proc.stdout


@pytest.mark.fleet
def test_stopping_the_exported_script_stops_every_remote_rank(emulated_fleet, tmp_path):
    import signal
    import time

    if shutil.which("ssh") is None:
        pytest.skip("needs the OpenSSH client")
    fleet = emulated_fleet
    program = "import os, time\nprint('UP', os.environ['RANK'], flush=True)\ntime.sleep(300)\n"
    script, env, token = _export_script(fleet, tmp_path, program, "0,1,2,3", 29690)
    proc = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    up, deadline = 0, time.monotonic() + 90
    while up < 4 and time.monotonic() < deadline:
        up += " UP " in proc.stdout.readline()
    assert up == 4
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    left, deadline = None, time.monotonic() + 30
    while left != [] and time.monotonic() < deadline:
        left = [cmd for h in fleet.hosts for _pid, cmd in fleet.processes(h.name) if token in cmd]
        time.sleep(0.3)
    assert left == []
