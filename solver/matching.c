/* Bottleneck perfect matching of a square cost matrix (see solver/matching.py).
 *
 * Rows are matched one at a time. For row i0, a bottleneck Dijkstra over alternating
 * paths finds the augmenting path whose largest non-matching entry v is smallest (a
 * matched column leads to its row at no cost: matched entries are <= t already); the
 * matching is augmented along it and t = max(t, v). Invariant: the optimum is >= t and
 * every matched entry is <= t. If a perfect matching existed with every entry below
 * max(t, v), its symmetric difference with the current one would hold an augmenting
 * path from i0 whose entries are all below v, so the optimum is >= max(t, v); after n
 * rows the matching is perfect with largest entry t: optimal.
 * O(n^2) per row, O(n^3) in all. Ties go to the lowest column index, so the result is
 * a pure function of the matrix.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* cost: (n, n) row-major; match: (n,) column of each row, written. Returns the largest
 * matched entry, or NAN when n < 1 or memory runs out. */
double bottleneck_match(int n, const double *cost, int64_t *match) {
    if (n < 1) return NAN;
    int *owner = malloc(sizeof(int) * (size_t)n);   /* row matched to each column */
    int *prev = malloc(sizeof(int) * (size_t)n);    /* row before each column on the path */
    char *done = malloc((size_t)n);
    double *dist = malloc(sizeof(double) * (size_t)n);
    if (!owner || !prev || !done || !dist) {
        free(owner); free(prev); free(done); free(dist);
        return NAN;
    }
    for (int j = 0; j < n; j++) owner[j] = -1;
    for (int i = 0; i < n; i++) match[i] = -1;
    double t = -INFINITY;
    for (int i0 = 0; i0 < n; i0++) {
        for (int j = 0; j < n; j++) {
            dist[j] = cost[(int64_t)i0 * n + j];
            prev[j] = i0;
            done[j] = 0;
        }
        int end = -1;
        for (;;) {
            int j = -1;
            for (int q = 0; q < n; q++)
                if (!done[q] && (j < 0 || dist[q] < dist[j])) j = q;
            done[j] = 1;
            if (owner[j] < 0) { end = j; break; }
            int i = owner[j];
            const double *row = cost + (int64_t)i * n;
            for (int q = 0; q < n; q++) {
                if (done[q]) continue;
                double v = row[q] > dist[j] ? row[q] : dist[j];
                if (v < dist[q]) { dist[q] = v; prev[q] = i; }
            }
        }
        if (dist[end] > t) t = dist[end];
        for (int j = end;;) {  /* augment: each row on the path takes the column after it */
            int i = prev[j];
            int before = (int)match[i];
            match[i] = j;
            owner[j] = i;
            if (i == i0) break;
            j = before;
        }
    }
    free(owner); free(prev); free(done); free(dist);
    return t;
}
