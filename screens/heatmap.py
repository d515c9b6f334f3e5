"""Fabric screen: the heatmap, its colour legend, the pair under the cursor, sweep progress."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import ProgressBar, Static

from screens.base import ConsoleScreen
from screens.statusbar import StatusBar
from screens.tabs import ScreenTabs
from screens.messages import Activity, SessionChanged
from screens.heatmap_view import (
    ESTIMATED_GLYPH, ESTIMATED_OFFSET, INFERRED_GLYPH, INFERRED_OFFSET, METRIC_TITLES, METRICS, PALETTES, SELF, UNMEASURED, UNMEASURED_GLYPH,
    Heatmap, darkened, faded,
)
from screens.widgets import ConsoleFooter
from solver.fabric import Fabric
from solver.workload import Workload


def _fmt(x: float, unit: str) -> str:
    if not math.isfinite(x):
        return "unmeasured"
    return f"{x:.3g} {unit}"


def _extra(fabric: Fabric, key: str, i: int, j: int) -> Any:
    table = fabric.extras.get(key)
    try:
        return table[i][j]
    except (TypeError, IndexError, KeyError):
        return None


def _where(fabric: Fabric, i: int) -> str:
    """A device's full name and its current labels (a relabel shows at once)."""
    d = fabric.devices[i] if fabric.devices is not None else None
    if d is None:
        return f"{fabric.device_name(i)} ({fabric.labels[i]})"
    labels = " / ".join(x for x in (d.region, d.zone, d.network_group) if x) or "unlabelled"
    return f"{d.name} ({labels})"


def describe_pair(fabric: Fabric, workload: Workload, i: int, j: int) -> Text:
    """What the operator needs about one directional pair, on three lines."""
    text = Text()
    text.append(_where(fabric, i), style="bold")
    text.append("  ->  ")
    text.append(_where(fabric, j) + "\n", style="bold")
    if i == j:
        text.append("same device")
        return text
    a, b = fabric.alpha_ms, fabric.beta_gbps
    t = fabric.transfer_s(workload.c_pp, workload.pp_messages)[i, j]
    text.append(f"alpha {_fmt(a[i, j], 'ms')} (back {_fmt(a[j, i], 'ms')})   ")
    text.append(f"beta {_fmt(b[i, j], 'Gbps')} (back {_fmt(b[j, i], 'Gbps')})   ")
    text.append(f"T({workload.c_pp:g} GB, {workload.pp_messages:g} msg) {_fmt(t, 's')}\n")
    r2 = _extra(fabric, "fit_r2", i, j)
    flag = _extra(fabric, "fit_flag", i, j)
    estimated = bool(_extra(fabric, "estimated", i, j))
    inferred = bool(_extra(fabric, "inferred", i, j))
    measured = math.isfinite(a[i, j])
    state = "estimated from labels" if estimated else ("measured" if measured else "not measured")
    if inferred:
        state = f"inferred, not measured: {_extra(fabric, 'inferred_basis', i, j) or 'sampled pairs'}"
    text.append(f"R² {r2:.4f}   " if isinstance(r2, (int, float)) else "R² -   ")
    text.append(f"when {fabric.measured_at or '-'}   ")
    text.append(state, style="yellow" if estimated or inferred else ("green" if measured else "red"))
    if flag:
        text.append(f"   {flag}", style="bold red")
    return text


def describe_blocks(fabric: Fabric, workload: Workload, rows: np.ndarray, cols: np.ndarray, names: tuple[str, str], level: str) -> Text:
    """Summary of an aggregated cell: how many pairs, how many measured, the means."""
    sub = np.ix_(rows, cols)
    a = fabric.alpha_ms[sub]
    b = fabric.beta_gbps[sub]
    off = ~np.equal.outer(rows, cols)
    finite = np.isfinite(a) & off
    inferred = _mask(fabric, "inferred")[sub] & finite
    measured = finite & ~inferred & ~_mask(fabric, "estimated")[sub]
    text = Text()
    text.append(f"{level} {names[0]}", style="bold")
    text.append("  ->  ")
    text.append(f"{level} {names[1]}\n", style="bold")
    pairs = int(off.sum())
    text.append(f"{pairs} pairs, {int(measured.sum())} measured"
                + (f", {int(inferred.sum())} inferred   " if inferred.any() else "   "))
    measured = finite
    if measured.any():
        t = fabric.transfer_s(workload.c_pp, workload.pp_messages)[sub]
        text.append(f"mean alpha {a[measured].mean():.3g} ms   mean beta {b[measured].mean():.3g} Gbps   ")
        text.append(f"mean T {t[measured].mean():.3g} s\n")
    else:
        text.append("\n")
    text.append(f"when {fabric.measured_at or '-'}   (cells are means: too many devices for one character each)")
    return text


def _mask(fabric: Fabric, key: str) -> np.ndarray:
    from screens.heatmap_view import estimated_mask

    return estimated_mask(fabric, key)


class ColourLegend(Static):
    """The colour scale of the heatmap with its end values and units."""


    DEFAULT_CSS = "ColourLegend { height: auto; }"

    def show(self, metric: str, lo: float, hi: float, level: str, estimated: bool = False,
             palette: str = "viridis", zoom: int = 0, inferred: bool = False) -> None:
        colours = PALETTES[palette]
        text = Text(f"{METRIC_TITLES[metric]}  ")
        ends = (hi, lo) if metric == "beta" else (lo, hi)
        if math.isfinite(lo):
            text.append(f"{ends[0]:.3g} ")
            for colour in colours:
                text.append("█", style=colour)
            text.append(f" {ends[1]:.3g} (log, dark = good, {palette})")
        else:
            text.append("no measured pairs")
        text.append("  ")
        text.append(UNMEASURED_GLYPH * 2, style=f"{UNMEASURED} on {SELF}")
        text.append(" unmeasured ")
        text.append("██", style=SELF)
        text.append(" self ")
        if estimated:
            text.append(ESTIMATED_GLYPH * 2, style=f"{SELF} on {faded(colours)[len(colours) // 2]}")
            text.append(" estimated ")
        if inferred:
            text.append(INFERRED_GLYPH * 2, style=f"{colours[len(colours) // 2]} on {darkened(colours)[len(colours) // 2]}")
            text.append(" inferred ")
        text.append(f" cells: {level}, zoom {zoom or 'fit'} (+/-)")
        self.update(text)


class HeatmapScreen(ConsoleScreen):
    """The measured fabric as a heatmap; the cursor shows one pair (or block) in detail."""

    COMMANDS_ = (
        ("Show latency alpha", "Heatmap of alpha (a)", "metric('alpha')"),
        ("Show bandwidth beta", "Heatmap of beta (b)", "metric('beta')"),
        ("Show transfer time", "Heatmap of T for the workload's activations (t)", "metric('transfer')"),
        ("Zoom in", "Larger cells, one per device; values from 6 characters (+)", "zoom_in"),
        ("Zoom out", "Smaller cells, back to fitting the space (-)", "zoom_out"),
        ("Next colour scale", "viridis or cividis, both colour-blind safe (p)", "cycle_palette"),
        ("Start sweep", "Measure every pair of the inventory (s)", "start_sweep"),
        ("Cancel sweep", "Stop the sweep and its remote workers (x)", "cancel_sweep"),
        ("Refresh fabric", "Re-measure the solution's bottleneck links and a sample; report drift (f)",
         "refresh"),
        ("Solve again", "After drift on a bottleneck link: solve on the refreshed fabric (S)", "resolve"),
    )
    HELP_WIDGETS = (Heatmap,)
    BINDINGS = [
        Binding("a", "metric('alpha')", "Alpha"),
        Binding("b", "metric('beta')", "Beta"),
        Binding("t", "metric('transfer')", "Transfer"),
        Binding("m", "cycle_metric", "Next metric", show=False),
        Binding("p", "cycle_palette", "Palette", show=False),
        Binding("s", "start_sweep", "Sweep"),
        Binding("x", "cancel_sweep", "Cancel sweep"),
        Binding("f", "refresh", "Refresh", show=False),
        Binding("S", "resolve", "Solve again", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.sweep: Any = None
        #: A refresh (re-measuring a sample of links) is running.
        self.refreshing = False

    def compose(self) -> ComposeResult:
        yield ScreenTabs()
        yield Static(id="fabric-title", classes="title", markup=False)
        yield Heatmap(id="heatmap")
        yield ColourLegend(id="legend")
        yield Static(id="pair-details", classes="details", markup=False)
        yield ProgressBar(id="sweep-progress", show_eta=True, total=None)
        yield Static("", id="sweep-status", classes="status", markup=False)
        yield StatusBar()
        yield ConsoleFooter()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#sweep-progress").display = False

    def show_session(self) -> None:
        s = self.session
        heatmap = self.query_one(Heatmap)
        heatmap.set_data(s.fabric, s.workload, s.devices())
        self._title()

    def _title(self) -> None:
        s = self.session
        heatmap = self.query_one(Heatmap)
        if s.fabric is None:
            self.query_one("#fabric-title", Static).update("No fabric: start a sweep (s) once the fleet is connected.")
            return
        missing = len(s.fabric.missing_pairs())
        total = s.fabric.n * (s.fabric.n - 1) // 2
        counts = {}
        for key in ("inferred", "estimated"):  # neither is called measured
            m = _mask(s.fabric, key)
            counts[key] = int(np.triu(m | m.T, 1).sum())
        also = "".join(f", {v} {k}" for k, v in counts.items() if v)
        self.query_one("#fabric-title", Static).update(
            f"Fabric {s.fabric.source}: {s.fabric.n} devices, "
            f"{total - missing - sum(counts.values())}/{total} pairs measured{also} — {METRIC_TITLES[heatmap.metric]}"
        )

    def action_metric(self, metric: str) -> None:
        self.query_one(Heatmap).metric = metric

    def action_zoom_in(self) -> None:
        self.query_one(Heatmap).action_zoom(1)

    def action_zoom_out(self) -> None:
        self.query_one(Heatmap).action_zoom(-1)

    def action_cycle_palette(self) -> None:
        heatmap = self.query_one(Heatmap)
        names = list(PALETTES)
        heatmap.palette = names[(names.index(heatmap.palette) + 1) % len(names)]

    def action_cycle_metric(self) -> None:
        heatmap = self.query_one(Heatmap)
        heatmap.metric = METRICS[(METRICS.index(heatmap.metric) + 1) % len(METRICS)]

    def on_heatmap_cursor_moved(self, message: Heatmap.CursorMoved) -> None:
        heatmap = message.heatmap
        lay, fabric, workload = heatmap.layout_, heatmap.fabric, heatmap.workload
        details = self.query_one("#pair-details", Static)
        if lay is None or fabric is None or workload is None:
            details.update("")
            return
        self.query_one(ColourLegend).show(
            heatmap.metric, lay.lo, lay.hi, lay.level,
            bool(((lay.colour >= ESTIMATED_OFFSET) & (lay.colour < INFERRED_OFFSET)).any()),
            heatmap.palette, heatmap.zoom, bool((lay.colour >= INFERRED_OFFSET).any()),
        )
        self._title()
        rows, cols = heatmap.cursor_rows()
        r, c = heatmap.cursor
        if lay.level == "device":
            details.update(describe_pair(fabric, workload, int(rows[0]), int(cols[0])))
        else:
            details.update(describe_blocks(fabric, workload, rows, cols, (lay.names[r], lay.names[c]), lay.level))

    # -- refresh: re-measure a sample, mark the solution STALE on bottleneck drift --------
    def action_refresh(self) -> None:
        s = self.session
        if not s.inventory or s.fabric is None or s.fabric.devices is None:
            self.notify("refresh needs a measured fabric and its inventory (--inventory hosts.toml)",
                        severity="warning")
            return
        if self.sweep is not None or self.refreshing:
            self.notify("a sweep or refresh is already running", severity="warning")
            return
        self.query_one("#sweep-status", Static).update("Refreshing: re-measuring a sample of links...")
        self.run_refresh(s.inventory, s.known_hosts)

    @work(exclusive=True, exit_on_error=False, group="sweep", description="fabric refresh")
    async def run_refresh(self, inventory: str, known_hosts: str | None) -> None:
        from geoconsole.inventory import load_inventory
        from probes.refresh import bottlenecks_for_rank_map, choose_links, merged, run_refresh
        from probes.ssh import SSHPool

        s = self.session
        fabric, sol = s.fabric, s.current
        bottlenecks = None
        if sol is not None and not s.is_stale(sol):
            bottlenecks = bottlenecks_for_rank_map(fabric, sol.rank_map, sol.workload)
        links = choose_links(fabric, bottlenecks)
        hosts = load_inventory(inventory).hosts
        async with SSHPool(**({"known_hosts": known_hosts} if known_hosts else {})) as pool:
            self.refreshing = True  # a refresh and a sweep never run at once
            try:
                new, drifts = await run_refresh(hosts, pool, fabric, links)
            finally:
                self.refreshing = False
        moved = [d for d in drifts if d.drifted]
        self.show_refresh(drifts, moved)
        if moved and s.fabric is fabric:
            s.set_fabric(merged(fabric, new, drifts))
            self.post_message(SessionChanged("refresh: drift"))

    def show_refresh(self, drifts: list, moved: list) -> None:
        """The status line and notification for a finished refresh."""
        status = self.query_one("#sweep-status", Static)
        hot = [d for d in moved if d.link.why == "bottleneck"]
        if hot:
            words = "; ".join(d.words() for d in hot[:2])
            status.update(Text(f"STALE: drift on the solution's bottleneck links: {words}. "
                               "S solves again on the refreshed fabric.", style="bold yellow"))
            self.notify(f"{len(hot)} bottleneck link(s) drifted: the solution is STALE; press S to solve again",
                        title="refresh", severity="warning", timeout=10)
        elif moved:
            status.update(Text(f"refresh: {len(moved)} of {len(drifts)} links drifted (none a bottleneck of "
                               f"the solution): {moved[0].words()}", style="yellow"))
        else:
            status.update(f"refresh: {len(drifts)} links re-measured, no drift beyond 20%")

    def action_resolve(self) -> None:
        self.app.switch_mode("solve")
        self.app.call_after_refresh(lambda: getattr(self.app.screen, "action_solve", lambda: None)())

    # -- sweep (async worker on the app's loop: asyncssh is asyncio-native) -----------
    def action_start_sweep(self) -> None:
        s = self.session
        if not s.inventory:
            self.notify("the demo fabric has no fleet to sweep: open with --inventory hosts.toml", severity="warning")
            return
        if self.sweep is not None or self.refreshing:
            self.notify("a sweep or refresh is already running (x cancels a sweep)", severity="warning")
            return
        self.run_sweep(s.inventory, s.known_hosts)

    def action_cancel_sweep(self) -> None:
        if self.sweep is None:
            self.notify("no sweep is running", severity="warning")
            return
        self.query_one("#sweep-status", Static).update("Cancelling the sweep: stopping remote workers...")
        self.cancel_remote()

    @work(exclusive=True, exit_on_error=False, group="sweep-cancel", description="cancel sweep")
    async def cancel_remote(self) -> None:
        if self.sweep is not None:
            await self.sweep.cancel()

    def worker_failed(self) -> None:
        """Called by the app's worker-error handler for this screen's workers."""
        self.sweep = None
        self.query_one("#sweep-status", Static).update(Text("The sweep failed (see the notification).", style="bold red"))
        self.post_message(Activity("sweep", None))

    @work(exclusive=True, exit_on_error=False, group="sweep", description="fabric sweep")
    async def run_sweep(self, inventory: str, known_hosts: str | None) -> None:
        from geoconsole.inventory import load_inventory
        from probes.ssh import SSHPool
        from probes.sweep import ProbeSettings, Sweep

        hosts = load_inventory(inventory).hosts
        pool_options = {"known_hosts": known_hosts} if known_hosts else {}
        progress = self.query_one("#sweep-progress", ProgressBar)
        progress.display = True
        live = LiveSweep()
        async with SSHPool(**pool_options) as pool:
            self.sweep = Sweep(hosts, pool=pool, settings=ProbeSettings())
            try:
                async for event in self.sweep.events():
                    self._on_sweep_event(live, event, progress)
            finally:
                self.sweep = None

    def _on_sweep_event(self, live: "LiveSweep", event: Any, progress: ProgressBar) -> None:
        kind = type(event).__name__
        status = self.query_one("#sweep-status", Static)
        if kind == "Discovered" or (live.fabric is None and getattr(self.sweep, "devices", None) and kind == "PairStarted"):
            devices = tuple(getattr(event, "devices", None) or self.sweep.devices)
            live.start(devices)
            live.total = getattr(event, "pairs", live.total)  # a sampled sweep infers the rest
            self.session.fabric = live.fabric
            progress.update(total=live.total, progress=0)
            self.query_one(Heatmap).set_data(live.fabric, self.session.workload, self.session.devices())
        if kind == "PairStarted":
            status.update(f"probing {event.src} <-> {event.dst} (round {event.round})")
        elif kind == "PairMeasured" and live.fabric is not None:
            live.measured(event)
            progress.update(progress=live.done)
            self.post_message(Activity("sweep", f"sweep {live.done}/{live.total} pairs"))
            self.query_one(Heatmap).set_data(live.fabric, self.session.workload, self.session.devices())
        elif kind == "PairFailed" and live.fabric is not None:
            live.failed(event)
            progress.update(progress=live.done)
            status.update(Text(f"{event.src} <-> {event.dst}: {event.reason}", style="red"))
        elif kind == "HostLost":
            status.update(Text(f"host lost: {event.host}: {event.reason}", style="bold red"))
            self.notify(f"{event.host}: {event.reason}", title="host lost", severity="error")
        elif kind == "SweepDone":
            self.session.set_fabric(event.fabric)
            words = "cancelled" if event.cancelled else "done"
            also = f", {event.inferred} inferred" if getattr(event, "inferred", 0) else ""
            status.update(f"sweep {words}: {event.measured} pairs measured{also}, {event.failed} failed, {event.elapsed_s:.1f} s")
            self.post_message(Activity("sweep", None))
            self.post_message(SessionChanged(f"sweep {words}"))


class LiveSweep:
    """The fabric being filled in while a sweep runs (NaN until each pair lands)."""

    def __init__(self) -> None:
        self.fabric: Fabric | None = None
        self.total = 0
        self.pairs: set[tuple[int, int]] = set()

    @property
    def done(self) -> int:
        return len(self.pairs)

    def start(self, devices: tuple) -> None:
        n = len(devices)
        nan = np.full((n, n), np.nan)
        r2 = [[None] * n for _ in range(n)]
        flag = [[None] * n for _ in range(n)]
        labels = tuple(d.region or d.host for d in devices)
        self.fabric = Fabric(nan.copy(), nan.copy(), labels, devices, None, {}, {"fit_r2": r2, "fit_flag": flag}, "sweep (live)")
        self.total = n * (n - 1) // 2

    def measured(self, ev: Any) -> None:
        f = self.fabric
        f.alpha_ms[ev.i, ev.j] = ev.alpha_ms
        f.beta_gbps[ev.i, ev.j] = ev.beta_gbps
        f.extras["fit_r2"][ev.i][ev.j] = ev.r2
        f.extras["fit_flag"][ev.i][ev.j] = ev.flag
        # A pair is done once both directions are in.
        if np.isfinite(f.alpha_ms[ev.j, ev.i]):
            self.pairs.add((min(ev.i, ev.j), max(ev.i, ev.j)))

    def failed(self, ev: Any) -> None:
        self.pairs.add((min(ev.i, ev.j), max(ev.i, ev.j)))
        self.fabric.extras["fit_flag"][ev.i][ev.j] = f"failed: {ev.reason}"
