/* Parallel tempering steps over as-launched placement grids (see solver/tempering.py).
 *
 * The same chains and acceptance as Ladder.run in numpy, one chain and one proposal at
 * a time: a proposal swaps grid positions i and j of one chain and costs O(D_DP) (the
 * two columns' peer sums, the at most four touched edges; the other columns' DataP come
 * from running totals, O(D_PP) only when the largest column is touched); a share
 * COLUMN_SHARE of them (kernel only) swaps two whole columns instead, a share
 * TAIL_SHARE swaps two pipelines' devices right of one edge, a share BLOCK_SHARE swaps
 * two pipeline segments of 2-4 stages (block_move), and a share CRIT_SHARE
 * swaps a critical device (the largest column's, a slowest link's) with another: for
 * GUIDE_SHARE of them one of the devices nearest the link's other end or a column peer
 * (``critical``), else any.
 * Random numbers: xoshiro256** seeded by the caller. Built on first use by solver/native.py; the numpy
 * Ladder is used wherever it cannot be built.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t next_u64(uint64_t *s) {
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return result;
}

static inline double uniform(uint64_t *s) { return (next_u64(s) >> 11) * 0x1.0p-53; }

static inline int64_t below(uint64_t *s, int64_t n) { return (int64_t)(uniform(s) * (double)n); }

/* New value of edge e (columns e, e + 1) of grid g: the slowest link; *mean: the mean. */
static double edge_value(const int64_t *g, int r, int p, int e, const double *tpp, int n,
                         double *mean) {
    double m = -INFINITY, sum = 0.0;
    for (int rr = 0; rr < r; rr++) {
        double v = tpp[g[rr * p + e] * n + g[rr * p + e + 1]];
        sum += v;
        if (v > m) m = v;
    }
    *mean = sum / r;
    return m;
}

/* New sums of column s after ``gone`` left it for ``came`` (grid already swapped):
 * into out[rr] for each replica; returns the column's DataP. */
static double column_sums(const int64_t *g, int r, int p, int s, int64_t gone, int64_t came,
                          const double *sums, const double *tdp, int n, double *out) {
    double m = -INFINITY, own = 0.0;
    int at = -1;
    for (int rr = 0; rr < r; rr++) {
        int64_t d = g[rr * p + s];
        if (d == came) { at = rr; continue; }
        double v = sums[d] - tdp[d * n + gone] + tdp[d * n + came];
        own += tdp[came * n + d];
        out[rr] = v;
        if (v > m) m = v;
    }
    out[at] = own;
    return own > m ? own : m;
}

/* New values of the edges beside columns s1 and s2 of grid g (s1 - 1, s1, s2 - 1, s2,
 * each once, those inside 0 .. p - 2) into touched/newe/newm, and their changes against
 * ed/em added to *pipe and *msum; returns how many. O(D_DP) each. */
static int rescore_edges(const int64_t *g, int r, int p, int s1, int s2, const double *tpp,
                         int n, const double *ed, const double *em, int *touched, double *newe,
                         double *newm, double *pipe, double *msum) {
    int nt = 0, cand[4] = {s1 - 1, s1, s2 - 1, s2};
    for (int q = 0; q < 4; q++) {
        int e = cand[q], dup = e < 0 || e > p - 2;
        for (int w = 0; w < nt && !dup; w++) dup = touched[w] == e;
        if (!dup) {
            touched[nt] = e;
            newe[nt] = edge_value(g, r, p, e, tpp, n, &newm[nt]);
            nt++;
        }
    }
    for (int w = 0; w < nt; w++) {
        *pipe += newe[w] - ed[touched[w]];
        *msum += newm[w] - em[touched[w]];
    }
    return nt;
}

static void commit_edges(double *ed, double *em, const int *touched, const double *newe,
                         const double *newm, int nt) {
    for (int w = 0; w < nt; w++) { ed[touched[w]] = newe[w]; em[touched[w]] = newm[w]; }
}

/* Shares of proposals that, instead of swapping two devices, swap two whole stage
 * groups (pipeline order) or the tails of two pipelines (one edge's matching);
 * ``CC="gcc -DTAIL_SHARE=0"`` builds a kernel without the latter, for comparisons. */
#define COLUMN_SHARE 0.125
/* Share of proposals that swap a critical device (``critical``) with another (for
 * GUIDE_SHARE of them a guided partner, else a uniform one); the other device swaps pick
 * both uniformly. It is taken from the top of the draw
 * that picks the kind of proposal, so it acts as at most 1 - COLUMN_SHARE - TAIL_SHARE -
 * BLOCK_SHARE. ``-DCRIT_SHARE=0`` builds the kernel
 * without critical picks, for comparisons (solver/tempering.py has the figures). */
#ifndef CRIT_SHARE
#define CRIT_SHARE 0.75
#endif
#ifndef TAIL_SHARE
#define TAIL_SHARE 0.125
#endif
/* Share of proposals that swap two pipeline segments (``block_move``), and their most
 * stages; ``-DBLOCK_SHARE=0`` builds the kernel without them, ``-DBLOCK_MOST=6`` with
 * longer ones, for comparisons (solver/tempering.py has the figures). */
#ifndef BLOCK_SHARE
#define BLOCK_SHARE 0.0625
#endif
#ifndef BLOCK_MOST
#define BLOCK_MOST 4
#endif

/* Share of critical picks whose partner is drawn near the other end of the slow link, or
 * near a peer of the largest column (``near``: NEAR closest devices of each by T_pp, then
 * by T_dp), not uniformly; ``-DGUIDE_SHARE=0`` builds the kernel without them. */
#ifndef GUIDE_SHARE
#define GUIDE_SHARE 0.5
#endif
#define NEAR 8
/* Guided partners are drawn among the first NEAR_USE of each row (nearest first);
 * ``-DNEAR_USE=8`` draws among all kept, for comparisons (solver/tempering.py). */
#ifndef NEAR_USE
#define NEAR_USE 4
#endif
#if NEAR_USE > NEAR || NEAR_USE < 1
#error "NEAR_USE must lie in 1 .. NEAR"
#endif

/* Running sums of one chain, so a proposal costs O(D_DP) and not O(D_PP) more: the
 * column DataP total and its largest column, the edge and mean-link totals. Recomputed
 * from the chain's arrays, with the chain's energy and smoothing term, at the start of
 * every call and every exchange step, so rounding cannot build up; the caller ends its
 * calls on exchange steps, so the chains do not depend on how a run is split. */
typedef struct { double dpsum, pipe, msum; int top; } Totals;

static void totals(const double *cd, const double *ed, const double *em, int p, Totals *t,
                   double *energy, double *smooth) {
    t->dpsum = 0.0; t->pipe = 0.0; t->msum = 0.0; t->top = 0;
    for (int s = 0; s < p; s++) {
        t->dpsum += cd[s];
        if (cd[s] > cd[t->top]) t->top = s;
    }
    for (int e = 0; e < p - 1; e++) { t->pipe += ed[e]; t->msum += em[e]; }
    *energy = cd[t->top] + 2.0 * t->pipe;
    *smooth = t->dpsum / p + 2.0 * t->msum;
}

static void swap_columns(int64_t *g, int r, int p, int s1, int s2) {
    for (int rr = 0; rr < r; rr++) {
        int64_t t = g[rr * p + s1];
        g[rr * p + s1] = g[rr * p + s2];
        g[rr * p + s2] = t;
    }
}

/* pos[d]: the grid index of device d, for the devices at grid indices [from, to). */
static inline void place(const int64_t *g, int64_t *pos, int64_t from, int64_t to) {
    for (int64_t i = from; i < to; i++) pos[g[i]] = i;
}

static void place_columns(const int64_t *g, int64_t *pos, int r, int p, int s1, int s2) {
    for (int rr = 0; rr < r; rr++) {
        pos[g[rr * p + s1]] = rr * p + s1;
        pos[g[rr * p + s2]] = rr * p + s2;
    }
}

/* Metropolis on a proposal whose DataP would be ``dp`` (the column DataP total
 * ``dpsum``) and whose changed edges are listed in touched/newe/newm (new totals pipe,
 * msum), for every kind of move: on acceptance commits the edges, the edge totals and
 * the chain's energy and smoothing term and returns 1; the caller then moves the
 * devices and commits what it changed on the DataP side. */
static int accept(int p, double *ed, double *em, const int *touched, const double *newe,
                  const double *newm, int nt, double dp, double dpsum, double pipe, double msum,
                  uint64_t *rng, double *energy, double *smooth, double temp, double lam,
                  Totals *tot) {
    double e_new = dp + 2.0 * pipe, sm_new = dpsum / p + 2.0 * msum;
    double delta = e_new - *energy + lam * (sm_new - *smooth);
    if (!(delta <= 0.0 || uniform(rng) < exp(-delta / temp))) return 0;
    commit_edges(ed, em, touched, newe, newm, nt);
    tot->pipe = pipe;
    tot->msum = msum;
    *energy = e_new;
    *smooth = sm_new;
    return 1;
}

static void keep_best(const int64_t *g, int n, double e, double *best, int64_t *best_grid) {
    if (e < *best - 1e-12 * fabs(*best)) {
        *best = e;
        memcpy(best_grid, g, sizeof(int64_t) * n);
    }
}

/* One proposal that swaps columns s1 and s2 of chain grid g: every column keeps its
 * devices (so its DataP and peer sums), only edges s1 - 1, s1, s2 - 1, s2 change:
 * O(D_DP) for the swap and the edges. Accepted by Metropolis on the same energy as a
 * device swap. */
static void column_move(int64_t *g, int r, int p, double *cd, double *ed, double *em,
                        const double *tpp, int n, uint64_t *rng, double *energy,
                        double *smooth, double temp, double lam, double *best,
                        int64_t *best_grid, Totals *tot, int64_t *pos) {
    double newe[4], newm[4];
    int touched[4];
    int s1 = (int)below(rng, p), s2 = (int)((s1 + 1 + below(rng, p - 1)) % p);
    swap_columns(g, r, p, s1, s2);
    double pipe = tot->pipe, msum = tot->msum;
    int nt = rescore_edges(g, r, p, s1, s2, tpp, n, ed, em, touched, newe, newm, &pipe, &msum);
    if (!accept(p, ed, em, touched, newe, newm, nt, cd[tot->top], tot->dpsum, pipe, msum, rng,
                energy, smooth, temp, lam, tot)) {
        swap_columns(g, r, p, s1, s2);
        return;
    }
    place_columns(g, pos, r, p, s1, s2);
    double t = cd[s1]; cd[s1] = cd[s2]; cd[s2] = t;
    if (tot->top == s1) tot->top = s2;
    else if (tot->top == s2) tot->top = s1;
    keep_best(g, n, *energy, best, best_grid);
}

/* Value of the link row rr would have across edge e if rows r1 and r2 swapped their
 * devices right of the edge. */
static inline double tail_link(const int64_t *g, int p, int e, int rr, int r1, int r2,
                               const double *tpp, int n) {
    int to = rr == r1 ? r2 : (rr == r2 ? r1 : rr);
    return tpp[g[rr * p + e] * n + g[to * p + e + 1]];
}

/* One proposal that swaps the devices of pipelines r1 and r2 right of edge e (columns
 * e + 1 .. p - 1): every column keeps its devices, only edge e changes (its matching).
 * O(D_DP) to score, O(D_PP) to apply. Device swaps inside one column change two edges at
 * once, so fixing one edge's matching otherwise takes a cascade along the pipeline. */
static void tail_move(int64_t *g, int r, int p, double *cd, double *ed, double *em,
                      const double *tpp, int n, uint64_t *rng, double *energy, double *smooth,
                      double temp, double lam, double *best, int64_t *best_grid, Totals *tot,
                      int64_t *pos) {
    int e = (int)below(rng, p - 1);
    int r1 = (int)below(rng, r), r2 = (int)((r1 + 1 + below(rng, r - 1)) % r);
    double m = -INFINITY, sum = 0.0;
    for (int rr = 0; rr < r; rr++) {
        double v = tail_link(g, p, e, rr, r1, r2, tpp, n);
        sum += v;
        if (v > m) m = v;
    }
    int touched[1] = {e};
    double newe[1] = {m}, newm[1] = {sum / r};
    double pipe = tot->pipe + m - ed[e], msum = tot->msum + newm[0] - em[e];
    if (!accept(p, ed, em, touched, newe, newm, 1, cd[tot->top], tot->dpsum, pipe, msum, rng,
                energy, smooth, temp, lam, tot))
        return;
    for (int s = e + 1; s < p; s++) {
        int64_t t = g[r1 * p + s];
        g[r1 * p + s] = g[r2 * p + s];
        g[r2 * p + s] = t;
    }
    place(g, pos, (int64_t)r1 * p + e + 1, (int64_t)(r1 + 1) * p);
    place(g, pos, (int64_t)r2 * p + e + 1, (int64_t)(r2 + 1) * p);
    keep_best(g, n, *energy, best, best_grid);
}

/* One proposal that swaps two pipeline segments of L consecutive stages (2 <= L <=
 * BLOCK_MOST, L <= p / 2): row r1's devices in columns a .. a + L - 1 with row r2's in
 * columns b .. b + L - 1, the two column ranges disjoint (r1 = r2 allowed). ``a`` is
 * drawn first; a draw that leaves no room for ``b`` is spent as it is (up to 1/3 of
 * these proposals at p = 4, 1/5 at p = 8, none from p = 11). A host that
 * holds a run of stages of one pipeline keeps its internal links as the run moves to
 * other stage groups; device swaps would break them one at a time, each step uphill by
 * about a crossing. Each of the 2L columns changes one device (its peer sums, O(D_DP)),
 * and the edges beside and inside the two ranges are rescored: O(L D_DP + D_PP).
 * ``bufs`` holds 2 BLOCK_MOST r doubles. */
static void block_move(int64_t *g, int r, int p, double *S, double *cd, double *ed, double *em,
                       const double *tpp, const double *tdp, int n, uint64_t *rng,
                       double *energy, double *smooth, double temp, double lam, double *best,
                       int64_t *best_grid, Totals *tot, double *bufs, int64_t *pos) {
    int most = p / 2 < BLOCK_MOST ? p / 2 : BLOCK_MOST;
    if (most < 2) return;
    int L = 2 + (int)below(rng, most - 1);
    int a = (int)below(rng, p - L + 1);
    int left = a - L + 1 > 0 ? a - L + 1 : 0, right = p - 2 * L - a + 1 > 0 ? p - 2 * L - a + 1 : 0;
    if (left + right == 0) return;
    int q = (int)below(rng, left + right);
    int b = q < left ? q : a + L + (q - left);
    int r1 = (int)below(rng, r), r2 = (int)below(rng, r);
    double nd[2 * BLOCK_MOST];
    int col[2 * BLOCK_MOST];
    double dpsum = tot->dpsum;
    for (int k = 0; k < L; k++) {
        int64_t *u = &g[r1 * p + a + k], *v = &g[r2 * p + b + k], x = *u, y = *v;
        *u = y; *v = x;
        col[k] = a + k; col[L + k] = b + k;
        nd[k] = column_sums(g, r, p, a + k, x, y, S, tdp, n, bufs + (size_t)k * r);
        nd[L + k] = column_sums(g, r, p, b + k, y, x, S, tdp, n, bufs + (size_t)(L + k) * r);
        dpsum += nd[k] - cd[a + k] + nd[L + k] - cd[b + k];
    }
    double dp = -INFINITY;
    int top = -1;
    for (int s = 0; s < p; s++) {
        if ((s >= a && s < a + L) || (s >= b && s < b + L)) continue;
        if (top < 0 || cd[s] > dp) { dp = cd[s]; top = s; }
    }
    for (int k = 0; k < 2 * L; k++)
        if (top < 0 || nd[k] > dp) { dp = nd[k]; top = col[k]; }
    int touched[2 * BLOCK_MOST + 2], nt = 0;
    double newe[2 * BLOCK_MOST + 2], newm[2 * BLOCK_MOST + 2];
    double pipe = tot->pipe, msum = tot->msum;
    for (int e = 0; e < p - 1; e++) {
        if (!((e >= a - 1 && e < a + L) || (e >= b - 1 && e < b + L))) continue;
        touched[nt] = e;
        newe[nt] = edge_value(g, r, p, e, tpp, n, &newm[nt]);
        pipe += newe[nt] - ed[e];
        msum += newm[nt] - em[e];
        nt++;
    }
    if (!accept(p, ed, em, touched, newe, newm, nt, dp, dpsum, pipe, msum, rng, energy, smooth,
                temp, lam, tot)) {
        for (int k = 0; k < L; k++) {
            int64_t t = g[r1 * p + a + k];
            g[r1 * p + a + k] = g[r2 * p + b + k];
            g[r2 * p + b + k] = t;
        }
        return;
    }
    place(g, pos, (int64_t)r1 * p + a, (int64_t)r1 * p + a + L);
    place(g, pos, (int64_t)r2 * p + b, (int64_t)r2 * p + b + L);
    for (int k = 0; k < 2 * L; k++) {
        const double *buf = bufs + (size_t)k * r;
        for (int rr = 0; rr < r; rr++) S[g[rr * p + col[k]]] = buf[rr];
        cd[col[k]] = nd[k];
    }
    tot->top = top;
    tot->dpsum = dpsum;
    keep_best(g, n, *energy, best, best_grid);
}

/* A critical grid position of chain grid g (p > 2, as pt_run calls it): a device of the
 * column with the largest DataP, or one end of a random edge's slowest link (half
 * each); O(D_DP). Comm is
 * DataP, a maximum over columns, plus a sum of per-edge maxima: a swap that touches
 * neither the largest column nor a slowest link cannot lower it on the coldest rung.
 * With odds GUIDE_SHARE, *partner gets the grid index (``pos``: chain's positions) of
 * one of the NEAR_USE devices nearest (of the NEAR kept, nearest first) the link's other
 * end (``near``, by T_pp) or another
 * device of the column (``near + n NEAR``, by T_dp); else, or when that device is the
 * pick itself (or, for a column pick, sits in that column), -1 (a uniform partner). */
static int64_t critical(const int64_t *g, int r, int p, int top, const double *tpp, int n,
                        uint64_t *rng, const int64_t *near, const int64_t *pos, int64_t *partner) {
    uint64_t bits = next_u64(rng);
    int guide = uniform(rng) < GUIDE_SHARE;
    *partner = -1;
    if (bits & 1) {
        int row = (int)below(rng, r);
        if (guide && r > 1) {  /* a device near another peer of the column */
            int other = (row + 1 + (int)below(rng, r - 1)) % r;
            int64_t d = near[(size_t)n * NEAR + (size_t)g[other * p + top] * NEAR + below(rng, NEAR_USE)];
            if (pos[d] % p != top) *partner = pos[d];
        }
        return (int64_t)row * p + top;
    }
    int e = (int)below(rng, p - 1), at = 0;
    double m = -INFINITY;
    for (int rr = 0; rr < r; rr++) {
        double v = tpp[g[rr * p + e] * n + g[rr * p + e + 1]];
        if (v > m) { m = v; at = rr; }
    }
    int side = (int)((bits >> 1) & 1);
    int64_t i = (int64_t)at * p + e + side;
    if (guide) {  /* a device near the link's other end takes this end's place */
        int64_t d = near[(size_t)g[at * p + e + 1 - side] * NEAR + below(rng, NEAR_USE)];
        if (pos[d] != i) *partner = pos[d];
    }
    return i;
}

/* Advance k chains by ``steps`` steps from step number ``step0``; returns 0.
 * grids: (k, r * p) device ids; sums: (k, n) peer sum per device; col_dp: (k, p);
 * edges: (k, p - 1); energy: (k,); chain_at: (k,) chain on each rung, coldest first;
 * rung_temp: (k,) temperature of each rung; best_grid: (r * p,) kept with *best;
 * means: (k, p - 1) mean link per edge; smooth: (k,) smoothing term S; rung_lam: (k,)
 * its weight on each rung; near: (2 n, NEAR) each device's nearest by T_pp, then by T_dp
 * (``critical``). Returns 0, -1 for bad sizes, -2 when out of memory. */
int pt_run(int k, int r, int p, const double *tpp, const double *tdp, int64_t *grids,
           double *sums, double *col_dp, double *edges, double *energy, int64_t *chain_at,
           const double *rung_temp, uint64_t *rng, int64_t step0, int64_t steps,
           int exchange_every, double *best, int64_t *best_grid, double *means, double *smooth,
           const double *rung_lam, const int64_t *near) {
    const int n = r * p;
    double newe[4], newm[4];
    int touched[4];
    if (n < 2 || k < 1) return -1;
    double *work = malloc(sizeof(double) * ((2 + 2 * BLOCK_MOST) * (size_t)r + 2 * (size_t)k));
    Totals *tots = malloc(sizeof(Totals) * (size_t)k);
    int64_t *posall = malloc(sizeof(int64_t) * (size_t)k * (size_t)n);
    if (work == NULL || tots == NULL || posall == NULL) { free(work); free(tots); free(posall); return -2; }
    for (int c = 0; c < k; c++) place(grids + (int64_t)c * n, posall + (int64_t)c * n, 0, n);
    double *buf1 = work, *buf2 = work + r, *temp_of = work + 2 * r, *lam_of = temp_of + k;
    double *bufs = lam_of + k;
    const int np = p > 1 ? p - 1 : 0;
    for (int l = 0; l < k; l++) { temp_of[chain_at[l]] = rung_temp[l]; lam_of[chain_at[l]] = rung_lam[l]; }
    for (int c = 0; c < k; c++)
        totals(col_dp + (int64_t)c * p, edges + (int64_t)c * np, means + (int64_t)c * np, p, &tots[c],
               &energy[c], &smooth[c]);
    for (int64_t step = step0; step < step0 + steps; step++) {
        for (int c = 0; c < k; c++) {
            int64_t *g = grids + (int64_t)c * n;
            double *S = sums + (int64_t)c * n, *cd = col_dp + (int64_t)c * p;
            double *ed = edges + (int64_t)c * np, *em = means + (int64_t)c * np;
            int64_t *pos = posall + (int64_t)c * n;
            int crit = 0;
            if (p > 2) {  /* one draw picks the kind of proposal */
                double u = uniform(rng);
                crit = u >= 1.0 - CRIT_SHARE;
                if (u < COLUMN_SHARE) {
                    column_move(g, r, p, cd, ed, em, tpp, n, rng, &energy[c], &smooth[c],
                                temp_of[c], lam_of[c], best, best_grid, &tots[c], pos);
                    continue;
                }
                if (r > 1 && u < COLUMN_SHARE + TAIL_SHARE) {
                    tail_move(g, r, p, cd, ed, em, tpp, n, rng, &energy[c], &smooth[c],
                              temp_of[c], lam_of[c], best, best_grid, &tots[c], pos);
                    continue;
                }
                if (p > 3 && u >= COLUMN_SHARE + TAIL_SHARE && u < COLUMN_SHARE + TAIL_SHARE + BLOCK_SHARE) {
                    block_move(g, r, p, S, cd, ed, em, tpp, tdp, n, rng, &energy[c], &smooth[c],
                               temp_of[c], lam_of[c], best, best_grid, &tots[c], bufs, pos);
                    continue;
                }
            }
            int64_t j = -1;
            int64_t i = crit ? critical(g, r, p, tots[c].top, tpp, n, rng, near, pos, &j) : below(rng, n);
            if (j < 0) j = (i + 1 + below(rng, n - 1)) % n;
            int s1 = (int)(i % p), s2 = (int)(j % p);
            int64_t a = g[i], b = g[j];
            g[i] = b; g[j] = a;
            double dp1 = cd[s1], dp2 = cd[s2];
            if (s1 != s2) {
                dp1 = column_sums(g, r, p, s1, a, b, S, tdp, n, buf1);
                dp2 = column_sums(g, r, p, s2, b, a, S, tdp, n, buf2);
            }
            Totals *tot = &tots[c];
            /* the largest DataP of the other columns, and where it is */
            int oi = tot->top;
            if (s1 != s2 && (oi == s1 || oi == s2)) {
                oi = -1;
                for (int s = 0; s < p; s++)
                    if (s != s1 && s != s2 && (oi < 0 || cd[s] > cd[oi])) oi = s;
            }
            double dp = dp1 > dp2 ? dp1 : dp2;
            if (oi >= 0 && cd[oi] > dp) dp = cd[oi];
            double dpsum = tot->dpsum + (s1 != s2 ? dp1 - cd[s1] + dp2 - cd[s2] : 0.0);
            double pipe = tot->pipe, msum = tot->msum;
            int nt = rescore_edges(g, r, p, s1, s2, tpp, n, ed, em, touched, newe, newm, &pipe, &msum);
            if (accept(p, ed, em, touched, newe, newm, nt, dp, dpsum, pipe, msum, rng, &energy[c],
                       &smooth[c], temp_of[c], lam_of[c], tot)) {
                if (s1 != s2) {
                    for (int rr = 0; rr < r; rr++) {
                        S[g[rr * p + s1]] = buf1[rr];
                        S[g[rr * p + s2]] = buf2[rr];
                    }
                    cd[s1] = dp1; cd[s2] = dp2;
                    int top = oi;  /* the largest of the others, s1 and s2 */
                    if (top < 0 || dp1 > cd[top]) top = s1;
                    if (dp2 > cd[top]) top = s2;
                    tot->top = top;
                    tot->dpsum = dpsum;
                }
                pos[a] = j; pos[b] = i;
                keep_best(g, n, energy[c], best, best_grid);
            } else {
                g[i] = a; g[j] = b;
            }
        }
        if ((step + 1) % exchange_every == 0) {
            for (int c = 0; c < k; c++)
                totals(col_dp + (int64_t)c * p, edges + (int64_t)c * np, means + (int64_t)c * np, p,
                       &tots[c], &energy[c], &smooth[c]);
            int parity = (int)(((step + 1) / exchange_every) % 2);
            for (int l = parity; l + 1 < k; l += 2) {
                int64_t x = chain_at[l], y = chain_at[l + 1];
                /* -log of the acceptance ratio of moving x up a rung and y down one */
                double lo_x = energy[x] + rung_lam[l] * smooth[x], lo_y = energy[y] + rung_lam[l] * smooth[y];
                double hi_x = energy[x] + rung_lam[l + 1] * smooth[x], hi_y = energy[y] + rung_lam[l + 1] * smooth[y];
                double arg = (lo_x - lo_y) / rung_temp[l] + (hi_y - hi_x) / rung_temp[l + 1];
                if (arg >= 0.0 || uniform(rng) < exp(arg)) {
                    chain_at[l] = y; chain_at[l + 1] = x;
                    temp_of[y] = rung_temp[l]; temp_of[x] = rung_temp[l + 1];
                    lam_of[y] = rung_lam[l]; lam_of[x] = rung_lam[l + 1];
                }
            }
        }
    }
    free(work);
    free(tots);
    free(posall);
    return 0;
}

/* The local search's batch (solver/localsearch.py, GridState.swap_scores): Comm after
 * swapping device a (grid index ia) with every device, into out (out[a] = inf), for
 * the grid g (r x p device ids; restored on return) with per-device peer sums ``sums``,
 * column DataP ``cd`` and edge values ``ed`` of that grid. Per candidate, the same
 * O(D_DP) rescoring as a proposal of the ladder: the two columns' new sums and the at
 * most four touched edges; the other columns' largest DataP comes from the top two
 * kept for the batch. O(N D_DP) for the batch. Returns 0, -2 when out of memory. */
int swap_scores(int r, int p, const double *tpp, const double *tdp, int64_t *g, int64_t ia,
                const double *sums, const double *cd, const double *ed, double *out) {
    const int n = r * p;
    double newe[4], newm[4];
    int touched[4];
    double *buf = malloc(sizeof(double) * (size_t)(r > 0 ? r : 1));
    if (buf == NULL) return -2;
    const int64_t a = g[ia];
    const int s1 = (int)(ia % p);
    double t1 = -INFINITY, t2 = -INFINITY, all = -INFINITY, pipe0 = 0.0, msum = 0.0;
    int i1 = -1;
    for (int s = 0; s < p; s++) {
        if (cd[s] > all) all = cd[s];
        if (s == s1) continue;
        if (cd[s] > t1) { t2 = t1; t1 = cd[s]; i1 = s; }
        else if (cd[s] > t2) t2 = cd[s];
    }
    for (int e = 0; e < p - 1; e++) pipe0 += ed[e];
    for (int64_t ib = 0; ib < n; ib++) {
        const int64_t b = g[ib];
        if (b == a) { out[a] = INFINITY; continue; }
        const int s2 = (int)(ib % p);
        g[ia] = b; g[ib] = a;
        double dp = all;
        if (s1 != s2) {
            double dp1 = column_sums(g, r, p, s1, a, b, sums, tdp, n, buf);
            double dp2 = column_sums(g, r, p, s2, b, a, sums, tdp, n, buf);
            dp = s2 == i1 ? t2 : t1;
            if (dp1 > dp) dp = dp1;
            if (dp2 > dp) dp = dp2;
        }
        double pipe = pipe0;
        rescore_edges(g, r, p, s1, s2, tpp, n, ed, ed, touched, newe, newm, &pipe, &msum);
        g[ia] = a; g[ib] = b;
        out[b] = dp + 2.0 * pipe;
    }
    free(buf);
    return 0;
}
