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
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import Click
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
#: Good (green) to bad (red): ColorBrewer RdYlGn, reversed.
PALETTE = (
    "#1a9850", "#66bd63", "#a6d96a", "#d9ef8b", "#fee08b", "#fdae61", "#f46d43", "#d73027", "#a50026",
)
#: The same scale, faded: pairs estimated from labels rather than measured.
ESTIMATED_PALETTE = tuple(
    "#%02x%02x%02x" % tuple((int(c[i:i + 2], 16) + 2 * 0x50) // 3 for i in (1, 3, 5)) for c in PALETTE
)
ESTIMATED_OFFSET = 100
#: Pairs a sampled sweep inferred: the same scale, darker, and drawn with the shade
#: glyph where both halves of a character are inferred, so they differ by shape too.
INFERRED_PALETTE = tuple(
    "#%02x%02x%02x" % tuple(int(c[i:i + 2], 16) * 3 // 5 for i in (1, 3, 5)) for c in PALETTE
)
INFERRED_OFFSET = 200
INFERRED_GLYPH = "▒"
UNMEASURED = "#101010"
SELF = "#4e4e4e"
CURSOR = "#ffffff"
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
    cell: int  # cell size: characters wide, half-lines high
    lo: float
    hi: float

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
    """Largest cell size (1..4) that fits ``n_blocks`` in ``width`` x ``height``; 0 if none."""
    for cell in (4, 3, 2, 1):
        if n_blocks * cell <= width and math.ceil(n_blocks * cell / 2) <= height:
            return cell
    return 0


def build_layout(
    fabric: Fabric, workload: Workload, metric: str, devices: tuple[Device, ...], width: int, height: int
) -> HeatmapLayout:
    """Choose the finest level that fits and compute its block values and colours."""
    labels = fabric.labels
    order = row_order(devices, labels)
    m = metric_matrix(fabric, workload, metric)
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
        is_self = np.zeros(values.shape, dtype=bool)
        if level == "host":  # a host's own GPUs talk over its bus: not a fabric link
            is_self = np.array([[a == b and len(blocks[a]) == 1 for b in range(len(blocks))] for a in range(len(blocks))])
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
    return HeatmapLayout(level, blocks, names, groups, values, colour, cell, lo, hi)


class Heatmap(Widget, can_focus=True):
    """GPU x GPU heatmap with a cell cursor. Set data with :meth:`set_data`."""

    DEFAULT_CSS = """
    Heatmap { height: 1fr; width: 1fr; min-height: 6; }
    """
    BINDINGS = [
        Binding("up,k", "move(-1, 0)", "Up", show=False),
        Binding("down,j", "move(1, 0)", "Down", show=False),
        Binding("left,h", "move(0, -1)", "Left", show=False),
        Binding("right,l", "move(0, 1)", "Right", show=False),
    ]

    metric: reactive[str] = reactive("alpha")
    """Which quantity is drawn: 'alpha', 'beta' or 'transfer'."""

    cursor: reactive[tuple[int, int]] = reactive((0, 0))
    """Cursor cell (row block, column block) in display order at the current level."""

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
        self._styles: dict[tuple[int, int], Style] = {}

    # -- data --------------------------------------------------------------------
    def set_data(self, fabric: Fabric | None, workload: Workload, devices: tuple[Device, ...]) -> None:
        """Show ``fabric`` (arrays may be filled in later: call again to redraw)."""
        self.fabric, self.workload, self.devices = fabric, workload, devices
        self._relayout()

    def watch_metric(self) -> None:
        self._relayout()

    def on_resize(self) -> None:
        self._relayout()

    @property
    def label_width(self) -> int:
        """Columns left of the map: the longest group name (at most 14), a space, ▶."""
        if self.fabric is None:
            return 0
        names = (group_key(d, lab) for d, lab in zip(self.devices, self.fabric.labels))
        return min(14, max((len(g) for g in names), default=0)) + 2

    def _relayout(self) -> None:
        if self.fabric is None or self.workload is None or not self.size.width:
            self.layout_ = None
            self.refresh()
            return
        width = max(self.size.width - self.label_width, 1)
        height = max(self.size.height - HEADER_LINES, 1)
        self.layout_ = build_layout(self.fabric, self.workload, self.metric, self.devices, width, height)
        k = self.layout_.k
        r, c = self.cursor
        self.cursor = (min(r, k - 1), min(c, k - 1))
        self.refresh()
        self.post_message(self.CursorMoved(self))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        if self.layout_ is None:
            return 1
        return HEADER_LINES + math.ceil(self.layout_.k * self.layout_.cell / 2)

    # -- cursor ------------------------------------------------------------------
    def action_move(self, dr: int, dc: int) -> None:
        if self.layout_ is None:
            return
        k = self.layout_.k
        r, c = self.cursor
        self.cursor = (min(max(r + dr, 0), k - 1), min(max(c + dc, 0), k - 1))

    def watch_cursor(self) -> None:
        self.refresh()
        self.post_message(self.CursorMoved(self))

    def on_click(self, event: Click) -> None:
        lay = self.layout_
        if lay is None:
            return
        offset = event.get_content_offset(self)  # relative to the content, inside padding
        if offset is None:
            return
        x, y = offset.x - self.label_width, offset.y - HEADER_LINES
        if x < 0 or y < 0:
            return
        r, c = (2 * y) // lay.cell, x // lay.cell
        if r < lay.k and c < lay.k:
            self.cursor = (r, c)

    def cursor_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Fabric rows under the cursor: (sending rows, receiving rows)."""
        assert self.layout_ is not None
        r, c = self.cursor
        return self.layout_.blocks[r], self.layout_.blocks[c]

    # -- drawing -----------------------------------------------------------------
    def _style(self, top: int, bottom: int) -> Style:
        key = (top, bottom)
        style = self._styles.get(key)
        if style is None:
            style = Style(color=_colour(top), bgcolor=_colour(bottom))
            self._styles[key] = style
        return style

    def render_line(self, y: int) -> Strip:
        # Line API strips carry no widget style of their own: lay the widget's colours under.
        return self._line(y).extend_cell_length(self.size.width).crop(0, self.size.width).apply_style(self.rich_style)

    def _line(self, y: int) -> Strip:
        lay = self.layout_
        if lay is None:
            return Strip([Segment("no fabric yet: run a sweep from the fleet" if y == 0 else "")])
        gutter = self.label_width
        if y < HEADER_LINES:
            return Strip(self._header(y, gutter, lay))
        h0 = 2 * (y - HEADER_LINES)
        r0, r1 = h0 // lay.cell, (h0 + 1) // lay.cell
        if r0 >= lay.k:
            return Strip([])
        segments = [self._gutter_segment(y - HEADER_LINES, r0, r1, gutter, lay)]
        top = lay.colour[r0].copy()
        bottom = lay.colour[r1].copy() if r1 < lay.k else np.full(lay.k, -3)
        cr, cc = self.cursor
        if cr == r0:
            top[cc] = -4
        if cr == r1:
            bottom[cc] = -4
        pairs = np.stack([top, bottom], axis=1)
        change = np.flatnonzero(np.any(pairs[1:] != pairs[:-1], axis=1)) + 1
        starts = np.concatenate([[0], change])
        ends = np.concatenate([change, [lay.k]])
        for s, e in zip(starts.tolist(), ends.tolist()):
            t, b = int(top[s]), int(bottom[s])
            if t >= INFERRED_OFFSET and (b >= INFERRED_OFFSET or b == -3):
                # Both halves inferred: the shade glyph, normal colour under the darker one.
                under = b - INFERRED_OFFSET if b >= INFERRED_OFFSET else b
                segments.append(Segment(INFERRED_GLYPH * ((e - s) * lay.cell), self._style(t, under)))
            else:
                segments.append(Segment("▀" * ((e - s) * lay.cell), self._style(t, b)))
        return Strip(segments)

    def _gutter_segment(self, line: int, r0: int, r1: int, gutter: int, lay: HeatmapLayout) -> Segment:
        """The group name on the line where the group starts; ▶ on the cursor row's lines."""
        name = ""
        for g, first, _count in lay.groups:
            if (first * lay.cell) // 2 == line:
                name = g
        marker = "▶" if self.cursor[0] in (r0, r1) else " "
        return Segment(f"{name[: gutter - 2]:<{gutter - 2}} {marker}", Style(bold=bool(name)))

    def _header(self, y: int, gutter: int, lay: HeatmapLayout) -> list[Segment]:
        line = [" "] * (lay.k * lay.cell)
        if y == 0:
            for g, first, count in lay.groups:
                span = count * lay.cell
                text = g[: max(span - 1, 1)]
                for i, ch in enumerate(text):
                    if first * lay.cell + i < len(line):
                        line[first * lay.cell + i] = ch
        else:
            line[self.cursor[1] * lay.cell] = "▼"
        return [Segment(" " * gutter), Segment("".join(line), Style(bold=y == 0))]


def _colour(index: int) -> str | None:
    if index >= INFERRED_OFFSET:
        return INFERRED_PALETTE[index - INFERRED_OFFSET]
    if index >= ESTIMATED_OFFSET:
        return ESTIMATED_PALETTE[index - ESTIMATED_OFFSET]
    if index >= 0:
        return PALETTE[index]
    return {-1: UNMEASURED, -2: SELF, -4: CURSOR}.get(index)
