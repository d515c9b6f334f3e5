"""Open Hamiltonian path: Held-Karp against brute force; the approximation against Held-Karp."""

import itertools

import numpy as np
import pytest

from solver.path import HELD_KARP_MAX, approximate_path, best_path, held_karp_path, path_length


def symmetric(rng, k):
    c = rng.random((k, k))
    c = (c + c.T) / 2
    np.fill_diagonal(c, 0.0)
    return c


def brute_force(c):
    k = c.shape[0]
    return min(path_length(c, list(p)) for p in itertools.permutations(range(k)))


@pytest.mark.parametrize("k", range(1, 8))
def test_held_karp_equals_brute_force(k):
    rng = np.random.default_rng(k)
    for _ in range(15):
        c = symmetric(rng, k)
        value, path = held_karp_path(c)
        assert sorted(path) == list(range(k))
        assert path_length(c, path) == pytest.approx(value, abs=1e-12)
        assert value == pytest.approx(brute_force(c), abs=1e-9)


def test_held_karp_boundary():
    held_karp_path(np.zeros((HELD_KARP_MAX, HELD_KARP_MAX)))
    with pytest.raises(ValueError, match="at most 16"):
        held_karp_path(np.zeros((HELD_KARP_MAX + 1, HELD_KARP_MAX + 1)))


def test_approximation_against_held_karp_up_to_12():
    """Every size 2..12, 20 instances each: report the worst gap, require it small."""
    rng = np.random.default_rng(11)
    worst = 0.0
    for k in range(2, 13):
        for _ in range(20):
            c = symmetric(rng, k)
            exact, _ = held_karp_path(c)
            approx, path = approximate_path(c)
            assert sorted(path) == list(range(k))
            assert approx >= exact - 1e-9
            worst = max(worst, (approx - exact) / exact)
    print(f"approximate path: worst gap {100 * worst:.2f}% over sizes 2..12")
    assert worst < 0.05


def test_best_path_switches_to_the_approximation_above_16():
    rng = np.random.default_rng(5)
    length, path, exact = best_path(symmetric(rng, 20))
    assert not exact and sorted(path) == list(range(20))
    assert best_path(symmetric(rng, 6))[2]


def test_compiled_held_karp_returns_the_numpy_path(monkeypatch):
    """solver/path.c fills the same table with the same tie-breaking: the same length and
    the same path as the numpy version, ties included."""
    from solver import native

    if native.held_karp() is None:
        pytest.fail(f"the compiled kernels should build here: {native.why_not()}")
    rng = np.random.default_rng(5)
    for k in [2, 3, 8, 11, 14]:
        for trial in range(4):
            c = symmetric(rng, k) if trial % 2 else np.round(symmetric(rng, k) * 2)
            compiled = held_karp_path(c)
            wide = np.zeros((k, 2 * k))
            wide[:, ::2] = c
            assert held_karp_path(wide[:, ::2]) == compiled  # a strided view, same values
            with monkeypatch.context() as m:
                m.setattr(native, "held_karp", lambda: None)
                numpy_path = held_karp_path(c)
            assert compiled == numpy_path


@pytest.mark.parametrize("k", [9, 17, 40])
def test_or_opt_ends_where_no_single_node_move_shortens_the_path(k):
    """The vectorised Or-opt scores every insertion at once; its answer must be a local
    optimum of the moves the former one tried one path at a time."""
    from solver.path import _or_opt

    rng = np.random.default_rng(k)
    c = rng.random((k, k))
    c = c + c.T
    np.fill_diagonal(c, 0.0)
    p = _or_opt(c, list(rng.permutation(k)))
    assert sorted(p) == list(range(k))
    base = path_length(c, p)
    for idx in range(k):
        rest = p[:idx] + p[idx + 1:]
        for pos in range(k):
            assert path_length(c, rest[:pos] + [p[idx]] + rest[pos:]) >= base - 1e-9


@pytest.mark.parametrize("k, starts", [(64, 32), (100, 32), (200, 8), (1000, 1)])
def test_approximate_path_takes_fewer_starts_on_long_pipelines(k, starts, monkeypatch):
    """32 starts at 200 stages took 37 s before a --time-limit could act."""
    import solver.path as path

    calls = []
    monkeypatch.setattr(path, "_or_opt", lambda c, p: calls.append(1) or p)
    monkeypatch.setattr(path, "_two_opt", lambda c, p: p)
    rng = np.random.default_rng(0)
    approximate_path(rng.random((k, k)))
    assert len(calls) == starts
