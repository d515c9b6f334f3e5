"""Probe pieces without a fleet: fit, tournament schedule, quoting, size planning."""

from __future__ import annotations

import itertools
import math
import random
import subprocess

import numpy as np
import pytest

from probes.fit import fit_alpha_beta
from probes.result import unmeasured_message, unmeasured_pairs
from probes.schedule import check_schedule, schedule, tournament
from probes.ssh import quote_command
from probes.worker import plan_sizes
from solver.fabric import Device, Fabric

# -- fit ---------------------------------------------------------------------------------------


def samples_for(alpha_s, beta_gbps, sizes, noise=0.0, seed=0, reps=3):
    rng = random.Random(seed)
    out = []
    for nbytes in sizes:
        for _ in range(reps):
            out.append((nbytes, alpha_s + nbytes * 8 / 1e9 / beta_gbps + abs(rng.gauss(0, noise))))
    return out


def test_fit_recovers_alpha_and_beta_exactly():
    fit = fit_alpha_beta(samples_for(0.004, 2.5, [1 << 20, 4 << 20, 16 << 20, 64 << 20]))
    assert fit.ok and fit.points == 4
    assert fit.beta_gbps == pytest.approx(2.5, rel=1e-9)
    assert fit.intercept_s == pytest.approx(0.004, rel=1e-9)
    assert fit.r2 == pytest.approx(1.0)


def test_fit_takes_fastest_repetition():
    clean = samples_for(0.001, 1.0, [1e6, 2e6, 4e6], reps=1)
    delayed = [(b, s + 0.5) for b, s in clean]  # a stalled repetition of every size
    fit = fit_alpha_beta(clean + delayed)
    assert fit.beta_gbps == pytest.approx(1.0, rel=1e-9) and fit.ok


def test_fit_flags_poor_and_negative_fits():
    rng = random.Random(3)
    scattered = [(b, rng.uniform(0.01, 0.2)) for b in (1e6, 2e6, 4e6, 8e6)]
    fit = fit_alpha_beta(scattered)
    assert not fit.ok and fit.problem.startswith(("poor-fit", "negative-slope"))
    falling = [(1e6, 0.3), (2e6, 0.2), (4e6, 0.1)]
    fit = fit_alpha_beta(falling)
    assert fit.problem == "negative-slope" and math.isnan(fit.beta_gbps)
    wobbly = [(1e6, 0.010), (2e6, 0.030), (3e6, 0.020), (4e6, 0.040)]
    fit = fit_alpha_beta(wobbly)
    assert fit.problem.startswith("poor-fit R^2=") and fit.r2 < 0.98


def test_fit_needs_two_sizes():
    with pytest.raises(ValueError, match="at least 2 payload sizes"):
        fit_alpha_beta([(1e6, 0.1), (1e6, 0.2)])


# -- schedule ----------------------------------------------------------------------------------


@pytest.mark.parametrize("hosts", range(1, 10))
def test_tournament_meets_every_host_pair_once_disjointly(hosts):
    names = [f"h{k}" for k in range(hosts)]
    rounds = tournament(names)
    met = [frozenset(p) for r in rounds for p in r]
    assert sorted(map(sorted, met)) == sorted(map(sorted, map(frozenset, itertools.combinations(names, 2))))
    for r in rounds:
        flat = [h for p in r for h in p]
        assert len(flat) == len(set(flat))  # no host in two pairs of one round
    assert len(rounds) == (hosts - 1 if hosts % 2 == 0 else hosts)


@pytest.mark.parametrize("seed", range(20))
def test_schedule_covers_gpu_pairs_with_disjoint_hosts(seed):
    rng = random.Random(seed)
    device_hosts = [f"h{k}" for k in range(rng.randint(1, 6)) for _ in range(rng.randint(1, 4))]
    for sequential in (False, True):
        rounds = schedule(device_hosts, sequential=sequential)
        check_schedule(device_hosts, rounds)
        if sequential:
            assert all(len(r.slots) == 1 and len(r.slots[0].pairs) == 1 for r in rounds)


def test_intra_host_pairs_come_first_and_in_sequence():
    device_hosts = ["a", "a", "a", "b", "b"]
    rounds = schedule(device_hosts)
    first = {s.hosts: s.pairs for s in rounds[0].slots}
    assert first == {("a",): ((0, 1), (0, 2), (1, 2)), ("b",): ((3, 4),)}
    assert rounds[1].slots[0].hosts == ("a", "b") and len(rounds[1].slots[0].pairs) == 6


def test_check_schedule_catches_a_host_in_two_slots():
    from probes.schedule import Round, Slot

    bad = [Round(0, (Slot(("a", "b"), ((0, 1),)), Slot(("a", "c"), ((0, 2),)))), Round(1, (Slot(("b", "c"), ((1, 2),)),))]
    with pytest.raises(AssertionError, match="host in two slots"):
        check_schedule(["a", "b", "c"], bad)


# -- quoting -----------------------------------------------------------------------------------

NASTY = ["plain", "two words", "semi;colon", "$(touch /tmp/geoconsole-pwned)", "`id`", "a'b\"c",
         "back\\slash", "new\nline", "*glob?", "--flag", "", "$HOME", "a&&b||c", "<in >out", "é ü 中"]


def test_quote_command_round_trips_through_a_real_shell():
    argv = ["printf", r"%s\0", *NASTY]
    out = subprocess.run(["sh", "-c", quote_command(argv)], capture_output=True, check=True).stdout
    assert out.decode().split("\0")[:-1] == NASTY


def test_quote_command_env_values_are_quoted_and_names_checked():
    cmd = quote_command(["sh", "-c", 'printf %s "$X"'], env={"X": "$(id); rm -rf /"})
    out = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout
    assert out == "$(id); rm -rf /"
    with pytest.raises(ValueError, match="not an identifier"):
        quote_command(["true"], env={"A;B": "1"})
    with pytest.raises(TypeError):
        quote_command("echo hi")


# -- size planning (runs on the host) ----------------------------------------------------------


def test_plan_sizes_scales_down_on_slow_links_and_keeps_ratios():
    sizes = [256 << 10, 1 << 20, 4 << 20, 16 << 20]
    fast = plan_sizes(sizes, rate_bytes_s=10e9 / 8, max_transfer_s=0.25, min_bytes=32 << 10)
    assert fast == sizes
    slow = plan_sizes(sizes, rate_bytes_s=100e6 / 8, max_transfer_s=0.25, min_bytes=32 << 10)
    assert slow[-1] == pytest.approx(0.25 * 100e6 / 8, rel=1e-6)
    assert slow[-1] / slow[1] == pytest.approx(16, rel=1e-3)
    tiny = plan_sizes(sizes, rate_bytes_s=1e3, max_transfer_s=0.1, min_bytes=4096)
    assert len(tiny) >= 3 and tiny[0] == 4096


# -- unmeasured pairs --------------------------------------------------------------------------


def test_unmeasured_pairs_are_named_with_reasons():
    nan = float("nan")
    alpha = np.array([[0, 1, nan], [1, 0, nan], [nan, 2, 0]], dtype=float)
    beta = np.array([[0, 1, nan], [1, 0, nan], [nan, 2, 0]], dtype=float)
    flags = [[None, None, "host-lost: c: gone"], [None, None, "host-lost: c: gone"], ["host-lost: c: gone", None, None]]
    devices = (Device("a"), Device("b"), Device("c", 0))
    fabric = Fabric(alpha, beta, ("a", "b", "c"), devices, extras={"fit_flag": flags}, source="f.json")
    pairs = unmeasured_pairs(fabric)
    assert [(p.src, p.dst, p.reason) for p in pairs] == [
        ("a", "c:0", "host-lost: c: gone"), ("b", "c:0", "host-lost: c: gone")]
    assert unmeasured_message(fabric) == (
        "f.json: 2 device pairs unmeasured: a - c:0 (host-lost: c: gone), b - c:0 (host-lost: c: gone)")
    complete = Fabric(np.zeros((2, 2)), np.ones((2, 2)), ("a", "b"))
    assert unmeasured_message(complete) is None


# -- discovery output parsing ------------------------------------------------------------------

from probes.discovery import discovery_script, parse_discovery  # noqa: E402
from geoconsole.inventory import Host  # noqa: E402

GCE_OUTPUT = """@@hostname
trainer-7
@@route
10.0.0.9 via 10.0.0.1 dev ens4 src 10.0.0.7 uid 0
@@interface
@@mtu
lo 65536
ens4 1460
@@cc
cubic
@@cc-available
reno cubic bbr
@@product
Google Compute Engine
@@versions
{"python": "3.11.7", "torch": "2.13.0", "nccl": "2.27.3"}
@@gce
projects/123456/zones/europe-west4-a
@@end
"""


def test_discovery_parses_a_cpu_host_on_gce():
    info = parse_discovery(Host(name="t7", address="10.0.0.7"), GCE_OUTPUT, labels={"region": "flag-region"})
    assert info.cpu_host and info.devices == (None,) and info.gpus == ()
    assert (info.hostname, info.interface, info.mtu) == ("trainer-7", "ens4", 1460)
    assert (info.congestion_control, info.congestion_available) == ("cubic", ("reno", "cubic", "bbr"))
    assert (info.torch, info.nccl, info.python_version) == ("2.13.0", "2.27.3", "3.11.7")
    assert (info.region, info.zone, info.location_source) == ("europe-west4", "europe-west4-a", "gce")


def test_location_precedence_inventory_then_gce_then_flags():
    inv = Host(name="t7", address="10.0.0.7", region="my-region", zone="my-zone")
    info = parse_discovery(inv, GCE_OUTPUT)
    assert (info.region, info.zone, info.location_source) == ("my-region", "my-zone", "inventory")
    not_google = GCE_OUTPUT.replace("Google Compute Engine", "PowerEdge R750").split("@@gce")[0] + "@@end\n"
    info = parse_discovery(Host(name="t7", address="10.0.0.7"), not_google, labels={"region": "r", "zone": "z"})
    assert (info.region, info.zone, info.location_source) == ("r", "z", "flags")
    timed_out = GCE_OUTPUT.replace("projects/123456/zones/europe-west4-a", "error URLError")
    info = parse_discovery(Host(name="t7", address="10.0.0.7"), timed_out)
    assert info.region is None and any("GCE metadata server: error URLError" in n for n in info.notes)


def test_inventory_interface_wins_and_failed_nvidia_smi_means_cpu_host():
    text = GCE_OUTPUT.replace("@@interface\n", "@@interface\nens5\n").replace(
        "@@route", "@@gpus\nNVIDIA-SMI has failed because it couldn't communicate with the driver\n@@gpus-rc 9\n@@route")
    info = parse_discovery(Host(name="t7", address="10.0.0.7", interface="ens5"), text)
    assert info.interface == "ens5" and info.mtu is None
    assert info.cpu_host and any("nvidia-smi failed" in n for n in info.notes)


def test_discovery_script_quotes_inventory_values():
    script = discovery_script("/opt/my env/py;rm -rf ~", "10.0.0.1; reboot", None)
    assert "'/opt/my env/py;rm -rf ~' -c" in script
    assert "ip -o route get '10.0.0.1; reboot'" in script
    out = subprocess.run(["sh", "-n", "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_discovery_reads_versions_past_a_json_py_in_the_login_directory(tmp_path):
    """The versions snippet runs as ``python -c`` in the login's home directory, which
    Python puts first on the module path: a ``json.py`` or ``platform.py`` there must not
    replace the standard modules (nor run)."""
    import platform
    import sys

    for mod in ("json", "platform"):
        (tmp_path / f"{mod}.py").write_text(f"open({str(tmp_path / (mod + '.ran'))!r}, 'w').close()\n")
    out = subprocess.run(["sh", "-c", discovery_script(sys.executable, None, None)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    info = parse_discovery(Host(name="t7", address="10.0.0.7"), out.stdout)
    assert info.python_version == platform.python_version(), out.stdout
    assert not list(tmp_path.glob("*.ran"))
