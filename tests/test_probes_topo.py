"""``nvidia-smi topo -m`` parsing: recorded outputs directly, and through real discovery.

The fleet test puts a stub ``nvidia-smi`` that prints a recorded output first on an
emulated host's PATH and runs ``geoconsole --headless inventory --json``, so the
parser is exercised by the same SSH discovery a user runs.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import require_fleet
from geoconsole.cli import app
from probes.topo import TopoError, link_rank, parse_topo

DATA = Path(__file__).parent / "data" / "topo"


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_dgx1_v100_hybrid_cube_mesh():
    t = parse_topo(load("dgx1_v100_nvlink_cube_mesh.txt"))
    assert t.gpus == tuple(f"GPU{i}" for i in range(8))
    assert t.classes() == {"NV2": 8, "NV1": 8, "SYS": 12}
    # every V100 has six NVLink lanes in the cube mesh
    assert [sum(t.nvlinks(i, j) for j in range(8)) for i in range(8)] == [6] * 8
    assert t.link(0, 3) == "NV2" and t.link(0, 5) == "SYS" and t.link(2, 6) == "NV1"
    assert t.nics == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert [t.nearest_nic(i) for i in range(8)] == ["mlx5_0"] * 2 + ["mlx5_1"] * 2 + ["mlx5_2"] * 2 + ["mlx5_3"] * 2
    assert t.cpu_affinity == ("0-19,40-59",) * 4 + ("20-39,60-79",) * 4
    assert t.numa_affinity == (0,) * 4 + (1,) * 4
    assert t.gpu_numa_id == (None,) * 8


def test_h100_sxm_nv18_all_to_all():
    t = parse_topo(load("h100_sxm_nv18.txt"))
    assert t.classes() == {"NV18": 28}
    assert t.nvlinks(0, 7) == 18
    assert len(t.nics) == 8 and t.nic_links[3][3] == "PXB" and t.nic_links[3][4] == "SYS"
    assert t.nearest_nic(6) == "mlx5_6"
    assert t.numa_affinity == (0,) * 4 + (1,) * 4


def test_two_socket_pcie_with_nic_columns():
    t = parse_topo(load("two_socket_pcie_nics.txt"))
    assert t.classes() == {"PIX": 4, "NODE": 8, "SYS": 16}
    assert t.nics == ("mlx5_0", "mlx5_1")
    assert t.nic_links[0] == ("PIX", "SYS") and t.nic_links[5] == ("SYS", "PIX")
    assert t.nearest_nic(2) == "mlx5_0" and t.nearest_nic(7) == "mlx5_1"
    assert t.cpu_affinity[0] == "0-23,48-71" and t.cpu_affinity[7] == "24-47,72-95"


def test_four_gpus_as_phb_pairs_joined_by_sys():
    t = parse_topo(load("four_gpu_phb_pairs_sys.txt"))
    assert t.links == (("X", "PHB", "SYS", "SYS"), ("PHB", "X", "SYS", "SYS"),
                       ("SYS", "SYS", "X", "PHB"), ("SYS", "SYS", "PHB", "X"))
    assert t.nics == () and t.nearest_nic(0) is None
    assert t.numa_affinity == (0, 0, 1, 1)


def test_two_gpus_nv4():
    t = parse_topo(load("two_gpu_nv4.txt"))
    assert t.links == (("X", "NV4"), ("NV4", "X")) and t.nvlinks(1, 0) == 4
    assert t.nics == ("mlx5_0",) and t.nic_links == (("PXB",), ("PXB",))


def test_one_gpu():
    t = parse_topo(load("one_gpu.txt"))
    assert t.n == 1 and t.links == (("X",),) and t.summary() == "1 GPU"
    assert t.cpu_affinity == ("0-15",) and t.numa_affinity == (0,)


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.txt")))
def test_pasted_copy_with_spaces_parses_the_same(name):
    """Outputs copied from a terminal lose tabs and colour codes; same result."""
    text = load(name)
    pasted = text.replace("\x1b[4m", "").replace("\x1b[0m", "").expandtabs(8)
    assert "\t" not in pasted
    assert parse_topo(pasted) == parse_topo(text)


def test_link_rank_orders_fastest_first():
    links = ["SYS", "PIX", "NV4", "NODE", "PHB", "NV18", "PXB"]
    assert sorted(links, key=link_rank) == ["NV18", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS"]


def test_malformed_outputs_name_the_problem():
    with pytest.raises(TopoError, match="no GPU0 column header"):
        parse_topo("No devices were found\n")
    bad = load("two_gpu_nv4.txt").replace("NV4", "NVX", 1)
    with pytest.raises(TopoError, match=r"line 2: GPU0: unknown link class 'NVX'"):
        parse_topo(bad)
    short = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \n"
    with pytest.raises(TopoError, match="GPU0 has 1 fields, expected at least 2"):
        parse_topo(short)


# -- through real discovery on an emulated host ----------------------------------------------

GPU_NAMES = {
    "dgx1_v100_nvlink_cube_mesh.txt": ("Tesla V100-SXM2-32GB", 32768, ["06", "07", "0a", "0b", "85", "86", "89", "8a"]),
    "h100_sxm_nv18.txt": ("NVIDIA H100 80GB HBM3", 81559, ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]),
    "two_socket_pcie_nics.txt": ("NVIDIA L40S", 46068, ["1a", "1b", "3d", "3e", "9c", "9d", "bc", "bd"]),
    "four_gpu_phb_pairs_sys.txt": ("NVIDIA GeForce RTX 3070", 8192, ["01", "21", "81", "c1"]),
    "two_gpu_nv4.txt": ("NVIDIA A100-SXM4-80GB", 81920, ["07", "0f"]),
    "one_gpu.txt": ("NVIDIA A10G", 23028, ["1e"]),
}


def stub_script(name: str) -> str:
    gpu, memory, buses = GPU_NAMES[name]
    rows = "\\n".join(
        f"{k}, {gpu}, GPU-{k:08x}-1111-2222-3333-{k:012x}, {memory}, 00000000:{bus.upper()}:00.0"
        for k, bus in enumerate(buses))
    topo = shlex.quote(str(DATA / name))
    return (
        "#!/bin/sh\n"
        "# stub nvidia-smi: replays a recorded machine\n"
        'case "$1" in\n'
        f"  topo) cat {topo} ;;\n"
        f"  --query-gpu=*) printf '{rows}\\n' ;;\n"
        "  *) echo \"stub nvidia-smi: unsupported $*\" >&2; exit 2 ;;\n"
        "esac\n"
    )


def discover_json(fleet, inventory: Path) -> tuple[int, dict]:
    result = CliRunner().invoke(app, [
        "--headless", "inventory", "--inventory", str(inventory), "--json",
        "--known-hosts", str(fleet.known_hosts_path), "--ssh-config", str(inventory.parent / "none")])
    start = result.output.find("{")
    doc = json.loads(result.output[start:result.output.rindex("}") + 1]) if start >= 0 else {}
    return result.exit_code, doc


@pytest.mark.fleet
@pytest.mark.parametrize("name", sorted(GPU_NAMES))
def test_discovery_reads_recorded_topology_through_stub_nvidia_smi(emulated_fleet, tmp_path, name):
    require_fleet()
    fleet = emulated_fleet
    fleet.install_stub("h0", "nvidia-smi", stub_script(name))
    try:
        code, doc = discover_json(fleet, fleet.inventory_path)
    finally:
        fleet.remove_stub("h0", "nvidia-smi")
    assert code == 0, doc
    h0 = next(h for h in doc["hosts"] if h["name"] == "h0")
    expected = parse_topo(load(name))
    assert h0["cpu_host"] is False
    assert h0["topo"] == expected.to_json()
    gpu, memory, buses = GPU_NAMES[name]
    assert [g["index"] for g in h0["gpus"]] == list(range(len(buses)))
    assert {g["name"] for g in h0["gpus"]} == {gpu}
    assert h0["gpus"][0]["memory_mib"] == memory
    assert h0["gpus"][-1]["pci_bus_id"] == f"00000000:{buses[-1].upper()}:00.0"
    assert h0["devices"] == list(range(len(buses)))
    # the other hosts have no nvidia-smi: CPU hosts, one device each
    others = [h for h in doc["hosts"] if h["name"] != "h0"]
    assert all(h["cpu_host"] and h["devices"] == [None] and h["topo"] is None for h in others)


@pytest.mark.fleet
def test_inventory_gpu_selection_is_checked_against_the_host(emulated_fleet, tmp_path):
    require_fleet()
    fleet = emulated_fleet
    fleet.install_stub("h0", "nvidia-smi", stub_script("four_gpu_phb_pairs_sys.txt"))
    try:
        good = fleet.write_inventory(tmp_path / "good.toml", extra={"h0": {"gpus": [1, 3]}})
        code, doc = discover_json(fleet, good)
        assert code == 0
        assert next(h for h in doc["hosts"] if h["name"] == "h0")["devices"] == [1, 3]
        bad = fleet.write_inventory(tmp_path / "bad.toml", extra={"h0": {"gpus": [2, 7]}})
        result = CliRunner().invoke(app, [
            "--headless", "inventory", "--inventory", str(bad), "--known-hosts",
            str(fleet.known_hosts_path), "--ssh-config", str(tmp_path / "none")])
    finally:
        fleet.remove_stub("h0", "nvidia-smi")
    assert result.exit_code == 3
    assert "error: 1 of 4 hosts failed: h0: gpus: index 7 not on this host (it has 4 GPUs: [0, 1, 2, 3])" in result.output
