"""``geoconsole --headless selftest``: the spec's checks of the exact solvers and inputs."""

from __future__ import annotations

import itertools
from typing import Callable

import numpy as np

from solver.fabric import Fabric, FabricError
from solver.matching import bottleneck_matching
from solver.path import HELD_KARP_MAX, held_karp_path, path_length


def _matching_vs_brute_force(rng) -> str:
    for _ in range(100):
        n = int(rng.integers(2, 6))
        cost = rng.random((n, n))
        expected = min(max(cost[i, p[i]] for i in range(n)) for p in itertools.permutations(range(n)))
        value, matching = bottleneck_matching(cost)
        assert abs(value - expected) < 1e-12
        assert abs(max(cost[i, matching[i]] for i in range(n)) - expected) < 1e-12
    return "bottleneck matching: 100/100 equal to brute force"


def _path_vs_brute_force(rng) -> str:
    for _ in range(100):
        n = int(rng.integers(2, 7))
        cost = rng.random((n, n))
        cost = (cost + cost.T) / 2
        np.fill_diagonal(cost, 0.0)
        expected = min(path_length(cost, list(p)) for p in itertools.permutations(range(n)))
        value, path = held_karp_path(cost)
        assert abs(value - expected) < 1e-9 and sorted(path) == list(range(n))
    return "open-loop path (Held-Karp): 100/100 equal to brute force"


def _min_max_not_min_sum(rng) -> str:
    probe = np.array([[0.0, 6.0], [6.0, 10.0]])
    value, matching = bottleneck_matching(probe)
    assert value == 6.0 and matching == [1, 0]
    assert min(probe[0, 0] + probe[1, 1], probe[0, 1] + probe[1, 0]) == 10.0
    return "min-sum assignment 10.0 would pick the diagonal; min-max bottleneck 6.0"


def _symmetrisation(rng) -> str:
    fabric = Fabric(np.array([[0.0, 10.0], [30.0, 0.0]]), np.array([[0.0, 1.0], [3.0, 0.0]]), ["a", "b"])
    directional_sum = 0.010 + 0.25 * 8 / 1.0 + 0.030 + 0.25 * 8 / 3.0
    assert abs(2 * fabric.transfer_s(0.25)[0, 1] - directional_sum) < 1e-12
    assert fabric.transfer_s(0.25)[0, 0] == 0.0
    return "directional transfer-time sum preserved"


def _rejects_malformed(rng) -> str:
    good = np.array([[0.0, 1.0], [1.0, 0.0]])
    cases = {
        "non-finite": (np.array([[0.0, np.inf], [1.0, 0.0]]), good, ["a", "b"]),
        "negative latency": (np.array([[0.0, -1.0], [1.0, 0.0]]), good, ["a", "b"]),
        "zero bandwidth": (good, np.array([[0.0, 0.0], [1.0, 0.0]]), ["a", "b"]),
        "labels mismatch": (good, good, ["a"]),
        "not square": (np.zeros((2, 3)), good, ["a", "b"]),
    }
    for name, (a, b, labels) in cases.items():
        try:
            Fabric(a, b, labels)
        except FabricError:
            continue
        raise AssertionError(f"{name} matrix accepted")
    return f"malformed fabrics rejected ({', '.join(cases)})"


def _held_karp_boundary(rng) -> str:
    try:
        held_karp_path(np.zeros((HELD_KARP_MAX + 1, HELD_KARP_MAX + 1)))
    except ValueError:
        return f"Held-Karp boundary rejected at {HELD_KARP_MAX + 1} stages"
    raise AssertionError(f"{HELD_KARP_MAX + 1}-stage exact path accepted")


CHECKS = (_matching_vs_brute_force, _path_vs_brute_force, _min_max_not_min_sum,
          _symmetrisation, _rejects_malformed, _held_karp_boundary)


def run_selftest(echo: Callable[[str], None] = print) -> bool:
    """Run every check, print one line each; True when all pass."""
    rng = np.random.default_rng(19)
    ok = True
    for check in CHECKS:
        try:
            echo(f"ok    {check(rng)}")
        except AssertionError as exc:
            ok = False
            echo(f"FAIL  {check.__name__.strip('_')}: {exc or 'check failed'}")
    echo("selftest passed" if ok else "selftest FAILED")
    return ok
