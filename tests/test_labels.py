"""The label model: values, sources, per-GPU overrides, JSON, fabric round trips; labels show."""

from __future__ import annotations

import json

import numpy as np
import pytest

from support import fabric_of
import typer
from typer.testing import CliRunner

from geoconsole.cli import labels as cli_labels
from geoconsole.cli.errors import exit_code_for
from geoconsole.cli.exitcodes import ExitCode
from geoconsole.errors import InputError
from geoconsole.labels import (
    MAX_LABEL_CHARS,
    Label,
    LabelError,
    LabelSet,
    apply_suggestions,
    label_problem,
    validate_label,
)
from solver.fabric import Device, Fabric, load_fabric
from solver.suggest import RowSuggestion




DEVICES = (
    Device("h1", 0, "europe-west1", "europe-west1-b", "rack-3"),
    Device("h1", 1, "europe-west1", "europe-west1-b", "rack-3"),
    Device("h2", 0, "europe-west1", "europe-west1-c", None),
    Device("h2", 1, "europe-west1", "europe-west1-c", "rack-9"),
    Device("cpu", None, None, None, None),
)


@pytest.mark.parametrize("value", ["europe-west1-b", "rack_3", "office/2nd-floor", "東京", "a" * MAX_LABEL_CHARS,
                                   "semi;colon", None, ""])
def test_valid_values(value):
    assert validate_label("zone", value) == value
    assert label_problem("zone", value) is None


@pytest.mark.parametrize("value,match", [
    ("rack 3", "no spaces or other whitespace"),
    ("rack\t3", "no spaces or other whitespace"),
    ("rack\x1b[31m", "control or unprintable character"),
    ("eu,us", "may not hold ',' \\(--regions lists are comma-separated\\)"),
    ("a" * (MAX_LABEL_CHARS + 1), "at most 63 characters, got 64"),
    (7, "expected text, got int"),
])
def test_invalid_values_name_the_field(value, match):
    with pytest.raises(LabelError, match=match) as err:
        validate_label("network_group", value, "hosts.toml: host h1")
    assert str(err.value).startswith("hosts.toml: host h1: network_group: ")
    assert isinstance(err.value, InputError) and exit_code_for(err.value) == ExitCode.USAGE


def test_unknown_field_and_source_are_refused():
    with pytest.raises(LabelError, match="'rack' is not a label"):
        validate_label("rack", "x")
    with pytest.raises(LabelError, match="label source 'guess'"):
        Label("x", "guess")
    labels = LabelSet()
    with pytest.raises(LabelError, match="label source 'guess'"):
        labels.set("h1", "zone", "z", "guess")


def test_gpu_override_wins_over_host_and_keeps_its_source():
    labels = LabelSet()
    labels.set("h1", "zone", "z1", "inventory")
    labels.set("h1", "zone", "z2", "operator", gpu=1)
    assert labels.get("h1", "zone", 0) == Label("z1", "inventory")
    assert labels.get("h1", "zone", 1) == Label("z2", "operator")
    assert labels.get("h1", "region", 1) is None
    labels.set("h1", "zone", None, gpu=1)  # clear the override: the host's value shows again
    assert labels.get("h1", "zone", 1) == Label("z1", "inventory")
    assert str(labels.get("h1", "zone")) == "z1 (inventory)"


def test_set_many_validates_once_before_any_change():
    labels = LabelSet()
    with pytest.raises(LabelError):
        labels.set_many([("h1", 0), ("h2", None)], "zone", "bad value")
    assert labels == LabelSet()
    assert labels.set_many([("h1", 0), ("h2", None)], "zone", "z9") == 2
    assert labels.get("h2", "zone", 5).value == "z9" and labels.get("h1", "zone", 0).source == "operator"


def test_from_fabric_groups_by_host_and_applies_back():
    f = fabric_of(DEVICES)
    labels = LabelSet.from_fabric(f, source="detected")
    assert labels.hosts["h1"]["network_group"] == Label("rack-3", "detected")
    assert "network_group" not in labels.hosts["h2"]  # GPUs differ: per GPU
    assert labels.gpus[("h2", 1)]["network_group"] == Label("rack-9", "detected")
    assert labels.hosts.get("cpu", {}) == {}
    labels.set("h2", "zone", "europe-west1-d", "operator")
    out = labels.apply(f)
    assert [d.zone for d in out.devices] == ["europe-west1-b"] * 2 + ["europe-west1-d"] * 2 + [None]
    assert out.meta["label_sources"]["h2:0"] == {"region": "detected", "zone": "operator"}
    assert f.devices[2].zone == "europe-west1-c"  # the input is unchanged


def test_sources_survive_the_fabric_file(tmp_path):
    f = fabric_of(DEVICES)
    labels = LabelSet.from_fabric(f)
    labels.set("h1", "network_group", "rack-4", "operator", gpu=0)
    path = tmp_path / "f.json"
    labels.apply(f).save(path)
    back = LabelSet.from_fabric(load_fabric(path))
    assert back.get("h1", "network_group", 0) == Label("rack-4", "operator")
    assert back.get("h1", "network_group", 1) == Label("rack-3", "inventory")
    assert back.get("h2", "zone", 0) == Label("europe-west1-c", "inventory")
    # A subset keeps names, so the sources still line up.
    sub = load_fabric(path).subset([3, 0])
    assert LabelSet.from_fabric(sub).get("h1", "network_group", 0).source == "operator"


def test_json_round_trip():
    labels = LabelSet.from_fabric(fabric_of(DEVICES))
    labels.set("h2", "network_group", "rack-1", "suggested", gpu=0)
    doc = json.loads(json.dumps(labels.to_json()))
    assert LabelSet.from_json(doc) == labels
    assert doc["gpus"][0]["host"] == "h2"


@pytest.mark.parametrize("doc,match", [
    ([], "labels: expected an object"),
    ({"hosts": []}, "labels.hosts: expected an object"),
    ({"hosts": {"h1": {"zone": {"value": "a b", "source": "operator"}}}}, "labels.hosts.h1: zone: no spaces"),
    ({"hosts": {"h1": {"zone": {"value": "z", "source": "rumour"}}}}, r"labels.hosts.h1.zone.source"),
    ({"hosts": {"h1": {"zone": "z"}}}, r"labels.hosts.h1.zone: expected"),
    ({"hosts": {"h1": {"zone": {"value": "", "source": "flag"}}}}, "empty value"),
    ({"gpus": [{"host": "h1", "gpu": -1, "labels": {}}]}, r"labels.gpus\[0\].gpu"),
    ({"gpus": [{"gpu": 0}]}, r"labels.gpus\[0\]: expected an object with a host"),
])
def test_from_json_errors_name_the_entry(doc, match):
    with pytest.raises(LabelError, match=match):
        LabelSet.from_json(doc)


def test_apply_suggestions_fills_and_replaces_but_not_the_operators():
    labels = LabelSet.from_fabric(fabric_of(DEVICES))
    labels.set("h2", "network_group", "mine", "operator", gpu=1)
    changes = [
        RowSuggestion(0, "h1:0", "rack-3", "ng-1", "contradicts"),
        RowSuggestion(1, "h1:1", "rack-3", "ng-1", "contradicts"),
        RowSuggestion(2, "h2:0", None, "ng-1", "missing"),
        RowSuggestion(3, "h2:1", "mine", "ng-1", "contradicts"),
    ]
    n, kept = apply_suggestions(labels, DEVICES, changes)
    assert n == 3 and kept == ["h2:1: kept the operator's network group mine (measured: ng-1)"]
    assert labels.get("h1", "network_group", 0) == Label("ng-1", "suggested")
    assert labels.hosts["h1"]["network_group"].source == "suggested"  # whole host: host level
    assert labels.get("h2", "network_group", 0) == Label("ng-1", "suggested")
    assert labels.get("h2", "network_group", 1) == Label("mine", "operator")
    only_missing = LabelSet.from_fabric(fabric_of(DEVICES))
    n, _ = apply_suggestions(only_missing, DEVICES, changes, include_contradicting=False)
    assert n == 1 and only_missing.get("h1", "network_group", 0).value == "rack-3"


def test_apply_needs_devices():
    f = Fabric(np.zeros((2, 2)), np.ones((2, 2)), ["a", "b"])
    with pytest.raises(LabelError, match="no devices to label"):
        LabelSet().apply(f)


def test_labels_show_command(tmp_path):
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Test root."""

    cli_labels.register(app)
    path = tmp_path / "f.json"
    labels = LabelSet.from_fabric(fabric_of(DEVICES))
    labels.set("h2", "zone", "europe-west1-c", "flag")
    labels.apply(fabric_of(DEVICES)).save(path)
    r = CliRunner().invoke(app, ["labels", "show", "--matrix", str(path)])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["row", "device", "region", "zone", "network", "group"]
    assert lines[3].split() == ["2", "h2:0", "europe-west1", "(inventory)", "europe-west1-c", "(flag)", "-"]
    assert lines[-1] == ("5 devices on 3 hosts: spans 2 zones in 1 region + 1 unlabelled; "
                         "0 unmeasured pairs, 0 estimated pairs")
    r = CliRunner().invoke(app, ["labels", "show", "--matrix", str(path), "--json"])
    doc = json.loads(r.output)
    assert doc["devices"][2]["zone"] == {"value": "europe-west1-c", "source": "flag"}
    assert doc["locality"]["unlabelled"] == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"labels": ["a"], "alpha_ms": [[0]], "beta_gbps": [[0]], "devices": [{"host": ""}]}')
    r = CliRunner().invoke(app, ["labels", "show", "--matrix", str(bad)])
    assert r.exit_code == 2 and r.output.strip() == f"error: {bad}: devices[0].host: expected a host name, got an empty string"


def test_probe_location_sources_become_label_sources():
    f = fabric_of(DEVICES[:4])
    f.meta["hosts"] = {"h1": {"location_source": "gce"}, "h2": {"location_source": "flags"}}
    labels = LabelSet.from_fabric(f)
    assert labels.get("h1", "zone", 0) == Label("europe-west1-b", "detected")
    assert labels.get("h2", "region", 1) == Label("europe-west1", "flag")
    assert labels.get("h1", "network_group", 0).source == "inventory"


def test_labels_show_on_a_fabric_without_devices(tmp_path):
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Test root."""

    cli_labels.register(app)
    path = tmp_path / "plain.json"
    Fabric(np.zeros((2, 2)), np.ones((2, 2)), ["a", "b"]).save(path)
    r = CliRunner().invoke(app, ["labels", "show", "-m", str(path)])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[1].split() == ["0", "#0", "-", "-", "-"]
    assert r.output.splitlines()[-1].startswith("2 devices on 2 hosts: no location labels")
    r = CliRunner().invoke(app, ["labels", "suggest", "-m", str(path), "--apply", "-o", str(tmp_path / "o.json")])
    assert r.exit_code == 2 and "lists no devices to label" in r.output


def test_headless_labels_commands_import_no_console_or_ssh(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "f.json"
    fabric_of(DEVICES).save(path)
    code = (
        "import sys\n"
        "from geoconsole.cli import app\n"
        f"sys.argv = ['geoconsole', '--headless', 'labels', 'show', '--matrix', {str(path)!r}]\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'asyncssh', 'torch')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True, timeout=60)
    assert "5 devices on 3 hosts" in out.stdout, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "LOADED []"


def test_labels_set_command(tmp_path):
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Test root."""

    cli_labels.register(app)
    src, dst = tmp_path / "f.json", tmp_path / "g.json"
    fabric_of(DEVICES).save(src)
    r = CliRunner().invoke(app, ["labels", "set", "-m", str(src), "-o", str(dst), "--host", "h1", "--host", "h2",
                                 "--zone", "europe-west1-d", "--network-group", ""])
    assert r.exit_code == 0, r.output
    assert r.output.strip() == f"set zone=europe-west1-d, network_group=(cleared) on 2 hosts; wrote {dst}"
    back = load_fabric(dst)
    assert [d.zone for d in back.devices[:4]] == ["europe-west1-d"] * 4
    assert [d.network_group for d in back.devices[:4]] == [None] * 4
    labels = LabelSet.from_fabric(back)
    assert labels.get("h1", "zone", 0) == Label("europe-west1-d", "operator")
    assert labels.get("h1", "region", 0) == Label("europe-west1", "inventory")
    r = CliRunner().invoke(app, ["labels", "set", "-m", str(dst), "-o", str(dst), "--host", "h2", "--gpu", "1",
                                 "--network-group", "rack-7"])
    assert r.exit_code == 0, r.output
    assert [d.network_group for d in load_fabric(dst).devices[2:4]] == [None, "rack-7"]
    r = CliRunner().invoke(app, ["labels", "set", "-m", str(dst), "-o", str(dst), "--host", "h1", "--host", "h1",
                                 "--zone", "z"])
    assert r.exit_code == 0 and r.output.startswith("set zone=z on 1 host;"), r.output
    # host names in any case, as DNS (the fabric never holds two that differ only in case)
    r = CliRunner().invoke(app, ["labels", "set", "-m", str(dst), "-o", str(dst), "--host", "H1", "--host", "h1",
                                 "--zone", "z2"])
    assert r.exit_code == 0 and r.output.startswith("set zone=z2 on 1 host;"), r.output
    assert [d.zone for d in load_fabric(dst).devices[:2]] == ["z2", "z2"]
    for args, match in ((["--host", "h9", "--zone", "z"], "no device h9 in the fabric"),
                        (["--host", "h1", "--gpu", "5", "--zone", "z"], "no device h1:5"),
                        (["--host", "h1"], "nothing to set"),
                        (["--host", "h1", "--zone", "bad zone"], "--zone: zone: no spaces"),
                        (["--host", " ", "--zone", "z"], "--host: expected a host name, got ' '"),
                        (["--host", "h1", "--region", "eu,us"], "--region: region: may not hold ','")):
        r = CliRunner().invoke(app, ["labels", "set", "-m", str(src), "-o", str(dst), *args])
        assert r.exit_code == 2 and match in r.output, (args, r.output)


def test_host_edit_can_replace_gpu_overrides():
    labels = LabelSet()
    labels.set("h", "zone", "z1", "inventory", gpu=0)
    labels.set("h", "zone", "z2", "inventory", gpu=1)
    labels.set("h", "zone", "z3", "operator")
    assert labels.get("h", "zone", 0).value == "z1"  # overrides still win
    labels.set("h", "zone", "z3", "operator", replace_gpus=True)
    assert labels.get("h", "zone", 0) == labels.get("h", "zone", 1) == Label("z3", "operator")


def test_a_fabric_with_an_invalid_label_is_a_one_line_error(tmp_path):
    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """Test root."""

    cli_labels.register(app)
    path = tmp_path / "f.json"
    fabric_of((Device("h1", 0, "eu west"), Device("h2", 0, "eu"))).save(path)
    r = CliRunner().invoke(app, ["labels", "show", "-m", str(path)])
    assert r.exit_code == 2
    assert r.output == f"error: {path}: devices[0].region: no spaces or other whitespace allowed in 'eu west'\n"


@pytest.mark.parametrize("flags, message", [
    (["--min-gap", "inf"], "--min-gap: expected a finite ratio >= 1.01, got inf"),
    (["--keep-contradicting"], "--keep-contradicting applies only with --apply"),
])
def test_labels_suggest_refuses_flags_that_would_be_ignored_or_meaningless(ww_path, flags, message):
    from typer.testing import CliRunner

    from geoconsole.cli import app

    r = CliRunner().invoke(app, ["--headless", "labels", "suggest", "-m", str(ww_path), *flags])
    assert r.exit_code == 2 and r.output == f"error: {message}\n"
