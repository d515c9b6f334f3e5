"""validate: the model's ranking of placements against measured proxy step time."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from geoconsole.launch.validate import (
    Placement,
    compare,
    format_report,
    parse_worker_output,
    scaled,
    warning_for,
    worker_command,
)
from solver.fabric import Device, Fabric
from solver.workload import Workload


def _placement(name, model_s, measured):
    return Placement(name, [0], model_s, model_s, steps_s=list(measured))


def test_agreeing_order_has_rho_one_and_no_warning():
    ps = [_placement("a", 1.0, [1.1, 1.0, 1.2]), _placement("b", 2.0, [2.1]), _placement("c", 3.0, [3.3])]
    rho, bad = compare(ps)
    assert rho == pytest.approx(1.0) and bad == [] and warning_for(rho, bad) is None


def test_reversed_order_is_a_disagreement_with_a_warning():
    ps = [_placement("solution", 1.0, [3.0]), _placement("random", 2.0, [1.0]), _placement("other", 3.0, [2.0])]
    rho, bad = compare(ps)
    assert rho == pytest.approx(-0.5)
    assert any("solution" in b and "random" in b for b in bad)
    warning = warning_for(rho, bad)
    assert "DISAGREES" in warning and "reject" in warning


def test_differences_inside_the_tolerance_are_noise():
    ps = [_placement("a", 1.0, [1.05]), _placement("b", 1.05, [1.0])]  # model within 10%
    assert compare(ps)[1] == []
    ps = [_placement("a", 1.0, [1.05]), _placement("b", 2.0, [1.0])]  # measured within 10%
    assert compare(ps)[1] == []


def test_failed_placements_are_left_out_of_the_comparison():
    ps = [_placement("a", 1.0, [1.0]), Placement("b", [0], 2.0, 2.0, error="rank 1 failed")]
    rho, bad = compare(ps)
    assert rho is None and bad == []
    text = "\n".join(format_report_for(ps))
    assert "FAILED: rank 1 failed" in text and "n/a" in text


def format_report_for(ps):
    from geoconsole.launch.validate import ValidationReport

    rho, bad = compare(ps)
    return format_report(ValidationReport(ps, Workload(1, 1, 0.1, 0.1), 1.0, rho, bad, warning_for(rho, bad)))


def test_worker_command_carries_scaled_bytes():
    w = scaled(Workload(2, 4, c_pp=0.5, c_dp=0.8, pp_messages=2.4), 0.01)
    cmd = worker_command("w.py", w, steps=3, warmup=1, backend="gloo", timeout_s=60)
    assert "--c-pp-bytes=5000000" in cmd and "--c-dp-bytes=8000000" in cmd
    assert "--pp-messages=2" in cmd and "--d-pp=2" in cmd and "--d-dp=4" in cmd
    with pytest.raises(ValueError, match="--scale"):
        scaled(w, 0)


def test_worker_output_marker_is_found_among_other_lines():
    lines = ["hello", '@@geoconsole-validate {"step_s": [0.5]}', "bye"]
    assert parse_worker_output(lines) == {"step_s": [0.5]}
    assert parse_worker_output(["@@geoconsole-validate {broken"]) is None


def test_console_never_imports_the_worker_or_torch():
    code = (
        "import sys, geoconsole.launch.validate, geoconsole.cli.launch, geoconsole.launch.run;"
        "bad=[m for m in ('torch','probes.validate_worker','textual') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- on the emulated fleet -----------------------------------------------------------


def _fleet_fabric(fleet) -> Fabric:
    """The fleet's links as a fabric: tbf rate times the TCP payload share, 0.05 ms."""
    from fleetlib import TCP_PAYLOAD_SHARE

    names = [h.name for h in fleet.hosts]
    n = len(names)
    beta = np.zeros((n, n))
    alpha = np.zeros((n, n))
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i != j:
                beta[i, j] = fleet.rates_mbit[(a, b)] * TCP_PAYLOAD_SHARE / 1000.0
                alpha[i, j] = 0.05
    return Fabric(alpha, beta, tuple(names), devices=tuple(Device(h) for h in names),
                  source="fleet-rates")


@pytest.mark.fleet
async def test_solved_placement_measures_faster_than_a_random_map(emulated_fleet):
    from geoconsole.inventory import load_inventory
    from geoconsole.launch.plan import LaunchHost
    from geoconsole.launch.validate import run_validation
    from probes.ssh import SSHPool

    fleet = emulated_fleet
    inv = load_inventory(fleet.inventory_path, ssh_config=None)
    hosts = {h.name: LaunchHost.from_inventory(h) for h in inv.hosts}
    fabric = _fleet_fabric(fleet)
    # Activations dominate: the pipelines must take the fast links.
    workload = Workload(d_pp=2, d_dp=2, c_pp=0.006, c_dp=0.002)
    async with SSHPool(known_hosts=fleet.known_hosts_path) as pool:
        sessions = {h.name: await pool.session(h) for h in inv.hosts}
        report, notes = await run_validation(
            fabric, workload, hosts, sessions, steps=3, warmup=1, seed=0, random_maps=3,
            port=29700, timeout_s=120,
        )
    text = "\n".join(format_report(report, notes))
    by_name = {p.name: p for p in report.placements}
    solution = by_name["solution (seed 0)"]
    assert all(p.error is None for p in report.placements), text
    worse = [p for p in report.placements if p.name.startswith("random") and p.model_s > 1.3 * solution.model_s]
    assert worse, text  # the seeded random maps include a clearly worse one
    for p in worse:
        assert solution.measured_s < p.measured_s, text
        assert f"{p.measured_s:.3f}" in text
    assert f"{solution.measured_s:.3f}" in text and f"{solution.model_s:.3f}" in text
    assert "Spearman" in text


@pytest.mark.parametrize("flag, message", [
    (["--backend", "foo"], "--backend 'foo': validate runs on gloo or nccl"),
    (["--backend", ""], "--backend '': validate runs on gloo or nccl"),
    (["--scale", "inf"], "--scale: must be a number > 0"),
    (["--scale", "1e300"], "--scale 1e+300: the scaled payloads are no workload"),
    (["--random", "1000000000000"], "Invalid value for '--random'"),
    (["--steps", "100000"], "Invalid value for '--steps'"),
])
def test_bad_validate_flags_are_refused_before_any_host_is_reached(ww_path, tmp_path, flag, message):
    """The inventory's host listens nowhere: a flag checked only after connecting exited 3
    with a connection error instead of naming the flag."""
    from typer.testing import CliRunner

    from geoconsole.cli import app

    inv = tmp_path / "inv.toml"
    inv.write_text('[[hosts]]\nname = "oregon-0"\naddress = "127.0.0.1"\nport = 1\n')
    r = CliRunner().invoke(app, ["--headless", "validate", "-m", str(ww_path), "-i", str(inv), "--c-pp", "0.512",
                                 "--c-dp", "0.65", *flag])
    assert r.exit_code == 2, r.output
    assert message in r.output and "connection" not in r.output
