"""Minimum open Hamiltonian path over stage groups (the pipeline order).

Problem
-------
Given a symmetric ``k x k`` matrix ``E`` of pipeline-edge costs between stage groups,
find an ordering ``s_0, ..., s_{k-1}`` minimising ``sum_t E[s_t, s_{t+1}]`` with free
end points (an open-loop travelling salesperson path).

``held_karp_path`` is exact (dynamic programming over subsets); ``approximate_path`` is a
multi-start nearest-neighbour construction improved by 2-opt and Or-opt moves, for
``k > HELD_KARP_MAX``. ``best_path`` picks between them.

Notes
-----
Held-Karp: ``D[S, j] = min_{i in S - {j}} D[S - {j}, i] + E[i, j]`` with
``D[{j}, j] = 0``; answer ``min_j D[all, j]``. O(2^k k^2) time, O(2^k k) memory, evaluated
one subset size at a time as a vectorised gather (pull form), so there is no Python loop
over subsets. k = 16 takes about 0.1 s; the compiled version (solver/path.c, where
solver.native builds) fills the same table in C with the same tie-breaking, so it
returns the same path, in 11 ms at k = 16 (0.13 s in numpy, one call each, same run).

Approximate: O(k^3) per start for 2-opt sweeps; validated against Held-Karp for every
k <= 12 in the tests and the ``path_gap`` benchmark.

References
----------
Held, M. and Karp, R. "A dynamic programming approach to sequencing problems." J. SIAM
10(1), 1962.  Lin, S. "Computer solutions of the traveling salesman problem." Bell Syst.
Tech. J. 44, 1965 (2-opt).
"""

from __future__ import annotations

import numpy as np

from solver import native

#: Largest stage count solved exactly; beyond it the state table grows past 2^16 x 16.
HELD_KARP_MAX = 16


def _check(cost: np.ndarray) -> np.ndarray:
    c = np.asarray(cost, dtype=float)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError(f"cost: must be a square matrix, got shape {c.shape}")
    if not np.isfinite(c).all():
        raise ValueError("cost: must be finite")
    return c


def path_length(cost: np.ndarray, path: list[int]) -> float:
    """``sum_t cost[path[t], path[t+1]]``."""
    c = np.asarray(cost, dtype=float)
    p = np.asarray(path, dtype=int)
    return float(c[p[:-1], p[1:]].sum()) if len(p) > 1 else 0.0


def held_karp_path(cost: np.ndarray) -> tuple[float, list[int]]:
    """Exact minimum open Hamiltonian path for ``k <= HELD_KARP_MAX`` nodes.

    Returns ``(length, path)``. Raises ValueError above the boundary.
    """
    c = _check(cost)
    k = c.shape[0]
    if k > HELD_KARP_MAX:
        raise ValueError(
            f"exact path solver handles at most {HELD_KARP_MAX} stages, got {k}; "
            "use approximate_path"
        )
    if k <= 1:
        return 0.0, list(range(k))
    compiled = native.held_karp()
    if compiled is not None:  # solver/path.c: the same table, in C
        path_out = np.empty(k, dtype=np.int64)
        contiguous = np.ascontiguousarray(c)  # kept alive through the call
        length = compiled(k, contiguous.ctypes.data, path_out.ctypes.data)
        if not np.isnan(length):
            return float(length), path_out.tolist()
    full = 1 << k
    bits = 1 << np.arange(k)
    table = np.full((full, k), np.inf)
    parent = np.full((full, k), -1, dtype=np.int8)
    table[bits, np.arange(k)] = 0.0
    masks = np.arange(full)
    popcount = np.zeros(full, dtype=np.int8)
    for b in range(k):
        popcount += (masks >> b) & 1
    cost_t = c.T[None, :, :]  # [., j, i] = cost[i, j]
    for size in range(2, k + 1):
        layer = masks[popcount == size]
        has = (layer[:, None] & bits[None, :]) != 0  # (m, j)
        prev = np.where(has, layer[:, None] ^ bits[None, :], 0)  # S - {j}
        cand = table[prev] + cost_t  # (m, j, i)
        best_i = cand.argmin(axis=2)
        best = np.take_along_axis(cand, best_i[:, :, None], axis=2)[:, :, 0]
        best[~has] = np.inf
        table[layer] = best
        parent[layer] = best_i
    last = int(table[full - 1].argmin())
    length = float(table[full - 1, last])
    path, mask = [last], full - 1
    while len(path) < k:
        prev_node = int(parent[mask, last])
        mask ^= 1 << last
        path.append(prev_node)
        last = prev_node
    path.reverse()
    return length, path


def _two_opt(c: np.ndarray, path: list[int]) -> list[int]:
    """Reverse segments while that shortens the open path (first improvement)."""
    p = np.array(path)
    k = len(p)
    improved = True
    while improved:
        improved = False
        for i in range(k - 1):
            # reversing p[i+1..j]: edges (p[i], p[i+1]) and (p[j], p[j+1]) change
            a, b = p[i], p[i + 1]
            js = np.arange(i + 1, k)
            nxt = np.where(js + 1 < k, p[np.minimum(js + 1, k - 1)], -1)
            old = c[a, b] + np.where(nxt >= 0, c[p[js], np.maximum(nxt, 0)], 0.0)
            new = c[a, p[js]] + np.where(nxt >= 0, c[b, np.maximum(nxt, 0)], 0.0)
            gain = old - new
            j_best = int(gain.argmax())
            if gain[j_best] > 1e-12 * abs(old[j_best]):
                j = int(js[j_best])
                p[i + 1 : j + 1] = p[i + 1 : j + 1][::-1].copy()
                improved = True
        # a free start: reversing a prefix changes only one edge
        for j in range(1, k - 1):
            if c[p[0], p[j + 1]] < c[p[j], p[j + 1]] - 1e-12 * abs(c[p[j], p[j + 1]]):
                p[: j + 1] = p[: j + 1][::-1].copy()
                improved = True
    return p.tolist()


def _or_opt(c: np.ndarray, path: list[int]) -> list[int]:
    """Move single nodes to their best position while that shortens the path.

    For the node at ``idx`` with neighbours ``a, b``, removing it saves ``c[a, node] +
    c[node, b] - c[a, b]`` and inserting it between ``x, y`` of the rest costs ``c[x,
    node] + c[node, y] - c[x, y]`` (one edge at a free end): every position is scored
    at once, O(k) array work per node, O(k^2) a pass (the former rebuilt and rescored
    the path for each position, O(k^3) a pass: 37 s at k = 200).
    """
    p = list(path)
    k = len(p)
    if k < 3:
        return p
    improved = True
    while improved:
        improved = False
        base = path_length(c, p)
        for idx in range(k):
            node = p[idx]
            saved = 0.0
            if idx > 0:
                saved += c[p[idx - 1], node]
            if idx < k - 1:
                saved += c[node, p[idx + 1]]
            if 0 < idx < k - 1:
                saved -= c[p[idx - 1], p[idx + 1]]
            rest = np.array(p[:idx] + p[idx + 1:])
            added = np.empty(k)
            added[0] = c[node, rest[0]]
            added[k - 1] = c[rest[-1], node]
            added[1:k - 1] = c[rest[:-1], node] + c[node, rest[1:]] - c[rest[:-1], rest[1:]]
            length = base - saved + added
            pos = int(length.argmin())
            if length[pos] < base - 1e-12 * abs(base):
                p = rest[:pos].tolist() + [node] + rest[pos:].tolist()
                base = path_length(c, p)
                improved = True
    return p


#: Most starts of approximate_path (times k^2, its work): 32 up to k = 100, then fewer,
#: down to one from k = 401 (8 at k = 200: 0.2 s; one at k = 1000: 0.35 s).
START_WORK = 32 * 100 * 100


def approximate_path(cost: np.ndarray, *, starts: int | None = None) -> tuple[float, list[int]]:
    """Heuristic open Hamiltonian path for any ``k``.

    Nearest-neighbour tours from ``starts`` start nodes (by default all k up to 32, fewer above
    100 nodes so that starts x k^2 stays within START_WORK; at least one), each improved
    by 2-opt then Or-opt; the shortest is returned.
    """
    c = _check(cost)
    k = c.shape[0]
    if k <= 2:
        return path_length(c, list(range(k))), list(range(k))
    n_starts = min(k, starts or max(1, min(32, START_WORK // (k * k))))
    best_len, best = np.inf, list(range(k))
    for start in np.linspace(0, k - 1, n_starts).astype(int):
        p, seen = [int(start)], np.zeros(k, dtype=bool)
        seen[start] = True
        for _ in range(k - 1):
            row = np.where(seen, np.inf, c[p[-1]])
            nxt = int(row.argmin())
            p.append(nxt)
            seen[nxt] = True
        p = _or_opt(c, _two_opt(c, p))
        length = path_length(c, p)
        if length < best_len:
            best_len, best = length, p
    return float(best_len), best


#: Up to this many stages, all orders are scored in one array operation (k! rows).
ENUMERATE_MAX = 7
_ORDERS: dict[int, np.ndarray] = {}


def enumerated_path(cost: np.ndarray) -> tuple[float, list[int]]:
    """Exact path by scoring every order at once; for ``k <= ENUMERATE_MAX``. O(k! k)."""
    c = _check(cost)
    k = c.shape[0]
    if k > ENUMERATE_MAX:
        raise ValueError(f"enumerated_path handles at most {ENUMERATE_MAX} stages, got {k}")
    if k not in _ORDERS:
        import itertools

        _ORDERS[k] = np.array(list(itertools.permutations(range(k))), dtype=np.intp).reshape(-1, k)
    orders = _ORDERS[k]
    if k <= 1:
        return 0.0, list(range(k))
    lengths = c[orders[:, :-1], orders[:, 1:]].sum(axis=1)
    best = int(lengths.argmin())
    return float(lengths[best]), orders[best].tolist()


def best_path(cost: np.ndarray) -> tuple[float, list[int], bool]:
    """``(length, path, exact)``: exact up to HELD_KARP_MAX stages, else approximate."""
    k = np.asarray(cost).shape[0]
    if k <= ENUMERATE_MAX:
        length, path = enumerated_path(cost)
        return length, path, True
    if k <= HELD_KARP_MAX:
        length, path = held_karp_path(cost)
        return length, path, True
    length, path = approximate_path(cost)
    return length, path, False
