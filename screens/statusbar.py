"""The status bar at the foot of every screen: what runs in the background, what is stale,
what is unsaved.

Screens report their background work with :class:`~screens.messages.Activity` (messages
up); the app keeps the latest line of each and bumps ``activity_rev``; every screen's bar
redraws from the app and the session (attributes down).
"""

from __future__ import annotations

import math

from rich.text import Text
from textual.widgets import Static

#: Order of the background work in the bar.
ACTIVITY_ORDER = ("solve", "sweep", "hosts")
SEPARATOR = " │ "


def duration(s: float) -> str:
    """A duration as an operator reads it: seconds, minutes, hours, then days (a 10^7 s
    limit read 'ETA 166667 min')."""
    for unit, size, below in (("s", 1, 600), ("min", 60, 180 * 60), ("h", 3600, 72 * 3600)):
        if s < below:
            return f"{s / size:.0f} {unit}"
    return f"{s / 86400:.0f} days"


def solve_eta(elapsed: float, nfev: int, time_limit: float | None, budget: int | None) -> float | None:
    """Seconds left: from the time limit, else from the swap budget at the current rate."""
    left = []
    if time_limit is not None:
        left.append(max(time_limit - elapsed, 0.0))
    if budget and nfev > 0:
        left.append(max(elapsed * (budget / nfev - 1.0), 0.0))
    return min(left) if left else None


def solve_running(best: float | None, bound: float | None, elapsed: float, eta: float | None) -> Text:
    """'solving: best 51.50 s, bound 48.10 s, 3 s, ETA 12 s' for the bar."""
    text = Text("solving", style="bold")
    if best is not None and math.isfinite(best):
        text.append(f": best {best:.2f} s")
    if bound is not None:
        text.append(f", bound {bound:.2f} s")
    text.append(f", {duration(elapsed)}")
    text.append(f", ETA {duration(eta)}" if eta is not None else ", no ETA (no limit)")
    return text


class StatusBar(Static):
    """Solve state, sweep progress, hosts, STALE and unsaved changes, on one line."""

    DEFAULT_CSS = """
    StatusBar { height: 1; width: 1fr; background: $panel; color: $foreground; padding: 0 1; }
    """

    def on_mount(self) -> None:
        self.watch(self.app, "activity_rev", self._redraw, init=False)
        self.watch(self.app, "revision", self._redraw, init=True)
        self.watch(self.app, "theme", self._redraw, init=False)

    def _redraw(self, _value: int = 0) -> None:
        self.update(self.line())

    def line(self) -> Text:
        app = self.app
        session = app.session  # type: ignore[attr-defined]
        activity: dict = getattr(app, "activity", {})
        parts: list[Text] = []
        colours = app.get_css_variables()  # the theme's colours: Rich styles know no $names
        warning, accent = colours.get("text-warning", "yellow"), colours.get("text-accent", "cyan")
        if "solve" not in activity and session.current is not None:
            sol = session.current
            if session.is_stale(sol):
                parts.append(Text(f"{sol.name} STALE: solve again", style=f"bold {warning}"))
            else:
                parts.append(Text(f"{sol.name} done: Comm {sol.fun:.2f} s"))
        elif "solve" not in activity:
            parts.append(Text("no solution yet", style="dim"))
        for key in ACTIVITY_ORDER:
            if activity.get(key) is not None:
                value = activity[key]
                parts.append(value if isinstance(value, Text) else Text(str(value)))
        if getattr(app, "dirty", False):
            parts.append(Text("● unsaved changes (ctrl+s)", style=f"bold {accent}"))
        else:
            parts.append(Text("saved" if session.path else "nothing to save", style="dim"))
        return Text(SEPARATOR, style="dim").join(parts)
