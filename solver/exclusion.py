"""Whole-grid redeals (confinement, exclusion, packing, transfer) for layouts bound by DataP or stalled, and split kicks.

When DataP rules Comm and every stage group holds a device of the same dear hosts (a
host behind a slow NIC pays its slow link to every peer off the host), every group
has about the same DataP: a swap that lowers one group's leaves the others, so Comm
sits on a plateau that local moves, the ladder and the segment moves of
solver.rebalance (which change a run of groups towards equal or whole-component
vectors) do not leave. The way out changes every group at once:

- *Confinement*: the devices of the *critical hosts* (hosts holding a device whose
  peer sum is at least CONFINE_SHARE of DataP; together fewer than half the devices)
  are taken out of their component at a coarse level (solver.rebalance.levels) and
  dealt into ``k1 = 1 .. CONFINE_GROUPS`` consecutive groups at one end of the
  pipeline, ``floor`` or ``ceil`` of ``z / k1`` each (``z`` of them in all); and the
  same for the *dear hosts* (``dear``, when they are other hosts): those whose mean
  DataP cost to the devices outside their nearest component (the finest coarse level
  where the host has company) is at least DEAR_FACTOR times that of the component's
  other devices to the same devices: a property of the fabric, not of the grid (a host
  behind a slow NIC; not a far region's hosts, whose peers pay the same distance).
- *Exclusion*: one component ``c`` of a coarse level (a region) is dealt into ``k1``
  consecutive groups at one end, ``z_c / k1`` each (``k1`` divides ``z_c``), and is
  absent from the other groups.
- *Packing*: one component ``c`` of ``z_c`` devices, more than a group's ``r`` and not a
  multiple of it (which the exclusions cannot deal whole), fills ``q = z_c // r``
  consecutive groups at one end and puts its remainder ``z_c - q r`` in the next group
  inward.
- *Transfer*: at a coarse level the pipeline order falls into runs of consecutive
  groups with one count vector each; two runs (lengths ``L_a``, ``L_b``) trade ``j
  lcm(L_a, L_b)`` devices of one component for as many of another, spread evenly over
  each run's groups so that each run keeps one vector (``j = 1 .. TRANSFER_STEPS``).

In the first three, each of the ``k1`` groups fills its other places in proportion to the other
components' totals, and the other ``D_PP - k1`` groups share what is left as equally
as it goes (largest remainders, ``_concentrated``). The grid is redealt to those counts
(solver.rebalance._redeal: surplus devices cheapest to carry elsewhere leave, the
takers choose the cheapest to keep), descended for EXCLUDE_SWEEPS local-search sweeps
and rebalanced (solver.rebalance.rebalance, every level and the hosts' splits), which
rebuilds the pipeline runs around the new groups. A redealt grid's Comm says little of
where its descent ends (60-95 s against 53 s at first, the Pipeline of groups dealt
without regard to their neighbours), but its DataP, which only the group contents
set and which the descent mostly keeps, does: explorers try the redeals in ascending
order of the dealt grid's DataP (``ranked``; RANK), ties in list order (``candidates``:
confinements first, then exclusions, packings and transfers).

Ranking was added for the draw-3 192-GPU 8 x 24 suite instance, whose 10 s runs ended
at 38.1-45.3 s seed by seed: a recorded 41.27 s layout has 72 redeals (0.2-0.9 s
each), more than a 10 s run's explorer gets through in list order; tried once each
from it they reached 38.2-51.5 s, and the one whose dealt grid has the lowest
DataP reached 38.21 s, the lowest of all. Over nine recorded 10 s layouts of six
suite instances, the Spearman correlation of the final Comm with the dealt grid's
DataP was 0.01-0.60 (median 0.38), with its Comm 0.07-0.36, with the Comm of its exact
matchings and order -0.21-0.41; where a redeal improved the layout, the first ranked
one did on two layouts of three (the third: the 11th). One session, ``--time-limit
10``, 2 workers, mean Comm without -> with: that instance, seeds 0-4, 42.34 -> 38.72 s
(worst 45.34 -> 39.18 s); draw 1 8 x 24 seeds 0-4 45.75 -> 46.32 s, seeds 5-9 46.31
-> 44.33 s (42.84 s, the lowest found); draws 0 and 2 36.59 -> 36.61 s and 47.27 s
both; draw-3 10 x 8 40.45 -> 40.60 s, 12 x 8 34.92 -> 34.79 s, 16 x 4 33.996 ->
33.990 s; the 48-96-GPU instances of draws 0 and 1 within 0.25% either way (draw-1
10 x 8 30.95 -> 30.88 s, 12 x 8 39.39 -> 39.43 s).

Measured on the SYNTHETIC hierarchical suite (benchmarks/), draw 1, 192-GPU 8 x 24
instance, whose 10 s layouts (52.6-52.9 s) hold one device of each of three slow-NIC
hosts in every group (DataP 42.7 of 52.9): from two such layouts, each candidate once,
the 18 confinements improved 4-5 times (best 48.1 and 49.0 s); in an earlier
session's scratch runs the 30 exclusions improved once or twice (45.1 s once, 50.7 s),
and a layout of 45.93 s found once in 30 s kept those hosts in two groups, which
excluded the region farthest from them.

Packings were added for the draw-3 48-GPU 4 x 12 instance, whose 10 s layouts fell into
two families: 30.46 s (DataP 12.1, Pipeline 18.4: its largest region, 19 devices with
the slow-NIC host, fills the first group and 7 places of the second) and 31.80 s (18.0 /
13.8: that region in every group), which the ladders rarely crossed and no exclusion
joined (19 is prime). From a recorded 31.80 s layout the two packings of that region
reached 30.65 and 30.54 s, one redeal each (0.05 s). Measured in one session at
``--time-limit 10``, 2 workers, without -> with: that instance, seeds 0-9, mean 31.00 s
(5 of 10 at 30.463 s, four at 31.795 s) -> all ten at 30.463 s (packings listed among
the exclusions; listed after them, seeds 0-4: all five at 30.463 s). Listed among the
exclusions (rotated with them) they put off the exclusion that crosses between the two
layout families of the draw-3 10 x 8 instance (solver.anytime, "Lineage explorers"):
seeds 0-4 41.45 -> 42.20 s; listed after every exclusion, 41.40 s. Draw-3 16 x 4 (two
basins, 33.4-33.5 and 34.0-34.1 s): 33.70 -> 33.94 s, as in an earlier session's runs
(33.82-33.94 s); the other instances of draws 0-3 within the runs' noise (README).
Since the redeals are ranked (RANK, above) a packing's place in the list only breaks
ties.

Dear hosts were added for the draw-3 80-GPU 10 x 8 instance: its 42.4-42.6 s layouts
(DataP 12.9, Pipeline 29.7 s) keep the slow-NIC host in the first two groups with its
own region, and the 40.5 s family spreads it over three groups of every region (25.7 /
14.8 s). In such a layout that host's peer sums are cheap, so it is not critical, and
from a recorded 42.56 s layout no confinement of the critical hosts, exclusion, packing
or kick beat it; five of the 18 dear-host confinements reached 41.49-42.29 s, each
within the 40 s family. One session, ``--time-limit 10``, 2 workers, seeds 0-4, mean
Comm without -> with: that instance 41.80 -> 40.14 s (every seed in the 40 s family,
39.91-40.33 s, against two of five); draw-3 16 x 4 33.99 -> 33.75 s; draw-3 12 x 8 34.76
-> 35.06 s, seeds 5-9 34.49 -> 34.48 s; draw-1 12 x 8 (two basins) 39.37 -> 39.61 s,
seeds 5-9 38.97 -> 39.40 s (4 -> 2 of 5 below 39.0 s): a cost there, its worst seed
about the same; 8 x 24 draw 1 46.42 -> 46.62 s, draw 3 40.16 ->
41.41 s (seeds of one build there range over 38-45 s from run to run). Listed after
the packings instead: 10 x 8 draw 3 41.22 s, 8 x 24 draw 3 41.91 s. Those runs took
the dear hosts as those whose mean cost off the host was at least 1.5 times the median
host's; on 8 of the 28 suite instances of draws 0-3 that also took other
hosts (on draw-1 12 x 8 the three of a 16-device region). Against each host's
nearest component instead (``dear``), the dear hosts are the slow-NIC hosts on 27 of
the 28 (one more host on draw-1 6 x 6), and in the same session: draw-1 12 x 8 seeds
0-9 39.50 -> 39.30 s (3 -> 5 of 10 below 39.0 s; 39.17 s, 6 of 10, without dear
hosts), draw-3 10 x 8 40.14 -> 40.38 s (every seed in the 40 s family either way),
draw-3 4 x 12 30.463 s on every seed, draw-3 16 x 4 33.75 -> 33.93 s.

Transfers were added for the draw-4 192-GPU 8 x 24 suite instance, whose 10 s runs
ended at 47.4-50.3 s seed by seed, each in the basin its first seconds reached. At the
region level its layouts are a run of four groups, one mixed group and a run of three,
and they differ in how the four regions split between those: (2, 12, 0, 10) x 4,
(5, 3, 10, 6), (3, 0, 15, 6) x 3 in a 47.44 s layout; (1, 11, 0, 12) x 4, (0, 7, 1,
16), (6, 0, 18, 0) x 3 in a 50.25 s one. The first one's region counts dealt onto the
second, descended and rebalanced, reached 49.11 s, and a 3 s ladder from there 47.78 s:
the counts set the basin, and the ladder rarely moves them (a swap between two runs
breaks both runs' vectors). Every other redeal of the 50.25 s layout, each tried once,
ended above it (51.48 s the lowest of 68); seven of its 22 transfers beat it (48.47 s
the lowest). From four recorded 10 s layouts of 49.1-50.25 s, transfers taken in ranked
order, the first improvement kept (as an explorer takes them), went 50.25 -> 48.14 s in
0.5 s and 47.35 s in 9.7 s (below the 47.41 s found before), 49.86 -> 48.04 s in 3 s.
One session, ``--time-limit 10``, 2 workers, seeds 0-4, mean Comm without -> with: 8 x
24 draw 4 49.33 -> 47.91 s (worst 50.22 -> 48.60 s), draw 3 38.77 -> 37.55 s (34.66 s,
a new lowest found, against 37.02 s), draw 0 36.62 -> 36.43 s, draws 1 and 2 45.87 ->
45.78 s and 47.16 -> 47.20 s; 12 x 8 draw 4 21.94 -> 21.72 s, draw 3 34.72 -> 34.59 s,
draw 1 39.53 -> 39.34 s; 16 x 4 draw 4 27.66 -> 27.98 s and, seeds 5-9, 27.73 -> 27.55 s
(two basins, 27.3 and 28.0 s); the other 48-96-GPU instances of draws 3 and 4, and 16 x 4
draw 1, within 0.2%. With TRANSFER_RUNS and TRANSFER_MOST, added after these runs, seeds
0-4 of draw 4 gave 8 x 24 47.74 s, 12 x 8 21.81 s, 16 x 4 27.90 s.
Path relinking was tried on the same recorded layouts first and not built: walking one
layout towards another one swap at a time (stage groups matched by overlap, each swap
putting a device in its group of the other layout), the points at a quarter, half and
three quarters of the way, each descended and rebalanced, never beat the better end (18
points between three 8 x 24 draw-4 layouts, 36 between four 16 x 4 draw-4 layouts).

*Split kicks* (``kicks``), tried by explorers on an elite that no walk of the last
round improved (solver.anytime), whatever its DataP: every segment of consecutive
groups dealt into two sub-runs with one count vector each (solver.rebalance._splits),
at every coarse level and at the hosts' level, scored in the current order; the KICKS
best distinct ones within KICK_SLACK of Comm are each descended and rebalanced
whatever that first score, where rebalancing proper descends only those that already
beat the grid. On a 10 s layout of the draw-1 64-GPU 8 x 8 suite instance (20.33 s;
the first three groups alternated two host vectors, paying two dear edges where one
would do) the first kick scored 20.44 s in the current order and reached 19.97 s
after its descent and rebalancing.

Cost: ``O(L m D_PP)`` candidate targets (``L`` levels of ``m`` components), and
``O(L R^2 m^2)`` transfers where a level's groups fall into ``R`` runs (3-84 transfers
on recorded suite layouts), each ``O(D_PP m)`` to build; trying one costs a redeal
(``O(N D_DP)`` array work), the descent (at most EXCLUDE_SWEEPS ``N^2`` scored swaps)
and a rebalancing call: 0.4-2 s at 192 devices. Kicks: the split scan of every level
(``O(L D_PP^3)`` targets, 0.04-1 s on the suite), then each kick like a candidate.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from solver.descent import Effort, descend
from solver.rebalance import _Scorer, _counts, _redeal, _splits, rebalance

#: Local-search sweeps (N^2 scored swaps each) that descend a redealt grid.
EXCLUDE_SWEEPS = 2.0
#: Explorers (solver.anytime.explore) act only on grids whose DataP is at least this
#: share of Comm. On the suite's 10 s layouts: 0.78-0.81 on the draw-1 8 x 24 instance,
#: 0.23-0.56 on the others.
EXCLUDE_SHARE = 0.7
#: A host is critical when one of its devices has a peer sum of at least this share of
#: DataP; confinements deal the critical hosts' devices into 1 .. CONFINE_GROUPS groups.
CONFINE_SHARE = 0.9
CONFINE_GROUPS = 3
#: Split kicks (``kicks``): those within KICK_SLACK of the grid's Comm in the current
#: order, at most KICKS of them (the best first), are tried.
KICK_SLACK = 0.3
KICKS = 8
#: Whether the redeals include packings (``_packings``, module text), after every
#: exclusion (with RANK, the order of ties).
PACKING = True
#: Whether the confinements also deal the *dear hosts* (``dear``: those whose mean DataP
#: cost to the devices outside their nearest component is at least DEAR_FACTOR times that
#: of the component's other devices), whatever the grid.
DEAR = True
DEAR_FACTOR = 1.5
#: Whether explorers try the redeals in ascending order of the dealt grid's DataP
#: (``ranked``; module text) instead of as listed.
RANK = True
#: Whether the redeals include transfers between runs (``_transfers``, module text),
#: listed last; each trades ``j lcm(L_a, L_b)`` devices a way for ``j = 1 ..
#: TRANSFER_STEPS``.
TRANSFER = True
TRANSFER_STEPS = 2
#: A level whose groups fall into more runs than this lists no transfers (the move is for
#: layouts made of a few runs: 1-5 at every level of 38 recorded suite layouts; scattered
#: layouts of 384-512 devices, 32-64 runs, listed 18 000-36 000, about 1 ms each to rank),
#: and a grid lists at most TRANSFER_MOST of them, coarsest level first.
TRANSFER_RUNS = 8
TRANSFER_MOST = 256


class Candidate(NamedTuple):
    """A whole-grid redeal: ``targets[j]`` devices of each component of ``labels`` (a
    level's, or one with the critical or dear hosts as one more component) for group ``j``."""

    kind: str  #: "confinement", "exclusion", "packing", "transfer" or "split"
    labels: np.ndarray
    targets: np.ndarray | None
    dealt: np.ndarray | None = None  #: the redealt grid itself (split kicks)


def identity(cand: Candidate) -> tuple:
    """What tells one candidate from another across grids of one coarse key
    (solver.anytime.explore): a redeal's kind, labels and target counts (its dealt grid
    depends on the grid dealt from), a split kick's dealt grid. O(N)."""
    spec = cand.targets if cand.targets is not None else cand.dealt
    return cand.kind, cand.labels.tobytes(), None if spec is None else spec.tobytes()


def _near_equal(left: np.ndarray, q: int, r: int) -> np.ndarray | None:
    """``(q, m)`` counts with column sums ``left``, each row summing to ``r``, columns as
    equal as they go (each group short of places takes the largest remainders in
    turn); None when the rows cannot all reach ``r``."""
    rows = np.tile(left // q, (q, 1))
    need = r - rows.sum(axis=1)
    for i in np.argsort(-(left % q), kind="stable"):
        for _ in range(int(left[i] % q)):
            j = int(np.argmax(need))
            rows[j, i] += 1
            need[j] -= 1
    return None if need.any() else rows


def _concentrated(vec: np.ndarray, c: int, sizes: list[int], first: bool) -> np.ndarray | None:
    """Counts for the whole grid (``vec``: its ``(p, m)`` counts) with component ``c``
    in ``k1 = len(sizes)`` consecutive groups at one end (``first``: the first ``k1``),
    ``sizes[j]`` in the ``j``-th of them and none elsewhere. Each of those groups fills
    its other places in proportion to the other components' totals (largest
    remainder), the other ``p - k1`` groups share the rest (``_near_equal``). None when
    that is not possible or changes nothing. O(p m)."""
    p, m = vec.shape
    k1 = len(sizes)
    r = int(vec[0].sum())
    total = vec.sum(axis=0)
    others = np.delete(np.arange(m), c)
    rest = total[others]
    if k1 >= p or sum(sizes) != total[c] or max(sizes) > r or rest.sum() == 0:
        return None
    fills = []
    for size in sizes:
        want = rest * (r - size) / rest.sum()
        y = np.floor(want).astype(np.int64)
        for i in np.argsort(-(want - y), kind="stable")[:r - size - int(y.sum())]:
            y[i] += 1
        fills.append(y)
    left = rest - np.sum(fills, axis=0)
    if (left < 0).any():
        return None
    rows = _near_equal(left, p - k1, r)
    if rows is None:
        return None
    out = np.zeros_like(vec)
    ends = list(range(k1)) if first else list(range(p - k1, p))
    for j, size, y in zip(ends, sizes, fills):
        out[j, c] = size
        out[j, others] = y
    for i, j in enumerate(j for j in range(p) if j not in ends):
        out[j, others] = rows[i]
    return out if (out != vec).any() else None


def _packings(vec: np.ndarray, labels: np.ndarray, c: int) -> list[Candidate]:
    """Component ``c`` *packed* at either end of the pipeline: ``q = z_c // r`` full
    groups of it and the remainder in the next one inward (``r`` devices a group; only
    when ``z_c > r`` does not divide by ``r``, where the exclusions cannot deal it whole).
    O(p m)."""
    r, z = int(vec[0].sum()), int(vec[:, c].sum())
    if z <= r or z % r == 0:
        return []
    q, rem = divmod(z, r)
    out = []
    for first in (True, False):
        t = _concentrated(vec, c, [r] * q + [rem] if first else [rem] + [r] * q, first)
        if t is not None:
            out.append(Candidate("packing", labels, t))
    return out


def _runs(vec: np.ndarray) -> list[tuple[int, int]]:
    """The maximal runs ``[s, e)`` of consecutive groups with equal count vectors. O(p m)."""
    out, s = [], 0
    for e in range(1, len(vec) + 1):
        if e == len(vec) or (vec[e] != vec[s]).any():
            out.append((s, e))
            s = e
    return out


def _transfers(vec: np.ndarray, labels: np.ndarray, most: int = TRANSFER_MOST) -> list[Candidate]:
    """Trades between two runs of equal vectors (``_runs``): ``j lcm(L_a, L_b)`` devices of
    component ``x`` move from run ``a`` to run ``b`` and as many of ``y`` back, spread
    evenly over each run's groups, for ``j = 1 .. TRANSFER_STEPS`` while both runs hold
    that many: each run keeps one vector; none when there are more than TRANSFER_RUNS
    runs, the first ``most`` otherwise. O(R^2 m^2 TRANSFER_STEPS p m) for ``R`` runs."""
    runs, m, out = _runs(vec), vec.shape[1], []
    if len(runs) > TRANSFER_RUNS:
        return out
    for a, (s1, e1) in enumerate(runs):
        for s2, e2 in runs[a + 1:]:
            n = math.lcm(e1 - s1, e2 - s2)
            for x in range(m):
                for y in range(m):
                    if x == y:
                        continue
                    for j in range(1, TRANSFER_STEPS + 1):
                        give, take = j * n // (e1 - s1), j * n // (e2 - s2)
                        if vec[s1, x] < give or vec[s2, y] < take:  # each run's groups are equal
                            break
                        if len(out) == most:
                            return out
                        t = vec.copy()
                        t[s1:e1, x] -= give
                        t[s1:e1, y] += give
                        t[s2:e2, x] += take
                        t[s2:e2, y] -= take
                        out.append(Candidate("transfer", labels, t))
    return out


def critical(model, grid: np.ndarray, hosts: np.ndarray, share: float = CONFINE_SHARE) -> np.ndarray:
    """Devices of the critical hosts (``hosts``: the fine level's labels): hosts with a
    device whose peer sum in its group is at least ``share`` of DataP. O(N D_DP)."""
    sums = model.peer_sums(grid)
    hot = grid.T[sums >= share * sums.max()]
    return np.isin(hosts, np.unique(hosts[hot]))


def _confinements(grid: np.ndarray, mask: np.ndarray, level_labels: list[np.ndarray]) -> list[Candidate]:
    """The devices of ``mask`` (when they are fewer than half) dealt into ``k1 = 1 ..
    CONFINE_GROUPS`` consecutive groups at either end, at each level: ``Candidate``s of
    kind "confinement". O(L m p^2)."""
    p, z, out = grid.shape[1], int(mask.sum()), []
    if not 0 < z < grid.size / 2:
        return out
    for lab in level_labels:
        m = int(lab.max()) + 1
        mixed = np.where(mask, m, lab)
        vec = _counts(grid, mixed)
        for k1 in range(1, min(CONFINE_GROUPS, p - 1) + 1):
            sizes = [z // k1 + (j < z % k1) for j in range(k1)]
            for first in (True, False):
                t = _concentrated(vec, m, sizes, first)
                if t is not None:
                    out.append(Candidate("confinement", mixed, t))
    return out


def dear(model, hosts: np.ndarray, level_labels: list[np.ndarray], factor: float = DEAR_FACTOR) -> np.ndarray:
    """Devices of the *dear hosts*: hosts whose mean DataP cost to the devices outside
    their nearest component is at least ``factor`` times that of the other devices of
    that component (the finest coarse level where the host has company; all other
    devices where it has none at any level). O(N^2)."""
    out = np.zeros(model.n, dtype=bool)
    for h in np.unique(hosts):
        mine = hosts == h
        peers = ~mine
        for lab in reversed(level_labels):
            near = (lab == lab[mine][0]) & ~mine
            if near.any():
                peers = near
                break
        dest = ~mine & ~peers
        if not dest.any():
            dest = ~mine
        out[mine] = model.t_dp[np.ix_(mine, dest)].mean() >= factor * model.t_dp[np.ix_(peers, dest)].mean()
    return out


def candidates(model, grid: np.ndarray, level_labels: list[np.ndarray], hosts: np.ndarray | None,
               offset: int = 0) -> list[Candidate]:
    """The confinements of ``grid`` (when ``hosts`` are known: of the critical hosts and,
    DEAR, of the dear hosts when they differ; each when its hosts hold fewer than half the
    devices), then its exclusions, then its packings (PACKING), then its transfers
    (TRANSFER; at most TRANSFER_MOST), as
    ``Candidate``s: per level coarsest first, then component, ``k1`` and end; the first
    two lists rotated by ``offset`` (the packings, few, come after every exclusion:
    listed among them they put off the exclusion that a draw-3 10 x 8 layout needs,
    module text of solver.anytime). Explorers try them ``ranked`` (RANK), where this
    order and the offset only break ties. O(L m p^2), and O(L R^2 m^3 p TRANSFER_STEPS) for
    the transfers of ``R`` runs."""
    p = grid.shape[1]
    excl, packs, trades = [], [], []
    crit = critical(model, grid, hosts) if hosts is not None else None
    out = _confinements(grid, crit, level_labels) if crit is not None else []
    if crit is not None and DEAR:  # and the dear hosts', when they are other hosts
        d = dear(model, hosts, level_labels)
        if (d != crit).any():
            out += _confinements(grid, d, level_labels)
    for lab in level_labels:
        vec = _counts(grid, lab)
        total = vec.sum(axis=0)
        for c in range(vec.shape[1]):
            for k1 in range(1, p):
                if total[c] % k1 == 0:
                    for first in (True, False):
                        t = _concentrated(vec, c, [int(total[c]) // k1] * k1, first)
                        if t is not None:
                            excl.append(Candidate("exclusion", lab, t))
            packs += _packings(vec, lab, c) if PACKING else []
        trades += _transfers(vec, lab, TRANSFER_MOST - len(trades)) if TRANSFER else []

    def turn(xs: list) -> list:
        return xs[offset % len(xs):] + xs[:offset % len(xs)] if xs else xs

    return turn(out) + turn(excl) + packs + trades


def dealt_grid(model, grid: np.ndarray, candidate: Candidate) -> np.ndarray:
    """``grid`` dealt to ``candidate``: its own ``dealt`` grid when set (split kicks,
    ``ranked``), else the grid redealt to its targets (solver.rebalance._redeal), before
    any descent. O(N D_DP)."""
    if candidate.dealt is not None:
        return candidate.dealt
    cols = [grid[:, s] for s in range(grid.shape[1])]
    return np.stack(_redeal(model.t_dp, cols, candidate.labels, candidate.targets), axis=1)


def ranked(model, grid: np.ndarray, cands: list[Candidate]) -> list[Candidate]:
    """``cands`` dealt from ``grid`` (their ``dealt`` grids set), the first of each
    distinct dealt grid only (two levels may deal the same counts: 70 distinct of 72 on
    a draw-3 8 x 24 suite layout), in ascending order of the dealt grid's DataP, ties in
    list order. O(len(cands) N D_DP); about a millisecond a candidate at 192 devices."""
    out, seen = [], set()
    for i, c in enumerate(cands):
        g = dealt_grid(model, grid, c)
        if (key := g.tobytes()) not in seen:
            seen.add(key)
            out.append((model.score_grid(g).data_p, i, c._replace(dealt=g)))
    return [c for _, _, c in sorted(out, key=lambda t: (t[0], t[1]))]


def kicks(model, grid: np.ndarray, level_labels: list[np.ndarray],
          hosts: np.ndarray | None, stop: Callable[[], bool] = lambda: False) -> list[Candidate]:
    """The grid's *split kicks*: every segment of consecutive groups dealt into two
    sub-runs of equal vectors (solver.rebalance._splits) at each coarse level and at the
    hosts' level, scored in the current order with exact matchings; the KICKS best
    distinct ones within KICK_SLACK of its Comm, best first. Rebalancing descends only
    splits that already beat the grid; a kick is descended and rebalanced whatever its
    first score. O(L p^3) split targets (at most SPLIT_MOST per split point), each
    scored with at most ``p`` bottleneck matchings. ``stop()`` (tested once per segment
    start) ends the scan with what it has found."""
    cols = [grid[:, s] for s in range(grid.shape[1])]
    scorer = _Scorer(model, cols)
    fun = scorer.current()
    found, seen = [], set()
    for lab in level_labels + ([hosts] if hosts is not None else []):
        split = _splits(model, grid, cols, lab, scorer, fun * (1.0 + KICK_SLACK), stop)
        for comm, _, new in split or []:
            dealt = np.stack(new, axis=1)
            if dealt.tobytes() not in seen:
                seen.add(dealt.tobytes())
                found.append((comm, len(found), Candidate("split", lab, None, dealt)))
        if split is None:
            break
    return [c for _, _, c in sorted(found, key=lambda f: (f[0], f[1]))[:KICKS]]


def redeal(model, grid: np.ndarray, candidate: Candidate,
           level_labels: list[np.ndarray], rng: np.random.Generator,
           stop: Callable[[], bool] = lambda: False, sweeps: float = EXCLUDE_SWEEPS,
           split_labels: np.ndarray | None = None) -> tuple[np.ndarray, float, int]:
    """``grid`` redealt to one of its ``candidates``, descended for ``sweeps`` local-search
    sweeps (polished first) and rebalanced (every level of ``level_labels``, the splits
    at ``split_labels``): ``(grid, Comm, swaps scored)``, better than ``grid`` or not."""
    effort = Effort(int(sweeps * model.n * model.n), stop)
    state = descend(model, dealt_grid(model, grid, candidate), rng, effort)
    nfev = effort.nfev
    g, comm = state.grid.copy(), float(state.score)
    out = rebalance(model, g, level_labels, comm, rng, stop, split_labels=split_labels)
    if out is not None:
        g, comm, nfev = out[0], out[1], nfev + out[2]
    return g, comm, nfev
