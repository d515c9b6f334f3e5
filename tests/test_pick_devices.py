"""pick_devices: the free GPU set whose slowest topo link is fastest (ADR-0021 addendum).

The link matrices below are the `nvidia-smi topo -m` GPU blocks of the ADR's machines
(DGX-1 NVLink cube mesh, 4 GPUs as PHB pairs joined by SYS, 2x A100 NV4, 8x NV18
all-to-all), written out here, and the same cases on the fleet-probe tests' recorded
outputs (tests/data/topo/*.txt) through the real parser, probes.topo.parse_topo.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from solver.devices import link_speed, pick_devices, pick_devices_greedy, speed_matrix


def grid(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


DGX1 = grid("""
X   NV1 NV1 NV2 NV2 SYS SYS SYS
NV1 X   NV2 NV1 SYS NV2 SYS SYS
NV1 NV2 X   NV2 SYS SYS NV1 SYS
NV2 NV1 NV2 X   SYS SYS SYS NV1
NV2 SYS SYS SYS X   NV1 NV1 NV2
SYS NV2 SYS SYS NV1 X   NV2 NV1
SYS SYS NV1 SYS NV1 NV2 X   NV2
SYS SYS SYS NV1 NV2 NV1 NV2 X
""")

PHB_PAIRS = grid("""
X   PHB SYS SYS
PHB X   SYS SYS
SYS SYS X   PHB
SYS SYS PHB X
""")

A100_NV4 = grid("""
X   NV4
NV4 X
""")

NV18 = [["X" if i == j else "NV18" for j in range(8)] for i in range(8)]


def test_link_class_order():
    order = ["NV12", "NV2", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"]
    speeds = [link_speed(c) for c in order]
    assert speeds == sorted(speeds, reverse=True) and len(set(speeds)) == len(speeds)
    assert link_speed("SOC") == link_speed("SYS")
    assert link_speed("nv4") == link_speed("NV4")


def test_unknown_link_class_is_refused():
    with pytest.raises(ValueError, match="unknown GPU link class 'FAST'"):
        pick_devices([["X", "FAST"], ["FAST", "X"]], [0, 1], 2)


def test_dgx1_four_gpus_with_gpu0_busy_get_the_other_island():
    assert pick_devices(DGX1, range(1, 8), 4) == [4, 5, 6, 7]


def test_dgx1_all_free_ties_break_to_lowest_indices():
    # Both islands are all-NVLink with the same total speed: the lowest indices win.
    assert pick_devices(DGX1, range(8), 4) == [0, 1, 2, 3]


def test_dgx1_two_gpus_take_a_double_link():
    # NV2 beats NV1; among NV2 pairs (0,3), (0,4), (1,2), ... the lowest is (0,3).
    assert pick_devices(DGX1, range(8), 2) == [0, 3]


def test_phb_pairs_two_gpus_with_gpu0_busy_get_2_and_3():
    assert pick_devices(PHB_PAIRS, [1, 2, 3], 2) == [2, 3]


def test_nv4_pair_and_uniform_nv18_keep_lowest_indices():
    assert pick_devices(A100_NV4, [0, 1], 2) == [0, 1]
    assert pick_devices(NV18, [1, 3, 4, 6, 7], 3) == [1, 3, 4]


def test_without_link_data_or_one_gpu_lowest_free_indices():
    assert pick_devices(None, [5, 2, 7, 3], 2) == [2, 3]
    assert pick_devices(DGX1, [6, 2, 5], 1) == [2]
    assert pick_devices({}, [4, 1], 1) == [1]
    assert pick_devices(DGX1, [3, 1], 0) == []


def test_mapping_form_matches_matrix_form():
    as_map = {i: {j: c for j, c in enumerate(row) if i != j} for i, row in enumerate(DGX1)}
    assert pick_devices(as_map, range(1, 8), 4) == [4, 5, 6, 7]
    assert (speed_matrix(as_map) == speed_matrix(DGX1)).all()


@pytest.mark.parametrize("k,free,match", [
    (5, [0, 1, 2], "between 0 and 3"),
    (-1, [0, 1], "between 0 and 2"),
    (2, [0, 9], "GPU 9 is not in the 8-GPU link matrix"),
    (2, [1, 1, 2], "duplicate"),
])
def test_bad_requests_are_refused(k, free, match):
    with pytest.raises(ValueError, match=match):
        pick_devices(DGX1, free, k)


def brute_force(speed: np.ndarray, free, k):
    """Oracle: every subset, ranked by (slowest link, total speed, lowest indices)."""
    def rank(c):
        links = [speed[a, b] for a, b in itertools.combinations(c, 2)]
        return (-min(links), -sum(links), c)

    return list(min(itertools.combinations(sorted(free), k), key=rank))


CLASSES = ["SYS", "NODE", "PHB", "PXB", "PIX", "NV1", "NV2", "NV4", "NV12"]


def random_links(rng, n):
    links = [["X"] * n for _ in range(n)]
    for i, j in itertools.combinations(range(n), 2):
        links[i][j] = links[j][i] = CLASSES[rng.integers(len(CLASSES))]
    return links


def test_exact_search_equals_brute_force_on_random_machines():
    rng = np.random.default_rng(21)
    for _ in range(150):
        n = int(rng.integers(2, 9))
        links = random_links(rng, n)
        free = sorted(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False).tolist())
        k = int(rng.integers(0, len(free) + 1))
        want = brute_force(speed_matrix(links), free, k) if k > 1 else free[:k]
        assert pick_devices(links, free, k) == want, (links, free, k)


def test_greedy_agrees_on_the_adr_machines_and_is_never_better_than_exact():
    assert pick_devices_greedy(DGX1, range(1, 8), 4) == [4, 5, 6, 7]
    assert pick_devices_greedy(PHB_PAIRS, [1, 2, 3], 2) == [2, 3]
    rng = np.random.default_rng(5)
    for _ in range(60):
        n = int(rng.integers(3, 9))
        links = random_links(rng, n)
        speed = speed_matrix(links)
        k = int(rng.integers(2, n + 1))
        exact, greedy = pick_devices(links, range(n), k), pick_devices_greedy(links, range(n), k)
        assert len(set(greedy)) == k
        worst = lambda c: min(speed[a, b] for a, b in itertools.combinations(c, 2))  # noqa: E731
        assert worst(greedy) <= worst(exact)


def test_large_machine_uses_greedy_and_keeps_islands():
    # 16 GPUs: two NV8 islands of 8 joined by SYS; C(15, 8) is past the exhaustive limit.
    n = 16
    links = [["X" if i == j else ("NV8" if i // 8 == j // 8 else "SYS") for j in range(n)] for i in range(n)]
    assert pick_devices(links, range(1, 16), 8) == list(range(8, 16))


TOPO_DIR = Path(__file__).parent / "data" / "topo"

# (recorded file, free GPUs, k, expected) -- the ADR's cases through the real parser.
RECORDED = [
    ("dgx1_v100_nvlink_cube_mesh.txt", range(1, 8), 4, [4, 5, 6, 7]),
    ("dgx1_v100_nvlink_cube_mesh.txt", range(8), 4, [0, 1, 2, 3]),
    ("four_gpu_phb_pairs_sys.txt", [1, 2, 3], 2, [2, 3]),
    ("four_gpu_phb_pairs_sys.txt", [0, 1, 2, 3], 2, [0, 1]),
    ("two_socket_pcie_nics.txt", range(1, 8), 4, [4, 5, 6, 7]),
    ("two_socket_pcie_nics.txt", range(1, 8), 2, [2, 3]),
    ("h100_sxm_nv18.txt", [2, 5, 6, 7], 3, [2, 5, 6]),
    ("two_gpu_nv4.txt", [0, 1], 2, [0, 1]),
    ("one_gpu.txt", [0], 1, [0]),
]


@pytest.mark.parametrize("name,free,k,want", RECORDED)
def test_recorded_topologies(name, free, k, want):
    """Recorded `nvidia-smi topo -m` outputs, parsed by probes.topo, then picked from."""
    topo = pytest.importorskip("probes.topo", reason="probes/topo.py not present in this checkout")
    path = TOPO_DIR / name
    if not path.exists():
        pytest.skip(f"recorded output {name} not present")
    parsed = topo.parse_topo(path.read_text())
    assert pick_devices(parsed.links, free, k) == want
    if len(parsed.links) > 1:
        assert (speed_matrix(parsed.links) == speed_matrix(
            {"dgx1_v100_nvlink_cube_mesh.txt": DGX1, "four_gpu_phb_pairs_sys.txt": PHB_PAIRS,
             "two_gpu_nv4.txt": A100_NV4, "h100_sxm_nv18.txt": NV18}.get(name, parsed.links))).all()
