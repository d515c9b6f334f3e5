"""Behaviour every console screen shares: reading the app's session and redrawing on change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen

if TYPE_CHECKING:
    from geoconsole.session import Session


class ConsoleScreen(Screen):
    """A screen of the console. Subclasses implement :meth:`show_session`."""

    def on_mount(self) -> None:
        # The app bumps `revision` after every session change; each screen redraws itself.
        self.watch(self.app, "revision", self._on_revision, init=True)

    @property
    def session(self) -> "Session":
        return self.app.session  # type: ignore[attr-defined]

    def _on_revision(self, _revision: int) -> None:
        self.show_session()

    def show_session(self) -> None:  # pragma: no cover - overridden
        """Redraw from ``self.session``."""
