"""Launch plan: explicit ranks per GPU, rendezvous on rank 0's host, quoting."""

from __future__ import annotations

import shlex

import numpy as np
import pytest

from geoconsole.launch.plan import LaunchError, LaunchHost, build_plan, describe, quote
from solver.fabric import Device

DEVICES = [Device("a", 0), Device("a", 1), Device("b", 0), Device("b", 3)]
HOSTS = [LaunchHost("a", "10.0.0.1", interface="eth0"), LaunchHost("b", "10.0.0.2", python="/v/bin/python")]


def _env(p):
    return dict(p.env)


def _flags(argv):
    return dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)


def test_rank_zero_host_is_the_rendezvous():
    plan = build_plan([3, 2, 0, 1], DEVICES, HOSTS, ["train.py"])
    assert plan.master_host == "b" and plan.master_addr == "10.0.0.2"
    assert all(_flags(p.argv)["master-addr"] == "10.0.0.2" for p in plan.processes)


def test_torchrun_one_agent_per_gpu_with_the_global_rank_as_node_rank():
    rank_map = [3, 2, 0, 1]
    plan = build_plan(rank_map, DEVICES, HOSTS, ["train.py", "--lr", "0.1"])
    assert [p.rank for p in plan.processes] == [0, 1, 2, 3]
    for p in plan.processes:
        assert rank_map[p.device] == p.rank
        f = _flags(p.argv)
        assert f["node-rank"] == str(p.rank) and f["nproc-per-node"] == "1"
        assert f["nnodes"] == "4" and f["rdzv-backend"] == "static"
        assert _env(p)["CUDA_VISIBLE_DEVICES"] == str(DEVICES[p.device].gpu)
        assert _env(p)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # nvidia-smi's numbering
        assert p.argv[-3:] == ("train.py", "--lr", "0.1")
    # the host's own python runs torchrun (virtual environments need no PATH)
    assert plan.processes[0].argv[:3] == ("/v/bin/python", "-m", "torch.distributed.run")


def test_multi_gpu_hosts_get_one_process_per_gpu_not_a_host_rank():
    """The spec's failure mode: a per-host node rank mis-ranks multi-GPU hosts."""
    plan = build_plan([0, 2, 1, 3], DEVICES, HOSTS, ["train.py"])
    on_a = [p for p in plan.processes if p.host == "a"]
    assert [(p.rank, p.gpu) for p in on_a] == [(0, 0), (2, 1)]
    assert [p.local_index for p in on_a] == [0, 1]
    assert {_flags(p.argv)["node-rank"] for p in on_a} == {"0", "2"}


def test_env_mode_sets_the_rank_variables():
    plan = build_plan([1, 0, 3, 2], DEVICES, HOSTS, ["python", "-m", "trainer"], mode="env")
    p = plan.processes[2]
    env = _env(p)
    assert env["RANK"] == "2" and env["WORLD_SIZE"] == "4" and env["LOCAL_RANK"] == "0"
    assert env["MASTER_ADDR"] == "10.0.0.1" and env["MASTER_PORT"] == "29500"
    assert env["CUDA_VISIBLE_DEVICES"] == "3" and p.argv == ("python", "-m", "trainer")
    script = build_plan([1, 0, 3, 2], DEVICES, HOSTS, ["t.py"], mode="env").processes[0]
    assert script.argv == ("python3", "t.py")  # a .py file runs with the host's python


def test_non_script_command_runs_under_torchrun_with_no_python():
    p = build_plan([0, 1, 2, 3], DEVICES, HOSTS, ["./trainer", "x"]).processes[0]
    assert p.argv[-3:] == ("--no-python", "./trainer", "x")


def test_interfaces_exact_name_for_nccl_and_plain_for_gloo():
    plan = build_plan([0, 1, 2, 3], DEVICES, HOSTS, ["t.py"], backend="nccl+gloo")
    a = _env(plan.processes[0])
    assert a["NCCL_SOCKET_IFNAME"] == "=eth0" and a["GLOO_SOCKET_IFNAME"] == "eth0"
    assert "NCCL_SOCKET_IFNAME='=eth0'" in plan.shell_command(0)
    b = _env(plan.processes[2])  # host b has no interface: left to the library / launcher
    assert "NCCL_SOCKET_IFNAME" not in b and "GLOO_SOCKET_IFNAME" not in b
    nccl_only = build_plan([0, 1, 2, 3], DEVICES, HOSTS, ["t.py"], interfaces={"b": "ib0"})
    assert "GLOO_SOCKET_IFNAME" not in _env(nccl_only.processes[0])
    assert _env(nccl_only.processes[2])["NCCL_SOCKET_IFNAME"] == "=ib0"
    cpu = build_plan([1, 0], [Device("a"), Device("b")], HOSTS, ["t.py"])
    assert cpu.backend == "gloo" and "CUDA_VISIBLE_DEVICES" not in _env(cpu.processes[0])


def test_every_value_is_quoted_for_the_remote_shell():
    evil = "x; touch /tmp/pwned"
    plan = build_plan([0, 1, 2, 3], DEVICES, HOSTS, ["t.py", evil, "$(id)"],
                      workdir="/data/my run", env={"NOTE": "it's `here`"})
    cmd = plan.shell_command(1)
    words = shlex.split(cmd)
    assert words[:4] == ["cd", "--", "/data/my run", "&&"]  # -- : a workdir may start with -
    assert evil in words and "$(id)" in words and "NOTE=it's `here`" in words
    assert quote("=eth0") == "'=eth0'" and quote("a b") == "'a b'"


@pytest.mark.parametrize(
    "rank_map, message",
    [
        ([0, 1, 2], "3 ranks for 4 devices"),
        ([0, 1, 2, 2], "rank 2 appears twice"),
        ([0, 1, 2, 7], "outside 0..3"),
        ([0, 1, 2, 2.5], "whole numbers"),
    ],
)
def test_bad_rank_maps_are_refused_with_one_line(rank_map, message):
    with pytest.raises(LaunchError, match=message):
        build_plan(rank_map, DEVICES, HOSTS, ["t.py"])


def test_bad_inputs_name_the_field():
    with pytest.raises(LaunchError, match="host 'c' is not in the inventory"):
        build_plan([0, 1], [Device("a", 0), Device("c", 0)], HOSTS, ["t.py"])
    with pytest.raises(LaunchError, match="also devices\\[0\\]"):
        build_plan([0, 1], [Device("a", 0), Device("a", 0)], HOSTS, ["t.py"])
    with pytest.raises(LaunchError, match="port"):
        build_plan([0, 1, 2, 3], DEVICES, HOSTS, ["t.py"], port=70000)
    with pytest.raises(LaunchError, match="mode"):
        build_plan([0, 1, 2, 3], DEVICES, HOSTS, ["t.py"], mode="mpi")
    with pytest.raises(LaunchError, match="command"):
        build_plan([0, 1, 2, 3], DEVICES, HOSTS, [])
    with pytest.raises(LaunchError, match="env"):
        build_plan([0, 1, 2, 3], DEVICES, HOSTS, ["t.py"], env={"A B": "1"})
    with pytest.raises(LaunchError, match="interface"):
        build_plan([0, 1, 2, 3], DEVICES, HOSTS, ["t.py"], interfaces={"*": "eth0; rm"})


def test_plan_rank_map_round_trips_for_random_maps():
    rng = np.random.default_rng(3)
    devices = [Device(f"h{i // 4}", i % 4) for i in range(16)]
    hosts = [LaunchHost(f"h{i}", f"10.0.0.{i}") for i in range(4)]
    for _ in range(20):
        rank_map = rng.permutation(16).tolist()
        plan = build_plan(rank_map, devices, hosts, ["t.py"])
        assert plan.rank_map == rank_map
        assert plan.master_host == devices[rank_map.index(0)].host
        doc = plan.to_json()
        assert doc["rank_map"] == rank_map and len(doc["processes"]) == 16


def test_describe_shows_every_rank_and_the_rendezvous():
    lines = describe(build_plan([3, 2, 0, 1], DEVICES, HOSTS, ["t.py"]))
    assert lines[0].startswith("rendezvous 10.0.0.2:29500 on b")
    assert sum(line.startswith("rank") for line in lines) == 4


@pytest.mark.parametrize("key", ["RANK", "WORLD_SIZE", "MASTER_ADDR", "CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME"])
def test_env_may_not_replace_what_the_plan_sets(key):
    """--env RANK=0 gave every rank rank 0 (and CUDA_VISIBLE_DEVICES=7 every rank GPU 7)."""
    with pytest.raises(LaunchError, match=f"env {key}: the plan sets it"):
        build_plan([0, 1, 2, 3], DEVICES, HOSTS, ["t.py"], mode="env", env={key: "0"})


@pytest.mark.parametrize("brk", ["\n", "\v", "\x1e", "\u2028"])
@pytest.mark.parametrize("where", ["env", "workdir", "command"])
def test_a_line_break_is_data_for_a_launch_and_refused_for_a_script_export(where, brk):
    """An exported script is read back line by line (str.splitlines, which cuts at
    ``\\v``, U+2028 and more): a line break failed its read-back with "No closing
    quotation". An SSH launch passes it through quoted."""
    from geoconsole.launch.plan import check_one_line

    kwargs = {"env": {"NOTE": f"a{brk}b"}} if where == "env" else {"workdir": f"/a{brk}b"} if where == "workdir" else {}
    command = ["t.py", f"--x{brk}--y"] if where == "command" else ["t.py"]
    plan = build_plan([0, 1, 2, 3], DEVICES, HOSTS, command, **kwargs)
    assert brk in plan.shell_command(0)  # inside quotes: data
    with pytest.raises(LaunchError, match="line break or NUL, which an exported script cannot hold") as info:
        check_one_line(plan)
    assert info.value.field == where


def test_a_workdir_that_starts_with_a_dash_is_not_an_option_of_cd():
    plan = build_plan([0, 1, 2, 3], DEVICES, HOSTS, ["t.py"], workdir="-x")
    assert shlex.split(plan.shell_command(0))[:3] == ["cd", "--", "-x"]
