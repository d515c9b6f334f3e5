"""When not to trust or not to use a placement: the spec's failure table, checked.

The placement spec ends with a failure-mode table and maintenance rules for the
operator to apply by hand; each rule here applies one of them to what a solve, a launch
or a validation already computed and returns :class:`Advice` items (code, severity,
one-line message, the device or host it is about). ``solve``, ``launch``, ``validate``
and the console's Solve, Rank map and Launch screens all call the functions below;
the callers add how to act on an item (a flag, a key), the messages here name none.

Rules and their cost (the solve itself is the reference):

* :func:`barely_beats_random` -- ratio to the random-stage-groups median; O(N^2) for
  the link spread.
* :func:`poor_device` -- the device that sets DataP or the bottleneck of most pipeline
  edges, re-solved once without it with a small budget (POOR_DEVICE_BUDGET_SHARE of the
  default, never more than the solve's; under a time limit also at most
  POOR_DEVICE_TIME_SHARE of it): 1.0 s beside a 5.6 s search on the world-wide demo (2
  shared cores).
* :func:`seed_spread` -- only when the caller solved several seeds (it pays for them).
* :func:`stale_measurement`, :func:`measurement_mismatch` -- the fabric's timestamp and
  recorded versions, interface and MTU against a clock and against discovery.
* :func:`model_assumptions` -- mixed GPU models or memory, D_DP = 1, D_PP = 1, more
  stages than the exact pipeline order handles.
* :func:`sync_too_slow` -- the lower bound against a given compute time per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from solver.fabric import Fabric, parse_timestamp
from solver.path import HELD_KARP_MAX

#: Severities, least to most pressing.
INFO, WARNING = "info", "warning"

#: Codes about the measurement itself: what a strict launch refuses to start with.
MEASUREMENT_CODES = frozenset({"stale-measurement", "measurement-mismatch"})

BARELY_BEATS_RANDOM = 1.10
"""Random-stage-groups median / Comm below this: the solver "barely beats the random
median" (the spec's failure table). The spec's own figures are 1.90x (world-wide) and
3.09x (two datacenters); 1.1x is the example threshold of the issue that added this
rule, a gain small enough to be lost in the model's own error."""

UNIFORM_SPREAD = 0.10
"""Link costs whose range is within this share of their median count as "approximately
uniform", the spec's case for skipping the WAN solver. Chosen here: a 10% spread in
transfer time is within the run-to-run noise of a WAN measurement."""

POOR_DEVICE_GAIN = 0.15
"""Leaving the dominating device out must lower Comm by more than this share to be
reported. Chosen here (the spec gives no number): well above the seed-to-seed spread of
the search on the test fabrics, so a gain this size comes from the device, not noise."""

POOR_DEVICE_BUDGET_SHARE = 0.10
"""The re-solve without the device scores this share of the default budget (at least
POOR_DEVICE_MIN_BUDGET swaps): the check stays about a tenth of a default solve. A small
budget can only understate the gain, never invent one."""

POOR_DEVICE_MIN_BUDGET = 5_000

POOR_DEVICE_TIME_SHARE = 0.10
"""Under a solve's ``--time-limit``, the re-solve also stops after this share of it (at
least POOR_DEVICE_MIN_S), so the check stays within about a tenth of the limit where
the budget alone would not: at 100 stages every pipeline order is an approximate path
of 0.1-0.3 s, and the budgeted re-solve took 7 s after a 3 s solve."""

POOR_DEVICE_MIN_S = 0.5
"""The re-solve's shortest time under a time limit, never more than the limit itself."""

SEED_SPREAD = 0.05
"""(max - min) / min of Comm over the seeds solved above which results "vary across
seeds" (the spec's failure table). Chosen here: 5% is more than the model's rounding
and less than the gains the spec reports over random placements."""

STALE_AFTER_DAYS = 30.0
"""A fabric measured longer ago than this is reported as stale. The spec ties
re-measuring to changes (topology, provider, kernel, overlay, instance), not to an age;
a month is a horizon over which cloud instances and routes commonly change."""

SYNC_OVER_COMPUTE = 2.0
"""The lower bound on Comm (met by every rank map) above this multiple of the compute
time per step means per-step synchronisation cannot be hidden by overlap (the spec:
"slower than the useful compute window for every plausible map"). Even perfect overlap
would leave more than half of each step waiting on the network."""


@dataclass(frozen=True)
class Advice:
    """One rule's finding: ``code`` (stable, listed in the README), ``severity`` (info or
    warning), a one-line ``message`` and the ``subject`` (device, host) it is about."""

    code: str
    severity: str
    message: str
    subject: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "message": self.message, "subject": self.subject}

    def with_hint(self, hint: str | None) -> "Advice":
        """The same advice with the caller's way to act on it appended."""
        if not hint:
            return self
        return Advice(self.code, self.severity, f"{self.message} ({hint})", self.subject)


# -- barely beats random ---------------------------------------------------------------
def link_spread(model: Any) -> float:
    """Largest (max - min) / median of the off-diagonal ``T_pp`` and ``T_dp``: 0 on a
    perfectly uniform fabric. O(N^2)."""
    off = ~np.eye(model.n, dtype=bool)
    spreads = []
    for t in (model.t_pp, model.t_dp):
        values = t[off]
        median = float(np.median(values)) if values.size else 0.0
        if median > 0:
            spreads.append((float(values.max()) - float(values.min())) / median)
    return max(spreads, default=0.0)


def barely_beats_random(model: Any, comm: float, baselines: Sequence[Any], *,
                        optimal: bool = False) -> list[Advice]:
    """The random-stage-groups median within BARELY_BEATS_RANDOM of ``comm``. A placement
    proven ``optimal`` is not blamed on the search: on a uniform fabric only
    ``uniform-fabric`` is said, otherwise ``optimal-near-random`` names the payloads as
    the suspects (info, with no hint to search longer)."""
    groups = next((d for d in baselines if d.name == "random stage groups" and d.values.size), None)
    if groups is None or comm <= 0:
        return []
    ratio = groups.median / comm
    if ratio >= BARELY_BEATS_RANDOM:
        return []
    spread = link_spread(model)
    out = []
    if not optimal:
        out.append(Advice("barely-beats-random", WARNING,
                          f"the placement beats the random-stage-groups median ({groups.median:.2f} s) by only "
                          f"{ratio:.2f}x: the fabric may be nearly uniform (link costs span {100 * spread:.1f}% "
                          f"of their median), the payloads or message counts may be wrong, or the search "
                          f"budget too small; check bytes and message counts and compare seeds"))
    elif spread > UNIFORM_SPREAD:
        out.append(Advice("optimal-near-random", INFO,
                          f"the placement is optimal, yet beats the random-stage-groups median "
                          f"({groups.median:.2f} s) by only {ratio:.2f}x: most placements are nearly as good "
                          f"(link costs span {100 * spread:.1f}% of their median), or the payloads or message "
                          f"counts are wrong; check bytes and message counts"))
    if spread <= UNIFORM_SPREAD:
        out.append(Advice("uniform-fabric", INFO,
                          f"every link cost is within {100 * spread:.1f}% of the median: the fabric is "
                          f"approximately uniform, placement gains little; the framework's topology-aware "
                          f"defaults will do"))
    return out


# -- a poor device dominates -----------------------------------------------------------
def dominating_device(model: Any, score: Any) -> tuple[int, str] | None:
    """``(row, why)`` of the poorest device among those that set DataP (when DataP is
    not 0: with D_DP = 1 no device does) or sit in the bottleneck pair of more than half
    of the pipeline edges: the one with the largest mean transfer time (``T_pp + T_dp``)
    to every other device; None when there is none. O(N^2)."""
    counts: dict[int, int] = {}
    for pair in score.bottlenecks:
        for d in set(pair):
            counts[d] = counts.get(d, 0) + 1
    edges = len(score.bottlenecks)
    candidates = {d for d, c in counts.items() if c * 2 > edges}
    if score.data_p > 0:
        candidates.add(score.worst_device)
    if not candidates:
        return None
    cost = (model.t_pp + model.t_dp).sum(axis=1) / max(model.n - 1, 1)
    row = max(sorted(candidates), key=lambda d: cost[d])
    why = []
    if score.data_p > 0 and row == score.worst_device:
        why.append("sets DataP")
    if counts.get(row, 0) * 2 > edges:
        why.append(f"is in the bottleneck link of {counts[row]} of {edges} pipeline edges")
    return row, " and ".join(why)


def typical_in_place_of(fabric: Fabric, row: int) -> Fabric:
    """``fabric`` with ``row``'s links replaced by the median of every other link: the
    same device count, as if a typical device stood in for it."""
    from dataclasses import replace

    keep = np.ones(fabric.n, dtype=bool)
    keep[row] = False
    out = []
    for m in (fabric.alpha_ms, fabric.beta_gbps):
        sub = m[np.ix_(keep, keep)]
        median = float(np.nanmedian(sub[~np.eye(sub.shape[0], dtype=bool)]))
        m = m.copy()
        m[row, :] = m[:, row] = median
        m[row, row] = 0.0
        out.append(m)
    return replace(fabric, alpha_ms=out[0], beta_gbps=out[1])


def reduced_budget(n: int, solve_budget: int | None = None) -> int:
    """The re-solve's budget: POOR_DEVICE_BUDGET_SHARE of the default, at least the
    minimum, and never more than the solve's own budget."""
    from solver.search import default_budget

    share = max(POOR_DEVICE_MIN_BUDGET, int(default_budget(n) * POOR_DEVICE_BUDGET_SHARE))
    return share if solve_budget is None else max(1, min(share, int(solve_budget)))


def poor_device(model: Any, score: Any, fabric: Fabric, *, seed: int = 0, budget: int | None = None,
                without: Callable[[str], tuple[Any, Any, str] | None] | None = None,
                time_limit: float | None = None) -> list[Advice]:
    """Re-solve once without the dominating device; advise when Comm drops enough.

    ``without(name)`` gives ``(model, seed_orders, how)`` for the workload on the devices
    that remain with a spare in its place (the caller prepares it as for the solve), or
    None when there is no spare. Without a spare the re-solve uses a typical device in
    its place (:func:`typical_in_place_of`): the gain the device costs. ``budget``: the
    solve's own, an upper bound on the re-solve's (:func:`reduced_budget`);
    ``time_limit``: the solve's own, of which the re-solve takes POOR_DEVICE_TIME_SHARE.
    """
    from geoconsole.solving import cost_model
    from solver.orders import seed_orders_for
    from solver.search import solve

    found = dominating_device(model, score)
    if found is None or model.n < 3 or score.comm <= 0:
        return []
    row, why = found
    name = fabric.device_name(row)
    spare = without(name) if without is not None else None
    if spare is None:
        other = typical_in_place_of(fabric, row)
        spare = (cost_model(other, model.workload), seed_orders_for(other),
                 "with a typical device (the median link) in its place")
    other_model, orders, how = spare
    limit = None if time_limit is None else min(time_limit, max(POOR_DEVICE_MIN_S,
                                                                POOR_DEVICE_TIME_SHARE * time_limit))
    result = solve(other_model, seed=seed, budget=reduced_budget(other_model.n, budget), restarts=1,
                   seed_orders=orders, time_limit=limit)
    gain = (score.comm - result.fun) / score.comm
    if gain <= POOR_DEVICE_GAIN:
        return []
    return [Advice("poor-device", WARNING,
                   f"{name} {why}; {how} Comm would be {result.fun:.2f} s instead of {score.comm:.2f} s "
                   f"({100 * gain:.0f}% lower, re-solved once with a small budget): leave it out, or "
                   f"match it to its least-bad neighbours", subject=name)]


# -- results vary across seeds ---------------------------------------------------------
def seed_spread(comms: Mapping[int, float]) -> list[Advice]:
    """Comm per seed (the caller solved each) spread by more than SEED_SPREAD."""
    if len(comms) < 2:
        return []
    lo_seed = min(comms, key=comms.__getitem__)
    hi_seed = max(comms, key=comms.__getitem__)
    lo, hi = comms[lo_seed], comms[hi_seed]
    spread = (hi - lo) / lo if lo > 0 else 0.0
    if spread <= SEED_SPREAD:
        return []
    return [Advice("seeds-vary", WARNING,
                   f"results vary across {len(comms)} seeds: Comm {lo:.2f} s (seed {lo_seed}) to {hi:.2f} s "
                   f"(seed {hi_seed}), {100 * spread:.1f}% apart; record the distribution and choose only "
                   f"after measuring real step times")]


def rerun_seeds(model: Any, seeds: Sequence[int], *, budget: int | None, restarts: int,
                seed_orders: Sequence[Sequence[int]] | None = None,
                time_limit: float | None = None, workers: int | None = None,
                should_stop: Callable[[], bool] = lambda: False) -> dict[int, float]:
    """Comm of a search per seed, with the solve's own options (no baselines): the cost
    is one search per seed. Once ``should_stop()`` (Ctrl-C), the search under way ends
    and no other starts: the seeds searched to the end are returned."""
    from solver.search import CANCELLED, solve

    def check(_progress: Any) -> None:
        if should_stop():
            raise StopIteration

    out = {}
    for s in seeds:
        if should_stop():
            break
        result = solve(model, seed=s, budget=budget, restarts=restarts, time_limit=time_limit,
                       seed_orders=seed_orders, workers=workers, callback=check)
        if result.status == CANCELLED:
            break
        out[s] = float(result.fun)
    return out


def validated_seeds(placements: Sequence[Any]) -> dict[int, float]:
    """Comm per seed of the placements ``validate`` solved itself ("solution (seed N)",
    "alternate seed N"; see geoconsole.launch.validate.choose_placements)."""
    import re

    out = {}
    for p in placements:
        found = re.fullmatch(r"solution \(seed (\d+)\)|alternate seed (\d+)", p.name)
        if found:
            out[int(found.group(1) or found.group(2))] = float(p.model_s)
    return out


# -- stale or mismatched measurement ---------------------------------------------------
def stale_measurement(fabric: Fabric, now: datetime | None = None) -> list[Advice]:
    """``measured_at`` older than STALE_AFTER_DAYS (a fabric without one says nothing:
    the built-in demos and hand-written matrices carry none)."""
    if not fabric.measured_at:
        return []
    when = parse_timestamp(fabric.measured_at)
    now = now or datetime.now(timezone.utc)
    if when is None:
        return [Advice("stale-measurement", WARNING,
                       f"measured_at {fabric.measured_at!r} is not a timestamp: the fabric's age is unknown")]
    days = (now - when).total_seconds() / 86400.0
    if days <= STALE_AFTER_DAYS:
        return []
    return [Advice("stale-measurement", WARNING,
                   f"the fabric was measured {days:.0f} days ago ({fabric.measured_at}); links change with "
                   f"topology, provider, kernel, overlay or instance changes: re-measure it")]


#: (recorded meta key, discovery attribute, words) compared at launch.
_COMPARED = (("torch", "torch", "torch"), ("nccl", "nccl", "NCCL"),
             ("interface", "interface", "interface"), ("mtu", "mtu", "MTU"))


def recorded(fabric: Fabric, host: str, key: str) -> Any:
    """What the probe sweep recorded for ``host``: ``meta.hosts[host][key]``, else the
    fabric-wide ``meta[key]`` when it is one value for all hosts."""
    hosts = fabric.meta.get("hosts")
    entry = hosts.get(host) if isinstance(hosts, dict) else None
    if isinstance(entry, dict) and key in entry:
        return entry[key]
    value = fabric.meta.get(key)
    if isinstance(value, dict):
        return value.get(host)
    return value


def measurement_mismatch(fabric: Fabric, found: Mapping[str, Any]) -> list[Advice]:
    """Recorded torch / NCCL version, interface or MTU unlike what discovery reports now.

    ``found``: host name -> its discovery (anything with ``torch``, ``nccl``,
    ``interface`` and ``mtu`` attributes, as :class:`probes.discovery.HostInfo`). A value
    missing on either side is not compared.
    """
    out = []
    for host in sorted(found):
        info = found[host]
        diffs = []
        for key, attr, words in _COMPARED:
            then, now = recorded(fabric, host, key), getattr(info, attr, None)
            if then is not None and now is not None and str(then) != str(now):
                diffs.append(f"{words} {then} then, {now} now")
        if diffs:
            out.append(Advice("measurement-mismatch", WARNING,
                              f"{host}: {'; '.join(diffs)}: the fabric was measured on another path or "
                              f"stack than the one training will use; re-measure it", subject=host))
    return out


# -- outside the model's assumptions ---------------------------------------------------
def gpu_kinds(fabric: Fabric, found: Mapping[str, Any] | None = None) -> dict[str, set[str]]:
    """Host -> the GPU kinds ("model, memory") it reports: from discovery when given,
    else from what the probe sweep recorded (``meta.hosts[host].gpus``, optional
    ``gpu_memory_mib``)."""
    out: dict[str, set[str]] = {}
    if found:
        for host, info in found.items():
            kinds = {f"{g.name}" + (f", {g.memory_mib} MiB" if g.memory_mib else "") for g in getattr(info, "gpus", ())}
            if kinds:
                out[host] = kinds
        return out
    hosts = fabric.meta.get("hosts")
    for host, entry in (hosts.items() if isinstance(hosts, dict) else ()):  # meta is free-form:
        if not isinstance(entry, dict) or not isinstance(entry.get("gpus"), list) or not entry["gpus"]:
            continue  # what does not fit the sweep's shape is not read
        names = [str(g) for g in entry["gpus"]]
        memory = entry.get("gpu_memory_mib")
        memory = memory if isinstance(memory, list) else [None] * len(names)
        out[host] = {n + (f", {m} MiB" if m else "") for n, m in zip(names, memory)}
    return out


def mixed_gpus(fabric: Fabric, found: Mapping[str, Any] | None = None) -> list[Advice]:
    """Hosts that report different GPU models or memory sizes (see :func:`gpu_kinds`)."""
    kinds = gpu_kinds(fabric, found)
    every = sorted(set().union(*kinds.values())) if kinds else []
    if len(every) < 2:
        return []
    where = "; ".join(f"{k} on {', '.join(sorted(h for h, v in kinds.items() if k in v))}" for k in every)
    return [Advice("mixed-gpus", WARNING,
                   f"hosts report different GPU models or memory sizes ({where}): the model assumes "
                   f"homogeneous compute, so Comm ignores that a slower or smaller GPU holds back its "
                   f"stage; the ranking of placements may not hold")]


def model_assumptions(fabric: Fabric, workload: Any, *, found: Mapping[str, Any] | None = None) -> list[Advice]:
    """Where the DT-FM model's assumptions do not hold, and what that means for Comm."""
    out = mixed_gpus(fabric, found)
    if workload.d_pp == 1:
        out.append(Advice("single-stage", INFO,
                          "D_PP = 1: one stage group holds every device, so every rank map has the same "
                          "Comm; placement cannot change the communication cost"))
    if workload.d_dp == 1:
        out.append(Advice("single-replica", INFO,
                          "D_DP = 1: no data-parallel exchange (DataP = 0); the placement only orders one "
                          "pipeline, and Comm is the pipeline's bottleneck links alone"))
    if workload.d_pp > HELD_KARP_MAX:
        out.append(Advice("approximate-order", INFO,
                          f"D_PP = {workload.d_pp} > {HELD_KARP_MAX}: the order of stage groups comes from an "
                          f"approximate path, not the exact Held-Karp one; Comm and the lower-bound gap may "
                          f"be looser than on smaller pipelines"))
    return out


# -- synchronisation too slow to hide --------------------------------------------------
def sync_too_slow(bound: float, comm: float, step_compute_s: float | None) -> list[Advice]:
    """The lower bound (every rank map's Comm is at least this) above SYNC_OVER_COMPUTE
    times the compute per step."""
    if step_compute_s is None or not step_compute_s > 0 or not math.isfinite(bound):
        return []
    ratio = bound / step_compute_s
    if ratio <= SYNC_OVER_COMPUTE:
        return []
    return [Advice("sync-too-slow", WARNING,
                   f"every rank map needs at least {bound:.2f} s of communication per step (this one "
                   f"{comm:.2f} s), {ratio:.1f}x the {step_compute_s:g} s of compute: per-step "
                   f"synchronisation cannot be hidden; reduce synchronisation frequency, consider "
                   f"DiLoCo-style training")]


# -- what each caller runs -------------------------------------------------------------
def for_solve(fabric: Fabric, model: Any, result: Any, baselines: Sequence[Any], bound: Any, *,
              now: datetime | None = None, seed_comms: Mapping[int, float] | None = None,
              step_compute_s: float | None = None, check_device: bool = True,
              without: Callable[[str], tuple[Any, Any, str] | None] | None = None,
              time_limit: float | None = None) -> list[Advice]:
    """Every rule that applies to a finished solve on ``fabric`` (the solved devices);
    ``time_limit``: the solve's, which bounds the poor-device re-solve."""
    from solver.search import CANCELLED, OPTIMAL

    comm = float(result.fun)
    optimal = result.status == OPTIMAL or (bound is not None and float(bound.value) >= comm * (1 - 1e-9))
    out = barely_beats_random(model, comm, baselines, optimal=optimal)
    if check_device and result.status != CANCELLED:  # a stopped solve is not re-solved
        out += poor_device(model, result.score, fabric, seed=int(result.seed or 0),
                           budget=getattr(result, "budget", None), without=without, time_limit=time_limit)
    out += seed_spread(seed_comms or {})
    out += stale_measurement(fabric, now)
    out += model_assumptions(fabric, model.workload)
    out += sync_too_slow(float(bound.value), float(result.fun), step_compute_s)
    return out


def for_launch(fabric: Fabric, workload: Any = None, *, now: datetime | None = None,
               found: Mapping[str, Any] | None = None) -> list[Advice]:
    """The rules that apply before a launch: age, and (with ``found``, discovery of the
    hosts) recorded versions, interface, MTU and GPU kinds against the fleet now."""
    out = stale_measurement(fabric, now)
    if found:
        out += measurement_mismatch(fabric, found)
    if workload is not None:
        return out + model_assumptions(fabric, workload, found=found)
    return out + mixed_gpus(fabric, found)


def lines(items: Sequence[Advice]) -> list[str]:
    """Text lines for a report: ``advice: <severity> <code>: <message>``."""
    return [f"advice     {a.severity} {a.code}: {a.message}" for a in items]


def spare_without(fabric: Fabric, workload: Any, **prepare: Any) -> Callable[[str], tuple[Any, Any, str] | None]:
    """For :func:`poor_device`: the solve's own preparation (``prepare_for_solve`` with
    ``prepare``'s keywords) on the whole ``fabric`` with one more device left out; None
    when no spare device is left to take its place."""
    from geoconsole.errors import GeoconsoleError
    from geoconsole.prepare import excluded_rows, prepare_for_solve
    from geoconsole.solving import cost_model

    def without(name: str) -> tuple[Any, Any, str] | None:
        exclude = [*prepare.get("exclude", ()), name]
        if fabric.n - len(excluded_rows(fabric, exclude)) < workload.n_devices:
            return None
        try:
            ready = prepare_for_solve(fabric, workload.n_devices, **{**prepare, "exclude": exclude})
        except GeoconsoleError:  # a locality policy the remaining devices cannot meet
            return None
        return cost_model(ready.fabric, workload), ready.seed_orders, "left out (a spare device takes part),"

    return without
