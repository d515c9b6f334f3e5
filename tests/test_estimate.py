"""Estimated pairs: filled from labels and links, always marked, never taken as measured."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from geoconsole.cli import labels as cli_labels
from geoconsole.demo_fabrics import worldwide_fabric
from solver.estimate import (
    DEFAULT_LEVELS,
    EstimateDefaults,
    defaults_from_flags,
    estimated_mask,
    estimated_pair_count,
    fill_missing,
    measured_mask,
    parse_estimate,
    shared_level,
)
from solver.fabric import Device, Fabric, load_fabric


def holed(fabric: Fabric, pairs, one_way=()) -> Fabric:
    """``fabric`` with both directions of ``pairs`` and the (i, j) entries of ``one_way`` unmeasured."""
    a, b = fabric.alpha_ms.copy(), fabric.beta_gbps.copy()
    for i, j in pairs:
        a[i, j] = a[j, i] = b[i, j] = b[j, i] = np.nan
    for i, j in one_way:
        a[i, j] = b[i, j] = np.nan
    return Fabric(a, b, fabric.labels, fabric.devices, fabric.measured_at, dict(fabric.meta),
                  dict(fabric.extras), fabric.source)


def two_hosts() -> Fabric:
    """Hosts x (4 GPUs, zone z1, group g1) and y (2 GPUs, zone z1, group g2); w in zone z2."""
    devices = ([Device("x", g, "r", "z1", "g1") for g in range(4)]
               + [Device("y", g, "r", "z1", "g2") for g in range(2)]
               + [Device("w", 0, "r", "z2")])
    n = len(devices)
    a = np.full((n, n), 3.0)
    b = np.full((n, n), 4.0)
    np.fill_diagonal(a, 0)
    np.fill_diagonal(b, 0)
    return Fabric(a, b, ["r"] * n, tuple(devices))


DGX_LINKS = {"x": [["X", "NV2", "PHB", "SYS"], ["NV2", "X", "SYS", "PHB"],
                   ["PHB", "SYS", "X", "NV1"], ["SYS", "PHB", "NV1", "X"]]}


def test_only_missing_entries_change_and_every_one_is_marked():
    f = worldwide_fabric()
    h = holed(f, [(0, 9), (3, 40), (10, 11)], one_way=[(5, 6)])
    out, count = fill_missing(h)
    assert count == 4
    was_missing = ~np.isfinite(h.alpha_ms)
    np.fill_diagonal(was_missing, False)
    assert (estimated_mask(out) == was_missing).all()
    keep = ~was_missing
    assert np.array_equal(out.alpha_ms[keep], h.alpha_ms[keep], equal_nan=True)
    assert np.array_equal(out.beta_gbps[keep], h.beta_gbps[keep], equal_nan=True)
    assert out.missing_pairs() == []
    assert estimated_pair_count(out) == 4
    assert not measured_mask(out)[0, 9] and measured_mask(out)[0, 1]
    assert h.missing_pairs() == [(0, 9), (3, 40), (5, 6), (10, 11)]  # input untouched


def test_estimates_follow_the_label_hierarchy():
    f = worldwide_fabric()
    out, _ = fill_missing(holed(f, [(0, 9), (10, 11)], one_way=[(5, 6)]))
    basis = out.extras["estimate_basis"]
    # Oregon-Virginia: other Oregon-Virginia pairs say 67 ms / 0.79 Gbps.
    assert (out.alpha_ms[0, 9], out.beta_gbps[0, 9]) == (67.0, 0.79)
    assert basis[0][9] == "region pair (median measured)"
    # Inside Virginia: the intra-region figure.
    assert (out.alpha_ms[10, 11], out.beta_gbps[10, 11]) == (5.0, 2.0)
    assert basis[10][11] == "region (median measured)"
    assert basis[5][6] == "reverse" and basis[6][5] is None
    assert basis[0][1] is None


def test_operator_defaults_and_builtins_when_nothing_is_measured_alike():
    f = two_hosts()
    # x:0 - w:0 is the only zone-crossing... make every z1-z2 pair unmeasured.
    h = holed(f, [(i, 6) for i in range(6)])
    out, count = fill_missing(h, EstimateDefaults(learn=False))
    assert count == 6
    assert (out.alpha_ms[0, 6], out.beta_gbps[0, 6]) == DEFAULT_LEVELS["region"]
    out, _ = fill_missing(h, {"region": (7.5, 1.5)})
    assert (out.alpha_ms[2, 6], out.beta_gbps[2, 6]) == (7.5, 1.5)
    assert out.extras["estimate_basis"][2][6] == "region (operator)"


def test_same_host_pairs_use_the_link_class():
    f = two_hosts()
    h = holed(f, [(0, 1), (0, 2), (0, 3), (2, 3), (4, 5)])
    out, count = fill_missing(h, EstimateDefaults(links={"PHB": (0.05, 70.0)}), links=DGX_LINKS)
    assert count == 5
    basis = out.extras["estimate_basis"]
    assert basis[0][1] == "link NV2 (default)" and out.beta_gbps[0, 1] == 300.0
    assert basis[2][3] == "link NV1 (default)" and out.beta_gbps[2, 3] == 150.0
    assert basis[0][2] == "link PHB (operator)" and out.alpha_ms[0, 2] == 0.05
    assert basis[0][3] == "link SYS (default)"
    # Host y has no link data: the host level, learnt from x's measured same-host pairs.
    assert basis[4][5] == "host (median measured)" and out.beta_gbps[4, 5] == 4.0
    out, _ = fill_missing(h, EstimateDefaults(learn=False))
    assert out.extras["estimate_basis"][4][5] == "host (default)"
    assert out.beta_gbps[4, 5] == DEFAULT_LEVELS["host"][1]


def test_estimates_are_never_learnt_from():
    f = two_hosts()
    out, _ = fill_missing(holed(f, [(0, 6)]), {"zone": (999.0, 0.01)}, )
    # (0, 6) came from the x-w host pair median (the other x-w pairs are measured).
    assert out.extras["estimate_basis"][0][6] == "host pair (median measured)"
    # Now mark every pair with w estimated with a silly value, and drop (1, 6): no
    # host-pair or zone-pair median may use them, so the operator's region value is used.
    a, b = out.alpha_ms.copy(), out.beta_gbps.copy()
    est = np.zeros_like(a, dtype=bool)
    for i in range(6):
        a[i, 6] = a[6, i] = 500.0
        est[i, 6] = est[6, i] = True
    a[1, 6] = a[6, 1] = b[1, 6] = b[6, 1] = np.nan
    est[1, 6] = est[6, 1] = False
    g = Fabric(a, b, f.labels, f.devices, extras={"estimated": est.tolist()})
    refilled, count = fill_missing(g, {"region": (42.0, 1.0)})
    assert count == 1
    assert refilled.alpha_ms[1, 6] == 42.0
    assert refilled.alpha_ms[0, 6] == 500.0  # earlier estimates stay, still marked
    assert estimated_mask(refilled)[0, 6] and estimated_mask(refilled)[1, 6]


def test_marks_survive_save_load_and_subset(tmp_path):
    f = worldwide_fabric()
    out, _ = fill_missing(holed(f, [(0, 9)]))
    path = tmp_path / "filled.json"
    out.save(path)
    back = load_fabric(path)
    assert (estimated_mask(back) == estimated_mask(out)).all()
    assert back.meta["estimates"]["filled_pairs"] == 1
    sub = back.subset([9, 0, 1])
    assert estimated_mask(sub)[0, 1] and estimated_mask(sub)[1, 0] and not estimated_mask(sub)[1, 2]
    assert fill_missing(back) == (back, 0)  # nothing left to fill


def test_filled_fabric_is_solvable():
    from solver.cost import CostModel
    from solver.workload import Workload

    f = holed(worldwide_fabric(4), [(0, 5), (1, 30)])
    with pytest.raises(ValueError):
        CostModel.from_fabric(f, Workload(4, 8, 0.512, 0.65))
    out, _ = fill_missing(f)
    CostModel.from_fabric(out, Workload(4, 8, 0.512, 0.65))


def test_shared_level_matrix():
    rel = shared_level(two_hosts())
    assert rel[0, 1] == "host" and rel[0, 4] == "zone" and rel[0, 6] == "region"
    f = Fabric(np.zeros((2, 2)), np.ones((2, 2)), ["a", "b"])
    assert shared_level(f)[0, 1] == "any"


@pytest.mark.parametrize("text,want", [
    ("zone=0.5,5", ("zone", (0.5, 5.0))),
    ("any=120,0.25", ("any", (120.0, 0.25))),
    ("nv2=0.01,300", ("NV2", (0.01, 300.0))),
])
def test_parse_estimate(text, want):
    assert parse_estimate(text) == want


@pytest.mark.parametrize("text,match", [
    ("zone=0.5", "expected LEVEL=ALPHA_MS,BETA_GBPS"),
    ("rack=1,1", "unknown GPU link class 'RACK'"),
    ("zone=-1,5", "alpha_ms must be finite and >= 0"),
    ("zone=1,0", "beta_gbps must be finite and > 0"),
    ("zone=x,1", "must be numbers"),
])
def test_parse_estimate_errors(text, match):
    with pytest.raises(ValueError, match=match):
        parse_estimate(text)


def test_defaults_from_flags_split_levels_and_links():
    d = defaults_from_flags(["zone=1,2", "PIX=0.01,100"], learn=False)
    assert d.levels == {"zone": (1.0, 2.0)} and d.links == {"PIX": (0.01, 100.0)} and not d.learn
    with pytest.raises(ValueError, match="estimate level 'rack'"):
        EstimateDefaults({"rack": (1, 1)})


def test_fill_command(tmp_path):
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Test root."""

    cli_labels.register(app)
    src, dst = tmp_path / "in.json", tmp_path / "out.json"
    holed(worldwide_fabric(), [(0, 9), (1, 2)]).save(src)
    r = CliRunner().invoke(app, ["labels", "fill", "-m", str(src), "-o", str(dst),
                                 "--estimate", "region=1,3", "--no-learn"])
    assert r.exit_code == 0, r.output
    assert "filled 2 unmeasured pairs (2 estimated in all)" in r.output
    out = load_fabric(dst)
    assert (out.alpha_ms[1, 2], out.beta_gbps[1, 2]) == (1.0, 3.0)
    r = CliRunner().invoke(app, ["labels", "show", "-m", str(dst), "--json"])
    assert json.loads(r.output)["estimated_pairs"] == 2
    r = CliRunner().invoke(app, ["labels", "fill", "-m", str(src), "-o", str(dst), "--estimate", "zone"])
    assert r.exit_code == 2 and "--estimate" in r.output


def test_same_host_links_recorded_in_the_fabric_meta_are_used():
    f = two_hosts()
    f.meta["hosts"] = {"x": {"links": DGX_LINKS["x"]}, "y": {"topology": "1x NV4"}}
    out, _ = fill_missing(holed(f, [(0, 1)]))
    assert out.extras["estimate_basis"][0][1] == "link NV2 (default)"


def test_odd_link_records_fall_back_to_levels_and_bad_marks_are_one_line_errors(tmp_path):
    f = two_hosts()
    # JSON-style mapping with text keys works; an unknown class is ignored.
    f.meta["hosts"] = {"x": {"links": {"0": {"1": "NV4"}, "2": {"3": "WARP"}}}}
    out, _ = fill_missing(holed(f, [(0, 1), (2, 3)]), EstimateDefaults(learn=False))
    basis = out.extras["estimate_basis"]
    assert basis[0][1] == "link NV4 (default)" and basis[2][3] == "host (default)"
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Test root."""

    cli_labels.register(app)
    bad = Fabric(f.alpha_ms, f.beta_gbps, f.labels, f.devices, extras={"estimated": [[True]]})
    bad.save(tmp_path / "bad.json")
    r = CliRunner().invoke(app, ["labels", "fill", "-m", str(tmp_path / "bad.json"), "-o", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "estimated: expected 7 x 7 booleans" in r.output


def test_pair_medians_equal_a_direct_computation():
    rng = np.random.default_rng(8)
    n = 24
    devices = tuple(Device(f"h{i // 3}", i % 3, f"r{i // 12}", f"z{i // 6}") for i in range(n))
    a, b = rng.uniform(1, 50, (n, n)), rng.uniform(0.5, 5, (n, n))
    hole = rng.random((n, n)) < 0.4
    a[hole] = b[hole] = np.nan
    f = Fabric(a, b, ["x"] * n, devices)
    out, _ = fill_missing(f)
    basis = out.extras["estimate_basis"]
    host = np.array([int(d.host[1:]) for d in devices])
    checked = 0
    for i, j in zip(*np.nonzero(hole)):
        if basis[i][j] != "host pair (median measured)":
            continue
        block = np.zeros((n, n), dtype=bool)
        block[np.ix_(host == host[i], host == host[j])] = True
        block |= block.T
        ok = block & ~hole
        np.fill_diagonal(ok, False)
        assert out.alpha_ms[i, j] == pytest.approx(np.median(a[ok]))
        assert out.beta_gbps[i, j] == pytest.approx(np.median(b[ok]))
        checked += 1
    assert checked > 20


def test_an_estimate_given_twice_with_two_values_is_refused():
    """--estimate zone=1,2 --estimate zone=3,4 kept the last without a word."""
    from solver.estimate import defaults_from_flags

    with pytest.raises(ValueError, match="zone is given twice"):
        defaults_from_flags(["zone=1,2", "zone=3,4"])
    assert defaults_from_flags(["zone=1,2", "zone=1,2"]).levels["zone"] == (1.0, 2.0)  # the same twice: once
