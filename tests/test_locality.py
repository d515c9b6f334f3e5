"""Locality levels and words (ADR-0021), solution summaries, seed orders, purity of solver/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from geoconsole.demo_fabrics import two_datacenter_fabric, worldwide_fabric
from solver.fabric import Device, Fabric
from solver.locality import (
    describe_group,
    group_locality,
    level_rank,
    locality_counts,
    locality_lines,
    solution_locality,
    solution_locality_detail,
)
from solver.orders import chained_label_order, host_order, label_order, seed_orders_for

ROOT = Path(__file__).resolve().parents[1]


def dev(host, region=None, zone=None, ng=None, gpu=0):
    return Device(host=host, gpu=gpu, region=region, zone=zone, network_group=ng)


GCP = [
    dev("a", "europe-west1", "europe-west1-b", "rack-3"),
    dev("b", "europe-west1", "europe-west1-b", "rack-3"),
    dev("c", "europe-west1", "europe-west1-b", "rack-4"),
    dev("d", "europe-west1", "europe-west1-c"),
    dev("e", "europe-west1", "europe-west1-d"),
    dev("f", "europe-west4", "europe-west4-a"),
    dev("g", "us-east1", "us-east1-b"),
    dev("h", "europe-west1"),
    dev("i"),
]


@pytest.mark.parametrize("rows,words,level", [
    ([0, 1], "same network group rack-3", "network_group"),
    ([0, 1, 2], "same zone europe-west1-b", "zone"),
    ([0, 3, 7], "same region europe-west1", "region"),
    ([0, 3, 4], "spans 3 zones in 1 region", "region"),
    ([0, 3, 4, 5, 6], "spans 5 zones in 3 regions", "any"),
    ([0, 5, 6, 7], "spans 3 regions", "any"),
    ([0, 5, 8], "spans 2 zones in 2 regions + 1 unlabelled", "any"),
    ([0, 7, 8], "spans 1 region + 1 unlabelled", "any"),
    ([8], "no location labels", "any"),
    ([3], "same zone europe-west1-c", "zone"),
])
def test_words_follow_the_adr(rows, words, level):
    loc = group_locality(GCP, rows)
    assert loc.words == words
    assert loc.level == level
    assert describe_group(GCP, rows) == words


def test_same_host_is_named_for_multi_gpu_hosts():
    devices = [dev("dgx", "r", "z", "n", gpu=g) for g in range(4)]
    assert describe_group(devices, [0, 2, 3]) == "same host dgx"


def test_network_groups_nest_inside_zones():
    # "rack-1" in two zones is two racks, not one network group.
    devices = [dev("a", "r", "z1", "rack-1"), dev("b", "r", "z2", "rack-1")]
    assert describe_group(devices, [0, 1]) == "spans 2 zones in 1 region"


def test_levels_order_tightest_first():
    assert [level_rank(x) for x in ("host", "network_group", "zone", "region", "any")] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="unknown locality level"):
        level_rank("rack")


def test_empty_group_is_refused():
    with pytest.raises(ValueError):
        group_locality(GCP, [])


def test_solution_locality_worldwide_layout():
    f = worldwide_fabric()
    # Each pipeline stays in one region, each stage group takes one GPU from every region.
    grid = np.arange(64).reshape(8, 8)
    out = solution_locality(f.devices, grid)
    assert out["pipelines"] == [f"same region {r}" for r in ("Oregon", "Virginia", "Ohio", "Tokyo", "Seoul",
                                                            "London", "Frankfurt", "Ireland")]
    assert out["stage_groups"] == ["spans 8 regions"] * 8
    detail = solution_locality_detail(f.devices, grid)
    assert detail["stage_groups"][3]["devices"][0] == "oregon-3:0"
    assert detail["stage_groups"][3]["level"] == "any" and detail["pipelines"][2]["words"] == "same region Ohio"
    assert locality_counts(detail["pipelines"]) == {"region": 8}
    lines = locality_lines(out)
    assert lines[0] == "stage 0: spans 8 regions" and lines[-1] == "pipeline 7: same region Ireland"
    # The transpose swaps the two.
    flipped = solution_locality(f.devices, grid.T)
    assert set(flipped["pipelines"]) == {"spans 8 regions"}


def test_solution_locality_rejects_bad_grids():
    f = worldwide_fabric()
    with pytest.raises(ValueError, match="device ids"):
        solution_locality(f.devices, np.array([[0, 64]]))
    with pytest.raises(ValueError, match="2-d"):
        solution_locality_detail(f.devices, np.arange(4))


def test_solution_locality_on_the_solvers_answer():
    """The words of a real solve: each group's level matches its devices' labels."""
    from solver.cost import CostModel
    from solver.search import solve
    from solver.workload import Workload

    full = two_datacenter_fabric()
    # Two hosts of each datacenter, four GPUs each: 16 devices.
    f = full.subset([i for i, d in enumerate(full.devices) if d.host[-1] in "01" and d.gpu < 4])
    model = CostModel.from_fabric(f, Workload(4, 4, 0.512, 0.65))
    result = solve(model, seed=1, restarts=0, budget=5_000)
    out = solution_locality_detail(f.devices, result.score.grid)
    assert len(out["stage_groups"]) == 4 and len(out["pipelines"]) == 4
    for entry in out["stage_groups"] + out["pipelines"]:
        hosts = {name.split(":")[0] for name in entry["devices"]}
        if entry["level"] == "host":
            assert len(hosts) == 1
        else:
            assert entry["words"].startswith(("same zone", "same region", "spans"))


def test_label_order_sorts_by_hierarchy_unlabelled_last():
    devices = (dev("h2", "r1", "z2"), dev("h9"), dev("h1", "r1", "z1", gpu=1),
               dev("h1", "r1", "z1", gpu=0), dev("h0", "r0"))
    f = Fabric(np.ones((5, 5)), np.ones((5, 5)), ["x"] * 5, devices)
    assert label_order(f) == [4, 3, 2, 0, 1]
    assert host_order(f) == [0, 1, 3, 2, 4]


def test_seed_orders_are_distinct_permutations_keeping_regions_together():
    f = worldwide_fabric()
    perm = np.random.default_rng(3).permutation(64)
    shuffled = f.subset(perm)
    orders = seed_orders_for(shuffled)
    assert len(orders) >= 3
    assert len({tuple(o) for o in orders}) == len(orders)
    for o in orders:
        assert sorted(o) == list(range(64))
    for o in orders[:3]:  # label, chained, measured: each region is one run of 8
        regions = [shuffled.devices[i].region for i in o]
        runs = [regions[k] for k in range(64) if k == 0 or regions[k] != regions[k - 1]]
        assert len(runs) == 8, o


def test_chained_order_puts_close_regions_next_to_each_other():
    f = worldwide_fabric()
    order = chained_label_order(f)
    regions = [f.devices[i].region for i in order[::8]]
    # Frankfurt (first alphabetically) chains to its nearest neighbours first.
    assert regions[:3] == ["Frankfurt", "Ireland", "London"] or regions[:3] == ["Frankfurt", "London", "Ireland"]
    assert set(regions[-2:]) <= {"Tokyo", "Seoul", "Oregon", "Virginia", "Ohio"}


def test_solver_modules_stay_pure():
    code = (
        "import sys\n"
        "import solver.locality, solver.selection, solver.devices, solver.estimate, solver.suggest, solver.orders\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('geoconsole', 'screens', 'probes', 'textual', 'asyncssh', 'torch', 'typer')]\n"
        "print(','.join(sorted(bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_seed_orders_on_partly_measured_and_unlabelled_fabrics():
    f = worldwide_fabric(4)
    a, b = f.alpha_ms.copy(), f.beta_gbps.copy()
    a[0, 5] = a[5, 0] = b[0, 5] = b[5, 0] = np.nan
    holed = Fabric(a, b, f.labels, f.devices)
    for order in seed_orders_for(holed):
        assert sorted(order) == list(range(32))
    bare = Fabric(f.alpha_ms, f.beta_gbps, f.labels)
    orders = seed_orders_for(bare)
    assert orders[0] == list(range(32))  # no labels: the identity, then the measured order
    regions = [f.devices[i].region for i in orders[1]]
    assert sum(regions[k] != regions[k - 1] for k in range(1, 32)) == 7
