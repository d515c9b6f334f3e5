/* Held-Karp minimum open Hamiltonian path (see solver/path.py, held_karp_path).
 *
 * D[S, j] = min_{i in S - {j}} D[S - {j}, i] + E[i, j], D[{j}, j] = 0; the answer is
 * min_j D[all, j]. Subsets are visited in increasing order (every S - {j} comes before
 * S); ties go to the lowest i and the lowest final j, the same choices as the numpy
 * version's argmin, and each entry is the same single addition, so both return the same
 * path. O(2^k k^2) time, O(2^k k) memory.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* cost: (k, k) row-major; path: (k,) written. Returns the length, or NAN when k is
 * outside 1..20 or memory runs out. */
double held_karp(int k, const double *cost, int64_t *path) {
    if (k < 1 || k > 20) return NAN;
    if (k == 1) { path[0] = 0; return 0.0; }
    const int64_t full = (int64_t)1 << k;
    double *table = malloc(sizeof(double) * (size_t)(full * k));
    signed char *parent = malloc((size_t)(full * k));
    if (!table || !parent) { free(table); free(parent); return NAN; }
    for (int64_t s = 0; s < full * k; s++) { table[s] = INFINITY; parent[s] = -1; }
    for (int j = 0; j < k; j++) table[((int64_t)1 << j) * k + j] = 0.0;
    for (int64_t s = 1; s < full; s++) {
        if (!(s & (s - 1))) continue;  /* one device: set above */
        for (int j = 0; j < k; j++) {
            if (!(s >> j & 1)) continue;
            const double *from = table + (s ^ ((int64_t)1 << j)) * k;
            double best = INFINITY;
            int arg = 0;
            for (int i = 0; i < k; i++) {
                double v = from[i] + cost[(int64_t)i * k + j];
                if (v < best) { best = v; arg = i; }
            }
            table[s * k + j] = best;
            parent[s * k + j] = (signed char)arg;
        }
    }
    const double *last_row = table + (full - 1) * k;
    int last = 0;
    for (int j = 1; j < k; j++) if (last_row[j] < last_row[last]) last = j;
    double length = last_row[last];
    int64_t mask = full - 1;
    for (int t = k - 1; t >= 0; t--) {
        path[t] = last;
        int before = parent[mask * k + last];
        mask ^= (int64_t)1 << last;
        last = before;
    }
    free(table);
    free(parent);
    return length;
}
