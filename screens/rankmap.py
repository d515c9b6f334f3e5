"""Rank-map review: the stage x replica grid, stage-group locality, pipeline edges, export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from rich.cells import cell_len
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer
from textual.widgets import Static

from geoconsole.session import Solution
from screens.base import ConsoleScreen
from screens.statusbar import StatusBar
from screens.tabs import ScreenTabs
from screens.dialogs import PathDialog, ask_path_then
from screens.widgets import (REGION_COLOURS, STALE_NOTE, ConsoleFooter, StageLocality, advice_text, grid_rows, region_colours,
                             warning_style)
from solver.fabric import Device, write_atomic


def short_names(devices: tuple[Device, ...]) -> list[str]:
    """Host names, with ``:gpu`` only where a host has several devices."""
    per_host: dict[str, int] = {}
    for d in devices:
        per_host[d.host] = per_host.get(d.host, 0) + 1
    return [d.name if per_host[d.host] > 1 else d.host for d in devices]


def region_legend(devices: tuple[Device, ...]) -> Text:
    """'regions: ██ Oregon  ██ Virginia ...' in the grid's colours."""
    text = Text("regions: ", style="bold")
    colours = region_colours(devices)
    for region, colour in colours.items():
        text.append("██", style=colour)
        text.append(f" {region}  ")
    if len(colours) > len(REGION_COLOURS):  # say so: two regions of one colour look like one
        text.append(f"({len(colours)} regions share {len(REGION_COLOURS)} colours: see the Labels screen) ",
                    style="bold")
    text.append("(reverse: the selected edge's bottleneck; c: compact)", style="dim")
    return text


def _show_wide(widget: Static, table: Table) -> None:
    """Show ``table`` at its natural width, so the scrolling body pans sideways instead
    of Rich squeezing (or cropping) the stages to the screen's width."""
    console = widget.app.console
    widget.styles.width = Measurement.get(console, console.options.update(width=10_000), table).maximum
    widget.update(table)


#: [ and ] share one footer entry.
EDGES = Binding.Group("Edges")


class RankMapScreen(ConsoleScreen):
    """Review the current solution; compare it with the previous one or a loaded rank map."""

    BINDINGS = [
        Binding("d", "toggle_diff", "Diff"),
        Binding("left_square_bracket", "edge(-1)", "Prev edge", key_display="[", group=EDGES),
        Binding("right_square_bracket", "edge(1)", "Next edge", key_display="]", group=EDGES),
        Binding("e", "export", "Export"),
        Binding("o", "open_rank_map", "Load rank map"),
        Binding("x", "leave_out", "Leave out"),
        Binding("c", "toggle_compact", "Compact"),
    ]
    COMMANDS_ = (
        ("Export rank map", "Write JSON and show rank_map=(...)", "export"),
        ("Compare with a rank map file", "Load a rank map for the side-by-side diff", "open_rank_map"),
        ("Toggle diff", "Side by side with the previous solution", "toggle_diff"),
        ("Toggle compact grid", "Device numbers instead of names in the grid (c)", "toggle_compact"),
    )

    def __init__(self) -> None:
        super().__init__()
        self.diff = False
        #: Cells show the device's row number (as in rank_map=(...)) instead of its name.
        self.compact = False
        self.edge = 0
        self.compare: Solution | None = None

    def compose(self) -> ComposeResult:
        yield ScreenTabs()
        with ScrollableContainer(id="rankmap-body"):
            yield Static(id="rankmap-summary", markup=False)
            yield Static(id="rankmap-legend", markup=False)
            with Horizontal(id="rankmap-grids"):
                yield Static(id="rankmap-grid", markup=False)
                yield Static(id="rankmap-other", markup=False)
            with Horizontal(id="rankmap-lists"):
                yield StageLocality(id="rankmap-locality")
                yield Static(id="rankmap-edges", markup=False)
        yield StatusBar()
        yield ConsoleFooter()

    def _other(self) -> Solution | None:
        return self.compare or self.session.previous

    def show_session(self) -> None:
        s = self.session
        sol = s.current
        summary = self.query_one("#rankmap-summary", Static)
        other_view = self.query_one("#rankmap-other", Static)
        if sol is None or s.fabric is None:
            summary.update("No solution yet: solve on the Solve screen (4).")
            for wid in ("#rankmap-grid", "#rankmap-edges", "#rankmap-legend"):
                self.query_one(wid, Static).update("")
            other_view.display = False
            self.query_one(StageLocality).show(None, 1, (), False)
            return
        from solver.cost import CostModel

        devices = s.devices()
        w = sol.workload
        score = CostModel.from_fabric(s.fabric, w).score_rank_map(sol.rank_map)
        self.edge = min(self.edge, max(w.d_pp - 2, 0))
        stale = s.is_stale(sol)
        summary.update(self._summary(sol, score, devices, stale))
        hot = set(score.bottlenecks[self.edge]) if len(score.bottlenecks) else set()
        other = self._other() if self.diff else None
        if other is not None and len(other.rank_map) != len(sol.rank_map):
            other = None
        self.query_one("#rankmap-legend", Static).update(region_legend(devices))
        _show_wide(self.query_one("#rankmap-grid", Static), self._grid(
            sol, devices, hot, None if other is None else other.rank_map, sol.name, compact=other is not None))
        other_view.display = other is not None
        if other is not None:
            title = f"{other.name} (Comm {other.fun:.2f} s; · = same device as left)"
            _show_wide(other_view, self._grid(other, devices, set(), sol.rank_map, title, compact=True, dots=True))
        self.query_one(StageLocality).show(sol.rank_map, w.d_pp, devices, stale)
        self.query_one("#rankmap-edges", Static).update(self._edges(score, devices))

    def _summary(self, sol: Solution, score, devices, stale: bool) -> Text:
        text = Text()
        text.append(f"{sol.name}", style="bold")
        text.append(f"  Comm {score.comm:.2f} s = DataP {score.data_p:.2f} s + Pipeline {score.pipeline:.2f} s")
        if sol.bound is not None:
            text.append(f"   lower bound {sol.bound:.2f} s")
        medians = {k: float(np.median(v)) for k, v in sol.baselines.items() if v}
        for name, median in medians.items():
            text.append(f"   {name} median {median:.2f} s")
        worst = score.worst_device
        stage = int(sol.rank_map[worst]) % sol.workload.d_pp
        if score.data_p > 0:
            text.append(f"\nDataP set by stage {stage}: worst device ")
            text.append(f"{devices[worst].name}", style="bold red")
            text.append(f" ({devices[worst].region or 'unlabelled'})")
        else:
            text.append("\nDataP is 0: no device sets it")
        if stale:
            text.append(f"\n{STALE_NOTE}; solve again.", style=warning_style(self.app))
        if sol.advice:
            text.append("\n").append(advice_text(sol.advice, {"poor-device": "x: leave it out"}))
        return text

    def _grid(self, sol: Solution, devices, hot: set[int], against: np.ndarray | None, title: str,
              compact: bool = False, dots: bool = False) -> Table:
        """Replicas as rows, stages as columns, cells coloured by region.

        ``against``: the other rank map of a diff; cells whose device sits elsewhere there
        are underlined, or (``dots``) cells holding the same device are shown as '·'.
        """
        w = sol.workload
        grid = grid_rows(sol.rank_map, w.d_pp, w.d_dp)
        compact = compact or self.compact
        names = [str(i) for i in range(len(devices))] if self.compact else short_names(devices)
        colours = region_colours(devices)
        # at least as wide as the title: a title Rich wraps makes this grid one line taller
        # than the one beside it, and the diff's rows stop lining up
        table = Table(title=Text(title, style="table.title"), title_justify="left", box=None, padding=(0, 1), show_edge=False,
                      min_width=cell_len(title))
        table.add_column("", style="bold")
        for stage in range(w.d_pp):
            table.add_column(f"s{stage}" if compact else f"stage {stage}", no_wrap=True)
        for replica in range(w.d_dp):
            cells = []
            for stage in range(w.d_pp):
                row = int(grid[replica, stage])
                style = colours[devices[row].region or "unlabelled"]
                if row in hot:
                    style += " reverse bold"
                moved = against is not None and int(against[row]) != int(sol.rank_map[row])
                if dots and not moved:
                    cells.append(Text("·", style="dim"))
                    continue
                if moved and not dots:
                    style += " underline"
                cells.append(Text(names[row], style=style))
            table.add_row(f"r{replica}" if compact else f"replica {replica}", *cells)
        return table

    def _edges(self, score, devices) -> Text:
        text = Text("Pipeline edges (bottleneck link of each)\n", style="bold")
        edges = list(score.edge_s)
        worst = int(np.argmax(edges)) if edges else -1
        for e, (cost, pair) in enumerate(zip(edges, score.bottlenecks)):
            a, b = (devices[int(x)].name for x in pair)
            style = "reverse" if e == self.edge else ""
            if e == worst:
                style += " bold red"
            text.append(f"stage {e}->{e + 1}: {cost:.3f} s  {a} <-> {b}\n", style=style.strip())
        return text

    # -- actions -----------------------------------------------------------------
    def action_toggle_compact(self) -> None:
        self.compact = not self.compact
        self.show_session()

    def action_toggle_diff(self) -> None:
        if self._other() is None:
            self.notify("nothing to compare: solve twice or load a rank map (o)", severity="warning")
            return
        self.diff = not self.diff
        self.show_session()

    def action_edge(self, step: int) -> None:
        sol = self.session.current
        if sol is None or sol.workload.d_pp < 2:
            return
        self.edge = (self.edge + step) % (sol.workload.d_pp - 1)
        self.show_session()

    def action_leave_out(self) -> None:
        """Drop the device the poor-device advice names from the session's fabric."""
        from screens.messages import SessionChanged

        sol = self.session.current
        names = [a["subject"] for a in (sol.advice if sol else []) if a["code"] == "poor-device" and a["subject"]]
        if not names or self.session.fabric is None or not all(
                any(d.name == n for d in self.session.devices()) for n in names):
            self.notify("no poor device to leave out (see the advice above the grid)", severity="warning")
            return
        left = self.session.leave_out(names)
        note = f"left out {', '.join(names)}: {left} devices remain; set D_PP x D_DP = {left} and solve again (4)"
        self.notify(note)
        self.post_message(SessionChanged(note))

    def action_export(self) -> None:
        sol = self.session.current
        if sol is None:
            self.notify("no solution to export", severity="warning")
            return

        def write(path: Path) -> None:
            try:
                self.export(path, sol)
            except (OSError, ValueError) as exc:  # FileError: a folder, FIFO, device or an input
                self.notify(" ".join(str(exc).split()), severity="error")
                return
            self._exported = str(path)  # offered next time
            self.app.copy_to_clipboard(sol.rank_map_text())
            self.notify(f"wrote {path}; {sol.rank_map_text()[:60]}... (copied)")

        stale = STALE_NOTE if self.session.is_stale(sol) else ""
        ask_path_then(self.app, "Export rank map (JSON) to", getattr(self, "_exported", "rank_map.json"), write,
                      note=stale)

    def export(self, path: Path, sol: Solution) -> None:
        s = self.session
        doc = {
            "rank_map": [int(r) for r in sol.rank_map],
            "rank_map_text": sol.rank_map_text(),
            "comm_s": sol.fun,
            "workload": sol.workload.to_json(),
            "fabric_sha256": None if s.fabric is None else s.fabric.sha256(),
            "devices": [d.to_json() for d in s.devices()],
            "solution": sol.name,
            "created_at": sol.created_at,
        }
        write_atomic(path, json.dumps(doc, indent=1) + "\n",
                     inputs=[("session file", s.path), ("inventory", s.inventory)])

    def action_open_rank_map(self) -> None:
        s = self.session
        sol = s.current
        if sol is None or s.fabric is None:
            self.notify("solve first: a loaded rank map is compared with the current solution", severity="warning")
            return

        def load(path: str | None) -> None:
            if not path:
                return
            from geoconsole.rank_maps import read_rank_map_file

            try:
                shape = (sol.workload.d_pp, sol.workload.d_dp)
                rank_map = np.asarray(read_rank_map_file(path, s.fabric.n, shape), dtype=int)
            except ValueError as exc:
                self.notify(str(exc), severity="error")
                return
            from solver.cost import CostModel

            fun = CostModel.from_fabric(s.fabric, sol.workload).score_rank_map(rank_map).comm
            self.compare = Solution(f"loaded {Path(path).name}", rank_map, fun, sol.workload, s.digest(), sol.created_at)
            self.diff = True
            self.show_session()

        self.app.push_screen(PathDialog("Compare with rank map file", "rank_map.json"), load)
