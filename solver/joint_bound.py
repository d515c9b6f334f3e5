"""A joint lower bound on Comm that couples DataP and Pipeline through cheap components.

Fix a threshold ``t`` and let ``K_1 .. K_m`` (sizes ``z_c``) be the connected components
of the graph of device pairs with ``T_pp < t``. Call a pipeline edge *cheap* when its
bottleneck matching is below ``t``: then every matched pair lies inside one component,
so the two stage groups hold the same number of devices of each component, i.e. the same
*component vector* ``v`` (``v_c`` = devices of ``K_c``, ``sum_c v_c = D_DP``). An edge
that is not cheap costs at least ``t``; every edge costs at least ``m_1``, the cheapest
link. With ``x`` edges not cheap, the ``D_PP`` groups in pipeline order fall into at
most ``x + 1`` *runs* of equal vectors; a run of length ``L`` with vector ``v`` uses
``L v`` devices, so::

    z = sum_j L_j v_j,    sum_j L_j = D_PP,   at most x + 1 terms              (*)

A group with vector ``v`` has DataP at least
``D(v) = max_{c: v_c > 0} min_{d in K_c} sum_{c'} (sum of the v_c' - [c = c'] smallest
T_dp[d, .] over K_c' minus d)``. Every device also sits in some group, so with the
*device floor* ``f_d(v)`` (the sum above for one device ``d`` of ``K_c``, infinite when
``v_c = 0``) a decomposition with vectors ``v_1 .. v_q`` has DataP at least
``max_d min_j f_d(v_j)``: a device the pairwise floors cannot hide (a host with a slow
NIC, say) pays its dear links in whichever group holds it. For each ``x``::

    Comm >= max(P_sep, 2 ((D_PP - 1 - x) m_1 + x t)) + max(D_sep, Dmin(x + 1))

where ``Dmin(q)`` is the least ``max_j D(v_j)`` over decompositions (*) with at most ``q``
terms, and ``P_sep``, ``D_sep`` are the separate bounds (solver.bounds). The bound for
``t`` is the minimum over ``x``; the reported bound is the maximum over thresholds.
Every step relaxes the problem, so the value never exceeds the optimum.

Exactness and cost. For each ``x`` the decompositions into ``x + 1`` runs are searched
depth first (``_Runs``) with the vectors sorted by ``D(v)``: pieces are chosen in rising
DataP, and a branch ends at the first vector with ``D(v) >= best - pipe``, where
``best`` is the least Comm floor found so far (over this and the smaller ``x``) and
``pipe`` this ``x``'s Pipeline floor. The last term of a decomposition is determined by
the others, and the last two are matched in one numpy pass (``_pairs``: for each first
piece and length the second is ``(rem - L v) / L'``, looked up by an integer key), so
``q`` terms cost ``O((|V| D_PP)^(q - 2))`` Python steps of ``O(|V| D_PP m)`` array work.
Each decomposition is priced with the device floors (``F``: ``N x |V|`` values, kept
while that is at most FLOOR_CELLS; O(N q)), then, only if that leaves it below ``best``,
with its edge floors in the best order (every order up to ORDER_EXACT_MAX runs, a
spanning-tree floor above). When the search passes NODE_LIMIT nodes or the budget,
``Dmin(x + 1)`` stands in, found by bisection over the distinct ``D(v)`` with the same
search for feasibility; if that runs out too, the least ``D(v)`` not yet ruled out (all
weaker, still valid, values). On the SYNTHETIC hierarchical suite (benchmarks/), 1 s
budget, this search with the sorted vectors and the numpy pairs raised the 80-GPU
10 x 8 instance's bound from 25.33 to 32.26 (gap against the best known 42% -> 27%) and
the 192-GPU 8 x 24 one's from 23.44 to 26.63 (37% -> 28%), where the earlier search
(vectors in lexicographic order, a fixed cap, at most 4 runs searched, Python pairs)
ran out of nodes at three components; on a second draw of the suite (other seeds) the
8 x 24 bound went from 22.10 to 29.83 and 10 x 8 from 21.50 to 26.53. The other
instances kept their values.
Thresholds are the distinct minimum-spanning-tree weights (where components merge), tried from
few components to many while the vector count ``|V| <= VECTOR_LIMIT`` and the budget
lasts. The budget is counted in search nodes (NODES_PER_SECOND per second asked for),
so the value does not depend on machine load. Building ``D`` costs ``O(N |V| m)``.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from solver.spanning import spanning_tree

#: Most component vectors enumerated for one threshold.
VECTOR_LIMIT = 20_000
#: Most run terms whose decompositions are searched exactly (above: Dmin stands in).
QMAX = 64
#: Largest N x |V| for which the device floors F are kept (float64 cells, 32 MB).
FLOOR_CELLS = 4_000_000
#: Most search nodes per (threshold, delta) feasibility test before giving up (valid).
NODE_LIMIT = 200_000
#: Search nodes granted per second of time budget. The budget is counted in nodes, not
#: read from the clock, so the bound is the same on a fast and on a loaded machine; the
#: clock is only a safety net at SAFETY x the budget. Measured on a quiet 2-core machine,
#: 1 s budgets on two draws of the benchmark suite: 104-296 thousand counted nodes per
#: second (a decomposition's orders and numpy pairs are charged about what they cost),
#: so a budget of s seconds took about s seconds or less (0.34-1.19 s for 1 s, two runs).
NODES_PER_SECOND = 100_000
SAFETY = 10.0
#: Matrix cells of a threshold's O(N^2) set-up counted as one search node.
SETUP_CELLS_PER_NODE = 256


class _Work:
    """Search nodes left for the whole bound, the safety deadline, and a caller's stop
    (a cancel ends the work as a spent budget does: the weaker values stand, still valid)."""

    def __init__(self, seconds: float, stop: Callable[[], bool] = lambda: False) -> None:
        self.left = int(NODES_PER_SECOND * seconds)
        self.deadline = time.monotonic() + SAFETY * seconds + 0.5
        self.stop = stop

    def spent(self) -> bool:
        return self.left <= 0 or time.monotonic() > self.deadline or self.stop()


def _vectors(z: np.ndarray, r: int) -> np.ndarray | None:
    """All integer vectors ``0 <= v <= z`` with ``sum v = r`` (None above VECTOR_LIMIT)."""
    cur = np.zeros((1, 0), dtype=np.int64)
    left_cap = np.concatenate([np.cumsum(z[::-1])[::-1][1:], [0]])  # capacity after c
    for c, cap in enumerate(np.minimum(z, r)):
        used = cur.sum(axis=1)
        parts = []
        for k in range(int(cap) + 1):
            ok = (used + k <= r) & (used + k + left_cap[c] >= r)
            if ok.any():
                parts.append(np.hstack([cur[ok], np.full((int(ok.sum()), 1), k, dtype=np.int64)]))
        cur = np.vstack(parts) if parts else np.zeros((0, c + 1), dtype=np.int64)
        if len(cur) > VECTOR_LIMIT:
            return None
    return cur


def _cumulative(t_dp: np.ndarray, labels: np.ndarray, m: int, r: int) -> np.ndarray:
    """``cum[d, c, k]``: sum of the k smallest ``T_dp[d, e]``, e in component c, e != d."""
    n = t_dp.shape[0]
    cum = np.full((n, m, r + 1), np.inf)
    cum[:, :, 0] = 0.0
    for c in range(m):
        members = np.flatnonzero(labels == c)
        block = t_dp[:, members]  # a copy (fancy indexing)
        block[members, np.arange(len(members))] = np.inf  # d is not its own peer
        k = min(r, len(members))
        if k < len(members):  # only the k smallest are needed: select, then sort those
            block.partition(k - 1, axis=1)
        block = np.sort(block[:, :k], axis=1)
        cum[:, c, 1:k + 1] = np.cumsum(block, axis=1)
    return cum


def _group_data_p(cum: np.ndarray, labels: np.ndarray, vecs: np.ndarray,
                  keep_devices: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """``D(v)`` for every row of ``vecs``, and (when ``keep_devices``) the device floors
    ``F[d, i] = f_d(vecs[i])`` (inf where ``vecs[i]`` holds no device of d's component;
    see the module text). O(N |V| m) time, O(N |V|) memory for F."""
    m = vecs.shape[1]
    out = np.full(len(vecs), -np.inf)
    floors = np.full((len(labels), len(vecs)), np.inf) if keep_devices else None
    cols = np.arange(m)
    for c in range(m):
        members = np.flatnonzero(labels == c)
        present = vecs[:, c] > 0
        if not present.any() or len(members) == 0:
            continue
        idx = vecs[present].copy()
        idx[:, c] -= 1
        best = np.full(len(idx), np.inf)
        where = np.flatnonzero(present)
        for chunk in range(0, len(members), 64):
            part = members[chunk:chunk + 64]
            vals = cum[part][:, cols[None, :], idx].sum(axis=2)  # (d, |V|)
            best = np.minimum(best, vals.min(axis=0))
            if floors is not None:
                floors[np.ix_(part, where)] = vals
        out[present] = np.maximum(out[present], best)
    return out, floors


class _VectorIndex:
    """Row of each vector in ``vecs``, by an integer key (the vector in base ``radix``,
    default max + 1; rows looked up must have every entry below it, or two rows could
    share a key); ``usable`` is False when that key would not fit in 62 bits."""

    def __init__(self, vecs: np.ndarray, radix: int | None = None) -> None:
        if radix is None:
            radix = int(vecs.max()) + 1 if len(vecs) else 1
        self.usable = len(vecs) > 0 and vecs.shape[1] * np.log2(max(radix, 2)) < 62
        if self.usable:
            self.place = radix ** np.arange(vecs.shape[1], dtype=np.int64)
            keys = vecs @ self.place
            self.order = np.argsort(keys, kind="stable")
            self.keys = keys[self.order]

    def lookup(self, rows: np.ndarray) -> np.ndarray:
        """Row in ``vecs`` of each of ``rows``, -1 where it is not one of them."""
        keys = rows @ self.place
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[at] == keys, self.order[at], -1)


def _pairs(vecs: np.ndarray, index: _VectorIndex, cand: np.ndarray, rem: np.ndarray,
           length: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Every ``(i, j)`` with ``i`` in ``cand``, ``j >= i`` and ``rem = L vecs[i] + L' vecs[j]``
    for some ``L + L' = length`` (``L, L' >= 1``), as two arrays, and the number of
    (candidate, L) cells tested (the work). One numpy pass, O(length |cand| m)."""
    cand = cand[(vecs[cand] <= rem).all(axis=1)]
    if not len(cand) or length < 2:
        return cand[:0], cand[:0], 0
    size = np.arange(1, length)[:, None, None]
    left = rem - size * vecs[cand][None]  # (L, cand, m)
    rest = length - size
    ok = (left >= 0).all(axis=2) & (left % rest == 0).all(axis=2)
    at_size, at_cand = np.nonzero(ok)
    i = cand[at_cand]
    j = index.lookup(left[at_size, at_cand] // rest[at_size, 0]) if len(i) else i
    good = j >= i
    return i[good], j[good], ok.size


class _Search:
    """Node counting shared by the depth-first searches below: past NODE_LIMIT nodes, the
    work budget or the safety deadline, ``_tick`` raises OverflowError (the caller then
    falls back to a weaker valid value)."""

    def __init__(self, work: _Work) -> None:
        self.work = work
        self.nodes = 0

    def _tick(self, nodes: int = 1) -> None:
        self.nodes += nodes
        self.work.left -= nodes
        if self.nodes > NODE_LIMIT or self.work.left <= 0 or time.monotonic() > self.work.deadline:
            raise OverflowError


class _Decompositions(_Search):
    """Exact search for (*) with vectors from an allowed set (see the module text)."""

    def __init__(self, vecs: np.ndarray, allowed: np.ndarray, work: _Work) -> None:
        super().__init__(work)
        self.vecs = vecs[allowed]
        self.keys = {tuple(v) for v in self.vecs.tolist()}
        # the radix of all vectors: remainders looked up can hold counts the allowed lack
        self.index = _VectorIndex(self.vecs, int(vecs.max()) + 1 if len(vecs) else 1)

    def feasible(self, rem: np.ndarray, length: int, q: int, first: int = 0) -> bool:
        """Can ``rem`` be written as at most ``q`` terms ``L v`` with ``sum L = length``?

        Raises OverflowError past NODE_LIMIT nodes or when the work is spent (the caller
        then falls back to a weaker valid value)."""
        self._tick()
        if length == 0:
            return not rem.any()
        if not (rem % length).any() and tuple((rem // length).tolist()) in self.keys:
            return True  # one term (fewer terms than q are allowed)
        if q == 1:
            return False
        if q == 2 and self.index.usable:
            i, _, tested = _pairs(self.vecs, self.index, np.arange(first, len(self.vecs)), rem, length)
            self._tick(1 + tested // 16)
            return len(i) > 0
        fits = np.flatnonzero((self.vecs[first:] <= rem).all(axis=1)) + first
        for i in fits.tolist():
            v = self.vecs[i]
            for size in range(1, length):
                left = rem - size * v
                if (left < 0).any():
                    break
                if self.feasible(left, length - size, q - 1, i):
                    return True
        return False


def _dmin(values: np.ndarray, vecs: np.ndarray, z: np.ndarray, p: int, q: int,
          work: _Work) -> float:
    """Least ``delta`` with a decomposition of at most ``q`` terms (or the valid fallback):
    bisection over the distinct ``D(v)``, since a decomposition within ``delta`` is one
    within every larger value."""
    levels = np.unique(values)
    lo, hi = 0, len(levels)  # levels[hi] is feasible (hi == len: none known yet)
    fallback = float(levels[0])  # every level below lo is infeasible
    while lo < hi:
        mid = (lo + hi) // 2
        if work.spent():
            return fallback
        try:
            ok = _Decompositions(vecs, values <= levels[mid], work).feasible(z.copy(), p, q)
        except OverflowError:
            return fallback
        if ok:
            hi = mid
        else:
            lo = mid + 1
            fallback = float(levels[lo]) if lo < len(levels) else np.inf
    return float(levels[lo]) if lo < len(levels) else np.inf  # inf: no decomposition at all


def _pair_floor(t_pp: np.ndarray, labels: np.ndarray, m: int) -> np.ndarray:
    """``C[c, c']``: the cheapest link between components c and c' (inside c on the diagonal)."""
    n = t_pp.shape[0]
    off = np.where(np.eye(n, dtype=bool), np.inf, t_pp)
    out = np.full((m, m), np.inf)
    for c in range(m):  # per column, the cheapest link from c; then per component: O(N^2)
        np.minimum.at(out[c], labels, off[labels == c].min(axis=0))
    return out


#: Most components whose row subsets ``_EdgeFloor`` tests all (2^m of them; one floor
#: took 0.42 s at 16, and it is not interrupted).
HALL_EXACT_MAX = 12


class _EdgeFloor:
    """``B(v, v')``: least bottleneck over transport plans between two component vectors.

    An edge between stage groups with vectors v and v' matches v_c devices of component c
    to devices of v', so it costs at least the least threshold theta at which a plan
    using only pairs with ``C[c, c'] <= theta`` exists. Feasibility by Hall's condition
    over the 2^m row subsets: ``sum_{c in S} v_c <= sum_{c' in N(S)} v'_c'``. Above
    HALL_EXACT_MAX components only the single rows and the whole set are tested: fewer
    conditions hold at a threshold no higher, so the floor stays valid (32 components,
    each a device whose links all tie, built 2^32 subsets: 32 GiB asked for)."""

    def __init__(self, floor: np.ndarray, vecs: np.ndarray, work: _Work) -> None:
        self.floor, self.vecs, self.work = floor, vecs, work
        m = floor.shape[0]
        self.levels = np.unique(floor[np.isfinite(floor)])
        if m <= HALL_EXACT_MAX:
            self.subsets = ((np.arange(1, 1 << m)[:, None] >> np.arange(m)) & 1).astype(bool)
        else:
            self.subsets = np.vstack([np.eye(m, dtype=bool), np.ones((1, m), dtype=bool)])
        self.cost = 4 + (len(self.subsets) + 1) * m // 32  # in search nodes, for the work budget
        self.cache: dict[tuple[int, int], float] = {}

    def __call__(self, i: int, j: int) -> float:
        key = (i, j) if i < j else (j, i)
        if key not in self.cache:
            self.cache[key] = self._solve(self.vecs[key[0]], self.vecs[key[1]])
            self.work.left -= self.cost
        return self.cache[key]

    def _solve(self, v: np.ndarray, w: np.ndarray) -> float:
        for theta in self.levels:
            allowed = self.floor <= theta
            need = self.subsets @ v
            reach = (self.subsets.astype(int) @ allowed.astype(int)) > 0  # N(S) per subset
            if (need <= reach @ w).all():
                return float(theta)
        return float(self.levels[-1])


#: Most pieces whose orders are all tried; above, a spanning-tree floor stands in.
ORDER_EXACT_MAX = 6
_ORDERS: dict[int, list[tuple[int, ...]]] = {}


def _orders_of(q: int) -> list[tuple[int, ...]]:
    """Orders of ``q`` pieces, one of each order and its reverse (B is symmetric)."""
    from itertools import permutations

    if q not in _ORDERS:
        _ORDERS[q] = [o for o in permutations(range(q)) if o[0] < o[-1]] if q > 1 else [(0,)]
    return _ORDERS[q]


def _ordered_cost(pieces: list[int], edge: _EdgeFloor) -> float:
    """Least sum of B over consecutive pieces, over orders with consecutive pieces
    distinct: every order up to ORDER_EXACT_MAX pieces (``q! / 2``); above, the weight of
    a minimum spanning tree of the pieces under B, which no order (a path through every
    piece) undercuts, so the bound stays valid. ``q^2`` floors B either way."""
    q = len(pieces)
    if q < 2:
        return 0.0
    c = np.array([[edge(a, b) if a != b else np.inf for b in pieces] for a in pieces])
    if q <= ORDER_EXACT_MAX:
        return min(sum(c[o[k], o[k + 1]] for k in range(q - 1)) for o in _orders_of(q))
    inside = np.zeros(q, dtype=bool)  # Prim, O(q^2)
    inside[0] = True
    reach = c[0].copy()
    total = 0.0
    for _ in range(q - 1):
        reach[inside] = np.inf
        k = int(np.argmin(reach))
        total += reach[k]
        inside[k] = True
        reach = np.minimum(reach, c[k])
    return float(total)


class _Runs(_Search):
    """All decompositions (*) into exactly ``q`` pieces, scored with ordered edge floors.

    ``vecs`` come sorted by ``D(v)`` (``values``), so the pieces of a decomposition are
    chosen in rising DataP and the search stops a branch at the first vector whose
    ``D(v)`` already reaches ``best - pipe`` (``pipe``: the least Pipeline floor with
    this many dear edges; ``best``: the least Comm floor found so far, which falls as
    the search goes). The last two pieces are matched in numpy: for each first piece
    and length, the second is ``(rem - L v) / L'``, looked up by an integer key."""

    def __init__(self, vecs, values, edge: _EdgeFloor, work: _Work, score, floors=None,
                 pipe: float = 0.0, best: float = np.inf) -> None:
        super().__init__(work)
        self.vecs, self.values, self.edge, self.score = vecs, values, edge, score
        self.floors = floors
        self.pipe, self.best = pipe, best
        self.index = {tuple(v): i for i, v in enumerate(vecs.tolist())}
        self.vector_index = _VectorIndex(vecs)

    def _leaf(self, pieces: list[int], dmax: float) -> None:
        d = dmax
        if self.floors is not None:  # every device sits in one of these groups
            d = max(d, float(self.floors[:, pieces].min(axis=1).max()))
            self.work.left -= len(self.floors) * len(pieces) // 256
            if d > self.best - self.pipe:
                return  # Comm >= d + pipe already reaches the best: no order needed
        q = len(pieces)  # the orders tried and the q^2 floors, in nodes
        self.work.left -= q * q + (len(_orders_of(q)) * (q - 1) // 8 if q <= ORDER_EXACT_MAX else q * q)
        self.best = min(self.best, self.score(d, _ordered_cost(pieces, self.edge)))

    def search(self, rem, length, q, first, chosen, dmax, cap) -> None:
        self._tick()
        cap = min(cap, self.best - self.pipe)
        if q == 1:
            if (rem % length).any():
                return
            last = self.index.get(tuple((rem // length).tolist()))
            if last is None or last < first or self.values[last] > cap:
                return
            self._leaf(chosen + [last], max(dmax, float(self.values[last])))
            return
        if q == 2 and self.vector_index.usable:
            self._last_two(rem, length, first, chosen, dmax, cap)
            return
        hi = int(np.searchsorted(self.values, cap, side="right"))
        ok = (self.vecs[first:hi] <= rem).all(axis=1)
        for i in (np.flatnonzero(ok) + first).tolist():
            if self.values[i] > self.best - self.pipe:
                break  # the best fell while this branch was searched
            v = self.vecs[i]
            for size in range(1, length - q + 2):
                left = rem - size * v
                if (left < 0).any():
                    break
                self.search(left, length - size, q - 1, i, chosen + [i], max(dmax, float(self.values[i])), cap)

    def _last_two(self, rem, length, first, chosen, dmax, cap) -> None:
        """``rem = L v_i + L' v_j`` with ``first <= i <= j``, ``L + L' = length``."""
        hi = int(np.searchsorted(self.values, cap, side="right"))
        i, j, tested = _pairs(self.vecs, self.vector_index, np.arange(first, max(first, hi)), rem, length)
        self._tick(1 + tested // 16)
        good = self.values[j] <= cap  # search() lowered cap to best - pipe just before
        for a, b in zip(i[good].tolist(), j[good].tolist()):
            if self.values[b] <= self.best - self.pipe:  # the best may fall on the way
                self._leaf(chosen + [a, b], max(dmax, float(self.values[b])))


def threshold_bound(t_pp, t_dp, d_pp, d_dp, t, p_sep, d_sep, work: _Work,
                    components: tuple[int, np.ndarray]) -> float | None:
    """The bound for one threshold ``t`` whose ``components`` (``(m, labels)`` of the
    pairs with ``T_pp < t``) are given; None when there are too many vectors."""
    n = t_pp.shape[0]
    m, labels = components
    z = np.bincount(labels, minlength=m).astype(np.int64)
    vecs = _vectors(z, d_dp)
    if vecs is None or m < 2:
        return None
    values, floors = _group_data_p(_cumulative(t_dp, labels, m, d_dp), labels, vecs,
                                   keep_devices=n * len(vecs) <= FLOOR_CELLS)
    by_value = np.argsort(values, kind="stable")  # _Runs chooses pieces in rising D(v)
    vecs, values = vecs[by_value], values[by_value]
    floors = floors[:, by_value] if floors is not None else None
    work.left -= len(vecs) * n // 64  # building D counts against the budget too
    m1 = float(t_pp[~np.eye(n, dtype=bool)].min())
    edge = _EdgeFloor(_pair_floor(t_pp, labels, m), vecs, work)
    best = np.inf
    for x in range(d_pp):
        pipe = max(p_sep, 2.0 * ((d_pp - 1 - x) * m1 + x * t))
        if pipe + d_sep >= best:
            break  # pipe only grows with x and the DataP part is at least d_sep
        best = min(best, _bound_for(x, pipe, m1, d_pp, p_sep, d_sep, vecs, values, floors, z, edge, work, best))
    return best


def _bound_for(x, pipe, m1, d_pp, p_sep, d_sep, vecs, values, floors, z, edge, work, best) -> float:
    """Least Comm floor over placements with exactly ``x`` edges not cheap."""
    if x + 1 > QMAX:
        return pipe + max(d_sep, float(values.min()))

    def score(dmax: float, edges: float) -> float:
        return max(d_sep, dmax) + max(p_sep, 2.0 * ((d_pp - 1 - x) * m1 + edges))

    runs = _Runs(vecs, values, edge, work, score, floors, pipe=pipe, best=best + 1e-12 if np.isfinite(best) else np.inf)
    try:
        runs.search(z.copy(), d_pp, x + 1, 0, [], -np.inf, np.inf)
    except OverflowError:  # too many decompositions: the weaker run-count bound
        return pipe + max(d_sep, _dmin(values, vecs, z, d_pp, x + 1, work))
    return runs.best


def joint_bound(model, p_sep: float, d_sep: float, time_budget_s: float,
                stop: Callable[[], bool] = lambda: False) -> tuple[float, float | None]:
    """``(value, threshold)``: the best bound over thresholds (value -inf if none applied).
    ``stop()`` true ends the work early (a cancel), as the budget does."""
    w = model.workload
    if w.d_pp < 2 or w.d_dp < 2:
        return -np.inf, None
    work = _Work(time_budget_s, stop)
    best, at = -np.inf, None
    tree = spanning_tree(model)
    # each threshold's peer sums and pair floors are O(N^2) array work (0.7-1 s at 4096
    # devices): charged after its search, and a next threshold starts only while the work
    # left covers its set-up (the first always runs)
    setup = model.n * model.n // SETUP_CELLS_PER_NODE
    for k, t in enumerate(tree.thresholds()):
        if work.spent() or (k > 0 and work.left < setup):
            break
        value = threshold_bound(model.t_pp, model.t_dp, w.d_pp, w.d_dp, float(t), p_sep, d_sep, work,
                                tree.components(float(t)))
        work.left -= setup
        if value is None:
            break  # below this threshold there are more components, so more vectors
        if value > best:
            best, at = value, float(t)
    return best, at
