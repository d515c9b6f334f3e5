"""The minimum spanning tree of ``T_pp`` and the components of its cheap links.

For every threshold ``t`` the connected components of the graph of device pairs with
``T_pp < t`` are those of the tree's edges lighter than ``t``: this holds for every
minimum spanning tree (a cheaper path joins the ends of any pair the tree's light
edges leave apart, which a minimum tree cannot do). Zero entries (co-located devices)
are made the smallest positive float, so the threshold just above zero still keeps
them. One tree costs O(N^2) (Prim on the dense matrix, N - 1 vector steps of O(N):
0.07 s at 4096 devices, where scipy's sparse routine took about 2 s and, converting the
dense matrix, dropped every entry below 1e-8 as if it were no link). Each level after
it costs O(N). The tree is kept on the cost model, so the separate
bound, the joint bound and the rebalancing levels share it.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components


class SpanningTree:
    """The tree's edges sorted by weight: ``weights``, ``rows``, ``cols`` (N - 1 each)."""

    def __init__(self, t: np.ndarray) -> None:
        self.n = t.shape[0]
        w = np.where(t > 0, t, np.finfo(float).tiny)  # a free pair is still an edge
        rows, cols, data = _prim(w)
        order = np.argsort(data, kind="stable")
        self.weights = data[order]
        self.rows, self.cols = rows[order], cols[order]
        #: the edges' true weights (a free pair's is 0, not the tiny stand-in above)
        self.costs = np.asarray(t, dtype=float)[self.rows, self.cols]

    def thresholds(self) -> np.ndarray:
        """Distinct edge weights, largest first (fewest components first)."""
        return np.unique(self.weights)[::-1]

    def components(self, t: float) -> tuple[int, np.ndarray]:
        """``(m, labels)`` of the graph of pairs with ``T_pp < t``."""
        keep = self.weights < t
        graph = coo_matrix((np.ones(int(keep.sum())), (self.rows[keep], self.cols[keep])),
                           shape=(self.n, self.n))
        return connected_components(graph, directed=False)

    def forest_weight(self, trees: int) -> float:
        """Weight of the minimum spanning forest with ``trees`` components: Kruskal stops
        after ``N - trees`` edges, which are the tree's lightest ``N - trees``."""
        return float(self.costs[: max(0, self.n - trees)].sum())


def _prim(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Edges ``(rows, cols, weights)`` of a minimum spanning tree of the dense symmetric
    ``w`` (diagonal ignored): Prim's algorithm, one O(N) vector step per device added."""
    n = w.shape[0]
    if not np.isfinite(w).all():  # argmin over inf distances could pick a tree vertex
        raise ValueError("spanning tree: the transfer matrix has non-finite entries")
    rows = np.zeros(max(n - 1, 0), dtype=np.int64)
    cols = np.zeros(max(n - 1, 0), dtype=np.int64)
    data = np.zeros(max(n - 1, 0))
    if n < 2:
        return rows, cols, data
    dist = w[0].astype(float, copy=True)
    parent = np.zeros(n, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    done[0] = True
    dist[0] = np.inf
    for k in range(n - 1):
        j = int(np.argmin(dist))
        rows[k], cols[k], data[k] = parent[j], j, dist[j]
        done[j] = True
        dist[j] = np.inf
        closer = (w[j] < dist) & ~done
        dist[closer] = w[j][closer]
        parent[closer] = j
    return rows, cols, data


def spanning_tree(model) -> SpanningTree:
    """The tree of ``model.t_pp``, built once per model."""
    tree = model.__dict__.get("_pp_tree")
    if tree is None:
        tree = model.__dict__["_pp_tree"] = SpanningTree(model.t_pp)
    return tree
