"""Suggested network groups recover planted groups on synthetic fabrics."""

from __future__ import annotations

import json

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from geoconsole.cli import labels as cli_labels
from geoconsole.labels import LabelSet
from solver.estimate import measured_mask
from solver.fabric import Device, Fabric, load_fabric
from solver.suggest import cluster_rows, leaf_order, log_distance, suggest_network_groups


def planted(seed: int, groups: int | None = None, zones: bool = False, labelled: bool = True,
            noise: float = 0.1):
    """SYNTHETIC fabric: groups of hosts of 1-4 GPUs; returns (fabric, group index per row).

    Same host 0.02 ms / 50 Gbps; same group 0.3 ms / 8 Gbps; (``zones``: groups 0-1 and
    2-... in two zones at 2 ms / 3 Gbps); otherwise 30-120 ms / 0.3-1 Gbps per group
    pair. Every directional entry gets independent +-``noise`` multiplicative noise.
    """
    rng = np.random.default_rng(seed)
    g = groups or int(rng.integers(3, 6))
    devices, truth = [], []
    for k in range(g):
        for h in range(int(rng.integers(2, 5))):
            zone = ("z0" if k < 2 else "z1") if zones else None
            for gpu in range(int(rng.integers(1, 5))):
                devices.append(Device(f"g{k}h{h}", gpu, "r", zone, f"rack-{k}" if labelled else None))
                truth.append(k)
    truth = np.array(truth)
    n = len(devices)
    far_a = rng.uniform(30, 120, (g, g))
    far_b = rng.uniform(0.3, 1.0, (g, g))
    a, b = np.empty((n, n)), np.empty((n, n))
    for i in range(n):
        for j in range(n):
            gi, gj = truth[i], truth[j]
            if devices[i].host == devices[j].host:
                a[i, j], b[i, j] = 0.02, 50.0
            elif gi == gj:
                a[i, j], b[i, j] = 0.3, 8.0
            elif zones and (gi < 2) == (gj < 2):
                a[i, j], b[i, j] = 2.0, 3.0
            else:
                a[i, j], b[i, j] = far_a[min(gi, gj), max(gi, gj)], far_b[min(gi, gj), max(gi, gj)]
    a *= rng.uniform(1 - noise, 1 + noise, (n, n))
    b *= rng.uniform(1 - noise, 1 + noise, (n, n))
    np.fill_diagonal(a, 0)
    np.fill_diagonal(b, 0)
    return Fabric(a, b, ["r"] * n, tuple(devices), source="synthetic"), truth


def same_partition(x, y) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    return bool(((x[:, None] == x[None, :]) == (y[:, None] == y[None, :])).all())


@pytest.mark.parametrize("seed", range(8))
def test_recovers_planted_groups(seed):
    f, truth = planted(seed, labelled=False)
    s = suggest_network_groups(f)
    assert s.clusters is not None and same_partition(s.clusters, truth)
    assert all(c.status == "missing" for c in s.changes) and len(s.changes) == f.n
    assert s.gap >= 1.5


def test_picks_groups_below_zones():
    f, truth = planted(3, groups=4, zones=True, labelled=False)
    s = suggest_network_groups(f)
    assert same_partition(s.clusters, truth)  # the rack level, not the two zones


def test_labels_that_agree_keep_their_names_and_contradictions_are_flagged():
    f, truth = planted(5, groups=4)
    wrong = "g1h0"  # label host g1h0 as rack-2
    devices = tuple(Device(d.host, d.gpu, d.region, d.zone, "rack-2" if d.host == wrong else d.network_group)
                    for d in f.devices)
    f = Fabric(f.alpha_ms, f.beta_gbps, f.labels, devices)
    s = suggest_network_groups(f)
    assert sorted(s.names) == ["rack-0", "rack-1", "rack-2", "rack-3"]
    flagged = {f.devices[c.row].host for c in s.changes}
    assert flagged == {wrong}
    assert {(c.current, c.suggested, c.status) for c in s.changes} == {("rack-2", "rack-1", "contradicts")}
    assert s.agree == f.n - len(s.changes)


def test_partly_labelled_rows_are_missing_and_named_after_their_group():
    f, truth = planted(6, groups=3)
    devices = tuple(Device(d.host, d.gpu, d.region, d.zone, None if d.host.endswith("h0") else d.network_group)
                    for d in f.devices)
    s = suggest_network_groups(Fabric(f.alpha_ms, f.beta_gbps, f.labels, devices))
    assert s.changes and all(c.status == "missing" for c in s.changes)
    for c in s.changes:
        assert c.suggested == f"rack-{truth[c.row]}"


def test_uniform_fabric_has_nothing_to_suggest():
    f, _ = planted(1, groups=1, labelled=False)
    s = suggest_network_groups(f)
    assert s.clusters is None and "no step of 1.5x" in s.reason and s.changes == ()


def test_estimated_pairs_do_not_shape_the_groups():
    f, truth = planted(2, groups=3, labelled=False)
    a, b = f.alpha_ms.copy(), f.beta_gbps.copy()
    est = np.zeros((f.n, f.n), dtype=bool)
    across = (truth[:, None] == 0) & (truth[None, :] == 1)
    across |= across.T
    a[across], b[across] = 0.3, 8.0  # estimates claiming groups 0 and 1 are one group
    est[across] = True
    g = Fabric(a, b, f.labels, f.devices, extras={"estimated": est.tolist()})
    assert same_partition(suggest_network_groups(g, measured=measured_mask(g)).clusters, truth)
    assert same_partition(suggest_network_groups(g).clusters, truth)  # the default mask
    trusting = suggest_network_groups(g, measured=np.isfinite(g.alpha_ms))
    assert len(trusting.names) == 2  # taken at face value, the estimates merge two groups


def test_unmeasured_pairs_count_as_far_and_distances_are_ratios():
    f, truth = planted(4, groups=3, labelled=False)
    d = log_distance(f)
    assert d.min() == 0.0 and np.allclose(d, d.T)
    a = f.alpha_ms.copy()
    a[0, 1] = np.nan
    b = f.beta_gbps.copy()
    b[0, 1] = np.nan
    d2 = log_distance(Fabric(a, b, f.labels, f.devices))
    assert d2[0, 1] == pytest.approx(np.nanmax(d2))
    assert sorted(leaf_order(f)) == list(range(f.n))


def test_cluster_rows_never_splits_a_host():
    # Two hosts of 2 GPUs: the only gap separates hosts, and no cut puts two hosts together.
    d = np.array([[0, 1, 5, 5], [1, 0, 5, 5], [5, 5, 0, 1], [5, 5, 1, 0]], dtype=float)
    assert cluster_rows(d, ["a", "a", "b", "b"]) is None
    assert cluster_rows(d, ["a", "b", "c", "d"])[0].tolist() == [0, 0, 1, 1]


def test_min_gap_must_be_a_ratio_above_one():
    f, _ = planted(0, groups=2)
    with pytest.raises(ValueError, match="min_gap"):
        suggest_network_groups(f, min_gap=1.0)


@pytest.fixture()
def app():
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Test root."""

    cli_labels.register(app)
    return app


def test_suggest_command_apply_keeps_operator_labels(app, tmp_path):
    f, truth = planted(7, groups=3, labelled=False)
    first = f.devices[0].host
    assert sum(d.host == first for d in f.devices) < sum(truth == 0) / 2  # rack-a stays the majority
    labels = LabelSet.from_fabric(f)
    for d, t in zip(f.devices, truth):
        if t < 2:
            labels.set(d.host, "network_group", "rack-a" if t == 0 else "rack-b", "inventory")
    labels.set(first, "network_group", "rack-b", "operator")  # the measurement says rack-a
    src = tmp_path / "in.json"
    labels.apply(f).save(src)
    out = tmp_path / "out.json"
    r = CliRunner().invoke(app, ["labels", "suggest", "-m", str(src), "--apply", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "3 groups in the measurement" in r.output
    assert f"{first}:0: kept the operator's network group rack-b (measured: rack-a)" in r.output
    back = load_fabric(out)
    after = LabelSet.from_fabric(back)
    assert after.get(first, "network_group", 0).source == "operator"
    for d, t in zip(back.devices, truth):
        lab = after.get(d.host, "network_group", d.gpu)
        if d.host == first:
            continue
        assert lab.value == ("rack-a", "rack-b", "ng-1")[t]
        assert lab.source == ("inventory", "inventory", "suggested")[t]
    r = CliRunner().invoke(app, ["labels", "suggest", "-m", str(out), "--json"])
    doc = json.loads(r.output)
    assert {c["status"] for c in doc["changes"]} == {"contradicts"}
    assert len(doc["changes"]) == sum(d.host == first for d in f.devices)
    r = CliRunner().invoke(app, ["labels", "show", "-m", str(out)])
    assert "rack-b (operator)" in r.output and "ng-1 (suggested)" in r.output


def test_suggest_command_usage_errors(app, tmp_path):
    f, _ = planted(0, groups=2)
    src = tmp_path / "in.json"
    f.save(src)
    r = CliRunner().invoke(app, ["labels", "suggest", "-m", str(src), "--apply"])
    assert r.exit_code == 2 and "--apply needs --out" in r.output
    r = CliRunner().invoke(app, ["labels", "suggest", "-m", str(src), "-o", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "--out is written only with --apply" in r.output
