"""Parallel tempering over as-launched grids: K chains, a compiled kernel or numpy.

State: K grids ``G_k`` (``D_DP x D_PP``, scored as launched, solver.cost) with per-chain
column DataP values and pipeline edge values. Chain ``k`` runs at temperature ``T_k``;
the temperatures form a geometric ladder from ``TAU_COLD`` to ``TAU_HOT`` times the
start's Comm. One *step* proposes, in every chain at once, the swap of two random grid
positions and scores it incrementally:

- DataP: only the swapped devices' columns change; each device keeps the sum of its
  ``T_dp`` to its column's peers, so the two columns' new sums cost O(D_DP) (a device
  that stays loses ``T_dp[d, gone]`` and gains ``T_dp[d, came]``), the rest comes from
  the stored column values;
- Pipeline: only edges ``s1 - 1, s1, s2 - 1, s2`` change; each is recomputed over its
  D_DP links (O(D_DP) per chain), duplicates counted once;

and accepts it by Metropolis, ``u < exp(-(E' - E) / T_k)``. In the compiled kernel a
share (1/8) of the proposals instead swaps two whole columns, i.e. two stage groups'
places in the pipeline order: every column keeps its devices, so only the (at most four)
edges beside them are rescored, O(D_DP). Device swaps alone reorder the pipeline only
through layouts that break stage groups apart. On the 16-stage 16 x 4 suite instance a
40 s run (seed 0) reached 38.92 s without the column swaps and 36.49 s with them (seeds
3 and 4: 35.62 and 36.49); at 10 s the suite's figures moved within their noise.
Another 1/8 swaps two pipelines' devices right of one edge (rows ``r1``, ``r2``, columns
``e + 1 ..``): every column keeps its devices and only edge ``e`` changes, so one edge's
matching is re-paired in one move, where device swaps inside a column move a crossing
to the next edge and need a cascade along the pipeline. Default stop rule (exact, no
clock), seeds 0-6 on the seven suite instances: mean +3.08% above the best known without
these swaps, +2.56% with them (16 x 4: +11.6% -> +8.9%; 10 x 8: +2.8% -> +2.0%; 12 x 8
and 8 x 24 about 0.2 points worse), in 17% less wall time.
A further 1/16 (BLOCK_SHARE) swaps two pipeline *segments*: row ``r1``'s devices in
columns ``a .. a + L - 1`` with row ``r2``'s in ``b .. b + L - 1`` (2 <= L <= 4, the two
ranges disjoint; ``a`` is drawn first, and a draw that leaves no room for ``b`` is spent
as it is: up to 1/3 of the segment proposals at 4 stages, 1/5 at 8, none from 11). On
hierarchical fabrics a host often holds a run of one pipeline's stages (its links
inside cost 0.03 s where a crossing costs 4-5 s); moving that run to
other stage groups whole keeps those links, where device swaps break them one at a time,
each step uphill by about a crossing, so the cold rungs never trade a region crossing
for DataP. Each of the 2L columns changes one device (its peer sums, O(D_DP)) and the
edges beside and inside the ranges are rescored: O(L D_DP + D_PP) a proposal. One
session, ``--time-limit 10``, 2 workers, seeds 0-4, mean Comm without -> with (each
instance both ways one after the other): 12 x 8 draw 9 47.40 -> 46.70 s, draw 3 35.08 ->
34.88 s, draw 1 39.14 -> 38.74 s, draw 5 39.46 -> 39.33 s; 16 x 4 draw 5 47.66 -> 47.48 s,
draw 0 34.36 -> 34.32 s; 10 x 8 draw 3 41.34 -> 41.06 s (one seed at 39.81 s, the lowest
found), draw 5 25.23 s both; 8 x 24 draw 3 38.47 -> 38.10 s, draw 1 41.79 -> 42.18 s
(seeds at 40.65-44.37 and 40.88-45.89 s: two basins either way), draw 5 36.57 -> 37.27 s
(one seed at 41.09 s, the other four at 35.95-36.93 s against 36.05-37.09 s); 8 x 8
draw 0 23.93 -> 23.92 s; 4 x 12 draw 2 31.01 s both. A share of 1/8 in the same
session: 12 x 8 draw 1 39.18 s, 8 x 24 draw 1 43.06 s, 10 x 8 draw 5 25.21 s, 12 x 8
draw 5 39.35 s, 16 x 4 draw 0 34.32 s: no better than 1/16 and worse on two. Tried later
in the same session, not kept (same 10 s runs; the 1/16 rule's own runs of the same
seeds, then, first):
segments of up to 6 stages (``-DBLOCK_MOST=6``; up to D_PP / 2) 12 x 8 draw 9 47.00 ->
46.87 s, draw 1 39.13 -> 39.05 s, draw 0 43.97 s both, draw 4 21.88 -> 21.97 s; 10 x 8
draw 3 40.36 -> 39.95 s, draw 0 43.86 -> 43.88 s, draw 1 30.89 -> 30.87 s; 16 x 4 draw 5
47.46 -> 47.13 s, draw 1 23.56 s both: within the runs' noise (the 1/16 rule's draw-9 12
x 8 gave 46.70 s in the first comparison, 47.00 s in this one). Half the segments holding
a critical position (as the device swaps' first pick): 46.83, 40.34, 39.17 and 47.50 s
on the first four of those.
The rest of the kernel's proposals (CRIT_SHARE in solver/tempering.c, 3/4 of all less
the segment swaps' 1/16, at least three stage groups) pick the first device of the swap
among the *critical* ones:
half the time a device of the column with the largest DataP, half an end of a random
edge's slowest link (an O(D_DP) scan); the partner is uniform for half of them, guided
for the other half (below). Comm is a maximum plus a sum of maxima, so a swap that
touches neither the largest column nor a slowest link cannot lower it on the coldest rung, and uniform picks spent most proposals there. The
proposal is no longer symmetric, so the chains do not sample the Boltzmann weights
exactly; the search wants low states, not samples. Measured in one session at
``--time-limit 10``, 2 workers, seeds 0-4, mean Comm with uniform picks, 1/4 and 1/2
critical, and 3/4: 12 x 8 draw 0 44.09, 43.97, 43.97, 43.96 s; 8 x 24 draw 0 36.73,
36.74, 36.73, 36.58 s; 16 x 4 draw 0 34.34, 34.36, 34.32, 34.35 s; 10 x 8 draw 1 31.00,
30.96, 30.82, 30.91 s; 12 x 8 draw 1 40.36, 40.38, 40.33, 39.77 s (3/4: every seed in
the 39.7-39.8 s basin, one in five before; two in five in the README's tables run of the
same seeds). At 3/4 in the same session, against the previous release's tables (quoted):
8 x 24 draw 1 48.74 -> 46.08 s (45.18 s), 10 x 8 draw 0 44.13 -> 44.03 s (43.66 s), the
other suite instances within noise. Tried in the same session, not kept (means on 10 x
8, 12 x 8 and 8 x 24 of draw 0, then of draw 1; this rule's two runs of the same seeds
gave 44.03 / 44.02, 43.96 / 44.02, 36.58 / 36.59, 30.91 / 30.99, 39.77 / 40.25 and 46.08
/ 46.22 s): picking the Comm term in proportion to its size (the largest column by its
DataP, an edge by twice its value), 44.14, 43.95, 36.48, 31.09, 40.28 and 45.82 s; that
for half the critical picks, 44.14, 43.87, 36.95, 30.84, 40.10 and 46.53 s: within the
runs' noise.

Guided partners (GUIDE_SHARE in solver/tempering.c): half the critical picks draw the
partner among the 4 devices nearest (``T_pp``; NEAR_USE of the NEAR = 8 kept) the other
end of the picked slow link, or nearest (``T_dp``) another device of the largest column
(``near_devices``, O(N^2) once a model), in place of a uniform draw; the kernel keeps
each chain's device positions (rebuilt at each call, O(N); every accepted move updates
the devices it moved). At 192 GPUs a uniform partner is the host mate that mends a
crossing once in 191 draws. One
session, ``--time-limit 10``, 2 workers, seeds 0-4, mean Comm without -> with: 8 x 24
draw 1 43.59 -> 40.87 s (seeds 5-14: 43.53 -> 42.74 s), draw 5 36.89 -> 36.00 s (seeds
5-14: 36.65 -> 36.47 s), draw 3 38.42 -> 38.55 s, draw 0 36.57 -> 36.53 s; 10 x 8 draw
3 41.15 -> 40.70 s, draw 0 43.96 -> 43.83 s; 12 x 8 draw 9 47.15 -> 46.96 s, draw 0
43.95 -> 43.81 s, draw 1 39.31 -> 39.37 s, draw 4 21.80 -> 21.73 s; 16 x 4 draw 5 47.45
-> 47.33 s; the other five of 16 instances within 0.15% (the README's "Guided partners"
table). Every critical pick guided: 10 x 8 draw 3 39.85 s
(against 40.46 s at half, same session), 12 x 8 draw 1 40.06 s (39.08 s): not kept.
Those figures drew among all 8; among the nearest 4, against 8 in one session (seeds
0-4, then 5-9): 10 x 8 draw 3 39.91 / 39.88 s against 40.39 / 41.36 s (every seed in
the 39.8 s basin), 16 x 4 draw 5 47.01 / 47.35 s against 47.52 / 47.49 s, 8 x 24 draw
1 42.74 / 41.66 s against 43.11 / 42.94 s, 12 x 8 draw 9 46.98 / 47.29 s against 46.97
/ 47.09 s; five instances of draws 0 and 1 within 0.2% (the README's "Guided
partners").

The energy of rung ``l`` is ``E_l = Comm + lambda_l S`` with the smoothing term
``S = mean_s DataP(s) + 2 sum_s mean_r T_pp[G[r, s], G[r, s + 1]]`` and ``lambda_l``
rising linearly from 0 on the coldest rung to SMOOTHING on the hottest: Comm is a sum
of maxima, flat wherever a change does not touch the slowest link or the worst device,
and the hot rungs see through those plateaus while the cold ones sample Comm itself.
Every ``EXCHANGE_EVERY`` steps, chains on neighbouring rungs ``l, l + 1`` exchange
rungs with probability ``min(1, exp((E_l(x) - E_l(y)) / T_l + (E_{l+1}(y) - E_{l+1}(x)) / T_{l+1}))``
(replica exchange with rung-dependent energies; Hukushima and Nemoto, 1996; Sugita,
Kitao and Okamoto, 2000), so a state found hot can cool and a cold chain stuck in a
basin can warm up and leave it. One proposal costs O(D_DP) in the compiled kernel
(solver/tempering.c, about 0.15 us: it keeps each chain's DataP total, largest column
and edge totals, and walks the other columns, O(D_PP), only when the proposal touches
the column with the largest DataP); the numpy steps here (the fallback, plain
Comm on every rung) cost O(K D_DP) array work per step of all K chains, a few us a
proposal.

Why: the descents of solver.anytime re-solve matchings and pipeline orders exactly, which
costs milliseconds per descent (Held-Karp at 16 stages: 0.1 s in numpy, 11 ms compiled);
on hierarchical fabrics the good layouts lie several block exchanges away from every
topology start, and a Metropolis walk over millions of cheap swaps crosses those ridges
where a few hundred
descents cannot (measured with benchmarks/anytime.py; figures in solver.anytime). The
ladder needs no schedule, so its answer keeps improving with the time given.
Cost per step of all K chains: O(K D_DP) expected in the kernel, O(K (D_DP + D_PP)) at
worst and in numpy.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from solver import native

#: The ladder's coldest and hottest temperatures, times the start's Comm. A hottest rung
#: at 4% left the 80-GPU 10 x 8 suite instance at +6% to +9% of the best known after
#: 10 s (its basins differ by a few seconds of DataP in a three-group segment); at 10%,
#: +1.0% to +3.4% over 3 seeds, the others as good or better; at 20% worse again (12 x 8:
#: up to +10%).
TAU_COLD = 2e-4
TAU_HOT = 0.10
#: Chains of one ladder. Measured in one session at ``--time-limit 10``, 2 workers, seeds
#: 0-4, mean Comm against 48 chains: 16 x 4 draw 0 36.02 -> 34.50 s (48 chains, seeds
#: 5-9: 36.42 s, two seeds at 38.6-40.4 s), 10 x 8 draw 0 44.41 -> 44.07 s, 12 x 8 draw 1
#: 40.78 -> 40.48 s, 10 x 8 draw 1 31.24 -> 31.11 s; 8 x 8 draw 1, 12 x 8 draw 0, 8 x 24
#: draws 0 and 1 within noise (19.94 -> 19.97, 43.99 -> 44.08, 36.95 -> 37.02, 48.36 ->
#: 49.39 s on a plateau whose seeds range 45-50 s). A chain of a smaller ladder takes more
#: steps in the same time; with 32 chains the figures were between, with 16 the
#: 12 x 8 draw-0 instance had two seeds in a basin 6-9% above (mean 45.36 s).
CHAINS = 24
EXCHANGE_EVERY = 20
#: Guided partners kept per device (NEAR in solver/tempering.c).
NEAR = 8
#: Seconds of kernel work between two stop tests (cancel, deadline).
CHUNK_S = 0.02
#: Weight of the smoothing term on the hottest rung (0 on the coldest; kernel only).
SMOOTHING = 0.6


def near_devices(model) -> np.ndarray:
    """(2 N, NEAR) int64: each device's NEAR nearest others by ``model.t_pp`` (rows 0 ..
    N - 1), then by ``model.t_dp``; nearest first, self excluded, cycled when N - 1 <
    NEAR. Cached on the model (every ladder of every round uses it)."""
    near = model.__dict__.get("_near_devices")
    if near is not None:
        return near
    n = model.t_pp.shape[0]
    cut = min(NEAR, n - 1)
    out = np.zeros((2 * n, NEAR), dtype=np.int64)
    if cut > 0:
        for half, t in enumerate((model.t_pp, model.t_dp)):
            for lo in range(0, n, 256):
                rows = np.arange(lo, min(n, lo + 256))
                key = np.array(t[rows], dtype=float)
                key[np.arange(len(rows)), rows] = np.inf
                ids = np.argpartition(key, cut - 1, axis=1)[:, :cut]
                ids = np.take_along_axis(ids, np.argsort(np.take_along_axis(key, ids, axis=1), axis=1,
                                                         kind="stable"), axis=1)
                out[half * n + rows] = ids[:, np.arange(NEAR) % cut]
    model.__dict__["_near_devices"] = out
    return out


class Ladder:
    """K tempering chains on one cost model; ``run`` advances them, ``best`` is kept."""

    def __init__(self, model, grid: np.ndarray, rng: np.random.Generator, chains: int = CHAINS,
                 use_native: bool = True) -> None:
        self.use_native = use_native
        self.model = model
        self.rng_state = rng.integers(1, 2**63, size=4, dtype=np.int64).view(np.uint64)  # kernel's stream
        self.t_pp = np.ascontiguousarray(model.t_pp, dtype=np.float64)
        self.t_dp = np.ascontiguousarray(model.t_dp, dtype=np.float64)
        g = np.ascontiguousarray(grid, dtype=np.int64)
        self.r, self.p = g.shape
        self.k = int(chains)
        self.rng = rng
        score = model.score_grid(g)
        self.grids = np.repeat(g[None], self.k, axis=0)
        self.col_dp = np.repeat(score.stage_data_p[None], self.k, axis=0)
        self.sums = np.repeat(self._sums(g)[None], self.k, axis=0)  # (k, n) by device
        self.edges = np.repeat(score.edge_s[None], self.k, axis=0)
        self.energy = np.full(self.k, score.comm)
        self._smooth()
        e0 = float(self.energy[0])
        scale = e0 if e0 > 0 else 1.0  # a Comm of 0 leaves nothing to improve
        self.temps = scale * np.geomspace(TAU_COLD, TAU_HOT, self.k)  # temps[c] of chain c
        self.best = float(e0)
        self.best_grid = g.copy()
        self.steps = 0

    def _sums(self, g: np.ndarray) -> np.ndarray:
        """Per device, the sum of ``T_dp`` to the peers of its column."""
        out = np.empty(g.size)
        for col in g.T:
            out[col] = self.t_dp[np.ix_(col, col)].sum(axis=1)
        return out

    def _load(self, c: int, g: np.ndarray) -> None:
        """Chain ``c``'s grid, column DataP, peer sums, edges and Comm, from scratch."""
        score = self.model.score_grid(g)
        self.grids[c] = g
        self.col_dp[c], self.edges[c], self.energy[c] = score.stage_data_p, score.edge_s, score.comm
        self.sums[c] = self._sums(g)

    def inject(self, grid: np.ndarray, fun: float) -> None:
        """Put ``grid`` into the coldest chain (an elite found elsewhere)."""
        c = int(np.argmin(self.temps))
        g = np.asarray(grid, dtype=np.int64)
        self._load(c, g)
        self._smooth()
        if self.energy[c] < self.best:
            self.best, self.best_grid = float(self.energy[c]), g.copy()

    def _draws(self, count: int):
        """Random proposals and acceptance thresholds for ``count`` steps at once."""
        k, r, p = self.k, self.r, self.p
        n = r * p
        rng = self.rng
        i = rng.integers(n, size=(count, k))
        j = (i + 1 + rng.integers(n - 1, size=(count, k))) % n
        s12 = np.empty((count, k, 2), dtype=np.int64)
        s12[..., 0], s12[..., 1] = i % p, j % p
        e = np.empty((count, k, 4), dtype=np.int64)  # edges s1 - 1, s1, s2 - 1, s2
        e[..., 0], e[..., 1], e[..., 2], e[..., 3] = s12[..., 0] - 1, s12[..., 0], s12[..., 1] - 1, s12[..., 1]
        ok = (e >= 0) & (e <= p - 2)
        ok[..., 2] &= (e[..., 2] != e[..., 0]) & (e[..., 2] != e[..., 1])
        ok[..., 3] &= (e[..., 3] != e[..., 0]) & (e[..., 3] != e[..., 1])
        ec = np.clip(e, 0, max(p - 2, 0))
        neg_log_u = -np.log1p(-rng.random((count, k)))  # Metropolis: accept delta <= T (-ln u)
        return i, j, s12, ok, ec, neg_log_u

    def run(self, steps: int, stop=lambda: False, on_best=lambda f: None) -> int:
        """Advance every chain ``steps`` steps (fewer if ``stop()``); returns steps done.

        The compiled kernel (solver.native) does the steps where it is available, numpy
        otherwise; each is a pure function of the ladder and ``steps`` (the two draw
        different random numbers, so their chains differ). Afterwards the chains' sums,
        DataP, edges and energies are recomputed from their grids, so rounding never
        accumulates across walks, and ``best`` is the best grid's score from scratch."""
        before = self.best
        fn = native.kernel() if self.use_native else None
        done = self._run_native(fn, steps, stop, on_best) if fn is not None else None
        if done is None:  # no kernel, or it refused these sizes
            done = self._run_numpy(steps, stop)
        self.steps += done
        self._resync()
        if self.best < before - 1e-12 * abs(before):
            on_best(self.best)
        return done

    def _resync(self) -> None:
        for c in range(self.k):
            self._load(c, self.grids[c].copy())
        self._smooth()
        self.best = self._score(self.best_grid)

    def _means(self, g: np.ndarray) -> np.ndarray:
        if self.p < 2:
            return np.zeros(0)
        return self.t_pp[g[:, :-1], g[:, 1:]].mean(axis=0)

    def _smooth(self) -> None:
        """Per-edge mean links and the surrogate energy the chains accept by."""
        self.means = np.ascontiguousarray([self._means(g) for g in self.grids]).reshape(self.k, -1)
        self.smooth = np.ascontiguousarray(self.col_dp.mean(axis=1) + 2.0 * self.means.sum(axis=1))

    def _score(self, g: np.ndarray) -> float:
        return float(self.model.score_grid(g).comm)

    def _run_native(self, fn, steps: int, stop, on_best) -> int | None:
        """Steps in the compiled kernel, in chunks of about CHUNK_S seconds between stop
        tests; None (nothing done) if the kernel refuses the sizes."""
        k, r, p = self.k, self.r, self.p
        order = np.argsort(self.temps, kind="stable").astype(np.int64)
        rung_temp = np.ascontiguousarray(self.temps[order])
        best = ctypes.c_double(self.best)
        best_grid = np.ascontiguousarray(self.best_grid.ravel(), dtype=np.int64)
        arrays = [self.t_pp, self.t_dp, self.grids, self.sums, self.col_dp, self.edges,
                  self.energy, order, rung_temp, self.rng_state]
        rung_lam = np.ascontiguousarray(SMOOTHING * np.linspace(0.0, 1.0, k))
        kinds = {np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.uint64)}
        if not all(a.flags.c_contiguous and a.dtype in kinds for a in arrays + [self.means, self.smooth]):
            return None  # never hand the kernel memory laid out otherwise
        ptrs = [a.ctypes.data for a in arrays]
        near = near_devices(self.model)  # the kernel's guided partners
        tail = (self.means.ctypes.data, self.smooth.ctypes.data, rung_lam.ctypes.data, near.ctypes.data)
        done, chunk, told = 0, 8, self.best
        while done < steps and not stop():
            now = min(chunk, steps - done)
            if done + now < steps:  # calls end on exchange steps (see solver/tempering.c)
                start = self.steps + done
                end = (start + now) // EXCHANGE_EVERY * EXCHANGE_EVERY
                if end <= start:
                    end = (start // EXCHANGE_EVERY + 1) * EXCHANGE_EVERY
                now = min(end - start, steps - done)
            t0 = time.perf_counter()
            code = fn(k, r, p, *ptrs, self.steps + done, now, EXCHANGE_EVERY, ctypes.byref(best),
                      best_grid.ctypes.data, *tail)
            if code != 0:
                if done == 0:
                    self.use_native = False
                    return None
                break
            done += now
            if best.value < told - 1e-9 * abs(told):  # the anytime trace, as it happens
                told = best.value
                on_best(self._score(best_grid.reshape(r, p)))  # exact, not the running sums
            spent = time.perf_counter() - t0
            chunk = int(min(max(1, chunk * 4), max(1, now * CHUNK_S / max(spent, 1e-6))))
        self.temps[order] = rung_temp
        if best.value < self.best:
            self.best_grid = best_grid.reshape(r, p).copy()
            self.best = best.value
        return done

    def _run_numpy(self, steps: int, stop, check_every: int = 64) -> int:
        """Steps in numpy; random numbers are drawn ``check_every`` steps at a time (so the
        chains depend on how the steps are split into calls, unlike the kernel's)."""
        k, r, p = self.k, self.r, self.p
        n = r * p
        chain = np.arange(k)
        rows3, rows2 = chain[:, None, None], chain[:, None]
        tpp, tdp = self.t_pp.ravel(), self.t_dp.ravel()
        down = p * np.arange(r)  # flat offsets of one column's replicas
        flat = self.grids.reshape(k, n)  # a view: writes reach self.grids
        edge_sum = self.edges.sum(axis=1)
        done = 0
        while done < steps:
            if stop():
                break
            block = min(check_every, steps - done)
            draws = self._draws(block)
            same = draws[2][..., 0] == draws[2][..., 1]
            for t in range(block):
                i, j, s12, ok, ec, nlu = (d[t] for d in draws[:6])
                new = flat.copy()
                a, b = flat[chain, i], flat[chain, j]
                new[chain, i], new[chain, j] = b, a
                cols = new[rows3, s12[:, :, None] + down]  # (k, 2, r): the new columns
                # peer sums of the two new columns: d's sum loses T[d, gone], gains
                # T[d, came]; the device that came gets its sum over the new column. A
                # swap inside one column (same) keeps every sum: gone = came = a there.
                gone = np.empty((k, 2, 1), dtype=np.int64)
                gone[:, 0, 0] = a
                gone[:, 1, 0] = np.where(same[t], a, b)
                came = gone[:, ::-1]
                t_came = tdp[cols * n + came]
                sums = np.where(cols == came, t_came.sum(axis=2, keepdims=True),
                                self.sums[rows3, cols] - tdp[cols * n + gone] + t_came)
                dp12 = sums.max(axis=2)
                col_dp = self.col_dp.copy()
                col_dp[chain, s12[:, 0]] = dp12[:, 0]
                col_dp[chain, s12[:, 1]] = dp12[:, 1]
                energy = col_dp.max(axis=1)
                if p > 1:
                    at = ec[:, :, None] + down  # (k, 4, r): left ends of the touched edges
                    links = tpp[new[rows3, at] * n + new[rows3, at + 1]].max(axis=2)  # (k, 4)
                    change = ((links - self.edges[rows2, ec]) * ok).sum(axis=1)
                    energy += 2.0 * (edge_sum + change)
                accept = energy - self.energy <= self.temps * nlu
                if accept.any():
                    flat[accept] = new[accept]
                    self.sums[rows3[accept], cols[accept]] = sums[accept]
                    self.col_dp[accept] = col_dp[accept]
                    self.energy[accept] = energy[accept]
                    if p > 1:
                        cr, cs = np.nonzero(ok & accept[:, None])
                        self.edges[cr, ec[cr, cs]] = links[cr, cs]
                        edge_sum[accept] += change[accept]
                    c = int(np.argmin(self.energy))
                    if self.energy[c] < self.best - 1e-12 * abs(self.best):
                        self.best, self.best_grid = float(self.energy[c]), self.grids[c].copy()
                done += 1
                if (self.steps + done) % EXCHANGE_EVERY == 0:
                    self._exchange((self.steps + done) // EXCHANGE_EVERY % 2)
        return done

    def _exchange(self, parity: int) -> None:
        order = np.argsort(self.temps)  # chains from coldest to hottest
        for lo in range(parity, self.k - 1, 2):
            a, b = order[lo], order[lo + 1]
            x = (self.energy[a] - self.energy[b]) * (1.0 / self.temps[a] - 1.0 / self.temps[b])
            if x >= 0 or self.rng.random() < np.exp(x):
                self.temps[a], self.temps[b] = self.temps[b], self.temps[a]
