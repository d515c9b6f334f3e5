"""Sampled sweeps and refreshes without a fleet: which pairs, what is inferred, drift."""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest

from geoconsole.launch.plan import LaunchHost, build_plan, default_backend
from probes.discovery import parse_discovery
from probes.refresh import (Link, RefreshError, bottlenecks_from_solve_json, choose_links, drift,
                            merged)
from probes.sample import infer, plan_sample, spread_of
from probes.schedule import schedule
from probes.topo import parse_topo
from solver.estimate import fill_missing, inferred_mask, inferred_pair_count, measured_mask
from solver.fabric import Device, Fabric, fabric_from_json

TOPO_2NIC = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity
GPU0\t X \tNV4\tSYS\tSYS\tPIX\tSYS\t0-15\t0
GPU1\tNV4\t X \tSYS\tSYS\tPIX\tSYS\t0-15\t0
GPU2\tSYS\tSYS\t X \tNV4\tSYS\tPIX\t16-31\t1
GPU3\tSYS\tSYS\tNV4\t X \tSYS\tPIX\t16-31\t1
NIC0\tPIX\tPIX\tSYS\tSYS\t X \tSYS
NIC1\tSYS\tSYS\tPIX\tPIX\tSYS\t X

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""


def cpu_fleet(hosts: int, slots: int) -> tuple[list[str], list[None]]:
    device_hosts = [f"h{h}" for h in range(hosts) for _ in range(slots)]
    return device_hosts, [None] * len(device_hosts)


def true_matrices(device_hosts, rng):
    """A fabric whose device pairs of one host pair share one link (as on the emulated fleet)."""
    hosts = sorted(set(device_hosts))
    link = {}
    for a, b in itertools.combinations(hosts, 2):
        link[(a, b)] = link[(b, a)] = (rng.uniform(0.1, 5.0), rng.uniform(0.1, 1.0))
    n = len(device_hosts)
    alpha, beta = np.zeros((n, n)), np.zeros((n, n))
    for i, j in itertools.product(range(n), repeat=2):
        if i != j:
            a, b = (0.01, 20.0) if device_hosts[i] == device_hosts[j] else link[(device_hosts[i], device_hosts[j])]
            noise = 1 + rng.uniform(-0.02, 0.02)
            alpha[i, j], beta[i, j] = a, b * noise
    return alpha, beta


def test_cpu_hosts_measure_inside_pairs_and_two_pairs_per_host_pair():
    device_hosts, gpus = cpu_fleet(5, 3)
    plan = plan_sample(device_hosts, gpus, {})
    per_host_pair: dict[tuple[str, str], list] = {}
    for i, j in plan.measure:
        a, b = device_hosts[i], device_hosts[j]
        per_host_pair.setdefault(tuple(sorted((a, b))), []).append((i, j))
    for h in set(device_hosts):
        assert len(per_host_pair[(h, h)]) == 3  # every inside pair of a CPU host
    inter = {k: v for k, v in per_host_pair.items() if k[0] != k[1]}
    assert len(inter) == 10 and all(len(v) == 2 for v in inter.values())
    for pairs in inter.values():  # distinct devices on both sides
        assert len({i for i, _ in pairs}) == 2 and len({j for _, j in pairs}) == 2
    assert plan.groups == {tuple(sorted(k)) for k in inter}


def test_gpu_hosts_cover_every_nic_and_measure_one_pair_per_link_class():
    topo = parse_topo(TOPO_2NIC)
    device_hosts = ["a"] * 4 + ["b"] * 4
    gpus = [0, 1, 2, 3] * 2
    plan = plan_sample(device_hosts, gpus, {"a": topo, "b": topo})
    inside_a = [(i, j) for i, j in plan.measure if device_hosts[i] == device_hosts[j] == "a"]
    assert sorted(topo.link(gpus[i], gpus[j]) for i, j in inside_a) == ["NV4", "SYS"]
    inter = [(i, j) for i, j in plan.measure if device_hosts[i] != device_hosts[j]]
    assert {plan.nic[i] for i, _ in inter} == {"mlx5_0", "mlx5_1"}
    assert {plan.nic[j] for _, j in inter} == {"mlx5_0", "mlx5_1"}
    assert len(inter) == 2


@pytest.mark.parametrize("seed", range(5))
def test_inferred_pairs_match_the_host_pair_link_and_carry_basis_and_spread(seed):
    rng = random.Random(seed)
    device_hosts, gpus = cpu_fleet(rng.randint(2, 5), rng.randint(2, 4))
    alpha_true, beta_true = true_matrices(device_hosts, rng)
    plan = plan_sample(device_hosts, gpus, {})
    n = len(device_hosts)
    alpha, beta = np.full((n, n), np.nan), np.full((n, n), np.nan)
    for i, j in plan.measure:
        for a, b in ((i, j), (j, i)):
            alpha[a, b], beta[a, b] = alpha_true[a, b], beta_true[a, b]
    inf = infer(alpha, beta, device_hosts, plan)
    planned = {(i, j) for i, j in plan.measure} | {(j, i) for i, j in plan.measure}
    for i, j in itertools.product(range(n), repeat=2):
        if i == j:
            continue
        if (i, j) in planned:
            assert not inf.mask[i, j]
            continue
        assert inf.mask[i, j], (i, j)
        assert inf.beta_gbps[i, j] == pytest.approx(beta_true[i, j], rel=0.05)
        assert inf.basis[i][j].startswith(f"{device_hosts[i]} -> {device_hosts[j]}: median of 2 sampled pairs")
        assert 0 <= inf.spread[i][j] < 0.05


def test_a_planned_pair_that_failed_is_not_inferred_and_a_host_pair_without_samples_stays_null():
    device_hosts, gpus = cpu_fleet(3, 2)
    plan = plan_sample(device_hosts, gpus, {})
    n = len(device_hosts)
    alpha, beta = np.full((n, n), np.nan), np.full((n, n), np.nan)
    lost = "h2"
    for i, j in plan.measure:
        if lost not in (device_hosts[i], device_hosts[j]):
            for a, b in ((i, j), (j, i)):
                alpha[a, b], beta[a, b] = 1.0, 0.5
    inf = infer(alpha, beta, device_hosts, plan)
    for i, j in itertools.product(range(n), repeat=2):
        hosts = {device_hosts[i], device_hosts[j]}
        if i != j and lost in hosts:
            assert not inf.mask[i, j]  # nothing measured to infer from, and failed pairs stay failed
        elif i != j and len(hosts) == 2 and (min(i, j), max(i, j)) not in plan.measure:
            assert inf.mask[i, j] and inf.beta_gbps[i, j] == 0.5


def test_spread_is_relative_to_the_median():
    assert spread_of([1.0]) == 0.0
    assert spread_of([0.9, 1.0, 1.1]) == pytest.approx(0.2)


def test_schedule_keeps_only_wanted_pairs_and_ends_group_slots():
    device_hosts, gpus = cpu_fleet(4, 3)
    plan = plan_sample(device_hosts, gpus, {})
    rounds = schedule(device_hosts, wanted=plan.measure, groups=plan.groups)
    seen = [p for r in rounds for s in r.slots for p in s.pairs]
    assert sorted(seen) == sorted(plan.measure)
    groups = {s.hosts for r in rounds for s in r.slots if s.group}
    assert {tuple(sorted(g)) for g in groups} == plan.groups
    for r in rounds:
        used = [h for s in r.slots for h in s.hosts]
        assert len(used) == len(set(used))


def test_odd_fleets_measure_inside_pairs_in_each_hosts_bye_round():
    device_hosts, _ = cpu_fleet(5, 2)
    rounds = schedule(device_hosts)
    assert len(rounds) == 5
    for r in rounds:
        inside = [s for s in r.slots if len(s.hosts) == 1]
        assert len(inside) == 1
        playing = {h for s in r.slots if len(s.hosts) == 2 for h in s.hosts}
        assert inside[0].hosts[0] not in playing


# -- the fabric side ---------------------------------------------------------------


def sampled_fabric() -> Fabric:
    devices = tuple(Device(f"h{h}", None, f"r{h}", slot=k) for h in range(2) for k in range(2))
    n = 4
    alpha = np.full((n, n), 1.0)
    beta = np.array([[0, 9, 0.5, 0.6], [9, 0, 0.55, 0.5], [0.5, 0.5, 0, 9], [0.6, 0.5, 9, 0]], dtype=float)
    inferred = np.zeros((n, n), dtype=bool)
    inferred[0, 3] = inferred[3, 0] = inferred[1, 2] = inferred[2, 1] = True
    basis = [[("h0 -> h1: median" if inferred[i, j] else None) for j in range(n)] for i in range(n)]
    return Fabric(alpha, beta, tuple(d.region for d in devices), devices,
                  extras={"inferred": inferred.tolist(), "inferred_basis": basis})


def test_cpu_slot_devices_round_trip_and_are_named_apart():
    fabric = sampled_fabric()
    assert [d.name for d in fabric.devices] == ["h0:cpu0", "h0:cpu1", "h1:cpu0", "h1:cpu1"]
    back = fabric_from_json(json.loads(json.dumps(fabric.to_json())))
    assert back.devices == fabric.devices
    assert "slot" not in Device("h0").to_json()  # one-device hosts keep their files as they were
    with pytest.raises(ValueError, match=r"devices\[0\]\.slot"):
        fabric_from_json({"labels": ["a"], "alpha_ms": [[0]], "beta_gbps": [[0]],
                          "devices": [{"host": "a", "gpu": 0, "slot": 1}]})


def test_inferred_entries_are_neither_measured_nor_learnt_from_by_estimates():
    fabric = sampled_fabric()
    assert inferred_pair_count(fabric) == 2
    m = measured_mask(fabric)
    assert not m[0, 3] and not m[1, 2] and m[0, 2]
    assert (inferred_mask(fabric) == np.array(fabric.extras["inferred"])).all()
    out, filled = fill_missing(fabric)  # nothing missing: unchanged
    assert filled == 0 and inferred_pair_count(out) == 2


def test_discovery_counts_cpu_slots_as_devices():
    class Host:
        name, address, python, gpus, region, zone, network_group, interface = (
            "c1", "10.0.0.1", "python3", (0, 1, 2), None, None, None, None)

    info = parse_discovery(Host(), "@@hostname\nc1\n@@route\n10.0.0.2 dev eth0 src 10.0.0.1\n@@end\n")
    assert info.cpu_host and info.devices == (None, None, None)
    Host.gpus = None
    assert parse_discovery(Host(), "@@hostname\nc1\n@@end\n").devices == (None,)


def test_cpu_slots_launch_one_gloo_process_each_with_its_rank():
    devices = [Device(f"h{h}", slot=k) for h in range(2) for k in range(3)]
    hosts = {f"h{h}": LaunchHost(f"h{h}", f"10.0.0.{h + 1}", python="python3") for h in range(2)}
    assert default_backend(devices) == "gloo"
    plan = build_plan([5, 4, 3, 2, 1, 0], devices, hosts, ["train.py"])
    by_host = {h: [p for p in plan.processes if p.host == h] for h in hosts}
    assert sorted(p.local_index for p in by_host["h0"]) == [0, 1, 2]
    assert [p.rank for p in sorted(plan.processes, key=lambda p: p.device)] == [5, 4, 3, 2, 1, 0]
    assert plan.master_host == "h1"
    for p in plan.processes:
        env = dict(p.env)
        assert "CUDA_VISIBLE_DEVICES" not in env and p.gpu is None


# -- refresh -----------------------------------------------------------------------


def test_refresh_takes_bottlenecks_then_a_seeded_random_share():
    fabric = sampled_fabric()
    links = choose_links(fabric, [(2, 0)], share=0.5, seed=3)
    assert links[0] == Link(0, 2, "h0:cpu0", "h1:cpu0", "bottleneck")
    rest = [x for x in links[1:]]
    assert len(rest) == 2 and all(x.why == "random" for x in rest)  # ceil(0.5 * 3 other inter-host links)
    assert all(fabric.devices[x.i].host != fabric.devices[x.j].host for x in rest)
    assert choose_links(fabric, [(2, 0)], share=0.5, seed=3) == links
    slowest = choose_links(fabric, None, share=0.0, slowest=2)
    assert [x.why for x in slowest] == ["slowest", "slowest"]
    assert all(fabric.devices[x.i].host != fabric.devices[x.j].host for x in slowest)
    inside = choose_links(fabric, [(1, 0)], share=1.0)  # a bottleneck inside a host is kept
    assert inside[0].why == "bottleneck" and (inside[0].i, inside[0].j) == (0, 1)
    assert len(inside) == 1 + 4 and all(x.why == "random" for x in inside[1:])
    with pytest.raises(RefreshError):
        choose_links(fabric, None, share=1.5)


def test_drift_beyond_the_threshold_is_flagged_and_merged_as_measured():
    old = sampled_fabric()
    new = sampled_fabric()
    new.beta_gbps[0, 3] = 0.3  # -50 %: drifted
    new.beta_gbps[0, 2] = 0.52  # +4 %: not
    links = [Link(0, 3, "h0:cpu0", "h1:cpu1", "bottleneck"), Link(0, 2, "h0:cpu0", "h1:cpu0", "random")]
    d = drift(old, new, links, threshold=0.2)
    assert d[0].drifted and d[0].change == pytest.approx(-0.5)
    assert not d[1].drifted and d[1].change == pytest.approx(0.04)
    assert "-50.0%" in d[0].words()
    out = merged(old, new, d)
    assert out.beta_gbps[0, 3] == 0.3 and not out.extras["inferred"][0][3]
    assert out.extras["inferred"][1][2]  # not re-measured: still inferred
    missing = drift(old, new.subset([0, 1]), links)
    assert all(math.isnan(x.change) and not x.drifted for x in missing)


def test_bottlenecks_from_a_solve_document():
    fabric = sampled_fabric()
    doc = {"score": {"pipeline_edges": [{"bottleneck": ["h0:cpu1", "h1:cpu1"]}],
                     "worst_device": {"name": "h0:cpu0"},
                     "stage_groups": [{"names": ["h0:cpu0", "h1:cpu0"]}, {"names": ["h0:cpu1", "h1:cpu1"]}]}}
    assert bottlenecks_from_solve_json(fabric, doc, "s.json") == [(1, 3), (0, 2)]
    with pytest.raises(RefreshError, match="s.json: expected a solve --json document"):
        bottlenecks_from_solve_json(fabric, {"labels": []}, "s.json")
    doc["score"]["pipeline_edges"][0]["bottleneck"] = ["x", "h1:cpu1"]
    with pytest.raises(RefreshError, match="bottleneck x - h1:cpu1: not a device"):
        bottlenecks_from_solve_json(fabric, doc, "s.json")


# -- probe --refresh: what is refused before any host is contacted -----------------


def refresh_args(tmp_path, fabric: Fabric, *extra: str) -> list[str]:
    path = tmp_path / "fabric.json"
    fabric.save(path)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("h0 slots=2\nh1 slots=2\n")
    return ["--headless", "probe", "--inventory", str(hostfile), "--refresh", str(path),
            "--ssh-config", str(tmp_path / "none"), *extra]


def test_refresh_refuses_bad_inputs_with_one_line(tmp_path):
    from typer.testing import CliRunner

    from geoconsole.cli import app

    runner = CliRunner()
    bare = Fabric(np.zeros((2, 2)), np.ones((2, 2)) - np.eye(2), ("a", "b"))
    result = runner.invoke(app, refresh_args(tmp_path, bare))
    assert result.exit_code == 2 and "has no device records" in result.output
    solution = tmp_path / "solve.json"
    solution.write_text(json.dumps({"score": {}}))
    result = runner.invoke(app, refresh_args(tmp_path, sampled_fabric(), "--solution", str(solution)))
    assert result.exit_code == 2 and "--solution:" in result.output and "expected a solve --json document" in result.output
    other = sampled_fabric()
    other.devices = tuple(Device("elsewhere", slot=d.slot) if d.host == "h1" else d for d in other.devices)
    result = runner.invoke(app, refresh_args(tmp_path, other))
    assert result.exit_code == 2 and "host elsewhere is not in the inventory" in result.output
    assert "Traceback" not in result.output


def test_links_a_refresh_could_not_re_measure_are_not_called_ok(tmp_path):
    """With every host down each link read "ok ... not re-measured"."""
    from typer.testing import CliRunner

    from geoconsole.cli import app

    known = tmp_path / "known_hosts"
    known.write_text("")
    args = refresh_args(tmp_path, sampled_fabric(), "--known-hosts", str(known), "--connect-timeout", "2",
                        "--host-timeout", "5")
    result = CliRunner().invoke(app, args)
    lines = [x for x in result.stdout.splitlines() if "not re-measured" in x]
    assert result.exit_code == 3 and lines, result.output
    assert all(x.startswith("  --    ") for x in lines), lines


def test_a_refresh_may_write_the_fabric_it_refreshes(tmp_path):
    """-o onto --refresh updates the fabric in place (atomic); the input checks for -o let it."""
    from typer.testing import CliRunner

    from geoconsole.cli import app

    known = tmp_path / "known_hosts"
    known.write_text("")
    args = refresh_args(tmp_path, sampled_fabric(), "--known-hosts", str(known), "--connect-timeout", "2",
                        "--host-timeout", "5", "-o", str(tmp_path / "fabric.json"))
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3 and "is also the --refresh" not in result.output, result.output
