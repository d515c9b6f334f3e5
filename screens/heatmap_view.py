"""The fabric heatmap widget: GPU x GPU alpha, beta or transfer time as coloured cells.

Each cell is one character wide and half a line high (the upper half-block glyph with
foreground = upper row, background = lower row), so a 64-GPU fabric fits in 64 columns
and 32 lines. When even that would not fit, rows and columns are aggregated by host,
then by label (mean of the measured pairs inside each block), so large fleets stay
readable instead of being cropped. Pairs a sampled sweep inferred are drawn in a darker
scale, with the shade glyph where both halves of a character are inferred.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import Click, MouseEvent, MouseMove
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from screens.adapters import group_key
from solver.fabric import Device, Fabric
from solver.workload import Workload

METRICS = ("alpha", "beta", "transfer")
METRIC_TITLES = {
    "alpha": "latency alpha (ms)",
    "beta": "bandwidth beta (Gbps)",
    "transfer": "transfer time T (s)",
}
#: Colour-blind-safe sequential scales (perceptually uniform, readable under deuteranopia
#: and protanopia), good (dark) to bad (bright): the links to look at stand out.
PALETTES = {
    "viridis": ("#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"),
    "cividis": ("#00224e", "#123570", "#3b496c", "#575d6d", "#707173", "#8a8678", "#a59c74", "#c3b369", "#fee838"),
}
PALETTE = PALETTES["viridis"]
ESTIMATED_OFFSET = 100
#: Added to a colour index for cells on the cursor's row or column (the crosshair).
CROSS_OFFSET = 1000
UNMEASURED = "#9e9e9e"
SELF = "#3a3a3a"
CURSOR = "#ff5fd7"
#: Glyphs of cells at least one line high: the state is readable without colour.
UNMEASURED_GLYPH = "╳"
ESTIMATED_GLYPH = "░"
#: Cell sizes (characters wide, half-lines high) of the zoom steps; zoom 0 fits the space.
ZOOM_CELLS = (0, 1, 2, 4, 6, 8, 10, 12)
#: Cells this wide or wider print their value.
VALUE_CELL = 6


def faded(palette: tuple[str, ...]) -> tuple[str, ...]:
    """The scale faded toward grey: pairs estimated from labels rather than measured."""
    return tuple("#%02x%02x%02x" % tuple((int(c[i:i + 2], 16) + 2 * 0x50) // 3 for i in (1, 3, 5)) for c in palette)


ESTIMATED_PALETTE = faded(PALETTE)
#: Pairs a sampled sweep inferred: the same scale, darker, and drawn with the shade
#: glyph where both halves of a character are inferred, so they differ by shape too.
INFERRED_OFFSET = 200
INFERRED_GLYPH = "▒"


def darkened(palette: tuple[str, ...]) -> tuple[str, ...]:
    """The scale darkened: pairs inferred from sampled pairs of the same two hosts."""
    return tuple("#%02x%02x%02x" % tuple(int(c[i:i + 2], 16) * 3 // 5 for i in (1, 3, 5)) for c in palette)


INFERRED_PALETTE = darkened(PALETTE)


def blend(colour: str, other: str, t: float) -> str:
    a = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(other[i:i + 2], 16) for i in (1, 3, 5)]
    return "#%02x%02x%02x" % tuple(int(x + (y - x) * t) for x, y in zip(a, b))


def cell_value(v: float) -> str:
    """A value in at most 5 characters."""
    if not math.isfinite(v):
        return ""
    if v >= 10_000:
        return f"{v / 1000:.0f}k"
    return f"{v:.3g}" if v < 1000 else f"{v:.0f}"


HEADER_LINES = 2
LEVELS = ("device", "host", "label")


def metric_matrix(fabric: Fabric, workload: Workload, metric: str) -> np.ndarray:
    """The (n, n) matrix shown for ``metric``; NaN where unmeasured."""
    if metric == "alpha":
        return fabric.alpha_ms
    if metric == "beta":
        return fabric.beta_gbps
    if metric == "transfer":
        t = fabric.transfer_s(workload.c_pp, workload.pp_messages)
        bad = ~(np.isfinite(fabric.alpha_ms) & np.isfinite(fabric.beta_gbps))
        t = np.where(bad | bad.T, np.nan, t)
        np.fill_diagonal(t, 0.0)
        return t
    raise ValueError(f"metric: expected one of {', '.join(METRICS)}, got {metric!r}")


def row_order(devices: tuple[Device, ...], labels: tuple[str, ...]) -> list[int]:
    """Rows grouped by label (in order of first appearance), then zone, network group,
    host and GPU index."""
    first: dict[str, int] = {}
    for i, d in enumerate(devices):
        first.setdefault(group_key(d, labels[i]), i)

    def key(i: int):
        d = devices[i]
        return (first[group_key(d, labels[i])], d.zone or "~", d.network_group or "~", d.host, d.gpu or 0)

    return sorted(range(len(devices)), key=key)


@dataclass(eq=False)
class HeatmapLayout:
    """What is drawn: blocks of rows (in display order), their values and colours."""

    level: str
    blocks: list[np.ndarray]
    names: list[str]
    groups: list[tuple[str, int, int]]  # (label, first block, block count)
    values: np.ndarray  # (k, k) block means, NaN where nothing measured
    colour: np.ndarray  # (k, k) palette index, -1 unmeasured, -2 self
    cell: int  # cell width in characters
    lo: float
    hi: float
    #: Cell height in half-lines (0: the same as ``cell``, a square cell).
    cell_h: int = 0

    def __post_init__(self) -> None:
        self.cell_h = self.cell_h or self.cell

    @property
    def k(self) -> int:
        return len(self.blocks)


def _blocks(order: list[int], devices: tuple[Device, ...], labels, level: str):
    """Contiguous runs of ``order`` sharing the level's key, with their names."""
    def key(i: int) -> str:
        d = devices[i]
        if level == "device":
            return d.name
        if level == "host":
            return d.host
        return group_key(d, labels[i])

    blocks, names = [], []
    for i in order:
        name = key(i)
        if names and names[-1] == name and level != "device":
            blocks[-1].append(i)
        else:
            blocks.append([i])
            names.append(name)
    return [np.asarray(b, dtype=int) for b in blocks], names


def block_means(m: np.ndarray, blocks: list[np.ndarray]) -> np.ndarray:
    """Mean of the finite off-diagonal entries of ``m`` in each block pair: O(k n^2)."""
    n = m.shape[0]
    k = len(blocks)
    p = np.zeros((k, n))
    for b, rows in enumerate(blocks):
        p[b, rows] = 1.0
    finite = np.isfinite(m)
    np.fill_diagonal(finite, False)
    total = p @ np.where(finite, m, 0.0) @ p.T
    count = p @ finite.astype(float) @ p.T
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def colour_index(values: np.ndarray, metric: str, is_self: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Palette index per cell on a log scale; bandwidth inverted so green is always good."""
    off = ~is_self & np.isfinite(values) & (values > 0)
    if not off.any():
        idx = np.full(values.shape, -1, dtype=int)
        idx[is_self] = -2
        return idx, math.nan, math.nan
    lo, hi = float(values[off].min()), float(values[off].max())
    with np.errstate(invalid="ignore", divide="ignore"):
        t = (np.log(values) - math.log(lo)) / max(math.log(hi) - math.log(lo), 1e-12)
    if metric == "beta":
        t = 1.0 - t
    t = np.where(off, t, 0.0)
    idx = np.clip(t * (len(PALETTE) - 1) + 0.5, 0, len(PALETTE) - 1).astype(int)
    idx = np.where(off, idx, -1)
    idx[is_self] = -2
    return idx, lo, hi


def estimated_mask(fabric: Fabric, key: str = "estimated") -> np.ndarray:
    """True where the fabric's ``estimated`` extra marks a pair as filled from labels
    (``key="inferred"``: inferred by a sampled sweep)."""
    raw = fabric.extras.get(key)
    n = fabric.n
    if not isinstance(raw, list) or len(raw) != n:
        return np.zeros((n, n), dtype=bool)
    try:
        return np.array([[bool(x) for x in row] for row in raw], dtype=bool).reshape(n, n)
    except (TypeError, ValueError):
        return np.zeros((n, n), dtype=bool)


def fit_layout(n_blocks: int, width: int, height: int) -> int:
    """Largest cell size (1..16) that fits ``n_blocks`` in ``width`` x ``height``; 0 if none."""
    for cell in (16, 14, 12, 10, 8, 6, 4, 3, 2, 1):  # large cells even: whole lines
        if n_blocks * cell <= width and math.ceil(n_blocks * cell / 2) <= height:
            return cell
    return 0


def build_layout(
    fabric: Fabric, workload: Workload, metric: str, devices: tuple[Device, ...], width: int, height: int,
    cell: int = 0,
) -> HeatmapLayout:
    """Choose the finest level that fits and compute its block values and colours.

    ``cell`` > 0 (zoomed in): one block per device at that cell size, larger than the
    space if need be (the widget then shows a window of it and pans).
    """
    labels = fabric.labels
    order = row_order(devices, labels)
    m = metric_matrix(fabric, workload, metric)
    zoomed = cell > 0
    if zoomed:
        level = "device"
        blocks, names = _blocks(order, devices, labels, level)
    else:
        for level in LEVELS:
            blocks, names = _blocks(order, devices, labels, level)
            cell = fit_layout(len(blocks), width, height)
            if cell or level == LEVELS[-1]:
                break
    cell = max(cell, 1)
    if level == "device":
        values = m[np.ix_(order, order)].astype(float)
        is_self = np.eye(len(order), dtype=bool)
    else:
        values = block_means(m, blocks)
        # a block of one device has no pair inside it: its own cell is self, not unmeasured
        # (a region of one device showed the unmeasured glyph)
        is_self = np.diag([len(b) == 1 for b in blocks]).astype(bool)
    colour, lo, hi = colour_index(values, metric, is_self)
    if level == "device":
        estimated = estimated_mask(fabric)[np.ix_(order, order)]
        colour = np.where(estimated & (colour >= 0), colour + ESTIMATED_OFFSET, colour)
        inferred = estimated_mask(fabric, "inferred")[np.ix_(order, order)]
        colour = np.where(inferred & (colour >= 0) & (colour < ESTIMATED_OFFSET), colour + INFERRED_OFFSET, colour)
    groups: list[tuple[str, int, int]] = []
    for b, rows in enumerate(blocks):
        g = group_key(devices[rows[0]], labels[rows[0]])
        if groups and groups[-1][0] == g:
            groups[-1] = (g, groups[-1][1], groups[-1][2] + 1)
        else:
            groups.append((g, b, 1))
    cell_h = cell
    if not zoomed:  # fill the width too: cells up to three times wider than high
        cell = min(max(cell, width // len(blocks)), 3 * cell, 16)
    return HeatmapLayout(level, blocks, names, groups, values, colour, cell, lo, hi, cell_h)


#: + and - share one footer entry.
ZOOM = Binding.Group("Zoom")


class Heatmap(Widget, can_focus=True):
    """GPU x GPU heatmap with a cell cursor and a crosshair. Set data with :meth:`set_data`.

    At zoom 0 the map fills the widget (cells as large as fit, aggregated when even one
    character per device does not fit). Zooming in (``+``) draws one block per device at
    a fixed cell size and shows a window of the map that follows the cursor (and pans
    with shift+arrows); from 6 characters a cell prints its value.
    """

    DEFAULT_CSS = """
    Heatmap { height: 1fr; width: 1fr; min-height: 6; }
    """
    BINDINGS = [
        Binding("up,k", "move(-1, 0)", "Up", show=False),
        Binding("down,j", "move(1, 0)", "Down", show=False),
        Binding("left,h", "move(0, -1)", "Left", show=False),
        Binding("right,l", "move(0, 1)", "Right", show=False),
        Binding("plus,equals_sign", "zoom(1)", "Zoom in", key_display="+", group=ZOOM),
        Binding("minus", "zoom(-1)", "Zoom out", key_display="-", group=ZOOM),
        Binding("0", "zoom(0)", "Fit", show=False),
        Binding("shift+up,K", "pan(-1, 0)", "Pan up", show=False),
        Binding("shift+down,J", "pan(1, 0)", "Pan down", show=False),
        Binding("shift+left,H", "pan(0, -1)", "Pan left", show=False),
        Binding("shift+right,L", "pan(0, 1)", "Pan right", show=False),
    ]

    metric: reactive[str] = reactive("alpha")
    """Which quantity is drawn: 'alpha', 'beta' or 'transfer'."""

    cursor: reactive[tuple[int, int]] = reactive((0, 0))
    """Cursor cell (row block, column block) in display order at the current level."""

    zoom: reactive[int] = reactive(0)
    """Index into ZOOM_CELLS: 0 fits the space, higher draws each device larger."""

    palette: reactive[str] = reactive("viridis")
    """Name of the colour scale in PALETTES."""

    class CursorMoved(Message):
        """The cursor moved, or what is under it changed."""

        def __init__(self, heatmap: "Heatmap") -> None:
            super().__init__()
            self.heatmap = heatmap

        @property
        def control(self) -> "Heatmap":
            return self.heatmap

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.fabric: Fabric | None = None
        self.workload: Workload | None = None
        self.devices: tuple[Device, ...] = ()
        self.layout_: HeatmapLayout | None = None
        self.view: tuple[int, int] = (0, 0)
        self._styles: dict[tuple[int, int], Style] = {}
        self._colours: dict[int, str | None] = {}

    # -- data --------------------------------------------------------------------
    def set_data(self, fabric: Fabric | None, workload: Workload, devices: tuple[Device, ...]) -> None:
        """Show ``fabric`` (arrays may be filled in later: call again to redraw)."""
        self.fabric, self.workload, self.devices = fabric, workload, devices
        self._relayout()

    def watch_metric(self) -> None:
        self._relayout()

    def watch_zoom(self) -> None:
        self._relayout()

    def watch_palette(self) -> None:
        self._styles.clear()
        self._colours.clear()
        self.refresh()
        self.post_message(self.CursorMoved(self))

    def on_resize(self) -> None:
        self._relayout()

    @property
    def label_width(self) -> int:
        """Columns left of the map: the longest group name (at most 14), a space, ▶."""
        if self.fabric is None:
            return 0
        names = (group_key(d, lab) for d, lab in zip(self.devices, self.fabric.labels))
        return min(14, max((cell_len(g) for g in names), default=0)) + 2  # screen cells: 東京 takes 4

    def _space(self) -> tuple[int, int]:
        return max(self.size.width - self.label_width, 1), max(self.size.height - HEADER_LINES, 1)

    def _relayout(self) -> None:
        if self.fabric is None or self.workload is None or not self.size.width:
            self.layout_ = None
            self.refresh()
            return
        # The cursor keeps its pair: remember the devices under it, find them again.
        old = self.layout_
        held = None
        if old is not None and old.k:
            r, c = self.cursor
            if r < old.k and c < old.k:
                held = (int(old.blocks[r][0]), int(old.blocks[c][0]))
        width, height = self._space()
        self.layout_ = build_layout(self.fabric, self.workload, self.metric, self.devices, width, height,
                                    cell=ZOOM_CELLS[self.zoom])
        k = self.layout_.k
        r, c = self.cursor
        if held is not None:
            where = {int(i): b for b, rows in enumerate(self.layout_.blocks) for i in rows}
            r, c = where.get(held[0], r), where.get(held[1], c)
        self.cursor = (min(r, k - 1), min(c, k - 1))
        self._follow()
        self.refresh()
        self.post_message(self.CursorMoved(self))

    def visible(self) -> tuple[int, int]:
        """Blocks that fit: (rows, columns)."""
        lay = self.layout_
        if lay is None:
            return 0, 0
        width, height = self._space()
        return max(min(lay.k, (2 * height) // lay.cell_h), 1), max(min(lay.k, width // lay.cell), 1)

    def _follow(self) -> None:
        """Move the window so that the cursor is inside it."""
        nr, nc = self.visible()
        if self.layout_ is None:
            return
        k = self.layout_.k
        (r, c), (vr, vc) = self.cursor, self.view
        vr = min(max(vr, r - nr + 1), r)
        vc = min(max(vc, c - nc + 1), c)
        self.view = (max(min(vr, k - nr), 0), max(min(vc, k - nc), 0))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.layout_ is None:
            return 1
        return HEADER_LINES + math.ceil(self.layout_.k * self.layout_.cell_h / 2)

    # -- cursor, zoom, pan ------------------------------------------------------------
    def action_move(self, dr: int, dc: int) -> None:
        if self.layout_ is None:
            return
        k = self.layout_.k
        r, c = self.cursor
        self.cursor = (min(max(r + dr, 0), k - 1), min(max(c + dc, 0), k - 1))

    def action_zoom(self, step: int) -> None:
        """+1 / -1 a zoom step; 0 back to fitting the space."""
        if step == 0 or self.layout_ is None:
            self.zoom = 0
            return
        if step > 0 and self.zoom == 0:
            # From the fitted map to the first step that shows more: one block per device,
            # larger than now.
            lay = self.layout_
            current = lay.cell if lay.level == "device" else 0
            bigger = [z for z in range(1, len(ZOOM_CELLS)) if ZOOM_CELLS[z] > current]
            self.zoom = bigger[0] if bigger else len(ZOOM_CELLS) - 1
            return
        self.zoom = min(max(self.zoom + step, 0), len(ZOOM_CELLS) - 1)

    def action_pan(self, dr: int, dc: int) -> None:
        """Move the window (and the cursor with it) by half a window."""
        nr, nc = self.visible()
        self.action_move(dr * max(nr // 2, 1), dc * max(nc // 2, 1))

    def watch_cursor(self) -> None:
        self._follow()
        self.refresh()
        self.post_message(self.CursorMoved(self))

    def _cell_at(self, event: MouseEvent) -> tuple[int, int] | None:
        """The (row, column) block under the mouse, or None off the map."""
        lay = self.layout_
        offset = event.get_content_offset(self) if lay is not None else None  # inside padding
        if offset is None:
            return None
        x, y = offset.x - self.label_width, offset.y - HEADER_LINES
        if x < 0 or y < 0:
            return None
        r, c = self.view[0] + (2 * y) // lay.cell_h, self.view[1] + x // lay.cell
        return (r, c) if r < lay.k and c < lay.k else None

    def on_click(self, event: Click) -> None:
        cell = self._cell_at(event)
        if cell is not None:
            self.cursor = cell

    def on_mouse_move(self, event: MouseMove) -> None:
        """Hovering a cell names its pair in full (the columns have room for a few letters)."""
        cell = self._cell_at(event)
        if cell is None:
            self.tooltip = None
            return
        lay = self.layout_
        r, c = cell
        names = [self.devices[int(lay.blocks[b][0])].name if lay.level == "device" else lay.names[b] for b in (r, c)]
        value = cell_value(float(lay.values[r, c]))
        self.tooltip = f"{names[0]} -> {names[1]}" + (f": {value}" if value else "")

    def cursor_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Fabric rows under the cursor: (sending rows, receiving rows)."""
        assert self.layout_ is not None
        r, c = self.cursor
        return self.layout_.blocks[r], self.layout_.blocks[c]

    # -- drawing -----------------------------------------------------------------
    def colour(self, index: int) -> str | None:
        """The colour of a cell index (palette, estimated, unmeasured, self, cursor, crosshair)."""
        found = self._colours.get(index, "")
        if found != "":
            return found
        palette = PALETTES.get(self.palette, PALETTE)
        if index >= CROSS_OFFSET // 2:  # the crosshair: the same colour, lightened
            base = self.colour(index - CROSS_OFFSET)
            found = None if base is None else blend(base, "#ffffff", 0.3)
        elif index >= INFERRED_OFFSET:
            found = darkened(palette)[index - INFERRED_OFFSET]
        elif index >= ESTIMATED_OFFSET:
            found = faded(palette)[index - ESTIMATED_OFFSET]
        elif index >= 0:
            found = palette[index]
        else:
            found = {-1: UNMEASURED, -2: SELF, -4: CURSOR}.get(index)
        self._colours[index] = found
        return found

    def _style(self, top: int, bottom: int) -> Style:
        key = (top, bottom)
        style = self._styles.get(key)
        if style is None:
            style = Style(color=self.colour(top), bgcolor=self.colour(bottom))
            self._styles[key] = style
        return style

    def render_line(self, y: int) -> Strip:
        # Line API strips carry no widget style of their own: lay the widget's colours under.
        return self._line(y).extend_cell_length(self.size.width).crop(0, self.size.width).apply_style(self.rich_style)

    def _row_indices(self, r: int, cols: range) -> np.ndarray:
        """Colour indices of block row ``r`` over ``cols``, with cursor and crosshair."""
        lay = self.layout_
        if r >= lay.k:
            return np.full(len(cols), -3)
        row = lay.colour[r, cols.start:cols.stop].copy()
        cr, cc = self.cursor
        if r == cr:
            row += CROSS_OFFSET
        if cols.start <= cc < cols.stop:
            row[cc - cols.start] = -4 if r == cr else row[cc - cols.start] + CROSS_OFFSET
        return row

    def _line(self, y: int) -> Strip:
        lay = self.layout_
        if lay is None:
            return Strip([Segment("no fabric yet: run a sweep from the fleet" if y == 0 else "")])
        gutter = self.label_width
        nr, nc = self.visible()
        vr, vc = self.view
        cols = range(vc, min(vc + nc, lay.k))
        if y < HEADER_LINES:
            return Strip(self._header(y, gutter, lay, cols))
        h0 = 2 * (y - HEADER_LINES)
        r0, r1 = vr + h0 // lay.cell_h, vr + (h0 + 1) // lay.cell_h
        if r0 >= min(vr + nr, lay.k):
            return Strip([])
        if r1 >= vr + nr:
            r1 = lay.k  # past the window: draw the lower half empty
        segments = [self._gutter_segment(y - HEADER_LINES, r0, r1, gutter, lay)]
        top = self._row_indices(r0, cols)
        if r0 == r1:  # a cell at least one line high: glyphs and values are possible
            in_block = h0 // 2 - ((r0 - vr) * lay.cell_h) // 2
            middle = lay.cell_h % 2 == 0 and in_block == max(lay.cell_h // 2 - 1, 0) // 2  # odd heights straddle lines
            segments.extend(self._full_line(r0, top, cols, middle))
            return Strip(segments)
        bottom = self._row_indices(r1, cols)
        pairs = np.stack([top, bottom], axis=1)
        change = np.flatnonzero(np.any(pairs[1:] != pairs[:-1], axis=1)) + 1
        starts = np.concatenate([[0], change])
        ends = np.concatenate([change, [len(cols)]])
        for s, e in zip(starts.tolist(), ends.tolist()):
            t, b = int(top[s]), int(bottom[s])
            if _inferred(t) and (_inferred(b) or b == -3):
                # Both halves inferred: the shade glyph, normal colour under the darker one.
                under = b - INFERRED_OFFSET if _inferred(b) else b
                segments.append(Segment(INFERRED_GLYPH * ((e - s) * lay.cell), self._style(t, under)))
            elif t == -1 and b in (-1, -3):  # both halves unmeasured: the glyph says so
                segments.append(Segment(UNMEASURED_GLYPH * ((e - s) * lay.cell), self._style(-1, -2)))
            elif _estimated(t) and (_estimated(b) or b == -3):  # both halves estimated
                segments.append(Segment(ESTIMATED_GLYPH * ((e - s) * lay.cell), self._style(-2, t)))
            else:
                segments.append(Segment("▀" * ((e - s) * lay.cell), self._style(t, b)))
        return Strip(segments)

    def _full_line(self, r: int, indices: np.ndarray, cols: range, middle: bool) -> list[Segment]:
        """One line inside a block row: glyphs for unmeasured and estimated, values when wide."""
        lay = self.layout_
        out = []
        for c, index in zip(cols, indices.tolist()):
            base = index - CROSS_OFFSET if index >= CROSS_OFFSET // 2 else index
            bg = self.colour(index)
            if base == -1:
                out.append(Segment(UNMEASURED_GLYPH * lay.cell, Style(color=bg, bgcolor=self.colour(-2))))
                continue
            under = int(lay.colour[r, c]) if index == -4 else base  # the cursor's cell shows its value too
            text = cell_value(float(lay.values[r, c])) if middle and lay.cell >= VALUE_CELL and under >= 0 else ""
            if text:
                dark = _luminance(bg) < 0.45
                out.append(Segment(text.center(lay.cell), Style(color="#ffffff" if dark else "#000000", bgcolor=bg, bold=True)))
            elif ESTIMATED_OFFSET <= base < INFERRED_OFFSET:
                out.append(Segment(ESTIMATED_GLYPH * lay.cell, Style(color=self.colour(-2), bgcolor=bg)))
            elif INFERRED_OFFSET <= base < CROSS_OFFSET // 2:
                out.append(Segment(INFERRED_GLYPH * lay.cell, Style(color=self.colour(base - INFERRED_OFFSET), bgcolor=bg)))
            else:
                out.append(Segment(" " * lay.cell, Style(bgcolor=bg)))
        return out

    def _gutter_segment(self, line: int, r0: int, r1: int, gutter: int, lay: HeatmapLayout) -> Segment:
        """The group name on the line where the group (or the window) starts; ▶ on the cursor row."""
        vr = self.view[0]
        starting = [g for g, first, count in lay.groups
                    if max(first, vr) < first + count and ((max(first, vr) - vr) * lay.cell_h) // 2 == line]
        # groups too small for a line of their own: the first, and how many more start here
        name = starting[0] if starting else ""
        if len(starting) > 1:
            more = f"+{len(starting) - 1}"
            keep = max(gutter - 2 - len(more) - 1, 1)
            name = f"{set_cell_size(name, min(cell_len(name), keep))} {more}"
        if lay.level == "device" and lay.cell_h >= 4 and r0 == r1 and not name:
            # Zoomed in: each row is tall enough to carry its device's name.
            in_block = line - ((r0 - vr) * lay.cell_h) // 2
            if in_block == 1:
                name = self.devices[int(lay.blocks[r0][0])].name
        marker = "▶" if self.cursor[0] in (r0, r1) else " "
        # cropped and padded by screen cells, not characters: wide and combining characters
        # kept the map's columns from lining up
        return Segment(f"{set_cell_size(name, gutter - 2)} {marker}", Style(bold=bool(name)))

    def _header(self, y: int, gutter: int, lay: HeatmapLayout, cols: range) -> list[Segment]:
        line = [" "] * (len(cols) * lay.cell)
        if y == 0:
            for g, first, count in lay.groups:
                start, stop = max(first, cols.start), min(first + count, cols.stop)
                if start >= stop:
                    continue
                span = (stop - start) * lay.cell
                x0 = (start - cols.start) * lay.cell
                _place(line, x0, g, min(max(span - 1, 1), len(line) - x0))
        elif cols.start <= self.cursor[1] < cols.stop:
            x = (self.cursor[1] - cols.start) * lay.cell
            line[x: x + lay.cell] = "▼" * lay.cell if lay.cell <= 2 else list(("▼" * lay.cell))
        return [Segment(" " * gutter), Segment("".join(line), Style(bold=y == 0))]


def _place(line: list[str], x0: int, text: str, room: int) -> None:
    """Write ``text`` into ``line`` (one screen cell a slot) from slot ``x0``, in at most
    ``room`` cells: a wide character fills two slots (the second left empty), a combining
    mark joins the slot before it; what does not fit is left out. O(len(text))."""
    x = x0
    for ch in text:
        w = cell_len(ch)
        if w == 0:
            if x > x0:
                line[x - 1] += ch
            continue
        if x + w > x0 + room:
            break
        line[x] = ch
        if w == 2:
            line[x + 1] = ""
        x += w


def _estimated(index: int) -> bool:
    """A colour index of an estimated pair (not the cursor's crosshair of one)."""
    return ESTIMATED_OFFSET <= index < INFERRED_OFFSET


def _inferred(index: int) -> bool:
    """A colour index of an inferred pair (not the cursor's crosshair of one)."""
    return INFERRED_OFFSET <= index < CROSS_OFFSET // 2


def _luminance(colour: str | None) -> float:
    if not colour or not colour.startswith("#"):
        return 0.0
    r, g, b = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b
