"""Segment rebalancing and gathering: one move across the ridge between two layouts of a run.

Take a coarse level of the fabric: the components ``K_1 .. K_m`` of the graph of device
pairs with ``T_pp < t``, ``t`` one of the largest minimum-spanning-tree weights (regions,
say). A pipeline edge is cheap at that level only when both stage groups hold the same
number of devices of every component (solver.joint_bound). A segment of ``k``
consecutive stage groups whose component counts add up to a multiple of ``k`` but whose
vectors differ pays for dear edges inside it; moving each group's surplus devices to
the groups short of them gives every group the vector ``total / k`` in one move. Swap
walks reach that layout only through worse ones: each single swap on the way makes one
more edge dear (a barrier of two dear links on a Comm of a few dozen seconds), which
the tempering ladder crosses rarely.

A run whose counts ``k`` does not divide (say 58 and 38 devices of two components over
four groups of 24) cannot be equal, but it can be nearly so: each group gets ``total /
k`` rounded per component (summing to ``D_DP``), and the group just before or just after
the run takes what is left, ``anchor + total - k v``, when that stays non-negative
(``_anchored``; at most four roundings, fewest devices moved first). On the 192-GPU
8 x 24 suite instance a walk ended with groups (5, 2, 17), (0, 11, 13) x 2, (0, 18, 6) x 2
at one level; the move to (5, 0, 19), (0, 15, 9) x 4 took it from 41.25 s to 37.33 s. On
two 80-GPU 10 x 8 layouts it gained 1.2 s and 0.4 s. It roughly doubles the time of a
rebalancing pass.

The opposite move, *gathering*: a run's devices dealt into whole groups (``_gathered``),
so each component fills groups of its own and at most ``m - 1`` groups mix. Where DataP
across components rules Comm, every group of the run must change at once before the
largest DataP falls, and each single swap only adds dear edges. On the 64-GPU 16 x 4
suite instance two of nine walk results (38.25 s, 39.48 s) went to 35.30 s and 36.58 s in one gathering move, where rebalancing found nothing;
35.30 s is below every earlier run's best (35.55 s). A gathered run is descended only
when it already beats the grid in the current order. Default stop rule, seeds 0-3 on
the seven suite instances: mean +2.98% above the best known without it, +2.06% with
it (4 x 12: +5.6% -> +1.2%, a basin at +16.5% gone; 16 x 4: +9.2% -> +7.6%); at
``--time-limit 30`` on 16 x 4, seeds 0-2, above 35.55 s: +0.5 / +2.7 / -0.4% against
+3.1 / +7.4 / +9.2%.

Gathering deals each component ``total_c // D_DP`` groups of its own and packs only the
remainders into mixed groups, largest first (dealing whole components largest first
would split a component that fills whole groups over two mixed groups whenever a larger
one comes before it). A gathered run is often worse at first: the region it empties
leaves groups whose hosts no longer line up. A gathered candidate that does not beat
the grid but lies within FOLLOW_SLACK of it is therefore polished (exact matchings and
pipeline order) and followed by one rebalancing move at the fine level (equal,
anchored, gathered or split over the hosts), and kept if the pair beats the grid. On a
10 s result of the 64-GPU 16 x 4 suite instance (draw 0, 38.23 s), where the eight GPUs
of one region sat two a group in four groups beside the leftovers of two others, the
gathered run scored 40.4 s in the current order (exact matchings), and with the
polish and the host-level move after it 35.12 s; no single move found anything. That
call took 0.9 s against 0.3 s without the follow-up (a slack of 15% lets more
candidates through; this one was 6% worse). Putting the gathered groups in the order of
the cheapest component changes before scoring them was tried and dropped: on five 10 s
layouts (16 x 4 and 10 x 8) it found nothing more (35.47 against 35.12 s on the one
above) and took 20-45% longer.

A third move, *splitting*, works at the finest level of near-identical devices (the
hosts: ``fine_level``). Inside a run of groups that mix coarse components (say two GPUs
of each of two regions per group, so every pipeline stays on its hosts), an edge is
cheap only when every pipeline stays on its host across it, which needs the two groups'
host vectors equal. A run whose hosts change at different edges in different pipelines
pays one dear edge per change; the same devices dealt into two sub-runs of ``k1`` and
``k - k1`` groups, each with one equal vector (``_split_runs``: per host, a multiple of
``k1`` to the first sub-run and of ``k - k1`` to the second, fewest devices moved first),
change hosts at one edge. On a 10 s result of the 80-GPU 10 x 8 suite instance it moved
45.44 s to 45.12 s where neither other move found anything. Default stop rule (exact),
against the search without it: draw 0, seeds 0-2, mean of h64-8x8 / h80 / h96 0.5-0.7%
lower, 16 x 4 1.9% higher; draw 1, seeds 0-1, h48 / h80 / 16 x 4 / h192 all lower (h192
52.80 -> 50.04 s). At ``--time-limit 10`` on draw 1 (seeds 0-2) h64-8x8 -0.8%, h192
-1.1%, h96 -0.2%, h80 +0.1% and 16 x 4 +2.6% (its 16-stage scan costs closing time).

Which devices move: a group gives away the surplus devices with the smallest mean
``T_dp`` to the segment's other groups (the cheapest to carry elsewhere), and takes,
of each component it lacks, the free devices with the smallest sum to the devices it
keeps.

Cost per pass: per level, the ``O(D_PP^2)`` segments are tested on prefix sums of the
component counts (``O(m)`` each); a rebalanced segment is scored in the current order
(the ``k + 1`` bottleneck matchings around it and the new groups' DataP), and the TRY
best of each kind (equal, gathered, split) are descended for DESCENT_SWEEPS local-search
sweeps (polish first: exact matchings and order). Gathering scores one more candidate per
segment, about doubling the scan (16 x 4 suite grid: 0.3 s -> 0.6-0.7 s a pass).
Splitting tries, at the fine level only, each segment's ``k - 1`` split points with at
most SPLIT_MOST count vectors each (a depth-first search over the hosts' admissible
shares, at most SPLIT_NODES nodes): about 0.06 s a pass on the 16 x 4 and 10 x 8 grids.
Levels come from the model's minimum spanning tree (solver.spanning, built once per
model, O(N^2)), then O(N) each. Each candidate is redealt and scored in solver/redeal.c
when the kernels are loaded (``_Scorer.redealt``: the greedy of ``_redeal``, 23 us a
candidate on the 16 x 4 grid and 95 us on the 8 x 24 one against 0.4-0.6 ms in Python),
which took a 16 x 4 walk's rebalancing from 4.3 s to 1.7 s of a 10 s solve (one worker)
and left the time to the tempering ladder; at ``--time-limit 10``, seeds 0-3, mean Comm
fell on five of eight suite instances (h80 draw 0 45.05 -> 44.25 s, h96 draw 1 41.24 ->
40.78 s, 16 x 4 draw 1 24.45 -> 24.19 s) and moved within noise on the rest. The time
saved went to more candidates: TRY 2 -> 3 descended per kind and SPLIT_MOST 4 -> 8
count vectors per split point (kicks included), which at ``--time-limit 10``, seeds 0-3,
lowered the mean Comm on six of seven suite instances (16 x 4 draw 0 36.13 -> 35.07 s,
h80 draw 1 31.68 -> 30.96 s, h192 draw 0 36.90 -> 36.68 s; h80 draw 0 44.55 -> 44.64 s).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from solver import native
from solver.matching import bottleneck_matching
from solver.spanning import spanning_tree

#: Coarsest levels tried (distinct component partitions with 2..MAX_COMPONENTS parts).
LEVELS = 3
MAX_COMPONENTS = 16
#: Whether a segment whose counts do not divide may trade with the group beside it.
ANCHORED = True
#: Whether segments are also *gathered*: their devices dealt so that each component fills
#: whole groups (``_gathered``); such a candidate is descended only when it already
#: beats the current grid in the current order.
GATHER = True
#: Whether runs are also *split* at the fine level: dealt into two sub-runs of equal host
#: vectors each (``_split_runs``).
SPLIT = True
#: Count vectors tried per split point, and the most search nodes spent finding them.
SPLIT_MOST = 8
SPLIT_NODES = 500
#: The fine level's components: at most N / FINE_SHARE (hosts of two or more devices),
#: cut where one tree weight is at least FINE_JUMP times the one below it.
FINE_SHARE = 2
FINE_JUMP = 2.0
#: Whether gathered segments that do not beat the grid yet, but lie within FOLLOW_SLACK
#: of it, are followed by one rebalancing move at the fine level (``split_labels``).
FOLLOW = True
FOLLOW_SLACK = 0.15
#: Gathered segments followed per pass (the best by their Comm in the current order).
FOLLOW_TRY = 2
#: Whether candidates are redealt and scored in solver/redeal.c when it is loaded (the
#: Python greedy otherwise, about 1 ms of interpreter time a candidate).
REDEAL_NATIVE = True
#: Most improving rebalances applied in one call.
MAX_MOVES = 4
#: Rebalanced segments descended per pass, and as many gathered and as many split ones
#: (the best by their Comm in the current order)...
TRY = 3
#: ... each for this many local-search sweeps (N^2 scored swaps each).
DESCENT_SWEEPS = 1.0


def level_cuts(model, most: int = LEVELS) -> list[tuple[float, np.ndarray]]:
    """``(threshold, labels)`` of the coarsest ``most`` levels (fewest components first):
    each level's components are those of the tree links below its threshold."""
    tree = spanning_tree(model)
    out: list[tuple[float, np.ndarray]] = []
    seen: set[bytes] = set()
    for t in tree.thresholds():
        m, labels = tree.components(float(t))
        if m > MAX_COMPONENTS or len(out) >= most:
            break
        if m >= 2 and labels.tobytes() not in seen:
            seen.add(labels.tobytes())
            out.append((float(t), labels.astype(np.int64)))
    return out


def levels(model, most: int = LEVELS) -> list[np.ndarray]:
    """Component labels of the coarsest ``most`` levels (fewest components first)."""
    return [labels for _, labels in level_cuts(model, most)]


def fine_level(model) -> np.ndarray | None:
    """Component labels of the finest clear level (hosts, say): the cut of the minimum
    spanning tree between two consecutive weights at least FINE_JUMP apart that leaves
    the most components, among cuts leaving 2 .. N / FINE_SHARE; None when there is no
    such cut (every tree edge within a factor FINE_JUMP of the next). O(N) after the
    tree."""
    tree = spanning_tree(model)
    w = np.sort(tree.weights)
    n = model.n
    for i in range(max(0, n - 1 - n // FINE_SHARE), len(w) - 1):  # most components first
        # the i + 1 lightest edges kept: n - i - 1 components (at most n // FINE_SHARE)
        if w[i + 1] >= FINE_JUMP * max(w[i], np.finfo(float).tiny):
            return tree.components(float((w[i] + w[i + 1]) / 2))[1].astype(np.int64)
    return None


def _split_runs(vec: np.ndarray, k1: int, most: int = SPLIT_MOST,
                nodes: int = SPLIT_NODES) -> list[np.ndarray]:
    """Targets for a segment (``vec``: its ``(k, m)`` counts) dealt into a first sub-run
    of ``k1`` groups and a second of ``k - k1``, each with one equal vector: component c
    gives the first sub-run ``x_c``, a multiple of ``k1`` whose rest ``total_c - x_c`` is
    a multiple of ``k - k1``, and the ``x_c`` add up to ``D_DP k1``. Depth-first over the
    components with fewest choices first, each trying its shares nearest to what the
    first sub-run holds now; the ``most`` solutions moving the fewest devices (of those
    found within ``nodes`` search nodes) that differ from ``vec``, as ``(k, m)``
    targets. O(nodes + most k m)."""
    k, m = vec.shape
    k2 = k - k1
    total = vec.sum(axis=0)
    now = vec[:k1].sum(axis=0)
    choices = []
    for c in range(m):
        xs = [x for x in range(0, int(total[c]) + 1, k1) if (total[c] - x) % k2 == 0]
        if not xs:
            return []
        choices.append(sorted(xs, key=lambda x, c=c: (abs(x - int(now[c])), x)))
    order = sorted(range(m), key=lambda c: (len(choices[c]), c))
    low = np.zeros(m + 1, dtype=np.int64)
    high = np.zeros(m + 1, dtype=np.int64)
    for j in range(m - 1, -1, -1):
        low[j] = low[j + 1] + min(choices[order[j]])
        high[j] = high[j + 1] + max(choices[order[j]])
    need = int(vec[0].sum()) * k1
    found: list[tuple[int, np.ndarray]] = []
    x = np.zeros(m, dtype=np.int64)
    left = [nodes]

    def search(j: int, s: int, moved: int) -> None:
        left[0] -= 1
        if left[0] < 0 or s + low[j] > need or s + high[j] < need:
            return
        if j == m:
            found.append((moved, x.copy()))
            return
        c = order[j]
        for v in choices[c]:
            x[c] = v
            search(j + 1, s + v, moved + abs(v - int(now[c])))

    search(0, 0, 0)
    out = []
    for _, xs in sorted(found, key=lambda f: f[0]):
        t = np.vstack([np.tile(xs // k1, (k1, 1)), np.tile((total - xs) // k2, (k2, 1))])
        if (t != vec).any():
            out.append(t)
        if len(out) >= most:
            break
    return out


def _counts(grid: np.ndarray, lab: np.ndarray) -> np.ndarray:
    """``(D_PP, m)``: each stage group's devices per component, in pipeline order."""
    m = int(lab.max()) + 1
    return np.stack([np.bincount(lab[grid[:, s]], minlength=m) for s in range(grid.shape[1])])


def signature(grid: np.ndarray, level_labels: list[np.ndarray]) -> bytes:
    """The stage groups' component vectors at every level, in pipeline order: what decides
    which segments ``rebalance`` tries."""
    return b"".join(_counts(grid, lab).tobytes() for lab in level_labels)


def _redeal(t_dp: np.ndarray, cols: list[np.ndarray], lab: np.ndarray, targets: np.ndarray) -> list[np.ndarray]:
    """The segment's groups with the component counts ``targets[j]`` (module text)."""
    keep: list[list[int]] = []
    free: dict[int, list[int]] = {}
    for j, col in enumerate(cols):
        target = targets[j]
        kept = list(col)
        surplus_of = np.flatnonzero(np.bincount(lab[col], minlength=len(target)) > target)
        if len(surplus_of):
            others = np.sort(np.concatenate(cols[:j] + cols[j + 1:]))  # the segment's other devices
        for c in surplus_of:
            members = [d for d in kept if lab[d] == c]
            surplus = len(members) - int(target[c])
            cost = t_dp[np.ix_(members, others)].mean(axis=1)  # cheapest to carry elsewhere
            gone = {members[i] for i in np.argsort(cost, kind="stable")[:surplus]}
            free.setdefault(int(c), []).extend(sorted(gone))
            kept = [d for d in kept if d not in gone]
        keep.append(kept)
    out = []
    for kept, target in zip(keep, targets):
        counts = np.bincount(lab[kept], minlength=len(target))
        for c in np.flatnonzero(counts < target):
            pool = free[int(c)]
            need = int(target[c] - counts[c])
            cost = t_dp[np.ix_(pool, kept)].sum(axis=1) if kept else np.zeros(len(pool))
            chosen = {pool[i] for i in np.argsort(cost, kind="stable")[:need]}
            free[int(c)] = [d for d in pool if d not in chosen]
            kept = kept + sorted(chosen)
        out.append(np.asarray(kept, dtype=int))
    return out


def _targets(total: np.ndarray, k: int) -> np.ndarray | None:
    """Equal per-group component counts for a segment of ``k`` groups holding ``total``
    (None when ``k`` does not divide it)."""
    return None if (total % k).any() else np.tile(total // k, (k, 1))


def _anchored(total: np.ndarray, k: int, anchor: np.ndarray, most: int = 4) -> list[np.ndarray]:
    """Equal vectors ``v`` for a segment of ``k`` groups whose total ``k`` does not
    divide, with the group next to it (count vector ``anchor``) taking the rest:
    ``anchor + total - k v`` must stay non-negative. ``v`` rounds ``total / k`` down or
    up per component (summing to ``D_DP``); rounding down is always feasible, rounding
    component c up only when ``anchor_c + total_c - k (low_c + 1) >= 0``. The roundings
    that move the fewest devices (the largest remainders rounded up) come first; at most
    ``most``. Returns ``(k + 1, m)`` targets, the anchor's first. O(m log m + most m)."""
    from itertools import combinations, islice

    low = total // k
    rem = total - k * low
    up = int(total.sum() // k - low.sum())
    ok = np.flatnonzero((rem > 0) & (anchor + total - k * (low + 1) >= 0))
    if up < 0 or up > len(ok):
        return []
    ok = ok[np.argsort(-rem[ok], kind="stable")]  # largest remainder first
    out = []
    for chosen in islice(combinations(ok.tolist(), up), most):
        v = low.copy()
        v[list(chosen)] += 1
        out.append(np.vstack([anchor + total - k * v, np.tile(v, (k, 1))]))
    return out


def _gathered(vec: np.ndarray) -> np.ndarray:
    """Per-group component counts for a segment (``vec``: its ``(k, m)`` counts) whose
    devices fill whole groups: component c gets ``total_c // D_DP`` groups of its own,
    and the remainders (``total_c mod D_DP``, largest first) are dealt in turn into the
    ``sum remainders / D_DP`` mixed groups, so a component whose count fills whole
    groups is never split and each remainder spans at most two mixed groups; each group,
    those with the largest single-component count first, takes the dealt vector that
    shares most devices with its own (greedy; ties go to the first dealt). O(k^2 m)."""
    total = vec.sum(axis=0)
    k, r = vec.shape[0], int(vec[0].sum())
    m = vec.shape[1]
    rows = vec.tolist()
    pool = [[r if c == d else 0 for d in range(m)] for c in range(m) for _ in range(int(total[c]) // r)]
    rem = total % r
    order = np.argsort(-rem, kind="stable")
    dealt = np.repeat(order, rem[order]).tolist()
    for i in range(0, len(dealt), r):
        counts = [0] * m
        for c in dealt[i:i + r]:
            counts[c] += 1
        pool.append(counts)
    out = np.empty_like(vec)
    for j in np.argsort(-vec.max(axis=1), kind="stable").tolist():
        mine = rows[j]
        shared = [sum(map(min, mine, other)) for other in pool]
        best = shared.index(max(shared))  # the most shared devices, the first dealt on ties
        out[j] = pool.pop(best)
    return out


class _Scorer:
    """Comm of the groups with groups ``a .. b`` replaced, in the current order and with
    exact matchings: only the new groups' DataP and the edges ``a - 1 .. b`` are
    computed (``b - a + 3`` bottleneck matchings at most), the rest is kept."""

    def __init__(self, model, cols: list[np.ndarray]) -> None:
        self.model = model
        self.cols = cols
        self.dp = np.array([self._data_p(c) for c in cols])
        self.edges = np.array([self._edge(x, y) for x, y in zip(cols, cols[1:])])
        self._native = None
        if REDEAL_NATIVE and native.redealer() is not None and len(cols) > 1:
            keep = (np.ascontiguousarray(model.t_dp, dtype=float),
                    np.ascontiguousarray(model.t_pp, dtype=float),
                    np.ascontiguousarray(np.stack(cols), dtype=np.int64),
                    np.ascontiguousarray(self.dp, dtype=float),
                    np.ascontiguousarray(self.edges, dtype=float))
            self._keep = keep  # the arrays behind the addresses below
            self._native = (native.redealer(), [a.ctypes.data for a in keep], keep[2].shape)
            self._labs: dict[int, tuple] = {}

    def _data_p(self, col: np.ndarray) -> float:
        return float(self.model.t_dp[np.ix_(col, col)].sum(axis=1).max())

    def _edge(self, x: np.ndarray, y: np.ndarray) -> float:
        return float(bottleneck_matching(self.model.t_pp[np.ix_(x, y)])[0])

    def current(self) -> float:
        """Comm of the groups as given, in their order, with exact matchings."""
        return float(self.dp.max() + 2.0 * self.edges.sum())

    def redealt(self, lo: int, hi: int, lab: np.ndarray, targets: np.ndarray) -> tuple[float, list[np.ndarray]]:
        """The groups with ``lo .. hi`` redealt to ``targets`` (``_redeal``) and their Comm
        (``comm``): in solver/redeal.c when it is loaded (same greedy; sums in another
        order, so costs equal in exact arithmetic may break ties differently), else in
        Python."""
        if self._native is not None:
            fn, (t_dp, t_pp, cols, dp, edges), (p, r) = self._native
            if id(lab) not in self._labs:
                labs = np.ascontiguousarray(lab, dtype=np.int64)
                # the C side indexes counts by label: the components it needs, or None
                need = int(labs.max()) + 1 if len(labs) == self.model.n and labs.min() >= 0 else None
                self._labs[id(lab)] = (lab, labs, labs.ctypes.data, need)  # lab kept: its id stays its own
            labs, address, need = self._labs[id(lab)][1:]
            t = np.ascontiguousarray(targets, dtype=np.int64)
            out = np.empty((hi - lo + 1, r), dtype=np.int64)
            fits = need is not None and need <= t.shape[1] and 0 <= lo <= hi < p and t.shape[0] == hi - lo + 1
            value = float("nan") if not fits else fn(self.model.n, t_dp, t_pp, address, t.shape[1], p, r, cols,
                                                      dp, edges, lo, hi, t.ctypes.data, out.ctypes.data)
            if value == value:  # NaN: out of memory, or targets it cannot meet; Python answers
                return value, self.cols[:lo] + list(out) + self.cols[hi + 1:]
        new = self.cols[:lo] + _redeal(self.model.t_dp, self.cols[lo:hi + 1], lab, targets) + self.cols[hi + 1:]
        return self.comm(new, lo, hi), new

    def comm(self, new: list[np.ndarray], a: int, b: int) -> float:
        p = len(new)
        outside = np.concatenate([self.dp[:a], self.dp[b + 1:]])
        data_p = max([self._data_p(c) for c in new[a:b + 1]] + outside.tolist())
        lo, hi = max(a - 1, 0), min(b, p - 2)  # edges that touch a new group
        pipe = float(self.edges[:lo].sum() + self.edges[hi + 1:].sum())
        pipe += sum(self._edge(new[e], new[e + 1]) for e in range(lo, hi + 1))
        return data_p + 2.0 * pipe


def _splits(model, grid: np.ndarray, cols: list[np.ndarray], lab: np.ndarray, scorer: _Scorer,
            best: float, stop: Callable[[], bool]) -> list[tuple[float, int, list[np.ndarray]]] | None:
    """Every segment of ``grid`` (its groups ``cols``) dealt into two sub-runs of equal
    vectors at level ``lab`` (``_split_runs``), scored in the current order; those that
    beat ``best``, as ``(Comm, index, groups)``. None when ``stop()`` said so."""
    vec = _counts(grid, lab)
    p = len(cols)
    out: list[tuple[float, int, list[np.ndarray]]] = []
    for a in range(p - 1):
        if stop():
            return None
        for b in range(a + 1, p):
            for k1 in range(1, b - a + 1):
                for t in _split_runs(vec[a:b + 1], k1):
                    comm, new = scorer.redealt(a, b, lab, t)
                    if comm < best - 1e-12 * abs(best):
                        out.append((comm, len(out), new))
    return out


def rebalance(model, grid: np.ndarray, level_labels: list[np.ndarray], fun: float,
              rng: np.random.Generator, stop: Callable[[], bool] = lambda: False,
              sweeps: float = DESCENT_SWEEPS,
              split_labels: np.ndarray | None = None, follow: bool | None = None,
              moves: int = MAX_MOVES) -> tuple[np.ndarray, float, int] | None:
    """Improving segment rebalances of ``grid`` (Comm ``fun``): per pass, the TRY best
    rebalanced segments, the TRY best gathered ones and the TRY best split ones (at the
    level ``split_labels``, when given) that beat the grid (all scored in the current
    order) are descended briefly; with ``follow`` (default FOLLOW), the FOLLOW_TRY best
    gathered ones that do not beat it but lie within FOLLOW_SLACK are polished and given
    one move of this function at the level ``split_labels`` (without a follow of its
    own). The best is kept if it beats the current grid. ``(grid, Comm, swaps scored)`` or None."""
    from solver.descent import Effort, descend, polish

    follow = (FOLLOW if follow is None else follow) and split_labels is not None
    best_grid, best = grid, fun
    moved, nfev = False, 0
    for _ in range(moves):
        cols = [best_grid[:, s] for s in range(best_grid.shape[1])]
        p = len(cols)
        found: list[tuple[float, int, list[np.ndarray]]] = []
        gathered: list[tuple[float, int, list[np.ndarray]]] = []
        near: list[tuple[float, int, list[np.ndarray]]] = []  # gathered, not yet better
        scorer = _Scorer(model, cols)
        for lab in level_labels:
            vec = _counts(best_grid, lab)
            pre = np.vstack([np.zeros((1, vec.shape[1]), dtype=np.int64), np.cumsum(vec, axis=0)])
            for a in range(p - 1):
                for b in range(a + 1, p):
                    total = pre[b + 1] - pre[a]
                    targets = _targets(total, b - a + 1)
                    tries = []
                    if targets is not None:
                        if not (vec[a:b + 1] == targets).all():
                            tries = [(a, b, targets)]
                    elif ANCHORED:  # the group before or after the segment takes the rest
                        tries = [(a - 1, b, t) for t in _anchored(total, b - a + 1, vec[a - 1])] if a else []
                        if b + 1 < p:
                            tries += [(a, b + 1, t[np.r_[1:len(t), 0]])
                                      for t in _anchored(total, b - a + 1, vec[b + 1])]
                    if (tries or GATHER) and stop():
                        return (best_grid, best, nfev) if moved else None
                    for lo, hi, t in tries:
                        comm, new = scorer.redealt(lo, hi, lab, t)
                        found.append((comm, len(found), new))
                    if GATHER:
                        t = _gathered(vec[a:b + 1])
                        if (t != vec[a:b + 1]).any():
                            comm, new = scorer.redealt(a, b, lab, t)
                            if comm < best - 1e-12 * abs(best):
                                gathered.append((comm, len(gathered), new))
                            elif follow and comm < best * (1.0 + FOLLOW_SLACK):
                                near.append((comm, len(near), new))
        split = ([] if split_labels is None or not SPLIT
                 else _splits(model, best_grid, cols, split_labels, scorer, best, stop))
        if split is None:
            return (best_grid, best, nfev) if moved else None
        better = None
        first = lambda f: (f[0], f[1])  # noqa: E731
        for _, _, new in (sorted(found, key=first)[:TRY] + sorted(gathered, key=first)[:TRY]
                          + sorted(split, key=first)[:TRY]):
            effort = Effort(int(sweeps * model.n * model.n), stop)
            state = descend(model, np.stack(new, axis=1), rng, effort)  # descend polishes first
            nfev += effort.nfev
            if state.score < (better[1] if better else best) - 1e-12 * abs(best):
                better = (state.grid.copy(), float(state.score))
        for _, _, new in sorted(near, key=first)[:FOLLOW_TRY]:  # gathered, then a fine move
            if stop():
                break
            effort = Effort(0, stop)
            cand = polish(model, np.stack(new, axis=1), effort)
            nfev += effort.nfev
            comm = model.score_grid(cand).comm
            out = rebalance(model, cand, [split_labels], comm, rng, stop, sweeps, split_labels,
                            follow=False, moves=1) or (cand, comm, 0)
            nfev += out[2]
            if out[1] < (better[1] if better else best) - 1e-12 * abs(best):
                better = (out[0].copy(), float(out[1]))
        if better is None:
            break
        best_grid, best = better
        moved = True
    return (best_grid, best, nfev) if moved else None
