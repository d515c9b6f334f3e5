"""Console benchmarks: heatmap render time, key-press delay during a large solve, start-up.

Run: ``.venv/bin/python benchmarks/console.py`` (about a minute). Prints one line per
figure. The app runs headless (Textual's test driver) except for start-up, which runs
the real ``geoconsole`` command on a pseudo-terminal.

- heatmap render: relayout (ordering, aggregation, colours) plus drawing every line of
  the widget, median of 20, for 64 and 512 devices, at a size where every device gets a
  cell and at a 200 x 60 terminal (512 devices then aggregate by host).
- key-press delay: from posting a key to its effect (the help screen opening or closing),
  median and max of 20 presses, idle and while a 1024-GPU solve runs in its thread.
- start-up: process start to the first frame that shows the demo fabric.
"""

from __future__ import annotations

import asyncio
import os
import pty
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from geoconsole.app import GeoConsoleApp  # noqa: E402
from geoconsole.session import Session  # noqa: E402
from screens.heatmap_view import Heatmap  # noqa: E402
from screens.help import HelpScreen  # noqa: E402
from solver.fabric import Device, Fabric  # noqa: E402
from solver.workload import Workload  # noqa: E402


def fleet_fabric(hosts: int, gpus: int, regions: int = 8, seed: int = 0) -> Fabric:
    """A synthetic fleet: fast links inside a host, region-dependent links across."""
    rng = np.random.default_rng(seed)
    devices = tuple(Device(f"host{h:03d}", g, f"region-{h % regions}") for h in range(hosts) for g in range(gpus))
    host = np.repeat(np.arange(hosts), gpus)
    region = host % regions
    base_a = rng.uniform(10, 200, (regions, regions))
    base_b = rng.uniform(0.3, 2.0, (regions, regions))
    alpha = base_a[np.ix_(region, region)] * rng.uniform(0.9, 1.1, (len(host), len(host)))
    beta = base_b[np.ix_(region, region)] * rng.uniform(0.9, 1.1, (len(host), len(host)))
    same_region = region[:, None] == region[None, :]
    alpha[same_region], beta[same_region] = 2.0, 10.0
    same_host = host[:, None] == host[None, :]
    alpha[same_host], beta[same_host] = 0.02, 100.0
    np.fill_diagonal(alpha, 0)
    np.fill_diagonal(beta, 0)
    return Fabric(alpha, beta, tuple(d.region for d in devices), devices, source=f"synthetic {len(host)}")


def session_for(fabric: Fabric, d_pp: int) -> Session:
    return Session(fabric=fabric, workload=Workload(d_pp, fabric.n // d_pp, 0.512, 0.65), name="benchmark")


async def heatmap_render(fabric: Fabric, size: tuple[int, int], repeats: int = 20) -> tuple[float, str, int]:
    app = GeoConsoleApp(session_for(fabric, 8))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        heatmap = app.screen.query_one(Heatmap)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            heatmap._relayout()
            for y in range(heatmap.size.height):
                heatmap.render_line(y)
            times.append(time.perf_counter() - started)
        lay = heatmap.layout_
        return statistics.median(times), lay.level, lay.k


async def until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark condition not reached")
        await asyncio.sleep(0.001)


async def key_delays(app: GeoConsoleApp, presses: int = 20) -> list[float]:
    delays = []
    for _ in range(presses // 2):
        for key, want in (("question_mark", True), ("escape", False)):
            started = time.perf_counter()
            app.simulate_key(key)
            await until(lambda: isinstance(app.screen, HelpScreen) == want)
            delays.append(time.perf_counter() - started)
            await asyncio.sleep(0.05)
    return delays


async def key_press_during_solve() -> tuple[list[float], list[float], float]:
    fabric = fleet_fabric(hosts=128, gpus=8)  # 1024 GPUs
    app = GeoConsoleApp(session_for(fabric, 32))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        idle = await key_delays(app)
        await pilot.press("4")
        solve = app.screen
        solve.query_one("#form-budget").value = "1000000000"
        solve.query_one("#form-time_limit").value = "600"
        app.simulate_key("ctrl+r")
        await until(lambda: solve.running)
        await asyncio.sleep(2.0)  # well into the search
        busy = await key_delays(app)
        assert solve.running, "the solve finished before the measurement ended"
        app.simulate_key("escape")
        started = time.perf_counter()
        await until(lambda: not solve.running, timeout=120)
        cancel = time.perf_counter() - started
    return idle, busy, cancel


async def screen_switches(rounds: int = 5) -> dict[str, list[float]]:
    """Key press to the first frame of the new screen written to the terminal driver, and
    to the app idle again, for each screen on the demo fabric with a solution, after the
    screens were built ahead."""
    from geoconsole.app import SCREENS, create_app
    from geoconsole.session import demo_session

    out: dict[str, list[float]] = {"first frame": [], "idle": []}
    app = create_app()
    app.session = demo_session()
    frames: list[tuple[float, object]] = []
    display = app._display

    def recording_display(screen, renderable) -> None:  # every frame goes through here
        frames.append((time.perf_counter(), screen))
        display(screen, renderable)

    app._display = recording_display
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await until(lambda: all(m in app._screen_stacks for m, _k, _t in SCREENS), timeout=60)
        await pilot.pause()
        for _ in range(rounds):
            for mode, key, _title in SCREENS:
                if app.current_mode == mode:
                    continue
                frames.clear()
                started = time.perf_counter()
                app.simulate_key(key)
                await until(lambda: app.current_mode == mode and any(s is app.screen for _t, s in frames))
                out["first frame"].append(next(t for t, s in frames if s is app.screen) - started)
                await pilot.pause()
                out["idle"].append(time.perf_counter() - started)
    return out


def startup_to_first_frame(timeout: float = 60.0) -> float:
    exe = Path(sys.executable).parent / "geoconsole"
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    started = time.perf_counter()
    proc = subprocess.Popen([str(exe)], stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    seen = b""
    first = None
    try:
        while time.perf_counter() - started < timeout:
            if select.select([master], [], [], 0.01)[0]:
                try:
                    seen += os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if first is None and b"demo:worldwide" in seen:
                    first = time.perf_counter() - started
                    os.write(master, b"q")
            if proc.poll() is not None:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)
    if first is None:
        raise RuntimeError("the console never drew its first frame")
    return first


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def main() -> None:
    print(f"# console benchmarks (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    for hosts, gpus, size in ((8, 8, (200, 60)), (64, 8, (540, 280)), (64, 8, (200, 60))):
        fabric = fleet_fabric(hosts, gpus)
        median, level, k = asyncio.run(heatmap_render(fabric, size))
        print(f"heatmap render {fabric.n} devices at {size[0]}x{size[1]}: {ms(median)} median "
              f"(cells: {level}, {k} x {k})")
    idle, busy, cancel = asyncio.run(key_press_during_solve())
    print(f"key press idle: median {ms(statistics.median(idle))}, max {ms(max(idle))}")
    print(f"key press during a 1024-GPU solve: median {ms(statistics.median(busy))}, max {ms(max(busy))}")
    print(f"cancel of the 1024-GPU solve to best-so-far result: {ms(cancel)}")
    switches = asyncio.run(screen_switches())
    for kind, times in switches.items():
        print(f"screen switch, key to {kind} (160x48, screens built ahead): median "
              f"{ms(statistics.median(times))}, max {ms(max(times))} of {len(times)}")
    starts = [startup_to_first_frame() for _ in range(3)]
    print(f"start-up to first frame (geoconsole on a pty): median {ms(statistics.median(starts))} of 3")


if __name__ == "__main__":
    main()
