"""Structure starts: the run structure of a layout chosen first, on a coarse model, then dealt.

Classes. A fabric whose coarse levels are all noise (no cut with its cheapest link
across at least CLEAR_CUT times the dearest inside: links drawn at random) gets no
structure starts. Devices fall into ``m`` classes: the components of the finest coarse
level (solver.rebalance.levels: zones, say), with every dear host (solver.exclusion.dear: a
host with a slow NIC) a class of its own. ``z_c`` devices are in class ``c``.

Coarse model. A stage group is described by its class vector ``v`` (``v_c`` devices of
class ``c``, ``sum_c v_c = D_DP``). With ``A[c, c']`` the mean ``T_dp`` between devices of
two classes (distinct devices inside one) and ``P[c, c']`` a typical ``T_pp`` (the median
across two classes, the 90th percentile inside one)::

    D(v)     = max_{c: v_c > 0} (sum_c' v_c' A[c, c'] - A[c, c])   the group's DataP
    I(v)     = max_{c: v_c > 0} P[c, c]                             an edge inside a run
    B(v, w)  = least theta with a transport plan from v to w over     an edge between runs
               class pairs with P <= theta (Hall's condition over the 2^m class subsets)

A *structure* is a sequence of runs ``(v_1, L_1) .. (v_q, L_q)`` with ``sum_j L_j v_j = z``
and ``sum_j L_j = D_PP``; its coarse cost is the DT-FM cost of such a layout::

    cost = max_j D(v_j) + 2 (sum_j (L_j - 1) I(v_j) + sum_j B(v_j, v_{j+1}))

Why. On hierarchical fabrics the best layouts keep every pipeline inside one zone along
a run of stage groups with equal class vectors and pay a few dear edges between runs;
which runs, and which mixes of regions they hold, decides the basin, and local moves
(device swaps, segment rebalancing, the tempering ladder) rarely change every group's
mix at once. On the draw-1 96-GPU 12 x 8 suite instance the layouts of the 38.5 s basin
have the runs ``4 x (0,2,2,4,0,0), 1 x (1,2,5,0,0,0), 4 x (2,5,0,0,0,1), 3 x
(3,3,0,0,2,0)``, those of the 40 s basin five runs; the coarse costs rank them 48.06
against 51.81, and that structure is the coarse optimum. Dealt onto the grid and
descended (41-42 s), a ladder of 200 000 steps from it reached 38.7-39.0 s on four
streams, where the same ladder from the 40 s basin's structures stayed at 40.0-40.5 s.

Enumeration (``best_structures``). Every class vector is listed class by class (none
when there are more than COVER times VECTOR_MOST, or when the partial lists pass
PARTIAL_MOST rows), and the VECTOR_MOST of lowest ``D`` are kept. *Terms* ``(v, L)``
with ``L v <= z``; structures of 1-5 runs of distinct vectors are found by
meet-in-the-middle on the terms' sums (an integer key of the summed vector and length;
none when that key could pass 62 bits): pairs of terms are tabulated (at most
PAIR_MOST, else the vectors are halved), and a structure of three (four) runs is a term
(pair) whose key complements a pair's, the terms (pairs) taken lowest ``D`` first until
their matches reach JOIN_MOST (the first always; duplicates still counted). One of five
runs is a term and a pair (a query within ``z``) whose key a pair complements, each set
of five terms once (``_fives``); the queries' pairs are taken lowest ``D`` first until
FIVE_WORK_MOST (pair, term) candidates were tried or the matches reach JOIN_MOST, and
they are joined last, so a stop during them leaves the structures of fewer runs. Long
pipelines need them: on the draw-3 64-GPU 16 x 4 suite instance the best basin (33.43
s) has the runs ``3 x (0,4,0,0,0), 7 x (0,1,0,3,0), 3 x (1,0,3,0,0), 1 x (3,0,0,0,1),
2 x (1,0,0,0,3)``, coarse cost 43.83, where the best of 1-4 runs costs 53.43 (0.3 s
with them, 0.02 s without). Each structure's runs are ordered by trying every order (a
reversed one counted once: at most 60) with the floors ``B`` of its vector pairs. Cost
``O(V m)`` for the vectors, ``O(T^2 m)`` for the pairs (T terms, about 2.5 V at 8
stages), ``O(P log P)`` for the joins (``O(W (m + log P))`` for the W = FIVE_WORK_MOST
candidates of five runs), ``O(S 2^m m)`` for the floors of S structures.

Many short runs. Layouts of more than five runs, most of them one stage group long,
are looked for by beams over the stage sequence (solver.structure_beam); they join the
enumerated structures where the cheapest of them is cheaper by more than BEAM_LEAD, or
where the enumeration found none.

Deal (``deal``). The groups of a structure, in pipeline order, take their ``v_c``
devices of each class from that class's devices in label order (hosts together), so a
host's devices share groups and neighbouring groups of a run get neighbouring hosts.
The starts phase polishes and descends the dealt grids like the topology starts
(solver.search); the rounds' ladders take them from there.

What it does not reach. On the draw-1 192-GPU 8 x 24 suite instance the coarse optimum
(47.62: runs of 4, 2, 1 and 1 groups, every group mixing regions, coarse DataP 19.08)
needs vectors up to the 3 250th by coarse DataP: the layouts that keep the three
slow-NIC hosts out of most groups pay for it with region mixes in every group. Its
enumeration takes 5-9 s (20 million pairs of terms); dealt, descended and given
200 000 ladder steps it reached 39.85-40.68 s, and as a given start of 10 s runs
39.46-40.01 s (seeds 0-4; 40.0-45.6 s without). With the VECTOR_MOST vectors of lowest
coarse DataP the best structure there (53.63) leads to 44-45 s, and on the draw-0
instance the cheapest structures of that kind descended to 42.2 s where a block start
reaches 41.8 s, and some 10 s runs from them ended at 39.8-40.4 s where every run without
them reached 36.4-36.7 s. So a fabric with more than COVER times VECTOR_MOST vectors in
all (192 GPUs as 8 x 24: 7 047-267 750 on the suite's draws; at most 1 675 on the
smaller instances) gets no structure starts.
"""

from __future__ import annotations

from itertools import permutations
from typing import Callable

import numpy as np

from solver.structure_beam import beam_structures

#: Largest fabric given structure starts: finding the classes took 0.1 s at 1 024 GPUs
#: and 4.8 s at 4 096 (and no fabric that large had few enough vectors).
STRUCTURE_MAX_N = 1024
#: No structure starts unless some coarse level's cut is this clear (``clear_cut``): on
#: the suite's fabrics the clearest cut is 1.4-9.6, on eight fabrics of links drawn at
#: random (32 and 64 GPUs) 1.02-1.09, where the levels are noise.
CLEAR_CUT = 1.25
#: Most classes (zones and dear hosts); the floors test 2^m class subsets.
CLASS_MOST = 10
#: Vectors kept, lowest coarse DataP first.
VECTOR_MOST = 400
#: No structure starts when there are more than this many times VECTOR_MOST vectors in
#: all: the kept ones then miss the structures that matter (module text).
COVER = 10
#: Most partial vectors (the first classes' counts) held while the vectors are built.
PARTIAL_MOST = 400_000
#: Most pairs of terms tabulated; past it the vectors are halved.
PAIR_MOST = 3_000_000
#: Matches of three (of four) runs joined: the terms (pairs) are taken lowest coarse
#: DataP first until their matches reach it (the first always; duplicates counted).
JOIN_MOST = 300_000
#: (pair, term) candidates of five-run structures examined, about (the last chunk can
#: pass it), and at a time (``_fives``).
FIVE_WORK_MOST = 1_000_000
FIVE_CHUNK = 200_000
#: Structures priced at a time, lowest floor (coarse DataP and inside edges) first.
PRICE_CHUNK = 4096
#: Structures dealt into starts, lowest coarse cost first.
STARTS_MOST = 3
#: What every structure start's name begins with (solver.search tells them by it).
NAME = "structure:"
#: Whether structures of many short runs are looked for too (solver.structure_beam)...
BEAMS = True
#: ... and they join the enumerated ones only where the cheapest of them is cheaper than
#: the cheapest enumerated structure by more than this share.
BEAM_LEAD = 0.015
#: Row pairs given the floors at a time (``Coarse.between``: 2^m m numbers a row).
BETWEEN_CHUNK = 256
#: Percentile of T_pp taken as the typical link inside a class.
INSIDE_PERCENTILE = 90


def clear_cut(model) -> float:
    """The clearest of the coarse levels' cuts (solver.rebalance.level_cuts): the largest
    ratio of the cheapest tree link across a level's cut to the dearest link inside its
    components (1.0 when there is no level). O(N^2) for the tree, O(N) a level."""
    from solver.rebalance import level_cuts
    from solver.spanning import spanning_tree

    weights = np.sort(spanning_tree(model).weights)
    best = 1.0
    for t, _ in level_cuts(model):
        inside = weights[weights < t]
        if len(inside) and inside[-1] > 0:
            best = max(best, float(t / inside[-1]))
    return best


def classes(model) -> np.ndarray | None:
    """Class of each device (module text), None when the fabric has no coarse level or
    more than CLASS_MOST classes. O(N^2)."""
    from solver.exclusion import dear
    from solver.rebalance import fine_level, levels

    lv = levels(model)
    if not lv:
        return None
    lab = lv[-1].copy()
    hosts = fine_level(model)
    if hosts is not None:
        slow = dear(model, hosts, lv)
        nxt = int(lab.max()) + 1
        for h in np.unique(hosts[slow]):
            lab[hosts == h] = nxt
            nxt += 1
    _, lab = np.unique(lab, return_inverse=True)
    m = int(lab.max()) + 1
    return lab.astype(np.int64) if 2 <= m <= CLASS_MOST else None


class Coarse:
    """The coarse model of one fabric's classes (module text)."""

    def __init__(self, model, lab: np.ndarray) -> None:
        m = int(lab.max()) + 1
        self.m = m
        self.z = np.bincount(lab, minlength=m).astype(np.int64)
        a, p = np.zeros((m, m)), np.zeros((m, m))
        for c in range(m):
            for d in range(m):
                rows, cols = lab == c, lab == d
                tdp, tpp = model.t_dp[np.ix_(rows, cols)], model.t_pp[np.ix_(rows, cols)]
                if c == d:
                    k = int(rows.sum())
                    off = ~np.eye(k, dtype=bool)
                    a[c, c] = tdp[off].mean() if k > 1 else 0.0
                    p[c, c] = np.percentile(tpp[off], INSIDE_PERCENTILE) if k > 1 else 0.0
                else:
                    a[c, d], p[c, d] = tdp.mean(), np.median(tpp)
        self.a, self.p = a, p
        self.subsets = ((np.arange(1, 1 << m)[:, None] >> np.arange(m)) & 1).astype(np.int64)
        self.levels = np.unique(p)
        # each subset S's classes d in the order they become reachable from S: at
        # min_{c in S} P[c, d] (``between``)
        first = np.where(self.subsets[:, :, None] > 0, p[None, :, :], np.inf).min(axis=1)
        self.reach_order = np.argsort(first, axis=1, kind="stable")
        self.reach_at = np.take_along_axis(first, self.reach_order, axis=1)

    def data_p(self, vecs: np.ndarray) -> np.ndarray:
        """``D(v)`` of each row. O(V m^2)."""
        cost = vecs @ self.a.T - np.diag(self.a)[None, :]
        return np.where(vecs > 0, cost, -np.inf).max(axis=1)

    def inside(self, vecs: np.ndarray) -> np.ndarray:
        """``I(v)`` of each row. O(V m)."""
        return np.where(vecs > 0, np.diag(self.p)[None, :], -np.inf).max(axis=1)

    def between(self, v: np.ndarray, w: np.ndarray) -> np.ndarray:
        """``B(v_i, w_i)`` for each row pair: the least level at which Hall's condition
        holds. For each class subset S with devices in v, the least theta at which the
        classes reachable from S (``min_{c in S} P[c, d] <= theta``) hold as many of w's
        devices as S holds of v's; B is the largest of those. O(n 2^m m), in chunks of
        BETWEEN_CHUNK rows."""
        out = np.empty(len(v))
        for at in range(0, len(v), BETWEEN_CHUNK):
            vv, ww = v[at:at + BETWEEN_CHUNK], w[at:at + BETWEEN_CHUNK]
            need = vv @ self.subsets.T  # (n, S)
            held = np.cumsum(ww[:, self.reach_order], axis=2)  # (n, S, m): w's devices reached, in order
            k = (held < need[:, :, None]).sum(axis=2)  # classes needed before S's demand is met
            short = k >= self.m  # w too small for v (unequal sums): no level holds
            theta = np.take_along_axis(np.broadcast_to(self.reach_at, need.shape + (self.m,)),
                                       np.minimum(k, self.m - 1)[:, :, None], axis=2)[:, :, 0]
            theta = np.where(need > 0, theta, self.levels[0])
            out[at:at + BETWEEN_CHUNK] = np.where(short.any(axis=1), self.levels[-1], theta.max(axis=1))
        return out


class Stopped(Exception):
    """The caller's ``stop()`` turned true during the enumeration."""


def _all_vectors(z: np.ndarray, r: int, limit: int) -> np.ndarray | None:
    """Every ``0 <= v <= z`` with ``sum v = r``, class by class; None past ``limit``
    vectors, or past PARTIAL_MOST rows of a partial list (counted as it grows, so the
    memory stays bounded)."""
    m = len(z)
    cur = np.zeros((1, 0), dtype=np.int64)
    after = np.concatenate([np.cumsum(z[::-1])[::-1][1:], [0]])  # room in the classes after c
    for c in range(m):
        used = cur.sum(axis=1)
        parts, rows = [], 0
        for k in range(int(min(z[c], r)) + 1):
            ok = (used + k <= r) & (used + k + after[c] >= r)
            rows += int(ok.sum())
            if rows > max(limit, PARTIAL_MOST):
                return None
            if ok.any():
                parts.append(np.hstack([cur[ok], np.full((int(ok.sum()), 1), k, dtype=np.int64)]))
        cur = np.vstack(parts) if parts else np.zeros((0, c + 1), dtype=np.int64)
    return cur if len(cur) <= limit else None


def vectors(coarse: Coarse, r: int, most: int = VECTOR_MOST) -> np.ndarray | None:
    """The ``most`` class vectors of lowest ``D`` (all when there are fewer), lowest
    first; None when there are more than COVER times ``most`` in all (module text,
    "What it does not reach"). O(V m^2)."""
    found = _all_vectors(coarse.z, r, COVER * most)
    if found is None:
        return None
    return found[np.argsort(coarse.data_p(found), kind="stable")[:most]]


def _pairs(tv, tl, ti, z, p, limit, stop):
    """Pairs of terms ``a < b`` of distinct vectors whose sums fit ``z`` and ``p``.
    OverflowError past ``limit``; Stopped when ``stop()`` (tested every 128 terms)."""
    t = len(tl)
    left, right, count = [], [], 0
    for a0 in range(0, t, 128):
        if stop():
            raise Stopped
        a = np.arange(a0, min(t, a0 + 128))
        ok = (tl[None, :] + tl[a][:, None] <= p) & (np.arange(t)[None, :] > a[:, None]) & \
             (ti[None, :] != ti[a][:, None])
        aa, bb = np.nonzero(ok)
        aa = a[aa]
        fit = (tv[aa] + tv[bb] <= z).all(axis=1)
        left.append(aa[fit])
        right.append(bb[fit])
        count += int(fit.sum())
        if count > limit:
            raise OverflowError
    empty = np.zeros(0, dtype=np.int64)
    return (np.concatenate(left), np.concatenate(right)) if left else (empty, empty)


def _complements(keys: np.ndarray, rank: np.ndarray, sorted_keys: np.ndarray, order: np.ndarray,
                 zkey: int, most: int):
    """Every ``(i, j)`` with ``keys[i]`` plus the key of pair ``j`` equal to ``zkey``; the
    rows ``i`` are taken in ascending ``rank`` while their matches total at most ``most``
    (the first row always)."""
    lo = np.searchsorted(sorted_keys, zkey - keys, "left")
    hi = np.searchsorted(sorted_keys, zkey - keys, "right")
    rows = np.argsort(rank, kind="stable")
    rows = rows[hi[rows] > lo[rows]]
    total = np.cumsum(hi[rows] - lo[rows])
    rows = rows[: max(1, int(np.searchsorted(total, most, "right")))] if len(rows) else rows
    n = hi[rows] - lo[rows]
    return np.repeat(rows, n), order[np.repeat(lo[rows], n) + _offsets(n)]


def _offsets(counts: np.ndarray) -> np.ndarray:
    """``0 .. k - 1`` for each ``k`` of ``counts``, concatenated. O(sum counts)."""
    return np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)


def _fives(tl, ti, tv, tkey, pa, pb, pkey, rank, sorted_keys, order, z, p, zkey, most, work_most, stop):
    """Structures of five runs as rows of term ids ``(t, a, b, c, d)``: a term ``t``, a
    query pair ``(a, b)`` and a complementing pair ``(c, d)`` with ``t < a < b < c < d``
    (each set of five terms once), the query's counts within ``z`` (so the sum of its
    key and the pair's is the key of the summed counts: no digit carries) and its lengths
    at most ``p - 2``. Query pairs are taken lowest ``rank`` first, each with every term
    below its first, a chunk (FIVE_CHUNK candidates) at a time, until the matches reach
    ``most`` or ``work_most`` (pair, term) candidates were examined (the last chunk can
    pass it). O(W (m + log P) + F) for W candidates and F rows found. Stopped when
    ``stop()``."""
    queries = np.flatnonzero((tl[pa] + tl[pb] <= p - 3) & (pa > 0))
    queries = queries[np.argsort(rank[queries], kind="stable")]
    heads = np.cumsum(pa[queries])  # candidates up to each query: the terms below its first
    found, matches, done = [], 0, 0
    while done < len(queries) and (not len(found) or heads[done - 1] < work_most):
        if stop():
            raise Stopped
        base = heads[done - 1] if done else 0
        upto = max(done + 1, int(np.searchsorted(heads, base + FIVE_CHUNK, "right")))
        q = queries[done:upto]
        done = upto
        qq, tt = np.repeat(q, pa[q]), _offsets(pa[q])  # each query with the terms 0 .. a - 1
        keep = (tl[pa[qq]] + tl[pb[qq]] + tl[tt] <= p - 2) & (ti[tt] != ti[pa[qq]]) & (ti[tt] != ti[pb[qq]])
        qq, tt = qq[keep], tt[keep]
        fit = (tv[pa[qq]] + tv[pb[qq]] + tv[tt] <= z).all(axis=1)
        qq, tt = qq[fit], tt[fit]
        i, j = _complements(pkey[qq] + tkey[tt], np.arange(len(qq)), sorted_keys, order, zkey,
                            np.iinfo(np.int64).max)  # every candidate's matches
        ok = pb[qq[i]] < pa[j]
        i, j = i[ok], j[ok]
        found.append(np.stack([tt[i], pa[qq[i]], pb[qq[i]], pa[j], pb[j]], axis=1))
        matches += len(j)
        if matches >= most:
            break
    return np.concatenate(found) if found else np.zeros((0, 5), dtype=np.int64)


def _unique_rows(rows: np.ndarray, base: int) -> np.ndarray:
    """``np.unique(rows, axis=0)`` for rows of integers in ``[0, base)``: one integer key a
    row (its entries as digits, the first most significant), so the rows come out in the
    same lexicographic order; ten times faster (0.3 s of 0.8 s at 80 GPUs). Falls back to
    ``np.unique(axis=0)`` when a key could pass 62 bits. O(R log R)."""
    q = rows.shape[1]
    if q * float(np.log2(max(base, 2))) >= 62:
        return np.unique(rows, axis=0)
    keys = rows @ (base ** np.arange(q - 1, -1, -1, dtype=np.int64))
    _, first = np.unique(keys, return_index=True)
    return rows[first]


def best_structures(coarse: Coarse, vecs: np.ndarray, d_pp: int, most: int,
                    pair_most: int = PAIR_MOST, join_most: int = JOIN_MOST,
                    stop: Callable[[], bool] = lambda: False, five_most: int = FIVE_WORK_MOST,
                    ) -> list[tuple[float, list[tuple[np.ndarray, int]]]]:
    """The ``most`` structures of 1-5 runs of lowest coarse cost over ``vecs``, runs in
    their best order: ``[(cost, [(v, L), ...]), ...]``, lowest first (module text).
    OverflowError past ``pair_most`` pairs of terms; Stopped when ``stop()`` turns true
    before the structures of 1-4 runs are priced (after it, those stand, with the
    five-run ones priced before the stop). ``five_most``: (pair, term) candidates of
    five runs to examine, give or take a chunk (FIVE_CHUNK; 0: none)."""
    z, p, m = coarse.z, d_pp, coarse.m
    values, inside = coarse.data_p(vecs), coarse.inside(vecs)
    nv = len(vecs)
    if not nv or most <= 0 or float(np.log2(z + 1.0).sum() + np.log2(p + 1.0)) >= 62:
        return []  # nothing to find, or keys that could pass 62 bits (module text)
    room = np.where(vecs > 0, z[None, :] // np.maximum(vecs, 1), p).min(axis=1)
    room = np.minimum(room, p)
    ti = np.repeat(np.arange(nv), room)
    tl = np.concatenate([np.arange(1, k + 1) for k in room]).astype(np.int64)
    tv = vecs[ti] * tl[:, None]
    place = np.concatenate([[1], np.cumprod(z + 1)]).astype(np.int64)  # mixed radix: counts, then L
    tkey = tv @ place[:m] + tl * place[m]
    zkey = int(z @ place[:m] + p * place[m])
    pa, pb = _pairs(tv, tl, ti, z, p, pair_most, stop)
    pkey = tkey[pa] + tkey[pb]
    order = np.argsort(pkey, kind="stable")
    sorted_keys = pkey[order]
    found = [np.flatnonzero(tkey == zkey)[:, None],
             np.stack([pa[pkey == zkey], pb[pkey == zkey]], axis=1)]
    i, j = _complements(tkey, values[ti], sorted_keys, order, zkey, join_most)  # a term and a pair
    found.append(np.stack([i, pa[j], pb[j]], axis=1))
    short = np.flatnonzero(tl[pa] + tl[pb] <= p - 2)  # four runs: a pair and a pair
    rank = np.maximum(values[ti[pa[short]]], values[ti[pb[short]]])
    i, j = _complements(pkey[short], rank, sorted_keys, order, zkey, join_most)
    found.append(np.stack([pa[short[i]], pb[short[i]], pa[j], pb[j]], axis=1))
    if five_most > 0 and p >= 5:  # last, and left out when stopped (see below)
        found.append(lambda: _fives(tl, ti, tv, tkey, pa, pb, pkey,
                                    np.maximum(values[ti[pa]], values[ti[pb]]), sorted_keys, order,
                                    z, p, zkey, join_most, five_most, stop))
    out: list[tuple[float, list[tuple[np.ndarray, int]]]] = []
    floors = np.full((nv, nv), np.nan)  # B of two vectors (symmetric), found as needed
    cross = float(coarse.p[~np.eye(m, dtype=bool)].min())  # every edge between runs costs this
    for ids in found:
        if callable(ids):  # five runs: when stopped, the structures of fewer stand
            try:
                ids = ids()
            except Stopped:
                break
        if not len(ids):
            continue
        ids = _unique_rows(np.sort(ids, axis=1), len(tl))
        vi = ti[ids]
        q = ids.shape[1]
        distinct = (np.diff(np.sort(vi, axis=1), axis=1) != 0).all(axis=1)
        ids, vi = ids[distinct], vi[distinct]
        orders = [o for o in permutations(range(q)) if q == 1 or o[0] < o[-1]]
        part = values[vi].max(axis=1) + 2.0 * ((tl[ids] - 1) * inside[vi]).sum(axis=1)
        by = np.argsort(part, kind="stable")
        for at in range(0, len(by), PRICE_CHUNK):  # lowest floors first, until none can enter
            if stop():
                if q == 5:
                    break  # the five-run ones priced so far join those of fewer runs
                raise Stopped
            rows = by[at:at + PRICE_CHUNK]
            if len(out) >= most and part[rows[0]] + 2.0 * (q - 1) * cross >= out[most - 1][0]:
                break
            edge = np.zeros((len(rows), len(orders)))
            if q > 1:
                v = vi[rows]
                keys = (np.minimum(v[:, :, None], v[:, None, :]) * nv
                        + np.maximum(v[:, :, None], v[:, None, :]))[:, ~np.eye(q, dtype=bool)]
                keys = np.unique(keys[np.isnan(floors.flat[keys])])
                if len(keys):
                    lo, hi = keys // nv, keys % nv
                    floors[lo, hi] = floors[hi, lo] = coarse.between(vecs[lo], vecs[hi])
                for k, o in enumerate(orders):
                    edge[:, k] = sum(floors[v[:, o[s]], v[:, o[s + 1]]] for s in range(q - 1))
            best = edge.argmin(axis=1)
            cost = part[rows] + 2.0 * edge[np.arange(len(rows)), best]
            for r in np.argsort(cost, kind="stable")[:most]:
                o, row = orders[best[r]], rows[r]
                out.append((float(cost[r]), [(vecs[vi[row, s]], int(tl[ids[row, s]])) for s in o]))
            out.sort(key=lambda f: f[0])
            del out[most:]
    return out


def deal(lab: np.ndarray, order: np.ndarray, runs: list[tuple[np.ndarray, int]]) -> np.ndarray:
    """The ``(D_DP, D_PP)`` grid of a structure (module text). O(N)."""
    pools = [[d for d in order.tolist() if lab[d] == c] for c in range(int(lab.max()) + 1)]
    taken = [0] * len(pools)
    cols = []
    for v, length in runs:
        for _ in range(length):
            col = []
            for c, k in enumerate(v.tolist()):
                col += pools[c][taken[c]:taken[c] + k]
                taken[c] += k
            cols.append(col)
    return np.array(cols, dtype=np.int64).T


def grid_cost(coarse: Coarse, lab: np.ndarray, grid: np.ndarray) -> float:
    """The coarse cost of a laid-out ``(D_DP, D_PP)`` grid: its stage groups' class
    vectors, each maximal stretch of equal ones a run (module text). O(N + D_PP 2^m m)."""
    vecs = np.stack([np.bincount(lab[grid[:, s]], minlength=coarse.m) for s in range(grid.shape[1])])
    same = (vecs[1:] == vecs[:-1]).all(axis=1)
    edges = np.where(same, coarse.inside(vecs[:-1]), coarse.between(vecs[:-1], vecs[1:])) if len(same) else []
    return float(coarse.data_p(vecs).max() + 2.0 * np.sum(edges))


def leading(model, structured: list[np.ndarray], others: list[np.ndarray], margin: float) -> list[int]:
    """Which of the ``structured`` grids lead: none unless the cheapest on the coarse
    model is cheaper than every one of ``others`` by more than ``margin`` (a fraction of
    the latter's cost); then those within ``margin`` of the cheapest (the coarse model
    does not tell them apart), in their order. O(S N) for S grids, besides the classes."""
    lab = classes(model) if structured else None
    if lab is None:
        return []
    coarse = Coarse(model, lab)
    costs = [grid_cost(coarse, lab, g) for g in structured]
    best = min(costs)
    if others and best >= (1.0 - margin) * min(grid_cost(coarse, lab, g) for g in others):
        return []
    return [k for k, c in enumerate(costs) if c <= best / (1.0 - margin)]


Structure = tuple[float, list[tuple[np.ndarray, int]]]  #: (coarse cost, [(v, L), ...])


def _once(found: list[Structure]) -> list[Structure]:
    """``found`` with each structure once: a later one with the same runs, or the same
    runs reversed (the same coarse cost), is left out. O(S q m)."""
    seen, out = set(), []
    for cost, runs in found:
        key = tuple((tuple(v.tolist()), length) for v, length in runs)
        if key not in seen and key[::-1] not in seen:
            seen.add(key)
            out.append((cost, runs))
    return out


def structure_starts(model, order: np.ndarray, most: int = STARTS_MOST,
                     stop: Callable[[], bool] = lambda: False,
                     beam_stop: Callable[[], bool] | None = None) -> list[tuple[str, np.ndarray]]:
    """Up to ``most`` dealt structures, lowest coarse cost first, named by their run
    lengths (``structure: runs 4+1+4+3``): the enumerated ones, joined by the beams'
    (solver.structure_beam; until ``beam_stop()``, default ``stop``) where the cheapest
    of those is cheaper by more than BEAM_LEAD or the enumeration found none, each
    structure once; none above STRUCTURE_MAX_N devices, when no
    coarse level is a clear cut (CLEAR_CUT), when the fabric has no classes or too many
    vectors (COVER), or when ``stop()`` turns true first. ``order``: the devices in an
    order that keeps a host's devices together (label order; the search passes its
    first order: the labels', else the clustering's)."""
    w = model.workload
    if w.d_pp < 2 or w.d_dp < 2 or model.n > STRUCTURE_MAX_N or stop() or clear_cut(model) < CLEAR_CUT:
        return []
    lab = classes(model)
    if lab is None:
        return []
    coarse = Coarse(model, lab)
    vecs = vectors(coarse, w.d_dp)
    if vecs is None:
        return []
    while True:
        try:
            found = best_structures(coarse, vecs, w.d_pp, most, stop=stop)
            break
        except OverflowError:
            vecs = vecs[: len(vecs) // 2]
        except Stopped:
            return []
    beam_stop = stop if beam_stop is None else beam_stop
    beams = beam_structures(coarse, vecs, w.d_pp, most, stop=beam_stop) if BEAMS else []
    if beams and (not found or beams[0][0] < (1.0 - BEAM_LEAD) * found[0][0]):
        found = _once(sorted(beams + found, key=lambda f: f[0]))[:most]  # ties: the beams' first
    return [(f"{NAME} runs {'+'.join(str(length) for _, length in runs)}", deal(lab, order, runs))
            for _, runs in found]
