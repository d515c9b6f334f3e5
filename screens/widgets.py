"""Widgets shared by several screens: rank-map helpers and the stage-group locality list."""

from __future__ import annotations

import numpy as np
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.widgets import Footer, Static

from screens.adapters import locality_words
from solver.fabric import Device

#: What every screen says of a solution whose fabric or labels changed since it was solved.
STALE_NOTE = "STALE: labels or fabric changed since this solution"

#: Colours for regions (by first appearance) in grids and lists.
REGION_COLOURS = (
    "#5fafff", "#ffaf5f", "#87d75f", "#ff5f87", "#af87ff", "#5fd7d7", "#d7d75f", "#d787af",
    "#87afaf", "#d7af87", "#afd7ff", "#ffd7af",
)


def warning_style(app) -> str:
    """Bold warning text in the theme's colour for text (plain yellow is unreadable on a
    light theme)."""
    return "bold " + app.get_css_variables().get("text-warning", "yellow")


def region_colours(devices: tuple[Device, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for d in devices:
        key = d.region or "unlabelled"
        if key not in out:
            out[key] = REGION_COLOURS[len(out) % len(REGION_COLOURS)]
    return out


def stage_groups(rank_map: np.ndarray, d_pp: int) -> list[list[int]]:
    """Rows in each stage's data-parallel group (rank = replica * D_PP + stage)."""
    groups: list[list[int]] = [[] for _ in range(d_pp)]
    for row in np.argsort(rank_map, kind="stable"):
        groups[int(rank_map[row]) % d_pp].append(int(row))
    return groups


def grid_rows(rank_map: np.ndarray, d_pp: int, d_dp: int) -> np.ndarray:
    """(D_DP, D_PP) rows: grid[replica, stage] is the fabric row holding that rank."""
    grid = np.full((d_dp, d_pp), -1, dtype=int)
    for row, rank in enumerate(rank_map.tolist()):
        grid[rank // d_pp, rank % d_pp] = row
    return grid


class StageLocality(Static):
    """Each stage group's locality in words, for the current labels."""

    DEFAULT_CSS = "StageLocality { height: auto; }"

    def show(self, rank_map: np.ndarray | None, d_pp: int, devices: tuple[Device, ...], stale: bool) -> None:
        if rank_map is None or not devices:
            self.update("No solution yet.")
            return
        text = Text()
        if stale:
            text.append(f"{STALE_NOTE}; solve again.\n", style=warning_style(self.app))
        for s, rows in enumerate(stage_groups(rank_map, d_pp)):
            words = locality_words(devices, rows)
            text.append(f"stage {s}: ", style="bold")
            text.append(f"{words}\n")
        self.update(text)


#: Advice code -> the console's way to act on it (shown after the message).
ADVICE_KEYS = {"poor-device": "x on the Rank map: leave it out"}


def advice_text(items: list[dict], keys: dict[str, str] | None = None) -> Text:
    """geoconsole.advice items (JSON form), one line each: warnings yellow, infos bold."""
    text = Text()
    for k, a in enumerate(items):
        if k:
            text.append("\n")
        text.append(f"{a['severity']} {a['code']}: ", style="bold yellow" if a["severity"] == "warning" else "bold")
        text.append(a["message"])
        hint = (keys or ADVICE_KEYS).get(a["code"])
        if hint:
            text.append(f" ({hint})", style="dim")
    return text


class ConsoleFooter(Footer):
    """The key footer, made to fit an 80-column terminal: below COMPACT_BELOW columns
    compact (one space between keys) and without the command-palette hint (ctrl+p still
    opens it); below BARE_BELOW also without the keys every screen has (NARROW_HIDDEN:
    save and quit; they still work, and ? lists them with every other key)."""

    DEFAULT_CSS = """
    ConsoleFooter.-compact {
        FooterLabel { margin: 0 1 0 0; }
        FooterKey.-grouped { margin: 0 1 0 0; }
    }
    """
    COMPACT_BELOW = 120
    BARE_BELOW = 100
    NARROW_HIDDEN = ("save", "quit")
    _layout: tuple[bool, bool] | None = None  #: (compact, without NARROW_HIDDEN) as last laid out

    def compose(self) -> ComposeResult:
        bare = 0 < self.size.width < self.BARE_BELOW
        for widget in super().compose():
            if not (bare and getattr(widget, "action", None) in self.NARROW_HIDDEN):  # a FooterKey's
                yield widget

    def on_resize(self, event: events.Resize) -> None:
        narrow = event.size.width < self.COMPACT_BELOW
        bare = event.size.width < self.BARE_BELOW
        if (narrow, bare) != self._layout:  # the palette hint is drawn only by a recompose
            self._layout = (narrow, bare)
            self.compact = narrow
            self.show_command_palette = not narrow
            self.refresh(recompose=True)
