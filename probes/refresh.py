"""Keeping a fabric fresh: re-measure a sample of its links and report their drift.

A refresh re-measures, with the sweep's own pair jobs (``Sweep(only=...)``):

* the **bottleneck links** of the current solution, when there is one: per pipeline
  edge the slowest device pair the score names, and the slowest data-parallel link of
  the device whose peer sum sets DataP (:func:`bottlenecks_from_score`, or
  :func:`bottlenecks_from_solve_json` for a ``solve --json`` document); else the
  ``slowest`` links of the fabric by symmetric beta;
* plus a seeded random ``share`` of the other links, so drift elsewhere is seen too.

The slowest and the random links are links between hosts (the network, which is what
drifts); inside a host only a bottleneck link is re-measured: a loopback or NVLink
transfer re-measured on a busy host says more about the host's load than about drift.

A link *drifts* when its re-measured bandwidth differs from the fabric's by more than
``threshold`` (relative, either direction; beta because it is what the fit pins down
well, alpha on a LAN being a few microseconds of noise). Pure apart from the sweep
that :func:`run_refresh` drives. O(n^2) to choose.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from solver.fabric import Fabric

DEFAULT_THRESHOLD = 0.2
DEFAULT_SHARE = 0.1
DEFAULT_SLOWEST = 5


class RefreshError(ValueError):
    """A solution or fabric that a refresh cannot use; one line."""


@dataclass(frozen=True)
class Link:
    """An unordered device pair to re-measure and why (``bottleneck``, ``slowest``, ``random``)."""

    i: int
    j: int
    src: str
    dst: str
    why: str


@dataclass(frozen=True)
class Drift:
    """One re-measured link: both directions' old and new beta, and the larger change."""

    link: Link
    old_gbps: tuple[float, float]
    new_gbps: tuple[float, float]
    #: Largest relative change of beta over the two directions (NaN: not re-measured).
    change: float
    drifted: bool

    def words(self) -> str:
        (o1, o2), (n1, n2) = self.old_gbps, self.new_gbps
        if not math.isfinite(self.change):
            return f"{self.link.src} - {self.link.dst} ({self.link.why}): not re-measured"
        return (f"{self.link.src} - {self.link.dst} ({self.link.why}): beta {o1:.3g}/{o2:.3g} -> "
                f"{n1:.3g}/{n2:.3g} Gbps ({self.change:+.1%})")


def bottlenecks_from_score(score: Any, t_dp: np.ndarray) -> list[tuple[int, int]]:
    """A solution's bottleneck links: per pipeline edge the slowest pair, and the
    worst device's slowest data-parallel link (``t_dp``: the model's DP transfer times)."""
    out = [tuple(sorted((int(a), int(b)))) for a, b in score.bottlenecks]
    grid = np.asarray(score.grid)
    w = int(score.worst_device)
    where = np.argwhere(grid == w)
    if where.size:
        peers = [int(p) for p in grid[:, int(where[0][1])] if int(p) != w]
        if peers:
            slowest = max(peers, key=lambda p: float(t_dp[w, p]))
            out.append(tuple(sorted((w, slowest))))
    return list(dict.fromkeys(out))


def bottlenecks_from_solve_json(fabric: Fabric, doc: Any, source: str) -> list[tuple[int, int]]:
    """Bottleneck links named by a ``solve --json`` document, as fabric rows."""
    index = {fabric.device_name(i): i for i in range(fabric.n)}
    try:
        score = doc["score"]
        pairs = [tuple(e["bottleneck"]) for e in score["pipeline_edges"]]
        worst = score["worst_device"]["name"]
        group = next(g["names"] for g in score["stage_groups"] if worst in g["names"])
    except (KeyError, TypeError, StopIteration):
        raise RefreshError(f"{source}: expected a solve --json document (score.pipeline_edges, "
                           "score.worst_device, score.stage_groups)") from None
    out: list[tuple[int, int]] = []
    for a, b in pairs:
        if a not in index or b not in index:
            raise RefreshError(f"{source}: bottleneck {a} - {b}: not a device of {fabric.source}")
        out.append(tuple(sorted((index[a], index[b]))))
    if worst in index:
        _, beta = fabric.symmetric()
        peers = [index[p] for p in group if p in index and p != worst]
        if peers:
            w = index[worst]
            out.append(tuple(sorted((w, min(peers, key=lambda p: float(beta[w, p]))))))
    return list(dict.fromkeys(out))


def choose_links(fabric: Fabric, bottlenecks: Iterable[tuple[int, int]] | None = None, *,
                 share: float = DEFAULT_SHARE, slowest: int = DEFAULT_SLOWEST, seed: int = 0) -> list[Link]:
    """Bottleneck links (else the ``slowest``), then a random ``share`` of the rest."""
    if not 0.0 <= share <= 1.0:
        raise RefreshError(f"share: expected 0..1, got {share!r}")
    name = fabric.device_name
    _, beta = fabric.symmetric()
    iu, ju = np.triu_indices(fabric.n, 1)
    known = np.isfinite(beta[iu, ju])
    if fabric.devices is not None:
        hosts = np.array([d.host for d in fabric.devices], dtype=object)
        known &= hosts[iu] != hosts[ju]
    chosen: dict[tuple[int, int], str] = {}
    for i, j in bottlenecks or ():
        chosen.setdefault((min(i, j), max(i, j)), "bottleneck")
    if not chosen:
        order = np.argsort(np.where(known, beta[iu, ju], np.inf), kind="stable")
        for k in order[:slowest]:
            if known[k]:
                chosen[(int(iu[k]), int(ju[k]))] = "slowest"
    rest = [(int(i), int(j)) for i, j, ok in zip(iu, ju, known) if ok and (int(i), int(j)) not in chosen]
    take = int(math.ceil(share * len(rest))) if rest and share > 0 else 0
    rng = np.random.default_rng(seed)
    for k in sorted(rng.choice(len(rest), size=take, replace=False).tolist()) if take else ():
        chosen[rest[k]] = "random"
    return [Link(i, j, name(i), name(j), why) for (i, j), why in chosen.items()]


def drift(old: Fabric, new: Fabric, links: Sequence[Link], *, threshold: float = DEFAULT_THRESHOLD) -> list[Drift]:
    """Compare ``new`` (a refresh sweep, rows by device name) with ``old`` on ``links``."""
    rows = {new.device_name(r): r for r in range(new.n)}
    out = []
    for link in links:
        a, b = rows.get(link.src), rows.get(link.dst)
        o = (float(old.beta_gbps[link.i, link.j]), float(old.beta_gbps[link.j, link.i]))
        if a is None or b is None:
            n = (math.nan, math.nan)
        else:
            n = (float(new.beta_gbps[a, b]), float(new.beta_gbps[b, a]))
        changes = [x / y - 1.0 for x, y in zip(n, o) if math.isfinite(x) and math.isfinite(y) and y > 0]
        change = max(changes, key=abs) if changes else math.nan
        out.append(Drift(link, o, n, change, math.isfinite(change) and abs(change) > threshold))
    return out


def merged(old: Fabric, new: Fabric, drifts: Sequence[Drift]) -> Fabric:
    """``old`` with every re-measured link replaced by its new values (and no longer
    marked inferred or estimated); per-pair fit records are updated too."""
    alpha, beta = old.alpha_ms.copy(), old.beta_gbps.copy()
    extras = {k: [list(r) for r in v] if _square(v, old.n) else v for k, v in old.extras.items()}
    rows = {new.device_name(r): r for r in range(new.n)}
    for d in drifts:
        if not math.isfinite(d.change):
            continue
        a, b = rows[d.link.src], rows[d.link.dst]
        for (i, j), (p, q) in (((d.link.i, d.link.j), (a, b)), ((d.link.j, d.link.i), (b, a))):
            if not math.isfinite(new.beta_gbps[p, q]):
                continue
            alpha[i, j], beta[i, j] = new.alpha_ms[p, q], new.beta_gbps[p, q]
            for key in ("inferred", "estimated"):
                if _square(extras.get(key), old.n):
                    extras[key][i][j] = False
            for key in ("inferred_basis", "inferred_spread", "estimate_basis"):
                if _square(extras.get(key), old.n):
                    extras[key][i][j] = None
            for key in ("fit_r2", "fit_flag", "probe_interface"):
                if _square(extras.get(key), old.n) and _square(new.extras.get(key), new.n):
                    extras[key][i][j] = new.extras[key][p][q]
    meta = dict(old.meta)
    meta["refreshed_at"] = new.measured_at
    return Fabric(alpha, beta, old.labels, old.devices, old.measured_at, meta, extras, old.source)


def _square(value: Any, n: int) -> bool:
    return isinstance(value, list) and len(value) == n and all(isinstance(r, list) and len(r) == n for r in value)


async def run_refresh(hosts: Sequence[Any], pool: Any, fabric: Fabric, links: Sequence[Link], *,
                      settings: Any = None, labels: dict | None = None, threshold: float = DEFAULT_THRESHOLD,
                      on_event: Any = None) -> tuple[Fabric, list[Drift]]:
    """Re-measure ``links`` on the inventory ``hosts`` that hold them; (new sweep, drifts)."""
    from probes.sweep import Sweep

    wanted = {fabric.devices[k].host for link in links for k in (link.i, link.j)} if fabric.devices else set()
    chosen = [h for h in hosts if h.name in wanted]
    missing = sorted(wanted - {h.name for h in chosen})
    if missing:
        raise RefreshError(f"{fabric.source}: host {missing[0]} is not in the inventory")
    sweep = Sweep(chosen, pool=pool, settings=settings, labels=labels,
                  only=[(link.src, link.dst) for link in links])
    new = await sweep.run(on_event)
    return new, drift(fabric, new, links, threshold=threshold)


def bottlenecks_for_rank_map(fabric: Fabric, rank_map: Sequence[int], workload: Any) -> list[tuple[int, int]]:
    """Bottleneck links of ``rank_map`` on ``fabric`` for ``workload`` (a session's solution)."""
    from solver.cost import CostModel

    try:
        model = CostModel.from_fabric(fabric, workload)
        score = model.score_rank_map(rank_map)
    except ValueError as exc:
        raise RefreshError(str(exc)) from None
    return bottlenecks_from_score(score, model.t_dp)
