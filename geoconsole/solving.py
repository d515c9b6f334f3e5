"""Solving a prepared fabric: the search, the lower bound and the random baselines.

The one path for ``solve``, ``demo`` and the console's Solve screen. A stop request
(Ctrl-C in the CLI, Cancel in the console) ends the search with the best placement so
far and skips the baselines still to draw; the finished search is always returned, so a
stop that arrives after the search never loses its result. The time limit covers the
bound, the search and the baselines: the search ends BASELINE_SHARE of the limit early,
and the baselines, drawn in chunks, stop once it has passed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from geoconsole.errors import InputError
from solver.fabric import Fabric
from solver.workload import Workload

#: Most random placements per baseline: a billion samples would run for days.
MAX_BASELINE_SAMPLES = 100_000
#: Limits of the solve options, the CLI's flags and the console's form alike.
MIN_TIME_LIMIT_S = 0.001
MAX_TIME_LIMIT_S = 1e7
MAX_RESTARTS = 10_000
#: Largest seed: written to outputs and records, which readers take with at most 20 digits.
MAX_SEED = 2**64 - 1
#: Largest budget the console's form and a saved session take (the search's "unlimited").
MAX_BUDGET = 1 << 62
#: Each solve option's range, as ``(least, most, in words)``: the console's form and a
#: saved session check against it (option_range_problem); the CLI's flags take the same
#: bounds.
OPTION_RANGES: dict[str, tuple[float, float, str]] = {
    "seed": (0, MAX_SEED, "0 to 2^64 - 1"),
    "budget": (0, MAX_BUDGET, "0 to 2^62"),
    "restarts": (0, MAX_RESTARTS, f"0 to {MAX_RESTARTS}"),
    "time_limit": (MIN_TIME_LIMIT_S, MAX_TIME_LIMIT_S, f"{MIN_TIME_LIMIT_S:g} to {MAX_TIME_LIMIT_S:g}"),
}


def option_range_problem(key: str, value: float) -> str | None:
    """``must be A to B`` when ``value`` is outside solve option ``key``'s range
    (OPTION_RANGES), else None."""
    least, most, words = OPTION_RANGES[key]
    return None if least <= value <= most else f"must be {words}"


#: Under a time limit, the share kept for the random baselines (each of the two gets
#: half of what is left when it starts), and the least share the search gets whatever
#: the bound took.
BASELINE_SHARE = 0.05
MIN_SEARCH_SHARE = 0.5


@dataclass(frozen=True)
class SolveOptions:
    """How long and how hard to search (solver.search.solve's keywords)."""

    seed: int = 0
    budget: int | None = None
    #: Without a time limit: anytime rounds in a row without improvement before stopping.
    restarts: int = 3
    time_limit: float | None = None
    baseline_samples: int = 200
    #: Search processes (None: the cores this process may use).
    workers: int | None = None


@dataclass(eq=False)
class SolveOutcome:
    """What a solve produced: the search result, the bound and the baselines drawn."""

    model: Any
    result: Any
    bound: Any
    baselines: list[Any] = field(default_factory=list)
    #: Baselines left out or cut short by a stop request or the time limit.
    baselines_cut: bool = False
    #: A stop was requested at some point (the result is still whole and scored).
    stopped: bool = False


def cost_model(fabric: Fabric, workload: Workload):
    """The cost model of ``workload`` on ``fabric``; InputError when they do not fit."""
    from geoconsole.prepare import unmeasured_message
    from solver.cost import CostModel

    message = unmeasured_message(fabric)  # solve's words (it checks before, in prepare_for_solve)
    if message is not None:
        raise InputError(f"{message} (labels fill)")
    try:
        return CostModel.from_fabric(fabric, workload)
    except ValueError as exc:
        text = str(exc)
        raise InputError(text if text.startswith(f"{fabric.source}: ") else f"{fabric.source}: {text}") from None


def check_baseline_samples(samples: int) -> int:
    if not 0 <= samples <= MAX_BASELINE_SAMPLES:
        raise InputError(f"baseline samples: expected 0-{MAX_BASELINE_SAMPLES}, got {samples}")
    return samples


def run_placement(
    model: Any,
    options: SolveOptions,
    *,
    seed_orders: list[list[int]] | None = None,
    callback: Callable[[Any], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    bound: Any = None,
    started: float | None = None,
) -> SolveOutcome:
    """Bound, search and baselines for ``model`` (see the module text for stopping).

    The lower bound comes first (``bound``, or computed within a share of the time
    limit): the search stops early when it reaches it.
    """
    from solver.bounds import bound_budget_s, lower_bound
    from solver.search import solve

    check_baseline_samples(options.baseline_samples)
    started = time.monotonic() if started is None else started
    deadline = None if options.time_limit is None else started + options.time_limit
    if bound is None:
        bound = lower_bound(model, bound_budget_s(options.time_limit), stop=should_stop)
    search_limit = None
    if deadline is not None:  # the limit covers the bound, the search and the baselines
        reserve = BASELINE_SHARE * options.time_limit if options.baseline_samples else 0.0
        search_limit = max(MIN_SEARCH_SHARE * options.time_limit, deadline - time.monotonic() - reserve)

    def checked(progress: Any) -> None:
        if callback is not None:
            callback(progress)
        if should_stop():
            raise StopIteration

    try:
        result = solve(model, seed=options.seed, budget=options.budget, restarts=options.restarts,
                       time_limit=search_limit, callback=checked, seed_orders=seed_orders,
                       workers=options.workers, lower_bound=bound.value)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    baselines, cut = draw_baselines(model, options.baseline_samples, options.seed,
                                    deadline=deadline, should_stop=should_stop)
    return SolveOutcome(model, result, bound, baselines, cut, stopped=should_stop())


def draw_baselines(model: Any, samples: int, seed: int, *, deadline: float | None = None,
                   should_stop: Callable[[], bool] = lambda: False) -> tuple[list[Any], bool]:
    """Both random baselines, ``samples`` each unless stopped or past ``deadline``.

    Returns ``(distributions, cut)``; a baseline with no sample drawn is left out.
    """
    from solver.baselines import random_rank_maps, random_stage_groups

    def keep_going() -> bool:
        return not should_stop() and (deadline is None or time.monotonic() < deadline)

    out, cut = [], False
    samplers = (random_stage_groups, random_rank_maps)
    for i, sampler in enumerate(samplers):
        if samples == 0:
            break
        if not keep_going():
            cut = True
            break
        # under a deadline each baseline gets an equal share of what is left
        own = None if deadline is None else time.monotonic() + (deadline - time.monotonic()) / (len(samplers) - i)
        dist = sampler(model, samples, seed,
                       keep_going if own is None else (lambda own=own: keep_going() and time.monotonic() < own))
        cut = cut or dist.values.size < samples
        if dist.values.size:
            out.append(dist)
    return out, cut
