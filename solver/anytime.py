"""Anytime improvement: the walks a worker runs in one round (solver.workers).

Two kinds. ``temper`` (the default, see "Why tempering" below) continues the worker's
parallel-tempering ladder (solver.tempering) for the round, then descends its best; it
is a pure function of the elite, the ladder kept from the worker's earlier rounds and
its budget. ``walk``, an iterated local search with annealed acceptance and group
mixing, starts from the best placement known (the elite) and repeats::

    candidate = descend(perturb(current))            (solver.descent)
    current   = candidate  if Comm(candidate) < Comm(current)
                           or  u < exp(-(Comm(candidate) - Comm(current)) / (tau * Comm(current)))
    best      = min(best, candidate)

Perturbations alternate between two kinds:

- *swaps*: 2 .. 2 + sqrt(N) random swaps, half of them touching a device of the
  critical structure (the worst stage group, the bottleneck links);
- *group mix* (a large-neighbourhood move): the devices of 2-3 stage groups, the worst
  one among them, are pooled and dealt back at random, and the descent repairs them.
  Swap search moves one device at a time; a mix moves whole blocks, which is what it
  takes to leave the basins seen on hierarchical fabrics, where a good layout differs
  from a local optimum by exchanging several hosts between stage groups at once.

A *hot-started* ILS walk (kind "anneal") first runs a heat-bath annealing from the
elite (solver.anneal) over most of its budget, then the ILS from where that ended.

Acceptance: tau (relative temperature) falls geometrically from ``TAU_START`` to
``TAU_END`` over a walk, so early in a walk it crosses ridges of a few percent and late
it only descends (simulated annealing on the ILS level; Lourenco, Martin and Stuetzle,
"Iterated Local Search", 2003). A walk is a pure function of its start, its random
stream and its budget of scored swaps, which is what makes the parallel search
(solver.workers) reproducible.

Why tempering is the default walk (WALK_MIX in solver.workers), measured with
``benchmarks/anytime.py`` on the SYNTHETIC hierarchical suite, 2 cores:

- the ILS and heat-bath walks below (each descent re-solves matchings and the pipeline
  order exactly: milliseconds, 0.1 s with Held-Karp at 16 stages) reached, at
  ``--time-limit 10``, 22.96 on the 48-GPU 4 x 12 instance, 51.5 on 16 x 4, 51.7-61.0 on
  the 80-GPU 10 x 8 and 56.8 on 12 x 8, with 5-seed spreads up to 12%;
- parallel tempering (``temper``) with the compiled kernel, from the same starts and in
  the same 10 s: 19.9-21.1, 40.7-42.9, 45.3-47.0 and 44.4-49.7: the good layouts lie
  several block exchanges away from every start, and millions of cheap Metropolis swaps
  at a ladder of temperatures cross those ridges where a few hundred exact descents do
  not. The descent that ends each tempering walk keeps what the exact inner solvers add.

``walk`` (the ILS, optionally hot-started by solver.anneal) stays available as a walk
kind.

Cost: one iteration is a perturbation (O(N)) plus a descent (a few local-search sweeps,
each O(N^2 D_DP) array work, and partition passes of at most 4 N exact matchings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from solver.anneal import anneal
from solver.descent import Effort, descend

TAU_START = 0.02
TAU_END = 0.001
#: Swaps scored per walk when no budget is given, in units of N^2 (one full sweep).
WALK_SWEEPS = 20
#: Scored swaps of one tempering walk when no time limit is given: TEMPER_SWEEPS sweeps
#: of N^2, at most TEMPER_MAX (about 4 s for the compiled kernel, a minute in numpy).
TEMPER_SWEEPS = 500
TEMPER_MAX = 20_000_000
#: The same with a time limit: longer walks, so hot-started ones can anneal far.
WALK_SWEEPS_TIMED = 200
#: Share of a hot-started walk's budget spent annealing before the ILS takes over.
ANNEAL_SHARE = 0.8
#: Fewest ladder steps in one tempering walk (small instances have small budgets).
MIN_TEMPER_STEPS = 2000
#: Local-search sweeps (N^2 scored swaps each) of the descent that ends a tempering walk.
DESCENT_SWEEPS = 2
#: ... and at most this many scored swaps (a sweep is 16.7 million at 4096 devices).
DESCENT_MAX = 2_000_000
#: Most devices for a full closing descent; above, the walk's best is only polished.
DESCENT_FULL_N = 512


@dataclass(eq=False)
class Walk:
    """What one walk returns: its best grid, Comm, work, and when it improved."""

    grid: np.ndarray
    fun: float
    strategy: str
    nfev: int
    nit: int
    iterations: int
    trace: list[tuple[float, float]] = field(default_factory=list)  #: (clock, Comm)


def temper_walk(n: int) -> int:
    """Scored swaps of one tempering walk under the default stop rule: TEMPER_SWEEPS
    sweeps, at most TEMPER_MAX, scaled down by (512 / N)^2 above 512 devices (there the
    matrices outgrow the caches and a proposal costs about 2.4 us at 1024 devices, 10x
    more than at 200, while the starts take most of the default's time)."""
    return int(min(TEMPER_SWEEPS * n * n, TEMPER_MAX * min(1.0, 512 / max(n, 1)) ** 2))


def _critical(model, grid: np.ndarray) -> np.ndarray:
    score = model.score_grid(grid)
    worst = grid[:, int(np.argmax(score.stage_data_p))]
    ends = np.array([d for pair in score.bottlenecks for d in pair], dtype=int)
    return np.unique(np.concatenate([worst, ends]))


def perturb_swaps(model, grid: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """2 .. 2 + sqrt(N) random swaps, every other one moving a critical device."""
    out = grid.copy()
    flat = out.ravel()
    critical = _critical(model, grid)
    pos = np.empty(model.n, dtype=int)
    for k in range(int(rng.integers(2, 3 + int(np.sqrt(model.n))))):
        pos[flat] = np.arange(flat.size)
        i = pos[int(rng.choice(critical))] if k % 2 == 0 else int(rng.integers(flat.size))
        j = int(rng.integers(flat.size))
        flat[i], flat[j] = flat[j], flat[i]
    return out


def perturb_mix(model, grid: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Pool the devices of the worst stage group and 1-2 others, deal them back at random."""
    p = grid.shape[1]
    if p < 2:
        return perturb_swaps(model, grid, rng)
    worst = int(np.argmax(model.score_grid(grid).stage_data_p))
    chosen = [worst] if rng.random() < 0.5 else []  # half the time, leave the worst alone
    rest = [s for s in range(p) if s not in chosen]
    need = min(len(rest), int(rng.integers(2, 4)) - len(chosen))
    cols = chosen + [int(c) for c in rng.choice(rest, size=need, replace=False)]
    out = grid.copy()
    pool = out[:, cols].ravel()
    out[:, cols] = rng.permutation(pool).reshape(grid.shape[0], len(cols))
    return out


def walk(model, grid: np.ndarray, fun: float, rng: np.random.Generator, effort: Effort,
         *, clock: Callable[[], float], on_best: Callable[[float], None] = lambda f: None,
         strategy_prefix: str = "", hot_start: bool = False) -> Walk:
    """Improve ``grid`` (Comm ``fun``) until ``effort`` says stop; see the module text.

    ``hot_start``: spend the first ANNEAL_SHARE of the budget on a heat-bath annealing
    run from ``grid`` (solver.anneal) and continue the ILS from where it ended."""
    best_grid, best = grid.copy(), fun
    current, cur = grid.copy(), fun
    start_budget = max(1, effort.budget - effort.nfev)
    start_nfev, start_nit = effort.nfev, effort.nit
    strategy, trace, k = "", [], 0
    if hot_start and not effort.should_stop():
        current, cur = anneal(model, grid, rng, effort, evals=int(ANNEAL_SHARE * start_budget))
        if cur < best - 1e-12 * max(1.0, best):
            best_grid, best = current.copy(), cur
            strategy = f"{strategy_prefix}heat-bath annealing"
            trace.append((clock(), best))
            on_best(best)
    while not effort.should_stop():
        kind = "group mix" if k % 2 == 0 else "swaps"
        k += 1
        cand = (perturb_mix if kind == "group mix" else perturb_swaps)(model, current, rng)
        state = descend(model, cand, rng, effort)
        score = state.score
        done = min(1.0, (effort.nfev - start_nfev) / start_budget)
        tau = TAU_START * (TAU_END / TAU_START) ** done
        if score < cur or rng.random() < np.exp(-(score - cur) / (tau * max(cur, 1e-12))):
            current, cur = state.grid.copy(), score
        if score < best - 1e-12 * max(1.0, best):
            best_grid, best = state.grid.copy(), score
            strategy = f"{strategy_prefix}annealed ILS, {kind} perturbation"
            trace.append((clock(), best))
            on_best(best)
    return Walk(best_grid, best, strategy, effort.nfev - start_nfev, effort.nit - start_nit, k, trace)


def temper(model, grid: np.ndarray, fun: float, rng: np.random.Generator, effort: Effort,
           memory: dict, *, seed, clock: Callable[[], float], cancel: Callable[[], bool],
           on_best: Callable[[float], None] = lambda f: None, strategy_prefix: str = "") -> Walk:
    """One walk of parallel tempering (solver.tempering) that goes on where the last ended.

    ``memory`` keeps the worker's ladder between walks (its chains and random stream,
    seeded by ``seed``); an elite ``grid`` better than the ladder's best enters its
    coldest chain. The ladder runs for the walk's budget (``CHAINS`` scored swaps a
    step); its best is then descended (exact matchings, order, partition swaps) and the
    descended grid goes back into the coldest chain."""
    from solver.tempering import Ladder

    ladder = memory.get("ladder")
    if ladder is None:
        ladder = memory["ladder"] = Ladder(model, grid, np.random.default_rng(seed))
    elif fun < ladder.best - 1e-12 * max(1.0, fun):
        ladder.inject(grid, fun)
    best_grid, best = grid.copy(), fun
    start_nfev, start_nit = effort.nfev, effort.nit
    strategy, trace = "", []

    def improved(value: float, how: str, g: np.ndarray) -> None:
        nonlocal best, best_grid, strategy
        if value < best - 1e-12 * max(1.0, best):
            best, best_grid = value, g.copy()
            strategy = f"{strategy_prefix}{how}"
            trace.append((clock(), best))
            on_best(best)

    steps = max(MIN_TEMPER_STEPS, (effort.budget - effort.nfev) // ladder.k)
    done = ladder.run(steps, stop=effort.should_stop,
                      on_best=lambda f: on_best(f) if f < best - 1e-12 * max(1.0, best) else None)
    effort.nfev += done * ladder.k
    improved(ladder.best, "parallel tempering", ladder.best_grid)
    if cancel():  # cancelled, or the time limit is reached: hand back what the ladder has
        return Walk(best_grid, best, strategy, effort.nfev - start_nfev, effort.nit - start_nit,
                    done, trace)
    # its own budget: it runs even when the walk's clock ended the ladder; above
    # DESCENT_FULL_N devices only the polish (a partition pass alone is 4 N matchings)
    sweeps = DESCENT_SWEEPS * model.n * model.n if model.n <= DESCENT_FULL_N else 0
    descent = Effort(min(sweeps, DESCENT_MAX), cancel)
    state = descend(model, ladder.best_grid, rng, descent)
    effort.nfev += descent.nfev
    effort.nit += descent.nit
    if state.score < ladder.best - 1e-12 * max(1.0, ladder.best):
        ladder.inject(state.grid, state.score)
        improved(state.score, "parallel tempering, then descent", state.grid)
    return Walk(best_grid, best, strategy, effort.nfev - start_nfev, effort.nit - start_nit,
                done, trace)
