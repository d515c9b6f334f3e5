"""Anytime improvement: the tempering walk a worker runs in one round (solver.workers).

``temper`` continues the worker's parallel-tempering ladder (solver.tempering) for the
round, descends its best (solver.descent: exact matchings, pipeline order, partition
swaps), then tries segment rebalancing on the result (solver.rebalance: a run of stage
groups given equal component vectors in one move); it is a pure function of the elite,
the ladder kept from the worker's earlier rounds and its budget, which is what makes
the parallel search reproducible.

Why tempering, measured with ``benchmarks/anytime.py`` on the SYNTHETIC hierarchical
suite, 2 cores:

- the previous walks, an iterated local search (descend a perturbation: random swaps
  or 2-3 stage groups pooled and dealt back; annealed acceptance) and the same after a
  heat-bath annealing run, where each descent re-solves matchings and the pipeline
  order exactly (milliseconds, 0.1 s with Held-Karp at 16 stages), reached at
  ``--time-limit 10`` 22.96 on the 48-GPU 4 x 12 instance, 51.5 on 16 x 4, 51.7-61.0 on
  the 80-GPU 10 x 8 and 56.8 on 12 x 8, with 5-seed spreads up to 12%;
- parallel tempering with the compiled kernel, from the same starts and in the same
  10 s: 19.9-21.1, 40.7-42.9, 45.3-47.0 and 44.4-49.7: the good layouts lie several
  block exchanges away from every start, and millions of cheap Metropolis swaps at a
  ladder of temperatures cross those ridges where a few hundred exact descents do not.
  The descent that ends each walk keeps what the exact inner solvers add.
- what the ladder does not cross: on the 192-GPU 8 x 24 instance, runs ended in a
  layout where four stage groups of one run held two different region mixes (13/11 and
  17/7 devices) and one edge inside the run crossed regions (41.5 s); each single swap
  towards equal mixes makes one more edge cross regions. Rebalancing the run in one
  move and descending reaches 37.8 s in 0.5 s (three such layouts: 37.8-38.6); at
  10 s that instance then reached 38.7 s where it had reached 40.3 s.

Under a time limit the ladder of a round stops as long before the round's end as the
walk's closing (descent, rebalancing) took last time, at most half the round
(solver.workers.CLOSING_SHARE): at 192 GPUs the closing (0.3-0.5 s of descent, 0.5 s or
more of rebalancing, rounds of 1.1 s at ``--time-limit 10``) otherwise ran past its grace
and was cut off in most rounds, and about one run in three kept a layout one
rebalancing move from 38 s at 41-42 s. With the compiled matchings, Held-Karp and batch
scoring (solver.native), the closings of a 10 s run (seed 1, both workers together) took
2.9 s against 14.4 s of ladder at 192 GPUs (9.1 s against 8.8 s before), 2.5 s against
14.7 s on 16 x 4 (9.2 / 8.6) and 1.3 s against 16.1 s on 10 x 8 (5.9 / 11.2).

Explorers (``explore``: the odd workers, but worker 1 while it keeps a lineage, up to
LINEAGE_MAX_N devices; while
DataP is at least solver.exclusion.EXCLUDE_SHARE of the elite's Comm, or the elite has
(nearly) stalled: "Stalled redeals" below) run whole-grid
redeals instead of the ladder: on the draw-1 192-GPU 8 x 24 suite instance, whose layouts sit on a DataP
plateau (every stage group holds a device of each slow-NIC host), five 10 s runs
ended at 45.5-50.1 s (mean 48.2) against 52.6-53.8 s (mean 53.2) with every worker
tempering, three 30 s runs at 46.1-50.3 s against 51.6-53.2 s, and the default rule
at 50.3 s in 46 s against 53.2 s in 37 s. With the generic exclusions alone (no
confinement) the 10 s mean was 52.0 s; with one exclusion per tempering walk's closing
instead of a worker of their own, 52.3 s (an earlier session's run). The other suite instances rarely meet the
gate (a few early rounds of h36, h48 and h80, where confinements took h36 from 34.5
to 29.9 s and h48 from 25.2 to 20.0 s in a few candidates) and kept their 10 s figures
within noise. A gate at 50% let them act on more instances: 16 x 4 draw 1 went from a
24.05 to a 24.64 s mean (a candidate takes about 4 s at 16 stages), 8 x 8 and 12 x 8
draw 0 stayed within noise.

Split kicks (solver.exclusion.kicks): an explorer handed the same elite as last round
(no walk improved it) tries the elite's best-scored splits of a segment into two runs
of equal vectors, at every coarse level and the hosts', each descended and rebalanced
whatever its first score; rebalancing proper descends only splits that already beat
the grid. From recorded 10 s layouts (2 workers) the first four kicks, tried one
after another, took the 64-GPU 8 x 8 draw-1 instance from 20.33 to 19.97 s (its best
known, 19.92-19.98 s), the 80-GPU 10 x 8 draw-2 instance from 36.78 to 35.88 s and
the 192-GPU draw-0 one from 37.20 to 36.72 s, where every move of the search had
stopped. Measured against the search without them in one session, 2 workers: default
rule, seeds 0-1 on five instances, 3 of 10 runs lower (8 x 8 draw 1 seed 1 20.03 ->
19.98 s; 12 x 8 draw 2 40.80 -> 40.67 and 41.03 -> 40.79 s), one 0.02% higher, the
rest equal, at 0-4 s more wall time; ``--time-limit 10``, seeds 0-3, means within the
runs' noise (16 x 4 draw 2 24.71 -> 24.43 s, 8 x 8 draw 1 20.19 -> 20.11 s, 10 x 8
draw 0 44.44 -> 44.75 s, 12 x 8 draw 2 40.69 -> 41.03 s, one seed of each of the
last two at +2-3%). Kicking every elite instead of a stalled one cost the odd
worker's ladder where it still improves: 12 x 8 draw 2 40.69 -> 41.92 s, 10 x 8
draw 0 44.44 -> 45.10 s. A nearly stalled elite (improved by less than NEAR_STALL in the
last round) gets its NEAR_KICKS best kicks: runs crawling 0.1% a round on 16 x 4 (40.78
-> 40.67 s) got no kick for seconds, where one kick from such a recorded layout (39.87
s) reached 35.03 s in 0.23 s. Against the search without it (one session, 10 s, 2
workers): 10-seed means h192 draw 0 36.88 -> 36.74 s, h80 draw 1 31.42 -> 31.39 s,
16 x 4 draw 1 24.44 -> 24.28 s; 5-seed means of the rest of both draws within 0.5%
either way (h64-8x8 draw 0 24.04 -> 24.16 s, draw 1 20.03 -> 19.98 s): within noise.

Ladder restarts (RESEED): a worker whose elite is nearly stalled (the last round improved
it by less than NEAR_STALL, or not at all) rebuilds its ladder from that elite, once per
elite: every chain starts at the elite, and the temperatures, TAU_COLD .. TAU_HOT times
the ladder's first Comm, are scaled to the elite's Comm. The ladder built in the first
round keeps the scale of the first elite (53 s on the 64-GPU 16 x 4 draw-0 suite
instance, whose 10 s answers are 34.5-35.7 s: its hottest rung at 15% of their Comm)
and its chains spread over basins far above the elite. From a recorded 10 s layout of
that instance (35.55 s, where the running ladder had stopped improving), four fresh
ladders of 3 s each reached 34.69-35.28 s (three below 34.81 s). Measured in one session
at ``--time-limit 10``, 2 workers, seeds 0-4, mean Comm against the search without it
run in the same session: 16 x 4 draw 0 35.47 -> 34.79 s (34.35-35.43 s; 34.348 s a new
best known), h80 draw 0 44.44 -> 44.18 s, h192 draw 1 49.85 -> 49.37 s, h96 draw 1
40.86 -> 40.89 s; against the previous session's tables (quoted): 16 x 4 draw 1 23.94
-> 23.58 s (spread 4.0% -> 0.09%), h64-8x8 draw 0 24.18 -> 23.94 s (1.8% -> 0.18%), h96
draw 0 44.36 -> 44.18 s, h192 draw 0 36.90 -> 36.71 s; the rest within noise.
Restarting only on a stalled elite (no walk improved it) did worse in the same session,
one run of five seeds (16 x 4 draw 0 mean 37.39 s, two seeds in a 40.5 s basin; h80
draw 0 45.27 s).

Own lineage (LINEAGE, ``lineage_ladder``): worker 1 never takes the elite into its
ladder. Its first ladder starts at a random layout, temperatures scaled to that
layout's Comm (a random layout of the draw-1 12 x 8 suite instance: 310-402 s, against
about 45 s for its best topology start); when its own best moved by less than
NEAR_STALL in a walk, a new ladder starts at that best (scaled to it), once per
lineage, and when the walk after that restart moved its best by less than NEAR_STALL
too, a new lineage starts from another random layout (LINEAGE_FRESH: some lineages
reach the better basin named below and the others stay out of it for the rest of the
run). Its walks still end with the descent and rebalancing, and the round takes the
better of its best and the elite, so the other workers get what it finds. Why: on the
draw-1 12 x 8 suite instance the best layouts (38.4-38.6 s) mix two regions in seven of the
twelve stage groups (DataP 14.9 s against 10.8 s) so that every pipeline stays inside
one zone along each run of groups (Pipeline 23.7 s against 29.3 s); the topology starts
give region-pure groups, and from their basin (39.7-40.6 s) the mixed layouts lie
behind a DataP step of about 4 s. In one process, a ladder from a random layout (3 s,
descent, a new ladder at its best for 3 s) ended at 38.68-40.11 s, three seeds of four
below 38.95 s, where the same steps at the same temperatures from a 40.06 s layout of
that basin ended at 39.80-39.84 s. Measured in one session at ``--time-limit 10``, 2
workers, seeds 0-4, mean Comm (an experimental build of the same rule, other streams):
12 x 8 draw 1 40.06 -> 39.58 s (same session; 38.67 s the best seed; 39.35 s in another
run of the same rule), 10 x 8 draw 1 30.99 -> 30.90 s (previous release's tables,
quoted; spread 1.4% -> 0.3%); within noise: 8 x 24 draw 1 46.22 -> 46.44 s (another
run of the same rule: 45.82 s), 8 x 8 draw 1 19.93 -> 19.90 s, and every draw-0
instance within 0.1%. Up to LINEAGE_MAX_N devices worker 1 no longer explores
(solver.exclusion): with 2 workers there is no explorer there, but for the lineage's
own explorer walks (below). At 192 GPUs a random layout's ladder found nothing in 10
s, and worker 1 explores again (LINEAGE_MAX_N).
Not kept, same session, 12 x 8 draw 1 means: the lineage for worker 1's first three or
five walks only, then the elite (39.57, 39.59 s: as good, with one more rule); the
first ladder of every worker 4 or 8 times hotter (39.76, 39.95 s); a DataP floor in
the chains' energy (Comm with DataP raised to a floor of 13-17 s, 4 s from the 40.06 s
layout: no layout below 39.8 s); swaps of two rows' runs of 2-8 devices in the kernel,
1/8 or 1/4 of the proposals (39.83, 40.42 s).

Lineage explorers (LINEAGE_EXPLORES, EXPLORE_COARSE_KEY): worker 1 spends a walk
exploring (``explore``) when the elite is nearly stalled or stalled, every redeal
(confinements, exclusions, packings, transfers) listed whatever the elite's DataP share, and the
split kicks;
it tempers its lineage otherwise, and for what is left of a walk once every candidate
has failed (in every pass, "Passes" below). A lineage walk that follows exploring walks
goes on with its ladder (the restart or fresh start of LINEAGE_FRESH waits for a walk
that follows a lineage walk; the figures below are of a build in which that mark could
outlive the walk after, when the last lineage walk had gained; the same session, fixed,
seeds 0-4: 10 x 8 draw 3 41.41 s, two below 41 s; 12 x 8 draw 1 39.55 s). An exploring
walk's place in its candidate list is kept under the elite's coarse component vectors
(``explore_key``), not the grid: a ladder crawling 0.01 s a round changes the elite
every round, and a list restarted every round tried only its first few candidates (a
candidate takes about a round at 10-12 stages). Why: up to LINEAGE_MAX_N devices with 2
workers no worker explored, and two suite instances sat in a basin that only a
whole-grid redeal leaves. The draw-3 80-GPU 10 x 8 instance has two layout families,
40.8 s (DataP 25.6 s, Pipeline 15.2 s: the slow host spread over three mixed groups) and
42.4 s (12.8 / 29.6 s: the slow host confined with its region); the ladders rarely cross
between them and an exclusion redeal does (42.36 -> 41.32 s, then 40.98 s after a 0.5 s
ladder). Measured in one session at ``--time-limit 10``, 2 workers, mean Comm without ->
with: draw-3 10 x 8 seeds 0-9 41.96 -> 40.88 s (2 -> 7 of 10 below 41 s, a noisy figure:
a later run of seeds 0-4 had one below 41 s where this one had four; 39.869 s, and
39.866 s by a seed without; seeds 0-4 with the grid as the key instead of the coarse
vectors: 41.90 s against 40.66 s with them); draw-2 48-GPU 4 x 12 seeds 0-4 34.576 s on
every seed -> 31.02-31.04 s (31.008 s the lowest found, by an earlier release); 192-GPU
8 x 24 (where worker 1 is an explorer and only the key changed) draw 1 46.46 -> 45.71 s,
draw 0 36.62 -> 36.71 s. The lineage's instance, 12 x 8 draw 1, seeds 0-14: 39.19 ->
39.36 s (8 -> 6 of 15 below 39.0 s; seeds 5-14 alone 39.29 -> 39.25 s): within its
two-basin noise. Within 0.2% either way, seeds 0-4: every other 36-96-GPU instance of
draws 0 and 1, and 16 x 4, 10 x 8 and 12 x 8 of draw 2; draw 3: 12 x 8 34.75 -> 34.67 s,
16 x 4 33.82 -> 33.94 s, 4 x 12 31.26 s both. Not kept: worker 0 exploring a nearly
stalled elite instead (10 x 8 draw 3 42.19 s, 12 x 8 draw 1 39.80 s); worker 1 exploring
at most every other walk or every third (10 x 8 draw 3 41.81 and 41.36 s, 12 x 8 draw 1
39.17 and 39.38 s).

Stalled redeals (STALL_REDEALS): an explorer that is not a lineage's (with 2 workers,
worker 1 above LINEAGE_MAX_N devices) lists every redeal of a (nearly) stalled elite,
whatever its DataP share, before the split kicks; where the elite still improves by
NEAR_STALL a round, the DataP gate holds. Why: on the draw-3 192-GPU 8 x 24 suite
instance a 10 s layout of 41.27 s (DataP 22.7 s, 55% of Comm: under the gate) got only
split kicks, none better than 41.24 s, where 11 of its 54 redeals (before the dear
hosts' confinements), each tried once from it, reached 38.46-40.56 s (an exclusion
38.46 s, three packings 38.66-38.85 s, a confinement 40.56 s; 0.1-0.9 s each).
Measured in one session at ``--time-limit 10``, 2 workers, seeds 0-4, mean Comm
without -> with: h192 draw 3 41.38 -> 39.61 s (37.18 s the best seed; one seed still
at 43.45 s), draw 1 46.44 -> 46.02 s, draw 0 36.73 -> 36.59 s, draw 2 47.14 -> 47.16 s.

Passes (EXPLORE_PASSES): an exploring walk whose every candidate failed on a grid goes
over the same list again, up to three passes in all, before the key is marked explored.
A redeal's descent and rebalancing draw their sweep orders from the walk's stream, so a
candidate that fails on one draw may succeed on another. On the draw-2 48-GPU 4 x 12
suite instance, seed 0's 10 s runs ended at 34.576 s where seeds 1-9 reached
31.008-31.020 s: worker 1's first exploring walk tried all 52 candidates of the stalled
elite (44 redeals, 8 split kicks), each failed once, and its lineage then found nothing
in the 6 s left. Of that layout's 44 ranked redeals, each redealt, descended and
rebalanced from it on six other streams, three went below it on some draws (a packing on
3 of 6, 31.3-31.8 s; a confinement on 3 of 6, 32.3-32.5 s; an exclusion on 1 of 6, 31.6
s). Only walks that reach the end of a list see the passes: at ``--time-limit 10`` (2
workers, seed 0, draws 0-5) lists ran out on the 36-64-GPU 6 x 6, 4 x 12 and 8 x 8
instances and never on the 64-96-GPU 16 x 4, 10 x 8 and 12 x 8 ones, where a candidate
takes 1-4 s. From the recorded layout, one exploring walk on each of 16 streams (every
candidate listed, no clock): with one pass the walk stayed at 34.576 s on 6 streams,
with three passes on none (31.04-31.32 s). Measured in one session at
``--time-limit 10``, 2 workers, mean Comm one pass -> three: draw-2 4 x 12 seeds 0-9
31.373 -> 31.016 s (worst 34.576 -> 31.041 s); seeds 0-4, within 0.2% either way or
equal: 6 x 6 of draws 0-5, 4 x 12 of draws 0, 1 and 3-8, 8 x 8 of draws 0, 3 and 6-8.
The draw-9 4 x 12 instance has two basins, 27.57 and 28.60 s: seeds 0-9 27.980 -> 27.878
s (4 -> 3 seeds in the upper one). The default stop rule gave the same answers (seed 0;
6 x 6 and 4 x 12 of draws 0-5 and 8 x 8 of draws 0 and 3, in the same time; 8 x 24 of
draws 0, 1 and 4, 12 x 8 of draw 4): its walks try as many candidates as their budget
buys (EXPLORE_PAIR_SWAPS), and the search stopped before any list ran out.

Cut candidates (RETRY_CUT): a redeal whose descent or rebalancing saw the walk's clock end
(``cancel``: the round's end plus its grace) was not judged; it does not count as failed,
and the next exploring walk on that key tries it first, with a whole round before it; cut
short again, it fails. At ``--time-limit 10`` (2 workers) on the 64-GPU 16 x 4 draw-5
suite instance 7 of 9 redeals tried in two runs were cut short this way (a candidate
takes about 1.1 s there, a round as long), and counted as failed; 2 of 15 on 12 x 8
draw 9, 2 of 25 on 10 x 8 draw 3, 1 of 11 on 8 x 24 draw 1. Measured in one session at
``--time-limit 10``, 2 workers, mean Comm without -> with: 10 x 8 draw 3 seeds 0-4
40.40 -> 39.88 s (a seed at 42.44 s before, none above 39.93 s after); 16 x 4 draw 5
seeds 0-14 47.20 -> 47.12 s; 8 x 24 draw 1 seeds 0-14 42.22 -> 42.03 s (41.79 -> 43.53
s on seeds 0-4, 42.43 -> 41.28 s on seeds 5-14: its basins split the seeds either way);
within 0.1% either way: 16 x 4 draws 0 and 1, 12 x 8 draw 9.

Origin ladders (REORIGIN, ``origin_ladder``): a tempering worker that is not a lineage's,
handed the same elite again after the walk of the ladder it reseeded there (RESEED),
starts a ladder at a topology start as laid out (solver.search hands them over, lowest
Comm first; worker w begins at place w of that list, then takes the next), every chain at
it, temperatures scaled to its Comm, on a stream of its own. No elite enters that ladder
while a walk lowers its best by NEAR_STALL of it or more; once a walk does not, the
worker's ladder takes the elite again, and if the elite is still the same the next start
follows. The family a ladder settles in is set by where it begins. The draw-9 48-GPU 4 x
12 suite instance has two, 27.57 s (DataP 9.1 s, Pipeline 18.5 s: region-pure first
group, zones in pipeline order) and 28.60 s (19.5 / 9.1 s: one group mixes regions).
Ladders of 600 000 steps (24 chains) from its ten topology starts as laid out, six
streams each, ended in the lower family from the two stage-groups-local starts of the
clustering and order-1 orders (the two lowest, 39.9-40.1 s) on 11 of 12 streams, from the
other eight on none of 48; from random layouts of 1 000 000 steps, 16 of 16 in the upper
(and 8 of 8 with the hottest rung at 4% or 20%). In a 10 s run (seed 5) worker 0's
ladder, from the best descended start (35.39 s), settled in the upper family in its first
round, the lineage too (28.61 s from a random layout); the reseed at 28.596 s found
nothing, worker 1 explored that layout in three passes for rounds 3-7, and the run ended
there. Measured in one session at ``--time-limit 10``, 2 workers, mean Comm without ->
with: draw-9 4 x 12 seeds 0-9 27.980 -> 27.579 s (3 seeds -> none in the upper family;
worst 28.596 -> 27.638 s), draw-9 12 x 8 seeds 0-9 47.159 -> 46.837 s; seeds 0-4, within
noise: 8 x 24 draw 0 36.693 -> 36.446 s, draw 5 36.161 -> 36.325 s, draw 9 52.099 ->
52.229 s; 10 x 8 draw 5 25.241 -> 25.245 s, 8 x 8 draw 5 44.627 -> 44.657 s, 6 x 6 draw 5
33.218 -> 33.223 s. An experimental build (origins from the labels and clustering orders
alone; an 8 x 24 explorer at the same place as worker 0), seeds 0-4: 16 x 4 draw 0 34.356
-> 34.361 s, 10 x 8 draw 3 41.013 -> 41.188 s and draw 1 30.892 -> 30.916 s, 12 x 8 draw
1 39.338 -> 39.130 s, 8 x 8 draw 1 19.900 -> 19.904 s, 4 x 12 draw 2 31.011 -> 31.013 s,
8 x 24 draw 3 37.350 -> 38.138 s (35.76-39.19 s either way; a second run of both: 38.08
-> 37.88 s). A build that restarted from the worker's own first grid, no other start,
left one seed of ten of draw-9 4 x 12 in the upper family: its first grid (a 34.20 s
start) led three origin ladders in a row there. Where the elite is at the best known the
ladders cost nothing; where the reseeded ladder would have found a little more, they cost
it. The default stop rule (seed 0) gave the same answers on seven suite instances of
draws 0, 1, 2 and 9 (draw-9 4 x 12 at 28.596 s both ways: three rounds without a gain end
it before an origin ladder crosses) and 0.02-0.03% higher ones on draw-0 8 x 8 (23.950 ->
23.954 s) and 8 x 24 (36.459 -> 36.469 s).

Cost: the ladder's steps (O(K D_DP) each, solver.tempering), then one descent
of at most DESCENT_SWEEPS local-search sweeps (O(N^2 D_DP) array work each) and
partition passes of at most 4 N exact matchings, then the rebalancing (solver.rebalance;
skipped while the component vectors are those it last failed on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from solver.descent import Effort, descend
from solver import exclusion
from solver.rebalance import fine_level, levels, rebalance, signature
from solver.tempering import Ladder

#: Scored swaps of one tempering walk when no time limit is given: TEMPER_SWEEPS sweeps
#: of N^2, at most TEMPER_MAX (about 3 s for the compiled kernel, a minute in numpy).
#: At 500 sweeps the default rule ended in 2-12 s on the 36-96-GPU suite instances at a
#: mean of +6.4% above the best known (3 seeds each; up to +25%); at 1500, in 4-17 s at
#: +3.0% (up to +14.6%, the 16 x 4 instance).
TEMPER_SWEEPS = 1500
TEMPER_MAX = 20_000_000
#: Most scored swaps per walk, in units of N^2, when a time limit and a budget are given.
WALK_SWEEPS_TIMED = 200
#: Fewest ladder steps in one tempering walk (small instances have small budgets).
MIN_TEMPER_STEPS = 2000
#: Local-search sweeps (N^2 scored swaps each) of the descent that ends a tempering walk.
DESCENT_SWEEPS = 2
#: ... and at most this many scored swaps (a sweep is 16.7 million at 4096 devices).
DESCENT_MAX = 2_000_000
#: Each walk's closing time is remembered as max(this one, CLOSING_FADE x the last).
CLOSING_FADE = 0.7
#: Most devices for a full closing descent; above, the walk's best is only polished.
DESCENT_FULL_N = 512
#: Whether odd-numbered workers (but a lineage's, LINEAGE) explore (``explore``) while
#: the elite is bound by DataP (and, with KICK and STALL_REDEALS, while it has (nearly)
#: stalled).
EXPLORE = True
#: Whether explorers also try split kicks (solver.exclusion.kicks) on an elite that no
#: walk of the last round improved, whatever its DataP.
KICK = True
#: An elite that the last round improved by less than this share of its Comm is *nearly*
#: stalled: explorers try its NEAR_KICKS best split kicks (all KICKS once it stalls).
NEAR_STALL = 0.005
NEAR_KICKS = 2
#: Whether a worker's ladder is rebuilt from a (nearly) stalled elite: all its chains
#: start at the elite and its temperatures are scaled to the elite's Comm; once per
#: elite (module text).
RESEED = True
#: Whether worker 1 keeps a lineage of its own (``lineage_ladder``, module text), for
#: instances of at most LINEAGE_MAX_N devices; above, it explores like the other odd
#: workers. On the 192-GPU 8 x 24 suite instances the lineage's walks found nothing in
#: 10 s (every answer of five seeds came from worker 0), and with worker 1 exploring
#: instead (redeals, split kicks) the 10-seed means at ``--time-limit 10``, 2 workers
#: (seeds 0-4 and 5-9 in two sessions, both rules in each), went from 46.74 to 46.07 s
#: on draw 1 (3 of seeds 0-4's answers from worker 1) and from 36.78 to 36.62 s on
#: draw 0. The lineage was built for the 96-GPU
#: 12 x 8 instance (module text), below the limit. Above 512 devices the default rule
#: runs 2 rounds of token walks (``temper_walk``) and the first topology start is the
#: answer on the benchmark's 1024- and 4096-GPU fabrics.
LINEAGE = True
LINEAGE_MAX_N = 128
#: Stream label of a lineage's ladders (after the worker's seed), above any round number
#: (a walk's own stream is ``(seed, worker, round)``, solver.workers).
LINEAGE_STREAM = 2**32 - 1
#: Whether a lineage whose restart at its own best nearly stalled too (the walk after it
#: moved the best by less than NEAR_STALL) starts over from another random layout
#: (``lineage_ladder``). The draw-1 12 x 8 suite instance's better basin (38.5 s, module
#: text) is reached by some lineages and not others; one session, ``--time-limit 10``, 2
#: workers, seeds 0-19, without -> with (when the restart found nothing at all): mean
#: 39.50 -> 39.16 s, 6 -> 10 answers of 20 below 39.0 s, worst 40.42 -> 39.91 s; seeds
#: 0-4 of 10 x 8 (both draws), 16 x 4 and 12 x 8 of draw 0 and 8 x 8 of draw 1 within
#: 0.1%, and seeds 5-14 of 10 x 8 draw 1 30.918 -> 30.927 s. A restart's walk that
#: crawled (a lineage in the 40.5 s basin moved 0.01 s a walk) restarted once per best
#: and never went fresh; one restart per lineage, then fresh (a later session, same
#: measure, both rules in it): seeds 0-19 39.365 -> 39.085 s (6 -> 12 of 20 below 39.0
#: s), seeds 20-39 39.333 -> 39.200 s (9 -> 11); within noise: 10 x 8 seeds 0-9 draw 0
#: 44.014 -> 44.042 s, draw 1 30.914 -> 30.905 s, seeds 0-4 of 16 x 4, 8 x 8 and 12 x 8
#: draw 0 (34.315 -> 34.316, 23.902 s both, 43.933 -> 43.918 s), 8 x 8 draw 1 19.906 ->
#: 19.922 s, 16 x 4 draw 1 seeds 0-14 23.566 -> 23.585 s.
LINEAGE_FRESH = True
#: Whether worker 1, while it keeps a lineage, explores an elite that the last round
#: improved by less than NEAR_STALL (or not at all) for that walk, every redeal listed
#: whatever the elite's DataP share (``explore``), and tempers its lineage otherwise or
#: once every candidate failed, in every pass (module text: "Lineage explorers").
LINEAGE_EXPLORES = True
#: Whether an explorer (not a lineage's) lists every redeal of an elite that the last
#: round improved by less than NEAR_STALL (or not at all), whatever its DataP share,
#: before the split kicks (module text: "Stalled redeals").
STALL_REDEALS = True
#: Whether an exploring walk goes on in the candidate list where the last one stopped
#: when its elite has the same component vectors at every coarse level as the grid that
#: walk ended on (``explore_key``), not only when it is the same grid.
EXPLORE_COARSE_KEY = True
#: Added to the count of fresh lineages in their stream label (restarts at a best use
#: the small counts).
FRESH_STREAM = 2**31
#: Without a clock an exploring walk tries as many candidates as its budget of scored
#: swaps buys at this many per D_PP^2 each (a candidate's rebalancing scans the
#: O(D_PP^2) segments): about its time in ladder proposals (0.15 us each), so the
#: default stop rule's walks take about as long as tempering ones (the swaps it
#: reports are those it scored). Measured per candidate on the suite: 0.27 s at 6 stages (36
#: GPUs), 1.2 s at 8 (192 GPUs), 1.6-1.8 s at 10-12, 3.9 s at 16; 0.05-0.18 million
#: proposals per D_PP^2. Under a time limit the clock decides.
EXPLORE_PAIR_SWAPS = 100_000
#: Whether a candidate whose redeal the walk's clock cut short (``cancel``) is tried
#: first in the next exploring walk on that key instead of counting as failed; cut
#: short a second time, it fails (module text, "Cut candidates").
RETRY_CUT = True
#: Passes an exploring walk makes over one key's candidate list (``explore``) before it
#: marks the key explored: a list whose every candidate failed is tried again, the
#: redeals' descents drawing other sweep orders (module text, "Passes").
EXPLORE_PASSES = 3
#: Whether a tempering worker whose reseeded ladder (RESEED) left the elite as it was
#: runs ladders from the topology starts in turn, each away from the elite until it
#: stalls (module text, "Origin ladders").
REORIGIN = True
#: Stream label of origin ladders (after the worker's seed), above any round number.
ORIGIN_STREAM = 2**32 - 2


@dataclass(eq=False)
class Walk:
    """What one walk returns: its best grid, Comm, work, and when it improved."""

    grid: np.ndarray
    fun: float
    strategy: str
    nfev: int
    nit: int
    iterations: int
    trace: list[tuple[float, float]] = field(default_factory=list)  #: (clock, Comm)


def seed_words(seed) -> list[int]:
    """``seed`` (an int or a sequence of ints) as a list of Python ints, the form
    ``np.random.default_rng`` takes: numpy turns a list that mixes an int of 2**63 or
    more with small ones into floats, which it then refuses as a seed."""
    if isinstance(seed, (list, tuple, np.ndarray)):
        return [int(x) for x in seed]
    return [int(seed)]


def temper_walk(n: int) -> int:
    """Scored swaps of one tempering walk under the default stop rule: TEMPER_SWEEPS
    sweeps, at most TEMPER_MAX, scaled down by (512 / N)^3 above 512 devices (there the
    matrices outgrow the caches and a proposal costs about 2.4 us at 1024 devices, 10x
    more than at 200, while the starts take most of the default's time). Above about
    2048 devices the walks are token (0.002 sweeps at 4096): there the starts decide. On
    the benchmark's random geo fabrics of 1024 and 4096 GPUs the walks found nothing
    better than the first start; with (512 / N)^2 the 1024-GPU default ended at 56-69 s
    in four runs of one session, with (512 / N)^3 at 49.7 s, with the same answer."""
    return int(min(TEMPER_SWEEPS * n * n, TEMPER_MAX * min(1.0, 512 / max(n, 1)) ** 3))


def temper(model, grid: np.ndarray, fun: float, rng: np.random.Generator, effort: Effort,
           memory: dict, *, seed, clock: Callable[[], float], cancel: Callable[[], bool],
           on_best: Callable[[float], None] = lambda f: None, strategy_prefix: str = "",
           explorer: bool = False, lineage: bool = False, origins: Sequence[np.ndarray] = ()) -> Walk:
    """One walk of parallel tempering (solver.tempering) that goes on where the last ended.

    ``memory`` keeps the worker's ladder between walks (its chains and random stream,
    seeded by ``seed``); an elite ``grid`` better than the ladder's best enters its
    coldest chain, and a nearly stalled one (RESEED, module text) gets a new ladder of
    its own, every chain at it, seeded ``(*seed, reseeds so far)``. The ladder runs for
    the walk's budget (``CHAINS`` scored swaps a step); its best is then descended
    (exact matchings, order, partition swaps) and the descended grid goes back into the
    coldest chain. An ``explorer`` first tries an
    exploring walk (``explore``; every redeal listed for a (nearly) stalled elite,
    STALL_REDEALS) and tempers when that declines, or for what is left
    of the walk once every candidate of its grid has failed. A ``lineage`` walk tempers
    its worker's own lineage (``lineage_ladder``) and returns the better of the elite
    and what the lineage reached; with LINEAGE_EXPLORES it explores a (nearly) stalled
    elite first, like an explorer, every redeal listed whatever the DataP share; after
    such a walk the lineage's next walk goes on with its ladder whatever the last lineage
    walk gained (``lineage_ladder`` judges a stall only on a walk that follows one). A
    worker that is not a lineage's, handed an elite that stayed as it was after its
    reseeded ladder had a walk on it, starts an origin ladder (``origin_ladder``,
    REORIGIN) from the next of ``origins`` (the topology starts, lowest Comm first, turned
    to begin at the worker's place: solver.workers; the worker's first grid when none are
    given), which takes no elite until it stalls."""
    start_nfev, start_nit = effort.nfev, effort.nit
    strategy, trace = "", []
    stalled = memory.get("elite") == grid.tobytes()  # no walk improved it last round
    last = memory.get("elite_fun")
    nearly = not stalled and last is not None and last - fun < NEAR_STALL * last
    memory["elite"], memory["elite_fun"] = grid.tobytes(), fun
    # worker 1 explores a (nearly) stalled elite too, for that walk (LINEAGE_EXPLORES)
    both = lineage and LINEAGE_EXPLORES and EXPLORE and (stalled or nearly)
    # a (nearly) stalled elite gets every redeal, whatever its DataP (STALL_REDEALS)
    every = both or (STALL_REDEALS and (stalled or nearly))
    if (explorer and EXPLORE and not lineage) or both:
        walk = explore(model, grid, fun, rng, effort, memory, clock=clock, cancel=cancel,
                       on_best=on_best, strategy_prefix=strategy_prefix,
                       kicks=exclusion.KICKS if stalled else NEAR_KICKS if nearly else 0,
                       share=0.0 if every else exclusion.EXCLUDE_SHARE)
        if walk is not None:
            if effort.should_stop() or memory.get("done") != walk.grid.tobytes():
                if both:  # the lineage's next walk is not judged stalled (docstring)
                    memory["lineage_idle"] = True
                return walk
            # every candidate of its grid failed and the walk has time left: temper on
            grid, fun, strategy, trace = walk.grid, walk.fun, walk.strategy, list(walk.trace)
    ladder = memory.get("ladder")
    if "first" not in memory:  # the origin when none are given (origin_ladder)
        memory["first"] = grid.copy()
    # an origin ladder goes on, away from the elite, until it stalls (REORIGIN)
    isolated = not lineage and origin_goes_on(ladder, memory)
    # a nearly stalled elite: every chain restarts at it, temperatures scaled to its Comm
    restart = (not lineage and not isolated and ladder is not None and RESEED and (stalled or nearly)
               and memory.get("reseeded") != grid.tobytes())
    # ... and one that stayed as it was after that: a ladder from the next origin
    reorigin = (not lineage and not isolated and ladder is not None and REORIGIN and stalled
                and memory.get("reseeded") == grid.tobytes())
    if lineage:
        ladder = lineage_ladder(model, grid.shape, memory, seed)
    elif isolated:
        pass
    elif reorigin:
        ladder = origin_ladder(model, origins, memory, seed)
    elif ladder is None or restart:
        stream = seed
        if restart:
            memory["reseeded"], memory["reseeds"] = grid.tobytes(), memory.get("reseeds", 0) + 1
            stream = [*seed_words(seed), memory["reseeds"]]
        ladder = memory["ladder"] = Ladder(model, grid, np.random.default_rng(stream))
    elif fun < ladder.best - 1e-12 * abs(fun):
        ladder.inject(grid, fun)
    best_grid, best = grid.copy(), fun
    pt = ("parallel tempering (own lineage)" if lineage else
          "parallel tempering (origin ladder)" if memory.get("isolated") else "parallel tempering")

    def improved(value: float, how: str, g: np.ndarray) -> None:
        nonlocal best, best_grid, strategy
        if value < best - 1e-12 * abs(best):
            best, best_grid = value, g.copy()
            strategy = f"{strategy_prefix}{how}"
            trace.append((clock(), best))
            on_best(best)

    steps = max(MIN_TEMPER_STEPS, (effort.budget - effort.nfev) // ladder.k)
    done = ladder.run(steps, stop=effort.should_stop,
                      on_best=lambda f: on_best(f) if f < best - 1e-12 * abs(best) else None)
    effort.nfev += done * ladder.k
    improved(ladder.best, pt, ladder.best_grid)
    if cancel():  # cancelled, or the time limit is reached: hand back what the ladder has
        return Walk(best_grid, best, strategy, effort.nfev - start_nfev, effort.nit - start_nit,
                    done, trace)
    if model.n <= DESCENT_FULL_N:  # not timed
        _levels(model, memory)
    closing_from = clock()
    # its own budget: it runs even when the walk's clock ended the ladder; above
    # DESCENT_FULL_N devices only the polish (a partition pass alone is 4 N matchings)
    sweeps = DESCENT_SWEEPS * model.n * model.n if model.n <= DESCENT_FULL_N else 0
    descent = Effort(min(sweeps, DESCENT_MAX), cancel)
    state = descend(model, ladder.best_grid, rng, descent)
    effort.nfev += descent.nfev
    effort.nit += descent.nit
    if state.score < ladder.best - 1e-12 * abs(ladder.best):
        ladder.inject(state.grid, state.score)
        improved(state.score, f"{pt}, then descent", state.grid)
    if model.n <= DESCENT_FULL_N and not cancel():
        fine = memory["fine"]
        key = signature(state.grid, memory["levels"])
        fine_key = None if fine is None else signature(state.grid, [fine])
        moved = None
        # the same component vectors failed last time: only the fine level's splits,
        # if its vectors changed
        coarse = memory.get("balanced") != key
        if coarse or (fine is not None and memory.get("split") != fine_key):
            moved = rebalance(model, state.grid, memory["levels"] if coarse else [], float(state.score),
                              rng, stop=cancel, split_labels=fine)
            failed = moved is None and not cancel()
            memory["split"] = fine_key if failed else None
            if coarse:
                memory["balanced"] = key if failed else None
        if moved is not None:
            effort.nfev += moved[2]
            ladder.inject(moved[0], moved[1])
            improved(moved[1], f"{pt}, descent, then segment rebalance", moved[0])
    # how long the closing took, fading (solver.workers stops the next ladder that early)
    memory["closing_s"] = max(clock() - closing_from, CLOSING_FADE * memory.get("closing_s", 0.0))
    return Walk(best_grid, best, strategy, effort.nfev - start_nfev, effort.nit - start_nit,
                done, trace)


def lineage_ladder(model, shape: tuple[int, int], memory: dict, seed) -> Ladder:
    """The ladder of a lineage walk (module text), kept in ``memory``.

    First walk: a ladder at a random layout drawn from the stream ``(*seed,
    LINEAGE_STREAM)``, its temperatures scaled to that layout's Comm (far hotter than
    the elite's ladder: module text). Later walks: the same ladder, or, when the last
    walk improved its best by less than NEAR_STALL of it, a new one with every chain at
    that best (temperatures scaled to it; stream ``(*seed, LINEAGE_STREAM, n)`` for the
    n-th), once per lineage (once per best without LINEAGE_FRESH); when the walk after
    that restart improved the best by less than NEAR_STALL too (LINEAGE_FRESH), a new
    lineage from another random layout (stream ``(*seed, LINEAGE_STREAM, FRESH_STREAM +
    m)`` for the m-th). The elite is never put into it. No stall is judged on the walk
    after an exploring walk of the lineage's worker (``memory["lineage_idle"]``, set by
    ``temper``). O(N) to draw or rebuild, besides the ladder's own set-up (solver.tempering)."""
    base = [*seed_words(seed), LINEAGE_STREAM]

    def from_random_layout(stream) -> Ladder:
        rng = np.random.default_rng(stream)
        return Ladder(model, rng.permutation(model.n).reshape(shape), rng)

    ladder = memory.get("ladder")
    if ladder is None:
        ladder = from_random_layout(base)
    else:
        last = memory.get("lineage_best")
        idle = memory.pop("lineage_idle", False)  # exploring walks came between: not judged
        stalled = not idle and last is not None and last - ladder.best < NEAR_STALL * last
        # with fresh lineages, one restart per lineage; without, one per best
        again = not (LINEAGE_FRESH and memory.get("lineage_restarted", False))
        if stalled and again and memory.get("lineage_reseeded") != ladder.best_grid.tobytes():
            grid = ladder.best_grid.copy()
            memory["lineage_reseeded"] = grid.tobytes()
            memory["lineage_reseeds"] = memory.get("lineage_reseeds", 0) + 1
            ladder = Ladder(model, grid, np.random.default_rng([*base, memory["lineage_reseeds"]]))
            memory["lineage_restarted"] = True
        elif stalled and LINEAGE_FRESH:  # the walk after its restart nearly stalled too
            memory["lineage_fresh"] = memory.get("lineage_fresh", 0) + 1
            ladder = from_random_layout([*base, FRESH_STREAM + memory["lineage_fresh"]])
            memory["lineage_restarted"] = False
    memory["ladder"], memory["lineage_best"] = ladder, ladder.best
    return ladder


def origin_goes_on(ladder: Ladder | None, memory: dict) -> bool:
    """Whether the worker's origin ladder (``origin_ladder``) runs another walk as it is,
    taking no elite: while its last walk lowered its best by NEAR_STALL of it or more.
    Records the best it starts this walk at. O(1)."""
    if not REORIGIN or ladder is None or not memory.get("isolated"):
        return False
    last = memory["isolated_best"]
    if last - ladder.best < NEAR_STALL * last:  # stalled: the worker's elite is its own again
        memory["isolated"] = False
        return False
    memory["isolated_best"] = ladder.best
    return True


def origin_ladder(model, origins: Sequence[np.ndarray], memory: dict, seed) -> Ladder:
    """A ladder from the m-th origin (module text, "Origin ladders"): ``origins[(m - 1) %
    len(origins)]``, or the worker's first grid (``memory["first"]``) when none are
    given; every chain at it, temperatures scaled to its Comm, stream ``(*seed,
    ORIGIN_STREAM, m)``. Marks the worker's ladder isolated: no elite enters it while it
    gains (``origin_goes_on``). O(N) besides the ladder's own set-up (solver.tempering)."""
    m = memory["origins"] = memory.get("origins", 0) + 1
    start = origins[(m - 1) % len(origins)] if len(origins) else memory["first"]
    stream = [*seed_words(seed), ORIGIN_STREAM, m]
    ladder = memory["ladder"] = Ladder(model, np.array(start), np.random.default_rng(stream))
    memory["isolated"], memory["isolated_best"] = True, ladder.best
    return ladder


def _levels(model, memory: dict) -> None:
    """The coarse levels and the fine level (solver.rebalance), once per worker."""
    if "levels" not in memory:
        memory["levels"], memory["fine"] = levels(model), fine_level(model)


def explore_key(grid: np.ndarray, memory: dict) -> bytes:
    """What an exploring walk's progress is kept under (``explore``): the grid's
    component vectors at every coarse level (solver.rebalance.signature; EXPLORE_COARSE_KEY),
    or the grid itself (without the option, or when the fabric has no coarse level). A
    ladder crawling 0.01 s a round changes the elite every round and leaves those vectors
    as they were. The hosts' level is left out on purpose: a crawl trades devices between
    hosts of one zone; so a grid of the same key may list other confinements (its
    critical hosts) and host-level kicks than the one whose list was begun, and rank its
    redeals in another order (solver.exclusion.ranked: each dealt grid's DataP depends
    on the grid); the walk tries its own list's candidates but those that already
    failed under the key (solver.exclusion.identity), none twice in one pass and none
    skipped. Needs ``memory["levels"]`` (``_levels``). O(N L)."""
    return signature(grid, memory["levels"]) if EXPLORE_COARSE_KEY and memory["levels"] else grid.tobytes()


def explore(model, grid: np.ndarray, fun: float, rng: np.random.Generator, effort: Effort,
            memory: dict, *, clock: Callable[[], float], cancel: Callable[[], bool],
            on_best: Callable[[float], None] = lambda f: None, strategy_prefix: str = "",
            kicks: int = 0, share: float = exclusion.EXCLUDE_SHARE) -> Walk | None:
    """An explorer's walk: whole-grid redeals (solver.exclusion) of the elite, one after
    another, each from the best so far, until the walk's budget or clock ends. The
    candidates of a grid are taken in ascending order of their dealt grid's DataP
    (solver.exclusion.ranked, RANK); ties keep the list order (confinements,
    exclusions, packings, transfers; the first two rotated by a per-worker offset from its seeded
    stream, one further for each new key; solver.exclusion.candidates), so explorers
    with other offsets try the same redeals in the same order but for ties. The list
    starts again from the first after each improvement; a walk from the grid the last
    walk ended on, or from one of the same coarse component vectors (``explore_key``),
    skips the candidates that failed there (solver.exclusion.identity: kind, labels and
    targets, a kick's dealt grid), whatever their place in its own ranked list. When
    every candidate of the list has failed, the list is tried again from its first, with
    the walk's stream further on, up to EXPLORE_PASSES passes in all (a redeal's descent
    and rebalancing are random: module text, "Passes").

    With ``kicks`` > 0 the elite also gets its first ``kicks`` split kicks
    (solver.exclusion.kicks, after the redeals when they are listed,
    alone otherwise): a segment dealt into two runs of equal vectors, descended and
    rebalanced whatever its first score. The caller (``temper``) asks for them only for
    a stalled elite: all KICKS when no walk of the last round improved it, its NEAR_KICKS
    best when the round improved it by less than NEAR_STALL. Only then because a kick
    costs about what a candidate costs, and while the ladder still improves, the
    worker's time is worth more there (module text).

    The redeals are listed while the elite's DataP is at least ``share`` of its Comm
    (EXCLUDE_SHARE; 0 for a (nearly) stalled elite, STALL_REDEALS, and for a lineage's
    walk, LINEAGE_EXPLORES), the kicks when asked
    for; the list of both parts up to EXPLORE_PASSES passes per key (``explore_key``;
    ``memory``: "explored" holds the last key whose redeals all failed in every pass,
    "kicked" the last key whose first ``kicks`` kicks all failed in every pass, and that
    number: a later walk on that key lists only the kicks after them, those of its own
    grid, which under the coarse key may rank other kicks first than the grid they
    failed on; "exploring" the key, parts, failed candidates' identities, skipped kicks
    and passes completed before the current one, of the list the last walk stopped in;
    a list of other parts or skipped kicks starts at its first pass; "cut" the key and
    identity of a candidate whose redeal the clock cut short, kept until the next walk
    tries a candidate: that walk on that key, whatever its parts, tries it first, RETRY_CUT).
    None (the caller tempers instead) when N exceeds DESCENT_FULL_N, or neither part is
    listed or left untried for this elite; ``memory["done"]`` is the walk's grid when
    the walk tried every candidate of it in every pass (the caller then tempers on)."""
    memory["done"] = None
    score = model.score_grid(grid)
    if model.n > DESCENT_FULL_N or score.comm <= 0:
        return None
    bound = score.data_p >= share * score.comm
    kick = KICK and kicks > 0
    _levels(model, memory)
    key = explore_key(grid, memory)
    kicked = memory.get("kicked", (b"", 0))  # (key, how many of its kicks) that all failed
    parts = (bound and memory.get("explored") != key, kick and (kicked[0] != key or kicked[1] < kicks))
    if not any(parts):
        return None
    if "offset" not in memory:
        memory["offset"] = int(rng.integers(1 << 30))
    # the first kicks that already failed on this key (a nearly stalled elite's) are not
    # listed again; a walk goes on where the last one ended only in the same list
    skip = kicked[1] if kicked[0] == key else 0
    at = memory.get("exploring")
    same = at is not None and at[:2] == (key, parts) and at[3] == skip
    failed, passes = (set(at[2]), at[4]) if same else (set(), 0)
    if not failed and passes == 0:  # a new list (a pass begun: the same list)
        memory["offset"] += 1
    best_grid, best = grid.copy(), fun
    start_nfev, strategy, trace, tried = effort.nfev, "", [], 0

    def listed(g: np.ndarray, skip: int = 0) -> list:
        out = exclusion.candidates(model, g, memory["levels"], memory["fine"], memory["offset"]) if parts[0] else []
        out = exclusion.ranked(model, g, out) if exclusion.RANK else out
        return out + (exclusion.kicks(model, g, memory["levels"], memory["fine"], cancel)[skip:kicks]
                      if parts[1] else [])

    cands = listed(best_grid, skip)
    # the candidate the clock cut short in the last walk on this key goes first (RETRY_CUT)
    cut = memory.get("cut")
    retry = cut[1] if RETRY_CUT and cut is not None and cut[0] == key else None
    if retry is not None:
        cands.sort(key=lambda c: exclusion.identity(c) != retry)  # stable: the rest keep their order
    # without a clock, a walk tries as many as its budget buys at EXPLORE_PAIR_SWAPS each
    most = max(1, (effort.budget - effort.nfev) // (EXPLORE_PAIR_SWAPS * grid.shape[1] ** 2))
    while tried < most and not effort.should_stop():
        cand = next((c for c in cands if exclusion.identity(c) not in failed), None)
        if cand is None and passes + 1 < EXPLORE_PASSES:  # every one failed: again, other draws
            passes, failed = passes + 1, set()
            continue
        if cand is None:  # every candidate of this grid failed, in each pass
            memory["done"] = best_grid.tobytes()
            done = explore_key(best_grid, memory)
            if parts[0]:
                memory["explored"] = done
            if parts[1]:
                memory["kicked"] = (done, kicks)
            break
        memory["cut"] = None  # tried now (RETRY_CUT)
        cut_short = []  # set when the redeal's descent or rebalancing saw the clock end

        def watched() -> bool:
            if cancel():
                cut_short.append(True)
                return True
            return False

        g, comm, nfev = exclusion.redeal(model, best_grid, cand, memory["levels"], rng,
                                         stop=watched, split_labels=memory["fine"])
        effort.nfev += nfev
        tried += 1
        ident = exclusion.identity(cand)
        if comm < best - 1e-12 * abs(best):
            strategy = f"{strategy_prefix}{cand.kind}, then segment rebalance"
            best, best_grid, failed, passes, retry = comm, g, set(), 0, None
            trace.append((clock(), best))
            on_best(best)
            parts, skip = (bound, kick), 0  # a new grid: both parts the elite had listed
            if effort.should_stop():
                break
            cands = listed(best_grid)
        elif RETRY_CUT and cut_short and ident != retry:  # cut short, not judged: first next walk
            memory["cut"] = (explore_key(best_grid, memory), ident)
            break
        else:  # failed (or cut short a second time)
            failed.add(ident)
    memory["exploring"] = (explore_key(best_grid, memory), parts, frozenset(failed), skip, passes)
    if tried == 0:
        return None
    return Walk(best_grid, best, strategy, effort.nfev - start_nfev, 0, 0, trace)
