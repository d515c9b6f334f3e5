"""Least-squares fit of ``seconds = alpha + gigabits / beta`` and its quality.

Given samples ``(x_k, y_k)`` (payload in decimal gigabits, elapsed seconds), ordinary
least squares gives the slope ``s = cov(x, y) / var(x)`` and intercept
``a = mean(y) - s * mean(x)``; bandwidth is ``beta = 1 / s`` Gbps and
``R^2 = 1 - SS_res / SS_tot``. O(k).

Repetitions of one size are first reduced to their fastest (minimum) time: a busy
CPU, a descheduled receiver or a competing flow only ever add time to a transfer,
so the fastest repetition is the closest to what the link itself allows (the same
reasoning as ``timeit``'s advice to take the minimum). R^2 is then computed over the
per-size minima, one point per size.

A fit is *poor* when R^2 < ``min_r2`` (0.98) or the slope is not positive; the sweep
retries such a pair once and then keeps the numbers with a flag, never hiding them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

MIN_R2 = 0.98


@dataclass(frozen=True)
class Fit:
    """Result of :func:`fit_alpha_beta`. ``beta_gbps`` is ``nan`` for a non-positive slope."""

    intercept_s: float
    slope_s_per_gbit: float
    beta_gbps: float
    r2: float
    points: int
    #: ``None`` for a good fit, else a short reason ("poor-fit R^2=0.91", "negative-slope").
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.problem is None


def fastest(samples: Iterable[Sequence[float]]) -> list[tuple[float, float]]:
    """``[(nbytes, seconds), ...]`` -> sorted ``[(gigabits, fastest seconds)]`` per size."""
    by_size: dict[float, list[float]] = {}
    for nbytes, seconds in samples:
        by_size.setdefault(float(nbytes), []).append(float(seconds))
    return [(b * 8 / 1e9, min(v)) for b, v in sorted(by_size.items())]


def fit_alpha_beta(samples: Iterable[Sequence[float]], *, min_r2: float = MIN_R2) -> Fit:
    """Fit ``seconds = alpha + gigabits / beta`` to ``(nbytes, seconds)`` samples."""
    points = fastest(samples)
    if len(points) < 2:
        raise ValueError(f"need samples of at least 2 payload sizes, got {len(points)}")
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    if sxx <= 0:
        raise ValueError("all samples have the same payload size")
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
    beta = 1.0 / slope if slope > 0 else float("nan")
    problem = None
    if slope <= 0:
        problem = "negative-slope"
    elif r2 < min_r2:
        problem = f"poor-fit R^2={r2:.3f}"
    return Fit(intercept, slope, beta, r2, len(points), problem)
