"""Bottleneck perfect matching against brute force and the min-sum trap."""

import itertools

import numpy as np
import pytest

from solver.matching import bottleneck_matching, is_perfect_matching


def brute_force(cost):
    n = cost.shape[0]
    return min(max(cost[i, p[i]] for i in range(n)) for p in itertools.permutations(range(n)))


@pytest.mark.parametrize("seed", range(5))
def test_equals_brute_force_on_random_matrices(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        n = int(rng.integers(1, 7))
        cost = rng.random((n, n))
        if rng.random() < 0.4:  # many ties
            cost = np.round(cost * 3)
        value, matching = bottleneck_matching(cost)
        assert is_perfect_matching(matching, n)
        assert value == pytest.approx(brute_force(cost), abs=1e-12)
        assert max(cost[i, matching[i]] for i in range(n)) == pytest.approx(value, abs=1e-12)


def test_min_max_differs_from_min_sum():
    probe = np.array([[0.0, 6.0], [6.0, 10.0]])
    value, matching = bottleneck_matching(probe)
    assert value == 6.0 and matching == [1, 0]


def test_large_matrix_is_a_permutation_with_the_reported_value():
    rng = np.random.default_rng(3)
    cost = rng.random((128, 128))
    value, matching = bottleneck_matching(cost)
    assert is_perfect_matching(matching, 128)
    assert cost[np.arange(128), matching].max() == value


def test_rejects_non_square_and_non_finite():
    with pytest.raises(ValueError, match="square"):
        bottleneck_matching(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="finite"):
        bottleneck_matching(np.array([[0.0, np.nan], [1.0, 0.0]]))


def test_empty_matrix():
    assert bottleneck_matching(np.zeros((0, 0))) == (0.0, [])


@pytest.mark.parametrize("n", [6, 9, 16, 24, 30])
def test_kuhn_and_hopcroft_karp_paths_agree(n, monkeypatch):
    import solver.matching as matching

    rng = np.random.default_rng(n)
    for _ in range(5):
        cost = np.round(rng.random((n, n)) * 20)
        expected, _ = bottleneck_matching(cost)
        monkeypatch.setattr(matching, "KUHN_MAX", 0)
        monkeypatch.setattr(matching, "PERMUTATION_MAX", 0)
        other, match = bottleneck_matching(cost)
        monkeypatch.undo()
        assert other == expected
        assert cost[np.arange(n), match].max() == expected


def test_compiled_and_python_searches_agree_on_the_value(monkeypatch):
    """The compiled matching (solver/matching.c) and the Python threshold search give the
    same bottleneck value, each with a perfect matching that reaches it, on sizes both
    sides of the Python search's switches (permutations, Kuhn, Hopcroft-Karp)."""
    from solver import native

    if native.matcher() is None:
        pytest.fail(f"the compiled kernels should build here: {native.why_not()}")
    rng = np.random.default_rng(11)
    for n in [1, 2, 3, 5, 6, 8, 13, 24, 25, 40]:
        for trial in range(12):
            cost = rng.random((n, n))
            if trial % 3 == 1:  # many ties
                cost = np.round(cost * 3)
            compiled = bottleneck_matching(cost)
            assert bottleneck_matching(cost.T)[0] == bottleneck_matching(cost.T.copy())[0]  # a view
            with monkeypatch.context() as m:
                m.setattr(native, "matcher", lambda: None)
                python = bottleneck_matching(cost)
            assert compiled[0] == python[0]
            for value, matching in (compiled, python):
                assert is_perfect_matching(matching, n)
                assert max(cost[i, matching[i]] for i in range(n)) == value
