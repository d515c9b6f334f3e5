"""The benchmark suite's generator: seeded, and its draws are other fabrics of one shape."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from hierarchical import DRAW_STRIDE, SUITE, hierarchical_fabric, suite_instance  # noqa: E402


def test_draw_zero_is_the_suite_and_other_draws_are_other_fabrics_of_the_same_shape():
    d_pp, d_dp, seed = SUITE["h36-6x6"]
    fabric, model = suite_instance("h36-6x6")
    again, _ = suite_instance("h36-6x6", 0)
    other, other_model = suite_instance("h36-6x6", 1)
    assert np.array_equal(fabric.alpha_ms, hierarchical_fabric(d_pp * d_dp, seed).alpha_ms)
    assert np.array_equal(fabric.alpha_ms, again.alpha_ms)
    assert np.array_equal(other.alpha_ms, hierarchical_fabric(d_pp * d_dp, seed + DRAW_STRIDE).alpha_ms)
    assert not np.array_equal(fabric.alpha_ms, other.alpha_ms)
    assert (other_model.workload.d_pp, other_model.workload.d_dp) == (d_pp, d_dp)
    assert {d.region for d in other.devices} and all(d.zone.startswith(d.region) for d in other.devices)
