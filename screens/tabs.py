"""The top line of every screen: the screens by key (the current one lit), the session name.

Replaces Textual's ``Header``: one line, and it tells the operator which digit leads
where. Clicking a tab switches to it.
"""

from __future__ import annotations

from rich.text import Text
from textual.events import Click
from textual.widgets import Static

#: (mode, key, title) of each screen, in the order of the flow.
SCREENS = (
    ("fleet", "1", "Fleet"),
    ("fabric", "2", "Fabric"),
    ("labels", "3", "Labels"),
    ("solve", "4", "Solve"),
    ("rankmap", "5", "Rank map"),
    ("launch", "6", "Launch"),
)


class ScreenTabs(Static):
    """``1 Fleet  2 Fabric  ...`` with the screen it sits on highlighted."""

    DEFAULT_CSS = """
    ScreenTabs { height: 1; width: 1fr; background: $panel; color: $foreground; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.mode = ""
        self._spans: list[tuple[int, int, str]] = []

    def on_mount(self) -> None:
        # The mode whose screen this bar sits on (the app maps modes to screen classes).
        modes = getattr(self.app, "MODES", {})
        self.mode = next((m for m, cls in modes.items() if isinstance(cls, type) and isinstance(self.screen, cls)), "")
        self.watch(self.app, "sub_title", self._redraw, init=True)

    def _redraw(self, _subtitle: str = "") -> None:
        text, self._spans = Text(no_wrap=True, overflow="ellipsis"), []
        for mode, key, title in SCREENS:
            start = len(text)
            current = mode == self.mode
            text.append(f" {key} ", style="bold reverse" if current else "bold")
            text.append(f"{title} ", style="bold reverse" if current else "")
            self._spans.append((start, len(text), mode))
            text.append(" ")
        name = getattr(self.app, "sub_title", "")
        text.append("│ ", style="dim")
        text.append(name, style="dim")
        self.update(text)

    def on_click(self, event: Click) -> None:
        for start, end, mode in self._spans:
            if start <= event.x < end:
                self.app.switch_mode(mode)
