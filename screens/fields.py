"""The console's text field: Escape leaves it, focusing it never selects its text.

Every form of the console uses :class:`Field` instead of a bare ``Input`` so the focus
model is the same everywhere: while a field has focus, keys are typed into it; Escape
gives the focus back to the screen (the footer says so), after which the screen's and
the app's keys work again and a second Escape reaches the screen (on Solve: cancel).
"""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import Input


class Field(Input):
    """An ``Input`` that Escape leaves and that keeps its text unselected on focus."""

    BINDINGS = [Binding("escape", "leave", "Leave field", key_display="esc")]

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("select_on_focus", False)
        super().__init__(*args, **kwargs)

    def action_leave(self) -> None:
        """Give the focus back to the screen: its keys and the app's work again."""
        self.screen.set_focus(None)
