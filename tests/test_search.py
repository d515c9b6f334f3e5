"""Outer search: true optimum on small instances, determinism, rescoring, callbacks, bound."""

import numpy as np
import pytest

from solver.bounds import lower_bound
from solver.cost import CostModel
import solver.search as search
from solver.search import BUDGET, CANCELLED, TIME_LIMIT, solve
from solver_oracles import brute_force_optimum, random_model

SHAPES = [(1, 2), (2, 1), (2, 2), (2, 3), (3, 2), (2, 4), (4, 2), (3, 3), (2, 5), (5, 2), (3, 4), (4, 3), (2, 6), (6, 2)]


@pytest.mark.parametrize("d_pp, d_dp", SHAPES)
def test_search_reaches_the_true_optimum_up_to_12_devices(d_pp, d_dp):
    rng = np.random.default_rng(100 * d_pp + d_dp)
    instances = 1 if d_pp * d_dp >= 12 else 3
    for k in range(instances):
        model = random_model(rng, d_pp, d_dp, clustered=bool(k % 2))
        optimum = brute_force_optimum(model)
        result = solve(model, seed=k)
        assert result.fun == pytest.approx(optimum, rel=1e-12, abs=1e-12)
        assert lower_bound(model).value <= optimum + 1e-12


def test_reported_score_equals_the_rank_map_rescored_from_scratch():
    rng = np.random.default_rng(5)
    model = random_model(rng, 8, 8, clustered=True)
    result = solve(model, seed=3, workers=2, restarts=1, budget=600_000)
    rescored = CostModel(model.t_pp.copy(), model.t_dp.copy(), model.workload).score_rank_map(result.x.tolist())
    assert result.fun == rescored.comm
    assert result.score.data_p + result.score.pipeline == result.fun


def test_identical_inputs_and_seed_give_identical_output():
    rng = np.random.default_rng(6)
    model = random_model(rng, 4, 8)
    a, b = solve(model, seed=11, workers=1), solve(model, seed=11, workers=1)
    assert np.array_equal(a.x, b.x) and a.fun == b.fun and a.nfev == b.nfev


def test_callback_stop_iteration_returns_best_so_far():
    rng = np.random.default_rng(7)
    model = random_model(rng, 8, 8)
    seen = []

    def callback(progress):
        seen.append(progress.fun)
        if len(seen) >= 2:
            raise StopIteration

    result = solve(model, seed=0, callback=callback)
    assert result.status == CANCELLED
    assert result.fun == model.score_rank_map(result.x).comm
    assert result.fun <= seen[0]


def test_budget_and_time_limit_stop_the_search():
    rng = np.random.default_rng(8)
    model = random_model(rng, 8, 16)
    assert solve(model, budget=10).status == BUDGET
    assert solve(model, time_limit=0.001, restarts=50).status == TIME_LIMIT


def test_search_beats_random_placements_on_a_geo_fabric():
    from geoconsole.demo_fabrics import worldwide_fabric
    from solver.baselines import random_stage_groups
    from solver.workload import DTFM_WORKLOAD

    model = CostModel.from_fabric(worldwide_fabric(), DTFM_WORKLOAD)
    result = solve(model, seed=7, restarts=0)
    assert result.fun <= 51.5005  # the spec's best topology-derived layout scores 51.50
    assert result.fun < random_stage_groups(model, 50, seed=1).min


def test_approximate_path_is_used_above_16_stages():
    rng = np.random.default_rng(9)
    model = random_model(rng, 18, 2)
    result = solve(model, seed=0, restarts=0)
    assert not result.exact_path
    assert result.fun == model.score_rank_map(result.x).comm


def test_one_replica_over_17_stages_is_not_claimed_optimal():
    """D_DP = 1 has a single partition, but its order over 17 stages is not exact."""
    model = random_model(np.random.default_rng(5), 17, 1)
    result = solve(model, seed=0, workers=1, restarts=0)
    assert not result.optimal and not result.exact_path
    assert result.status != search.OPTIMAL and "optimal" not in result.message
    assert result.fun == model.score_rank_map(result.x).comm


@pytest.mark.parametrize("bad", [dict(budget=-1), dict(restarts=-1), dict(time_limit=0)])
def test_bad_options_are_value_errors(bad):
    rng = np.random.default_rng(1)
    with pytest.raises(ValueError):
        solve(random_model(rng, 2, 2), **bad)


def test_seed_orders_must_be_permutations():
    rng = np.random.default_rng(1)
    with pytest.raises(ValueError, match="seed_orders"):
        solve(random_model(rng, 2, 2), seed_orders=[[0, 0, 1, 2]])


def test_lower_bound_never_exceeds_found_solutions():
    rng = np.random.default_rng(12)
    for p, r in [(4, 4), (8, 2), (2, 8)]:
        model = random_model(rng, p, r, clustered=True)
        assert lower_bound(model).value <= solve(model, seed=0, workers=1, restarts=1).fun + 1e-12


@pytest.mark.slow
def test_heuristic_alone_on_small_clustered_instances(monkeypatch):
    """Without enumeration the search still finds most optima and stays close on the rest.

    Measured when written: 45 of 54 optimal, worst 2.5% above; the bounds leave room for
    noise in the instances, not for a broken neighbourhood.
    """
    import solver.enumerate as enumerate_
    import solver.search as search

    monkeypatch.setattr(search, "optimal_grid", lambda model, stop=None: (None, 0))
    hits = total = 0
    worst = 1.0
    for d_pp, d_dp in [(2, 4), (4, 2), (3, 3), (2, 5), (5, 2), (3, 4), (4, 3), (2, 6), (6, 2)]:
        rng = np.random.default_rng(d_pp * 7 + d_dp)
        for k in range(6):
            model = random_model(rng, d_pp, d_dp, clustered=True)
            grid, _ = enumerate_.optimal_grid(model)
            optimum = model.score_grid(grid).comm
            found = search.solve(model, seed=k, workers=1, restarts=1).fun
            assert found >= optimum - 1e-12
            total += 1
            hits += found <= optimum + 1e-12
            worst = max(worst, found / optimum)
    assert hits >= 40 and worst < 1.05, (hits, total, worst)


# -- anytime rounds and worker processes ---------------------------------------------

def _h24_model(n=24, d_pp=4):
    """The 24-GPU hierarchical fabric of seed 1 (benchmarks/hierarchical.py) as 4 x 6 (or
    ``n`` GPUs as ``d_pp`` stages)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from geoconsole.solving import cost_model
    from hierarchical import hierarchical_fabric
    from solver.workload import Workload

    return cost_model(hierarchical_fabric(n, 1), Workload(d_pp, n // d_pp, 0.5, 0.6))


def _geo_model(seed=21, d_pp=4, d_dp=6):
    return random_model(np.random.default_rng(seed), d_pp, d_dp, clustered=True)


def test_same_seed_and_workers_give_the_same_answer_with_worker_processes():
    model = _geo_model()
    runs = [solve(model, seed=4, workers=2, restarts=2, budget=150_000) for _ in range(2)]
    assert np.array_equal(runs[0].x, runs[1].x) and runs[0].fun == runs[1].fun
    assert runs[0].nfev == runs[1].nfev and runs[0].rounds == runs[1].rounds >= 1


def test_result_names_the_strategy_and_worker_and_carries_the_trace():
    model = _geo_model(22)
    seen = []
    bound = lower_bound(model).value
    result = solve(model, seed=1, workers=2, restarts=1, budget=300_000, lower_bound=bound,
                   callback=seen.append)
    assert result.workers == 2 and result.rounds >= 1
    assert result.start  # a topology start, or "worker k: parallel tempering, ..."
    if result.worker is not None:
        assert result.start.startswith(f"worker {result.worker}: parallel tempering")
    values = [v for _, v in result.history]
    assert values == sorted(values, reverse=True) and values[-1] == result.fun
    assert seen and all(p.bound == bound for p in seen)
    assert result.fun == model.score_rank_map(result.x).comm


def test_reaching_the_lower_bound_ends_the_search_as_optimal():
    model = _geo_model(23)
    first = solve(model, seed=0, workers=1, restarts=0)
    again = solve(model, seed=0, workers=2, lower_bound=first.fun)
    assert again.status == search.OPTIMAL and again.optimal and again.rounds == 0
    assert "lower bound" in again.message


def test_cancel_from_the_callback_stops_every_worker_and_keeps_the_best():
    import multiprocessing

    model = _geo_model(24, 6, 8)

    def callback(progress):
        if progress.phase == "anytime":
            raise StopIteration

    result = solve(model, seed=0, workers=2, time_limit=600, callback=callback)
    assert result.status == CANCELLED
    assert result.fun == model.score_rank_map(result.x).comm
    assert multiprocessing.active_children() == []


def test_a_worker_that_dies_is_reported_and_the_search_finishes():
    import multiprocessing
    import os
    import signal

    model = _geo_model(25, 6, 8)
    killed = []

    def callback(progress):
        children = multiprocessing.active_children()
        if progress.phase == "anytime" and not killed and len(children) >= 2:
            victim = sorted(children, key=lambda p: p.name)[-1]
            os.kill(victim.pid, signal.SIGKILL)
            killed.append(victim.name)

    result = solve(model, seed=0, workers=2, restarts=2, callback=callback)
    assert killed
    assert any("died" in e for e in result.worker_errors)
    assert "worker(s) lost" in result.message
    assert result.fun == model.score_rank_map(result.x).comm


def test_time_limit_keeps_the_rounds_going_until_it():
    model = _geo_model(26)
    result = solve(model, seed=0, workers=1, time_limit=1.5)
    assert result.status == TIME_LIMIT and result.rounds >= 1


def test_bad_worker_count_is_a_value_error():
    with pytest.raises(ValueError, match="workers"):
        solve(_geo_model(), workers=0)


def test_first_round_gives_odd_workers_the_other_layout_when_it_is_close(monkeypatch):
    """The best start of the other layout (pipelines local / stage groups local) is the
    second worker's first grid when it is within DIVERSE_RATIO of the best start; with
    3+ workers always; otherwise every worker starts from the best."""
    a, b, c = (np.full((2, 2), k) for k in range(3))
    results = [(10.0, 0, "labels: stage groups local", a), (10.5, 1, "labels: stage groups local", b),
               (10.8, 2, "clustering: pipelines local", c)]
    other = search._other_layout(results)
    assert other[1] == 10.8 and other[0] is c
    assert search._other_layout(results[:2]) is None

    class Run:
        best, best_score = a, 10.0

    run = Run()
    run.other_start = other
    assert [f for _, f in search._firsts(run, 2)] == [10.0, 10.8]
    assert [f for _, f in search._firsts(run, 4)] == [10.0, 10.8, 10.0, 10.8]
    monkeypatch.setattr(search, "DIVERSE_RATIO", 1.05)
    assert [f for _, f in search._firsts(run, 2)] == [10.0]
    assert [f for _, f in search._firsts(run, 3)] == [10.0, 10.8, 10.0]
    run.other_start = None
    assert [f for _, f in search._firsts(run, 3)] == [10.0]


def test_worker_processes_start_when_stderr_has_no_descriptor(tmp_path):
    """Under the console, sys.stderr is Textual's capture (fileno() == -1), and
    multiprocessing's resource tracker failed to start ("bad value(s) in fds_to_keep"):
    the search fell back to one in-process worker. A fresh interpreter, so that no
    tracker runs yet."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "capture.py"
    script.write_text(
        "import sys\n"
        "class Capture:\n"
        "    def write(self, text): pass\n"
        "    def flush(self): pass\n"
        "    def fileno(self): return -1\n"
        "if __name__ == '__main__':\n"
        "    import numpy as np\n"
        "    from solver_oracles import random_model\n"
        "    from solver.search import solve\n"
        "    model = random_model(np.random.default_rng(0), 4, 4, clustered=True)\n"
        "    real, sys.stderr = sys.stderr, Capture()\n"
        "    result = solve(model, seed=0, workers=2, budget=50_000)\n"
        "    sys.stderr = real\n"
        "    print(result.message)\n")
    tests = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=f"{tests.parent}:{tests}")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "lost" not in out.stdout and "could not start" not in out.stdout, out.stdout


def test_a_timed_round_stops_its_ladder_early_enough_for_the_closing(monkeypatch):
    """The ladder of a timed round stops as long before the round's end as the walk's
    closing (descent, rebalancing) took last time, at most CLOSING_SHARE of the round;
    the walk then records how long its own closing took."""
    import solver.workers as workers

    now = [1000.0]
    monkeypatch.setattr(workers.time, "monotonic", lambda: now[0])
    seen = {}

    def fake_temper(model, grid, fun, rng, effort, memory, **kw):
        for at in (0.3, 0.59, 0.61, 0.99):
            now[0] = 1000.0 + at
            seen.setdefault(effort.should_stop(), at)
        seen["late"] = kw["cancel"]()
        return "walk"

    monkeypatch.setattr(workers, "temper", fake_temper)
    model = random_model(np.random.default_rng(0), 2, 2)
    plan = workers.Rounds(seed=0, walk_evals=1, patience=1, budget=1, deadline=1100.0, round_s=1.0,
                          by_clock=True)
    for closing, stops_at in ((0.4, 0.61), (5.0, 0.59), (0.0, None)):
        seen.clear()
        now[0] = 1000.0
        assert workers._one_walk(model, 0, 0, None, 1.0, plan, lambda: False, lambda f: None,
                                 {"closing_s": closing}) == "walk"
        assert seen.get(True) == stops_at and seen[False] == 0.3 and seen["late"] is False


def test_under_a_time_limit_the_starts_are_polished_only_while_their_phase_lasts(monkeypatch):
    """With the starts' share of the limit already spent, only the first start of each
    layout is polished (and none descended); without a limit every start is polished."""
    rng = np.random.default_rng(9)
    model = random_model(rng, 4, 6, clustered=True)
    orders = [rng.permutation(model.n) for _ in range(3)]
    polished = []
    real = search.polish

    def counting(model_, grid, effort):
        polished.append(grid.copy())
        return real(model_, grid, effort)

    monkeypatch.setattr(search, "polish", counting)
    monkeypatch.setattr(search, "START_SHARE", 0.0)
    run = search._Run(model, 10**9, 60.0, None, None)
    search._starts_phase(run, model, np.random.default_rng(0), search._starts(model, orders))
    assert len(polished) == 2
    assert run.best is not None and run.other_start is not None
    polished.clear()
    run = search._Run(model, 10**9, None, None, None)
    search._starts_phase(run, model, np.random.default_rng(0), search._starts(model, orders))
    assert len(polished) >= len(search._starts(model, orders))


def test_origins_are_the_starts_structures_first_then_lowest_comm_each_once_and_reach_every_worker(monkeypatch):
    """solve hands the workers its starts as laid out: the structure starts first in their
    own order, then the others lowest Comm first, each grid once (an extra order equal to
    another start's gives no second copy); worker w gets them turned to begin at place w
    (solver.workers._one_walk), for its origin ladders (solver.anytime.origin_ladder)."""
    import solver.workers as workers

    rng = np.random.default_rng(5)
    model = random_model(rng, 4, 6, clustered=True)
    orders = [rng.permutation(model.n)]
    orders.append(orders[0].copy())  # the same start twice
    dealt = [rng.permutation(model.n).reshape(6, 4) for _ in range(2)]  # two structure starts, dear first
    dealt.sort(key=lambda g: -model.score_grid(g).comm)
    monkeypatch.setattr(search, "structure_starts", lambda model_, order, stop=None, beam_stop=None: [
        (f"structure: runs {k}+{4 - k}", g) for k, g in enumerate(dealt, 1)])
    starts = search._starts(model, orders)
    structures = [g for name, g in starts if name.startswith("structure: runs ")]
    assert len(structures) == 2
    origins = search._origins(model, starts)
    distinct = {np.ascontiguousarray(g).tobytes() for _, g in starts}
    assert len(origins) == len(distinct) < len(starts)
    assert {g.tobytes() for g in origins} == distinct
    assert [g.tobytes() for g in origins[:len(structures)]] == [np.ascontiguousarray(g).tobytes() for g in structures]
    comms = [model.score_grid(g).comm for g in origins[len(structures):]]
    assert comms == sorted(comms)
    monkeypatch.setattr(search, "STRUCTURE_ORIGINS_FIRST", False)
    comms = [model.score_grid(g).comm for g in search._origins(model, starts)]
    assert comms == sorted(comms)
    monkeypatch.setattr(search, "STRUCTURE_ORIGINS_FIRST", True)

    planned = []
    monkeypatch.setattr(search, "_rounds_phase", lambda run, model_, pool, plan: planned.append(plan) or [])
    solve(model, seed=0, seed_orders=orders, workers=1, restarts=1)
    assert [g.tobytes() for g in planned[0].origins] == [g.tobytes() for g in origins]

    handed = {}
    monkeypatch.setattr(workers, "temper", lambda *a, **kw: handed.setdefault(kw["seed"][1], kw["origins"]))
    plan = workers.Rounds(seed=0, walk_evals=1, patience=1, budget=1, deadline=None, origins=origins)
    for w in range(3):
        workers._one_walk(model, w, 0, origins[0], 1.0, plan, lambda: False, lambda f: None, {})
        assert [g.tobytes() for g in handed[w]] == [g.tobytes() for g in origins[w:] + origins[:w]]


def _start_pool(tmp_path, root, cwd, **env) -> str:
    """Start and close a 2-worker pool in a fresh process that puts ``root`` first on its
    path, from working directory ``cwd`` (the script lies in ``tmp_path``, so its folder,
    not ``cwd``, is that process's own first entry), with ``env`` added to this
    environment less PYTHONPATH and PYTHONSAFEPATH; its output, "<errors> <live workers>"."""
    import os
    import subprocess
    import sys

    script = tmp_path / "start.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(root)!r})\n"
        "if __name__ == '__main__':\n"
        "    from solver.workers import WorkerPool\n"
        "    pool = WorkerPool(None, 2)\n"
        "    pool.start()\n"
        "    print(pool.errors, len(pool.live))\n"
        "    pool.close()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")} | env
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         cwd=cwd, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip()


def test_worker_processes_run_the_solver_package_their_caller_imported(tmp_path):
    """The forkserver imported ``solver.workers`` from the default module path (Python
    3.11 ignores the caller's sys.path there), so a caller that imported another copy
    of the package had its workers run the installed one. A copy that marks every
    process importing it: the caller and the forkserver both must."""
    import shutil
    from pathlib import Path

    import solver

    copy = tmp_path / "copy"
    shutil.copytree(Path(solver.__file__).parent, copy / "solver",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "solver" / "workers.py", "a") as f:
        f.write("\nwith open(os.path.join(os.environ['MARKS'], str(os.getpid())), 'w') as _mark:\n"
                "    _mark.write(__file__)\n")
    marks = tmp_path / "marks"
    marks.mkdir()
    assert _start_pool(tmp_path, copy, tmp_path, MARKS=str(marks)) == "[] 2"
    files = [p.read_text() for p in marks.iterdir()]
    assert len(files) >= 2 and all(f.startswith(str(copy)) for f in files), files


def test_worker_processes_ignore_a_solver_package_in_the_current_directory(tmp_path):
    """The forkserver and the resource tracker run ``python -c``, which puts the current
    directory first on the path: started from a folder holding a ``solver`` package of
    its own, the workers imported that one and ran its code. Foreign ``solver`` and
    ``multiprocessing`` packages that mark their import, in the caller's working
    directory: no process imports them, and the pool starts whole."""
    from pathlib import Path

    import solver

    work = tmp_path / "work"
    mark = tmp_path / "imported"
    for name in ("solver", "multiprocessing"):
        (work / name).mkdir(parents=True)
        (work / name / "__init__.py").write_text(f"open({str(mark)!r}, 'a').write(__file__)\n")
    assert _start_pool(tmp_path, Path(solver.__file__).parents[1], work) == "[] 2"
    assert not mark.exists(), mark.read_text()


def test_worker_processes_start_with_ctrl_c_blocked():
    """Ctrl-C and SIGTERM reach the whole process group: the forkserver importing its
    preload, or a worker starting up, printed KeyboardInterrupt tracebacks, and SIGTERM
    ended the workers. Both start with the two blocked (the caller decides how to stop)."""
    import signal

    from solver.workers import WorkerPool

    pool = WorkerPool(_geo_model(), 2)
    pool.start()
    try:
        assert len(pool.procs) == 2 and not pool.errors
        for proc in pool.procs:
            with open(f"/proc/{proc.pid}/status") as status:
                blocked = int(next(x for x in status if x.startswith("SigBlk:")).split()[1], 16)
            assert blocked & (1 << (signal.SIGINT - 1)) and blocked & (1 << (signal.SIGTERM - 1)), proc.name
        assert not {signal.SIGINT, signal.SIGTERM} & signal.pthread_sigmask(signal.SIG_BLOCK, [])  # ours as it was
    finally:
        pool.close()


def test_without_a_time_limit_every_worker_starts_and_the_answer_is_repeatable():
    """The default budget is spent by the starts before the rounds: that must not stop
    the workers from starting (a first build did, so a cold start ran 2 of 4)."""
    model = _geo_model(21, 4, 6)
    runs = [solve(model, seed=0, workers=4, restarts=1) for _ in range(2)]
    assert all("started before" not in r.message for r in runs), runs[0].message
    assert np.array_equal(runs[0].x, runs[1].x) and runs[0].nfev == runs[1].nfev


def test_starting_workers_stops_at_the_deadline_or_a_cancel():
    """--workers 256 on 2 cores took 18 s to start for a 1 s limit: starting stops at the
    deadline (or a cancel) after the first two, and says how many started."""
    import time

    from solver.workers import WorkerPool

    for kwargs, why in [(dict(deadline=time.monotonic() - 1.0), "the time limit"),
                        (dict(abandon=lambda: True), "the stop")]:
        pool = WorkerPool(_geo_model(), 64)
        pool.start(**kwargs)
        try:
            assert len(pool.procs) == pool.workers == 2 and pool.live == [0, 1]
            assert pool.notes == [f"2 of 64 worker processes started before {why}"]
        finally:
            pool.close()
    result = solve(_geo_model(), seed=0, workers=64, time_limit=0.05)
    why = "started before 50% of the time limit had passed"  # POOL_START_SHARE: the rounds get the rest
    assert result.status == TIME_LIMIT and f"worker processes {why}" in result.message
    started = int(result.message.split(" of 64 worker processes")[0].rsplit("; ", 1)[-1])
    assert result.workers == started < 64  # the count reported is of those started
    said = "the search used those" if result.rounds else "too late for any round"
    assert f"{why}; {said}" in result.message


def test_a_time_limit_shorter_than_starting_the_workers_still_descends_the_best_start():
    """A 10 ms limit with two workers ended before they started (about 0.3 s): the answer
    was a start only polished (26.10 s on this 24-GPU fabric) where one worker, searching
    in-process, reached 16.4 s. The best start's descent now has a floor of swaps."""
    from solver.search import _starts, first_descent_swaps

    model = _h24_model()
    polished = min(model.score_grid(model.grid_for_partition(model.partition_of(g))[0]).comm
                   for _, g in _starts(model, None)[:2])
    for workers in (1, 2):
        result = solve(model, seed=0, workers=workers, time_limit=0.001)
        assert result.status == TIME_LIMIT and result.rounds == 0
        # the floor, and no more (a batch of at most N swaps may end past it)
        assert first_descent_swaps(model.n) <= result.nfev <= first_descent_swaps(model.n) + model.n
        assert result.fun < 0.8 * polished, (result.fun, polished)
    big = _h24_model(192, 8)  # the first descent scored its whole budget, 1.47 million swaps
    result = solve(big, seed=0, workers=1, time_limit=0.001)
    assert first_descent_swaps(big.n) <= result.nfev <= first_descent_swaps(big.n) + big.n


def test_under_a_time_limit_the_best_start_s_descent_goes_on_past_its_floor(monkeypatch):
    """The floor is a minimum: while the starts' share of the limit lasts, the best
    start's descent goes on past it (a first build skipped it as 'far behind' itself)."""
    calls = []
    plain = search.descend

    def spy(model, grid, rng, effort, offer):
        state = plain(model, grid, rng, effort, offer)
        calls.append((getattr(effort, "cap", None), model.score_grid(grid).comm, float(state.score)))
        return state

    monkeypatch.setattr(search, "descend", spy)
    starts = search._starts  # the two plain layouts only: the first sweep gains over 25%
    monkeypatch.setattr(search, "_starts", lambda *args: starts(*args)[:2])
    solve(_h24_model(), seed=0, workers=1, time_limit=5.0, restarts=1)
    (cap, start, capped), (then_cap, then_from, _) = calls[:2]
    assert capped < start / search.SKIP_START_RATIO
    assert cap is not None and then_cap is None  # capped, then the phase's own effort
    assert then_from == pytest.approx(capped)  # from where the capped descent ended


def test_a_budget_of_zero_polishes_every_start_with_or_without_a_time_limit():
    """--budget 0 --restarts 0 polished every start without a time limit but only the
    first two with one (the budget, not the clock, ended that loop): 26.10 s against
    16.08 s on a 24-GPU fabric."""
    model = _h24_model()
    plain = solve(model, seed=0, workers=1, budget=0, restarts=0)
    timed = solve(model, seed=0, workers=1, budget=0, restarts=0, time_limit=30.0)
    assert timed.fun == plain.fun and timed.start == plain.start and timed.nfev == 0


def test_progress_counts_the_work_of_each_round_as_it_ends():
    """The console's "improvements, swaps scored" stood still through the anytime rounds
    (the rounds' work was counted once, at their end)."""
    model = _geo_model(26, 6, 8)
    seen = []
    result = solve(model, seed=0, workers=2, restarts=3, callback=seen.append)
    during = sorted({p.nfev for p in seen if p.phase == "anytime"})
    assert result.rounds >= 2 and len(during) >= 2, (result.rounds, during)
    assert during[-1] <= result.nfev


def test_workers_of_a_killed_caller_exit_quietly(tmp_path):
    """A caller killed mid-search (SIGKILL, or SIGTERM to a script without a handler): its
    workers printed BrokenPipeError tracebacks as they tried to hand back their best."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "caller.py"
    script.write_text(
        "import sys\n"
        f"sys.path[:0] = [{os.path.dirname(os.path.dirname(os.path.abspath(search.__file__)))!r},"
        f" {os.path.dirname(os.path.abspath(__file__))!r}]\n"
        "import numpy as np\n"
        "from solver_oracles import random_model\n"
        "from solver.search import solve\n"
        "if __name__ == '__main__':\n"
        "    model = random_model(np.random.default_rng(24), 6, 8, clustered=True)\n"
        "    solve(model, seed=0, workers=2, time_limit=120, callback=lambda p: print(p.phase, flush=True))\n")
    err = tmp_path / "err.txt"
    with open(err, "w") as stderr:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=stderr, text=True,
                                start_new_session=True)
        for line in proc.stdout:  # until the rounds run
            if line.startswith("anytime"):
                break
        time.sleep(1.0)
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the workers see the caller gone and leave
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
    assert "Traceback" not in err.read_text(), err.read_text()


def test_a_bound_reached_in_a_round_ends_the_search_there():
    """The bound was tested against the best start only until the rounds ended: a run
    whose round reached it went on to the time limit, or ``restarts`` rounds more. Now a
    round's best is taken after each round (without a time limit the search ends at that
    round's end, the output still a function of the seed), and under a time limit a
    walk's best at the bound ends the search at once."""
    model = _geo_model(23)
    starts = solve(model, seed=0, workers=2, restarts=0)
    found = solve(model, seed=0, workers=2, restarts=2)  # two rounds past its last gain
    assert found.fun < starts.fun and found.rounds >= 3  # the rounds, not the starts, found it
    assert found.status == search.CONVERGED  # ended by patience: its last gain came 2 rounds before
    runs = [solve(model, seed=0, workers=2, restarts=1000, lower_bound=found.fun) for _ in range(2)]
    for run in runs:
        assert run.status == search.OPTIMAL and run.message == search.OPTIMAL_BY_BOUND
        assert run.fun == found.fun and run.rounds == found.rounds - 2  # the round that reached it
    assert np.array_equal(runs[0].x, runs[1].x) and runs[0].nfev == runs[1].nfev
    timed = solve(model, seed=0, workers=2, time_limit=60, lower_bound=found.fun)
    assert timed.status == search.OPTIMAL and timed.fun <= found.fun * (1 + 1e-9)
    assert timed.elapsed_s < 30  # not the 60 s of the limit


def test_progress_counts_the_rounds_as_they_end():
    seen = []
    solve(_geo_model(23), seed=0, workers=2, restarts=2, callback=lambda p: seen.append((p.phase, p.restart)))
    rounds = [r for phase, r in seen if phase == "anytime"]
    assert rounds and rounds == sorted(rounds) and max(rounds) >= 3


def test_workers_reported_are_the_processes_that_searched():
    assert solve(_geo_model(), seed=0, workers=4, restarts=0).workers == 1  # the starts alone
    tiny = random_model(np.random.default_rng(0), 2, 2)
    assert solve(tiny, seed=0, workers=4).workers == 1  # enumerated


def test_a_pool_that_cannot_send_the_model_searches_in_process():
    """Any start failure, not only OSError/RuntimeError/ValueError: a model that cannot
    be pickled stopped the start thread, and the search ran no round and said it had
    converged."""
    model = _geo_model()
    model.unpicklable = lambda: None  # a local function: pickling fails
    result = solve(model, seed=0, workers=2, time_limit=1.0)
    assert result.rounds >= 1 and result.workers == 1
    assert "worker processes could not start" in result.message and "searched in-process" in result.message


def test_a_start_that_fails_past_two_workers_keeps_those(monkeypatch):
    import solver.workers as workers

    real, made = workers._context, []

    class Context:  # the real context, but its third process fails to start
        def __init__(self, ctx):
            self.ctx = ctx

        def __getattr__(self, name):
            return getattr(self.ctx, name)

        def Process(self, *a, **k):
            made.append(1)
            if len(made) == 3:
                raise OSError(24, "Too many open files")
            return self.ctx.Process(*a, **k)

    monkeypatch.setattr(workers, "_context", lambda: Context(real()))
    result = solve(_geo_model(), seed=0, workers=4, time_limit=1.0)
    assert result.workers == 2 and result.rounds >= 1
    assert ("2 of 4 worker processes started (worker 2 could not start: [Errno 24] Too many open files); "
            "the search used those") in result.message and "lost" not in result.message


def test_rounds_go_on_in_process_once_every_worker_is_lost(monkeypatch):
    import solver.workers as workers

    real = workers.WorkerPool._round_processes

    def killing(self, k, *a):
        if k == 1:  # before the second round: every worker process dies
            for proc in self.procs:
                proc.kill()
                proc.join()
        return real(self, k, *a)

    monkeypatch.setattr(workers.WorkerPool, "_round_processes", killing)
    result = solve(_geo_model(), seed=0, workers=2, time_limit=2.0)
    assert result.status == TIME_LIMIT and result.rounds >= 3
    assert "worker 0 died" in result.message and "worker 1 died" in result.message
    assert result.fun == pytest.approx(result.score.comm) and result.history[-1][1] == pytest.approx(result.fun)


def test_the_default_rule_s_end_says_so_not_a_budget(monkeypatch):
    monkeypatch.setattr(search, "MAX_DEFAULT_ROUNDS", 1)  # the default rule's swaps: one round
    model = _geo_model()
    result = solve(model, seed=0, workers=1)
    assert result.status == BUDGET and result.rounds == 1
    assert result.message.startswith("default work used up (the swaps of 1 round of tempering walks")
    given = solve(model, seed=0, workers=1, budget=10_000)
    assert given.status == BUDGET and given.message.startswith("evaluation budget used up")
    monkeypatch.setattr(search, "default_budget", lambda n: 50)  # the starts' budget, no round
    starts = solve(model, seed=0, workers=1, restarts=0)
    assert starts.status == BUDGET and starts.rounds == 0 and starts.message.startswith("evaluation budget")


def test_the_trace_lists_what_the_result_returns():
    """A walk's improvement whose walk was then lost is not in the result: the trace
    drops bests below it and ends at the result's Comm."""
    model = _geo_model()
    grid = np.arange(model.n).reshape(6, 4)
    comm = model.score_grid(grid).comm
    run = search._Run(model, 10, None, None, None)
    run.offer(grid, comm, "start")
    run.note(comm - 1.0, 1)  # a lost walk's best
    out = search._result(run, model, 0, 3, 2, ["worker 1 died"])
    assert [v for _, v in out.history] == [comm] and out.fun == comm


def test_the_bound_test_is_relative_at_any_scale():
    """An absolute slack of 1e-12 s called any placement of a Comm under it optimal:
    payloads scaled by 1e-14 gave 'optimal' beside a printed gap of 52%."""
    model = _geo_model()
    for scale in (1e-14, 1.0, 1e6):
        run = search._Run(model, 10, None, None, 2.38 * scale)
        run.best_score = 4.92 * scale
        assert not run.at_bound()
        run.best_score = 2.38 * scale * (1 + 1e-12)
        assert run.at_bound()


def test_the_search_improves_at_any_scale():
    """Improvements were counted only above 1e-12 s: with every link scaled by 1e-14 the
    search made 0 moves and kept its first start."""
    model = _geo_model()
    plain = solve(model, seed=0, workers=1, restarts=1)
    for scale in (1e-14, 1e6):
        scaled = solve(CostModel(model.t_pp * scale, model.t_dp * scale, model.workload), seed=0, workers=1,
                       restarts=1)
        assert scaled.nit > 0 and scaled.fun / scale == pytest.approx(plain.fun, rel=0.02)


def test_a_search_that_lost_every_worker_goes_on_with_one_walk_s_share(monkeypatch):
    """Without a time limit, rounds in this process after every worker was lost took the
    whole budget sized for every worker's walk: workers x as many rounds."""
    import solver.workers as workers

    real = workers.WorkerPool._round_processes

    def killing(self, k, *a):
        if k == 1:
            for proc in self.procs:
                proc.kill()
                proc.join()
        return real(self, k, *a)

    monkeypatch.setattr(workers.WorkerPool, "_round_processes", killing)
    rounds = search.default_rounds(24)  # the default rule's budget: this many rounds of 4 walks
    result = solve(_geo_model(), seed=0, workers=4, restarts=1000)
    assert "worker 3 died" in result.message
    assert 2 <= result.rounds <= 2 + rounds  # not 2 + 4 x rounds
    assert result.status == BUDGET and result.message.startswith("default work used up")
