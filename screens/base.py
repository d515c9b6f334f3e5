"""Behaviour every console screen shares: reading the app's session and redrawing on change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen
from textual.worker import Worker, WorkerState

if TYPE_CHECKING:
    from geoconsole.session import Session


class ConsoleScreen(Screen):
    """A screen of the console. Subclasses implement :meth:`show_session`."""

    def on_mount(self) -> None:
        # The app bumps `revision` after every session change; each screen redraws itself.
        self.watch(self.app, "revision", self._on_revision, init=True)
        # Colours taken from the theme (warnings, the heatmap's cursor) follow a theme switch.
        self.watch(self.app, "theme", self._on_revision, init=False)

    @property
    def session(self) -> "Session":
        return self.app.session  # type: ignore[attr-defined]

    def _on_revision(self, _revision: int) -> None:
        self.show_session()

    def show_session(self) -> None:  # pragma: no cover - overridden
        """Redraw from ``self.session``."""

    def worker_failed(self) -> None:
        """Reset the screen after one of its workers failed (override where needed)."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place worker failures surface: a notification naming the work.

        Worker.StateChanged does not bubble, so the handler lives on the base of every
        screen (all workers are started by screens) rather than on the app.
        """
        if event.state != WorkerState.ERROR:
            return
        self.worker_failed()
        error = " ".join(str(event.worker.error).split())
        self.app.notify(
            f"{event.worker.description or event.worker.name}: {error}",
            title="failed", severity="error", timeout=10,
        )
