/* A segment of stage groups redealt to given component counts, and the Comm of the grid
 * with it, in the current order (see solver/rebalance.py: _redeal and _Scorer.comm; the
 * same greedy, written once more here because the Python version spends about a
 * millisecond of interpreter time on each of the thousands of candidates a pass scores).
 * Its sums run in another order than numpy's, so two costs equal in exact arithmetic
 * (rows holding the same values in another order) may round apart and break a tie
 * differently; otherwise the groups are the Python version's.
 *
 * Redeal, per group j of the segment (devices in their stored order):
 *   1. for each component c (ascending) the group holds more of than targets[j][c], the
 *      surplus members with the smallest mean T_dp to the segment's other groups leave
 *      (ties: the earlier member), into component c's free list (ascending device id);
 *   2. then, per group in turn and per component c it lacks (ascending), the free
 *      devices of c with the smallest sum of T_dp to the devices the group holds by then
 *      join it (ties: earlier in the free list), appended in ascending id.
 * Score: max(DataP of the outside groups, DataP of the new ones) + 2 x (the kept edges
 * + the bottleneck matchings of the edges that touch a new group).
 * Cost, k groups of r devices: O(k^2 r^2) for the surpluses' costs, O(k r^2) per
 * component filled, and O(k r^3) for the matchings.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

double bottleneck_match(int n, const double *cost, int64_t *match);

/* Stable selection: the `take` indices of the `len` smallest `cost` (ties: lower index)
 * marked in `chosen`. O(len * take). */
static void pick_smallest(int len, const double *cost, int take, char *chosen) {
    memset(chosen, 0, (size_t)len);
    for (int t = 0; t < take; t++) {
        int best = -1;
        for (int i = 0; i < len; i++)
            if (!chosen[i] && (best < 0 || cost[i] < cost[best])) best = i;
        if (best < 0) return;
        chosen[best] = 1;
    }
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* n devices; t_dp, t_pp: (n, n) row-major; lab: (n,) components 0..m-1; cols: (p, r)
 * the groups in pipeline order; dp: (p,) their DataP; edges: (p - 1,) their edges'
 * bottleneck values; lo..hi: the segment; targets: (hi - lo + 1, m); out: (hi - lo + 1,
 * r) the new groups, written. Returns the new Comm; NAN when memory runs out or the
 * targets cannot be met (a component short of devices). */
double redeal_score(int n, const double *t_dp, const double *t_pp, const int64_t *lab, int m,
                    int p, int r, const int64_t *cols, const double *dp, const double *edges,
                    int lo, int hi, const int64_t *targets, int64_t *out) {
    int k = hi - lo + 1;
    int seg = k * r;
    int64_t *kept = malloc(sizeof(int64_t) * (size_t)seg);  /* (k, r): each group's devices */
    int *nkept = calloc((size_t)k, sizeof(int));
    int64_t *free_ = malloc(sizeof(int64_t) * (size_t)m * (size_t)seg); /* (m, seg) free lists */
    int *nfree = calloc((size_t)m, sizeof(int));
    int *count = calloc((size_t)m, sizeof(int));
    double *cost = malloc(sizeof(double) * (size_t)(seg > r * r ? seg : r * r));
    int64_t *tmp = malloc(sizeof(int64_t) * (size_t)seg);
    char *chosen = malloc((size_t)seg);
    int64_t *match = malloc(sizeof(int64_t) * (size_t)r);
    double result = NAN;
    if (!kept || !nkept || !free_ || !nfree || !count || !cost || !tmp || !chosen || !match)
        goto done;
    /* 1. surpluses leave */
    for (int j = 0; j < k; j++) {
        const int64_t *col = cols + (int64_t)(lo + j) * r;
        const int64_t *target = targets + (int64_t)j * m;
        int64_t *mine = kept + (int64_t)j * r;
        int nk = r;
        memcpy(mine, col, sizeof(int64_t) * (size_t)r);
        memset(count, 0, sizeof(int) * (size_t)m);
        for (int i = 0; i < r; i++) count[lab[col[i]]]++;
        for (int c = 0; c < m; c++) {
            int surplus = count[c] - (int)target[c];
            if (surplus <= 0) continue;
            int nm = 0;  /* members of c, in kept order, with their mean cost to the others */
            for (int i = 0; i < nk; i++) {
                if (lab[mine[i]] != c) continue;
                const double *row = t_dp + mine[i] * (int64_t)n;
                double s = 0.0;
                for (int q = 0; q < k; q++) {
                    if (q == j) continue;
                    const int64_t *other = cols + (int64_t)(lo + q) * r;
                    for (int e = 0; e < r; e++) s += row[other[e]];
                }
                cost[nm] = s / (double)((k - 1) * r);
                tmp[nm++] = mine[i];
            }
            pick_smallest(nm, cost, surplus, chosen);
            int64_t *list = free_ + (int64_t)c * seg;
            int start = nfree[c];
            for (int i = 0; i < nm; i++)
                if (chosen[i]) list[nfree[c]++] = tmp[i];
            qsort(list + start, (size_t)(nfree[c] - start), sizeof(int64_t), cmp_i64);
            int w = 0;
            for (int i = 0; i < nk; i++) {
                int gone = 0;
                for (int q = 0; q < nm; q++)
                    if (chosen[q] && tmp[q] == mine[i]) { gone = 1; break; }
                if (!gone) mine[w++] = mine[i];
            }
            nk = w;
        }
        nkept[j] = nk;
    }
    /* 2. shortfalls are filled */
    for (int j = 0; j < k; j++) {
        const int64_t *target = targets + (int64_t)j * m;
        int64_t *mine = kept + (int64_t)j * r;
        memset(count, 0, sizeof(int) * (size_t)m);
        for (int i = 0; i < nkept[j]; i++) count[lab[mine[i]]]++;
        for (int c = 0; c < m; c++) {
            int need = (int)target[c] - count[c];
            if (need <= 0) continue;
            int64_t *list = free_ + (int64_t)c * seg;
            int len = nfree[c];
            if (need > len || nkept[j] + need > r) goto done;
            for (int i = 0; i < len; i++) {
                const double *row = t_dp + list[i] * (int64_t)n;
                double s = 0.0;
                for (int e = 0; e < nkept[j]; e++) s += row[mine[e]];
                cost[i] = s;
            }
            pick_smallest(len, cost, need, chosen);
            int base = nkept[j], w = 0;
            for (int i = 0; i < len; i++) {
                if (chosen[i]) mine[nkept[j]++] = list[i];
                else list[w++] = list[i];
            }
            nfree[c] = w;
            qsort(mine + base, (size_t)(nkept[j] - base), sizeof(int64_t), cmp_i64);
        }
        if (nkept[j] != r) goto done;
    }
    memcpy(out, kept, sizeof(int64_t) * (size_t)seg);

    /* score: DataP */
    double data_p = -INFINITY;
    for (int g = 0; g < p; g++) {
        if (g >= lo && g <= hi) continue;
        if (dp[g] > data_p) data_p = dp[g];
    }
    for (int j = 0; j < k; j++) {
        const int64_t *grp = out + (int64_t)j * r;
        for (int i = 0; i < r; i++) {
            const double *row = t_dp + grp[i] * (int64_t)n;
            double s = 0.0;
            for (int e = 0; e < r; e++) s += row[grp[e]];
            if (s > data_p) data_p = s;
        }
    }
    /* Pipeline: edges lo - 1 .. hi touch a new group */
    int elo = lo > 0 ? lo - 1 : 0, ehi = hi < p - 2 ? hi : p - 2;
    double pipe = 0.0;
    for (int e = 0; e < p - 1; e++)
        if (e < elo || e > ehi) pipe += edges[e];
    for (int e = elo; e <= ehi; e++) {
        const int64_t *x = (e >= lo && e <= hi) ? out + (int64_t)(e - lo) * r : cols + (int64_t)e * r;
        const int64_t *y = (e + 1 >= lo && e + 1 <= hi) ? out + (int64_t)(e + 1 - lo) * r
                                                          : cols + (int64_t)(e + 1) * r;
        for (int i = 0; i < r; i++)
            for (int q = 0; q < r; q++) cost[i * r + q] = t_pp[x[i] * (int64_t)n + y[q]];
        double v = bottleneck_match(r, cost, match);
        if (isnan(v)) goto done;
        pipe += v;
    }
    result = data_p + 2.0 * pipe;
done:
    free(kept); free(nkept); free(free_); free(nfree); free(count); free(cost); free(tmp);
    free(chosen); free(match);
    return result;
}
