"""group_locality selection: the ADR-0021 decisions and consequences, and the select command."""

from __future__ import annotations

import json

import numpy as np
import pytest

from support import fabric_of
import typer
from typer.testing import CliRunner

from geoconsole.cli import labels as cli_labels
from geoconsole.demo_fabrics import worldwide_fabric
from solver.fabric import Device, Fabric, load_fabric
from solver.locality import location_key
from solver.selection import POLICIES, SelectionError, select_devices




def fleet(spec) -> Fabric:
    """``spec``: list of (count, region, zone, network_group); one GPU per host."""
    devices, k = [], 0
    for count, region, zone, ng in spec:
        for _ in range(count):
            devices.append(Device(f"w{k}", 0, region, zone, ng))
            k += 1
    return fabric_of(devices)


# Zone eu-b holds network group rack-1 (4) and 2 more; region eu adds zone eu-c (4);
# us-a has 6. 16 workers in all.
FLEET = fleet([
    (2, "us", "us-a", None),
    (2, "eu", "eu-c", None),
    (4, "eu", "eu-b", "rack-1"),
    (2, "eu", "eu-b", None),
    (4, "us", "us-a", None),
    (2, "eu", "eu-c", None),
])


@pytest.mark.parametrize("k,level,words", [
    (4, "network_group", "same network group rack-1"),
    (6, "zone", "same zone eu-b"),
    (10, "region", "spans 2 zones in 1 region"),
    (16, "any", "spans 3 zones in 2 regions"),
])
def test_prefer_picks_the_tightest_level_available(k, level, words):
    sel = select_devices(FLEET, k, "prefer")
    assert (sel.level, sel.summary, len(sel.rows)) == (level, words, k)


def test_prefer_never_fails_for_locality_and_falls_back_to_any():
    sel = select_devices(FLEET, 12, "prefer")
    assert sel.level == "any" and len(sel.rows) == 12
    # A tighter level is tried first but never waited for: zone/region cannot hold 12.
    with pytest.raises(SelectionError):
        select_devices(FLEET, 12, "region")


def test_prefer_on_an_unlabelled_fleet_is_the_previous_behaviour():
    f = fabric_of([Device(f"h{i}", 0) for i in range(6)])
    sel = select_devices(f, 4, "prefer")
    assert sel.rows == (0, 1, 2, 3) and sel.level == "any"
    assert sel.summary == "no location labels"
    assert sel.left_out == ((4, "not needed: the group took 4 of 6 devices"),
                            (5, "not needed: the group took 4 of 6 devices"))


def test_required_level_excludes_unlabelled_workers_with_a_reason():
    f = fleet([(3, "eu", "eu-b", None), (2, "eu", None, None), (4, "eu", "eu-c", None)])
    sel = select_devices(f, 4, "zone")
    assert sel.rows == (5, 6, 7, 8) and sel.summary == "same zone eu-c"
    reasons = dict(sel.left_out)
    assert reasons[3] == reasons[4] == "no zone label (group_locality=zone needs one)"
    assert reasons[0].startswith("outside the group's zone eu-c")
    # Five labelled in eu-b plus unlabelled ones would make 4 with prefer/region, never with zone.
    g = fleet([(3, "eu", "eu-b", None), (2, "eu", None, None)])
    with pytest.raises(SelectionError, match=r"no zone has 4 devices \(largest: eu-b with 3\); "
                                             r"2 devices have no zone label"):
        select_devices(g, 4, "zone")
    assert select_devices(g, 4, "region").summary == "same region eu"


def test_network_group_required_without_labels_says_so():
    with pytest.raises(SelectionError, match="none of the 6 devices has a network group label"):
        select_devices(fleet([(6, "eu", "eu-b", None)]), 2, "network_group")


def test_buckets_respect_torch_versions():
    # Zone eu-b comes first but mixes versions; eu-c has four on one version.
    f = fleet([(4, "eu", "eu-b", None), (4, "eu", "eu-c", None)])
    versions = ["2.4.0", "2.3.1", "2.4.0", "2.3.1", "2.4.0", "2.4.0", "2.4.0", "2.4.0"]
    sel = select_devices(f, 4, "prefer", torch_versions=versions)
    assert sel.rows == (4, 5, 6, 7) and sel.level == "zone"
    reasons = dict(sel.left_out)
    assert reasons[1] == "torch 2.3.1; the group runs torch 2.4.0"
    with pytest.raises(SelectionError, match="no 5 devices share one torch version"):
        select_devices(f, 5, "any", torch_versions=["a", "b"] * 4)
    with pytest.raises(ValueError, match="torch_versions: 2 entries for 8 devices"):
        select_devices(f, 4, torch_versions=["a", "b"])


def test_region_filter_matches_a_region_or_a_zone():
    f = fleet([(3, "us", "us-a", None), (3, "eu", "eu-b", None), (3, "eu", "eu-c", None)])
    by_zone = select_devices(f, 3, "prefer", regions=["eu-c"])
    assert by_zone.rows == (6, 7, 8)
    assert dict(by_zone.left_out)[0] == "us / us-a not in --regions eu-c"
    by_region = select_devices(f, 6, "prefer", regions=["eu"])
    assert by_region.rows == (3, 4, 5, 6, 7, 8) and by_region.summary == "spans 2 zones in 1 region"
    mixed = select_devices(f, 6, "any", regions=["us", "eu-b"])
    assert mixed.rows == (0, 1, 2, 3, 4, 5)
    with pytest.raises(SelectionError, match="--regions eu-c: 3 of 9 devices match, the workload needs 4"):
        select_devices(f, 4, regions=["eu-c"])


def test_first_bucket_to_fill_wins_between_equally_close_groups():
    # Both zones can hold 2; eu-c's second worker comes before eu-b's.
    f = fleet([(1, "eu", "eu-b", None), (2, "eu", "eu-c", None), (1, "eu", "eu-b", None)])
    assert select_devices(f, 2, "zone").rows == (1, 2)


def test_region_level_pick_takes_whole_zones():
    # Region eu fills first in row order, across three zones; 4 fit in one zone plus... no:
    # the pick takes the 4-device zone whole instead of the first four rows.
    f = fleet([(1, "eu", "eu-a", None), (1, "eu", "eu-b", None), (1, "eu", "eu-c", None),
               (4, "eu", "eu-d", None), (1, "us", "us-a", None)])
    sel = select_devices(f, 5, "region")
    assert sel.summary == "spans 2 zones in 1 region"
    assert sel.rows == (0, 3, 4, 5, 6)


def test_worldwide_region_filter_and_prefer():
    f = worldwide_fabric()
    sel = select_devices(f, 8, "prefer", regions=["Tokyo"])
    assert sel.rows == tuple(range(24, 32)) and sel.summary == "same region Tokyo"
    sel = select_devices(f, 16, "prefer")
    assert sel.level == "any" and sel.summary == "spans 2 regions"


def test_bad_arguments():
    with pytest.raises(ValueError, match="group_locality: expected one of"):
        select_devices(FLEET, 4, "rack")
    with pytest.raises(ValueError, match="workload size"):
        select_devices(FLEET, 0)
    with pytest.raises(SelectionError, match="the fabric has 16 devices, the workload needs 17"):
        select_devices(FLEET, 17)


def test_random_fleets_partition_rows_and_meet_the_policy():
    rng = np.random.default_rng(11)
    regions = {"r0": ["r0-a", "r0-b"], "r1": ["r1-a", "r1-b", "r1-c"]}
    for trial in range(200):
        n = int(rng.integers(2, 40))
        devices = []
        for i in range(n):
            r = list(regions)[rng.integers(2)] if rng.random() < 0.85 else None
            z = regions[r][rng.integers(len(regions[r]))] if r and rng.random() < 0.8 else None
            g = f"g{rng.integers(3)}" if rng.random() < 0.5 else None
            devices.append(Device(f"h{i}", 0, r, z, g))
        f = fabric_of(devices)
        versions = [["2.4", "2.3"][rng.integers(2)] for _ in range(n)] if trial % 2 else None
        k = int(rng.integers(1, n + 1))
        policy = POLICIES[trial % len(POLICIES)]
        try:
            sel = select_devices(f, k, policy, torch_versions=versions)
        except SelectionError:
            assert policy != "prefer" or versions is not None
            continue
        assert len(sel.rows) == k
        assert sorted(sel.rows + tuple(r for r, _ in sel.left_out)) == list(range(n))
        if versions is not None:
            assert len({versions[i] for i in sel.rows}) == 1
        if policy not in ("prefer", "any"):
            keys = {location_key(devices[i], policy) for i in sel.rows}
            assert len(keys) == 1 and None not in keys
        assert select_devices(f, k, policy, torch_versions=versions) == sel  # deterministic


# -- the select command ------------------------------------------------------------
@pytest.fixture()
def app():
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Test root."""

    cli_labels.register(app)
    return app


def test_select_command_writes_the_subfabric(app, tmp_path):
    src = tmp_path / "fleet.json"
    FLEET.save(src)
    out = tmp_path / "sel.json"
    r = CliRunner().invoke(app, ["select", "--matrix", str(src), "--pp", "2", "--dp", "3",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "selected 6 of 16 devices (group_locality=prefer, level zone): same zone eu-b" in r.output
    assert "  0 w0:0: outside the group's zone eu-b (us / us-a)" in r.output
    sub = load_fabric(out)
    assert sub.n == 6 and {d.zone for d in sub.devices} == {"eu-b"}
    assert sub.meta["selection"]["rows"] == [4, 5, 6, 7, 8, 9]
    assert sub.meta["selection"]["summary"] == "same zone eu-b"


def test_select_command_json_and_failures(app, tmp_path):
    src = tmp_path / "fleet.json"
    FLEET.save(src)
    r = CliRunner().invoke(app, ["select", "-m", str(src), "--pp", "2", "--dp", "2",
                                 "--regions", "us-a", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["devices"] == ["w0:0", "w1:0", "w10:0", "w11:0"]
    assert doc["left_out"][0] == {"row": 2, "reason": "eu / eu-c not in --regions us-a", "device": "w2:0"}
    r = CliRunner().invoke(app, ["select", "-m", str(src), "--pp", "4", "--dp", "3", "--group-locality", "zone"])
    assert r.exit_code == 1
    assert r.output.count("\n") == 1 and "group_locality=zone: no zone has 12 devices" in r.output
    r = CliRunner().invoke(app, ["select", "-m", str(src), "--pp", "2", "--dp", "2", "--group-locality", "rack"])
    assert r.exit_code == 2 and "--group-locality: expected one of" in r.output
    r = CliRunner().invoke(app, ["select", "-m", str(src), "--pp", "2", "--dp", "2", "--regions", "eu,,us"])
    assert r.exit_code == 2 and "--regions: empty name" in r.output
    r = CliRunner().invoke(app, ["select", "-m", str(tmp_path / "nope.json"), "--pp", "2", "--dp", "2"])
    assert r.exit_code == 2 and "nope.json: no such fabric JSON file" in r.output


def test_select_command_too_few_devices_is_bad_input_as_for_solve(app, tmp_path):
    """Too few devices for D_PP x D_DP is exit 2 (bad input, as solve's shape check), an
    unmet --group-locality stays exit 1."""
    src = tmp_path / "fleet.json"
    FLEET.save(src)
    n = FLEET.n
    r = CliRunner().invoke(app, ["select", "-m", str(src), "--pp", str(n), "--dp", "2"])
    assert r.exit_code == 2 and r.output.count("\n") == 1
    assert f"the fabric has {n} devices, the workload needs {2 * n} (--pp, --dp)" in r.output
    r = CliRunner().invoke(app, ["select", "-m", str(src), "--pp", "2", "--dp", "2", "--regions", "nowhere"])
    assert r.exit_code == 2 and f"--regions nowhere: 0 of {n} devices match, the workload needs 4" in r.output


def test_any_policy_ignores_location_but_prefer_falls_back_tightly():
    f = fleet([(1, "eu", "eu-b", None), (1, "us", "us-a", None), (1, "eu", "eu-b", None),
               (1, "us", "us-a", None), (2, "eu", "eu-b", None), (1, "us", "us-a", None)])
    assert select_devices(f, 5, "any").rows == (0, 1, 2, 3, 4)
    tight = select_devices(f, 5, "prefer")  # no region holds 5: any, but whole zones first
    assert tight.level == "any" and tight.rows == (0, 1, 2, 4, 5)
    assert tight.summary == "spans 2 zones in 2 regions"


def test_select_command_reads_torch_versions_from_the_probe_meta(app, tmp_path):
    f = fleet([(4, "eu", "eu-b", None), (4, "eu", "eu-c", None)])
    f.meta["hosts"] = {f"w{i}": {"torch": "2.3.0" if i == 1 else "2.4.1"} for i in range(8)}
    src = tmp_path / "fleet.json"
    f.save(src)
    r = CliRunner().invoke(app, ["select", "-m", str(src), "--pp", "2", "--dp", "2", "--json"])
    doc = json.loads(r.output)
    assert doc["rows"] == [4, 5, 6, 7] and doc["summary"] == "same zone eu-c"
    assert doc["left_out"][1]["reason"] == "torch 2.3.0; the group runs torch 2.4.1"


# -- prepare_for_solve: what solve calls before the search ------------------------
def test_prepare_for_solve_selects_fills_and_seeds():
    from geoconsole.prepare import UnmeasuredPairsError, prepare_for_solve
    from solver.cost import CostModel
    from solver.search import solve
    from solver.workload import Workload

    f = FLEET
    a, b = f.alpha_ms.copy(), f.beta_gbps.copy()
    for i, j in ((4, 5), (0, 1)):  # one pair inside zone eu-b, one in us-a
        a[i, j] = a[j, i] = b[i, j] = b[j, i] = np.nan
    holed = Fabric(a, b, f.labels, f.devices, source="fleet.json")
    with pytest.raises(UnmeasuredPairsError, match=r"fleet.json: 1 device pair unmeasured: w4:0 - w5:0; "
                                                   r"measure them, or fill them with estimates"):
        prepare_for_solve(holed, 6)
    prepared = prepare_for_solve(holed, 6, fill_missing=True, estimates=["network_group=0.7,3"], learn=False)
    assert prepared.selection.summary == "same zone eu-b"
    assert prepared.fabric.n == 6 and prepared.filled_pairs == 1  # (0, 1) was filled but not selected
    assert prepared.fabric.alpha_ms[0, 1] == 0.7
    lines = prepared.lines()
    assert lines[0] == "selected   6 devices (group_locality=prefer, level zone): same zone eu-b"
    assert lines[-1] == "estimated  1 pair(s) filled from labels and links, not measured"
    assert sum(int(x.split()[2]) for x in lines[1:-1]) == 10  # "left out   N device(s): why"
    assert all(sorted(o) == list(range(6)) for o in prepared.seed_orders)
    model = CostModel.from_fabric(prepared.fabric, Workload(2, 3, 0.1, 0.1))
    result = solve(model, seed=0, budget=200, restarts=0, seed_orders=prepared.seed_orders)
    assert sorted(result.x.tolist()) == list(range(6))


def test_prepare_for_solve_keeps_a_fabric_of_the_right_size_and_refuses_bad_flags():
    from geoconsole.errors import InputError, PolicyError
    from geoconsole.prepare import prepare_for_solve

    same = prepare_for_solve(FLEET, 16)
    assert same.selection is None and same.fabric is FLEET and same.filled_pairs == 0
    with pytest.raises(InputError, match="estimates apply only when unmeasured pairs are filled"):
        prepare_for_solve(FLEET, 16, estimates=["zone=1,1"])
    with pytest.raises(InputError, match="group locality: expected one of"):
        prepare_for_solve(FLEET, 4, group_locality="rack")
    with pytest.raises(PolicyError, match="group_locality=region: no region has 12 devices"):
        prepare_for_solve(FLEET, 12, group_locality="region")
    only = prepare_for_solve(FLEET, 6, regions=["us-a"])
    assert only.selection.summary == "same zone us-a"


def test_a_host_giving_part_of_its_gpus_gives_the_best_linked_ones():
    # One DGX-1 (8 GPUs, GPU 0 taken out of the fabric) and two single-GPU hosts elsewhere.
    from test_pick_devices import DGX1

    devices = [Device("dgx", g, "eu", "eu-b") for g in range(1, 8)] + [Device("x", 0, "us"), Device("y", 0, "us")]
    f = fabric_of(devices)
    plain = select_devices(f, 4, "prefer")
    assert plain.rows == (0, 1, 2, 3)  # GPUs 1-4: lowest indices without link data
    sel = select_devices(f, 4, "prefer", links={"dgx": DGX1})
    assert [devices[i].gpu for i in sel.rows] == [4, 5, 6, 7] and sel.summary == "same host dgx"
    reasons = dict(sel.left_out)
    assert reasons[0] == "not needed: the group took 4 of 7 devices in zone eu-b"


def test_torch_versions_and_links_default_to_the_probe_meta():
    from test_pick_devices import DGX1

    devices = [Device("dgx", g, "eu", "eu-b") for g in range(1, 8)] + [Device("x", 0, "eu", "eu-b")]
    f = fabric_of(devices)
    f.meta["hosts"] = {"dgx": {"torch": "2.4.1", "links": DGX1}, "x": {"torch": "2.3.0"}}
    sel = select_devices(f, 4, "zone")
    assert [devices[i].gpu for i in sel.rows] == [4, 5, 6, 7]
    assert dict(sel.left_out)[7] == "torch 2.3.0; the group runs torch 2.4.1"
    # Passing versions explicitly overrides the meta.
    assert 7 not in dict(select_devices(f, 8, "zone", torch_versions=["a"] * 8).left_out)
