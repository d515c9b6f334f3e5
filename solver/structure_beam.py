"""Structures of many short runs on the coarse model, by a beam over the stage sequence.

solver.structures enumerates structures of 1-5 runs exactly. Some fabrics' best layouts
have more runs than that, most of them one stage group long: on the draw-2 96-GPU 12 x 8
suite instance a 40.32 s layout (DataP 6.0 s; found in a 40 s run) has seven runs,
1+1+5+2+1+1+1, at coarse cost 49.72, where the cheapest structure of 1-5 runs costs 52.92
and leads to the 40.9-41.1 s basin (10 s runs, 2 workers, seeds 0-4); with that layout's
class counts as the only structure start, the same runs ended at 40.34-40.46 s, and from
each of the three seven-run structures the beams find, at 40.27-40.47 s.

The beam. A layout's coarse cost (solver.structures) is ``max_s D(v_s) + 2 sum_s e_s``
over its stage groups' class vectors ``v_1 .. v_P`` in pipeline order, where the edge
``e_s`` is ``I(v_s)`` when ``v_{s+1} = v_s`` and ``B(v_s, v_{s+1})`` otherwise, subject to
``sum_s v_s = z``. For a count ``k`` the ``k`` vectors of lowest ``D`` are allowed, and
the sequence is built one stage at a time: a state is the residual ``z - sum v`` and the
last vector; each step extends every state by every allowed vector that fits the
residual, keeps per (residual, last vector) the lowest edge sum ``F``, and the ``width``
states of lowest ``F``. Complete sequences are priced ``max D + 2 F``. There is one beam
for each ``k`` in BEAM_COUNTS. With a beam for every ``k`` from 1 to the number of
vectors and no limit on the width this is exact (the sequence of least cost has some
largest ``D``; the beam whose vectors just reach it finds the least ``F`` among them, a
test checks it against brute force); with BEAM_COUNTS and BEAM_WIDTH it is a heuristic.
A low ``k`` leaves few vectors, so the beam covers most of their sequences: the
seven-run structure above uses vectors among the 20 cheapest of 400; one beam over all
400 ranked by ``max D + 2 F`` needed a width of 20 000 and 29 s to find it, while at a
width of 1 000 the beams of k = 20-24 find it in about 0.02 s each (all nine of
BEAM_COUNTS: 0.15 s).

Cost: O(A^2 2^m m) for the edges of the A = max(BEAM_COUNTS) cheapest vectors, then per
count ``P`` steps of O(W A m) for a width W, and a sort of the W A extensions.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

#: States kept at each stage of a beam.
BEAM_WIDTH = 1000
#: One beam for each k here, over the k vectors of lowest coarse DataP.
BEAM_COUNTS = (8, 10, 12, 14, 16, 19, 22, 26, 32)
#: No beams where a state's integer key (its counts and last vector) could pass this many
#: bits (as solver.structures.best_structures: many classes of many devices).
KEY_BITS = 62
#: Most state-steps of one beam: the width is at most this over the stages (1,000 up to
#: 64 stages; without it 128 stages took 2.2 s and 256 stages 4.9 s of beams).
BEAM_STEPS_MOST = 64_000


def edges(coarse, vecs: np.ndarray) -> np.ndarray:
    """``E[i, j]``: the coarse edge from ``vecs[i]`` to ``vecs[j]`` (``I`` on the
    diagonal, ``B`` elsewhere). O(A^2 2^m m)."""
    a = len(vecs)
    i, j = np.divmod(np.arange(a * a), a)
    e = coarse.between(vecs[i], vecs[j]).reshape(a, a)
    e[np.arange(a), np.arange(a)] = coarse.inside(vecs)
    return e


def _beam(z: np.ndarray, vecs: np.ndarray, edge: np.ndarray, d_pp: int, width: int,
          stop: Callable[[], bool]) -> list[tuple[float, np.ndarray]]:
    """Complete sequences over ``vecs`` that one beam finds: ``[(F, indices), ...]``
    (``F`` the edge sum; the module text). Empty when stopped."""
    a = len(vecs)
    radix = np.concatenate([[1], np.cumprod(z[:-1] + 1)]).astype(np.int64)
    first = np.flatnonzero((vecs <= z).all(axis=1))
    left, last, f = z[None, :] - vecs[first], first, np.zeros(len(first))
    seq = first[:, None]
    for _ in range(1, d_pp):
        if stop() or not len(last):
            return []
        k, j = np.nonzero((vecs[None, :, :] <= left[:, None, :]).all(axis=2))
        nf, nleft = f[k] + edge[last[k], j], left[k] - vecs[j]
        key = (nleft @ radix) * a + j
        order = np.lexsort((nf, key))  # by key, then F: the first of each key is its best
        keyed = key[order]
        keep = order[np.concatenate([[True], keyed[1:] != keyed[:-1]])] if len(order) else order
        keep = keep[np.argsort(nf[keep], kind="stable")[:width]]
        left, last, f = nleft[keep], j[keep], nf[keep]
        seq = np.hstack([seq[k[keep]], j[keep][:, None]])
    done = np.flatnonzero((left == 0).all(axis=1))
    return [(float(f[i]), seq[i]) for i in done]


def beam_structures(coarse, vecs: np.ndarray, d_pp: int, most: int, width: int = BEAM_WIDTH,
                    counts: tuple[int, ...] = BEAM_COUNTS, stop: Callable[[], bool] = lambda: False,
                    ) -> list[tuple[float, list[tuple[np.ndarray, int]]]]:
    """The ``most`` structures of lowest coarse cost the beams find over ``vecs`` (lowest
    coarse DataP first, as solver.structures.vectors gives them), in the form of
    solver.structures.best_structures: ``[(cost, [(v, L), ...]), ...]``, each once (a
    reversed sequence costs the same and is left out); none where the state keys could
    pass KEY_BITS. The width is at most BEAM_STEPS_MOST over ``d_pp``. Once ``stop()``
    turns true, those of the beams run to the end. O(module text)."""
    a = min(len(vecs), max(counts, default=0))
    if a == 0 or d_pp < 1 or most <= 0 or stop():
        return []
    if float(np.log2(coarse.z + 1.0).sum() + np.log2(a + 1.0)) >= KEY_BITS:
        return []  # keys that could pass 62 bits
    width = max(1, min(width, BEAM_STEPS_MOST // d_pp))
    vecs = vecs[:a]
    values = coarse.data_p(vecs)
    edge = edges(coarse, vecs)
    found: dict[bytes, tuple[float, np.ndarray]] = {}  # a sequence costs the same in every beam
    for count in sorted(set(min(c, a) for c in counts)):
        for f, seq in _beam(coarse.z, vecs[:count], edge[:count, :count], d_pp, width, stop):
            found.setdefault(min(seq.tobytes(), seq[::-1].tobytes()), (float(values[seq].max() + 2.0 * f), seq))
        if stop():
            break
    out = []
    for cost, seq in sorted(found.values(), key=lambda x: x[0])[:most]:
        runs: list[list[int]] = []  # [vector index, length]
        for i in seq.tolist():
            if runs and runs[-1][0] == i:
                runs[-1][1] += 1
            else:
                runs.append([i, 1])
        out.append((cost, [(vecs[i], length) for i, length in runs]))
    return out
