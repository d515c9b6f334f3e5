"""Messages screens send up to the app ("attributes down, messages up")."""

from __future__ import annotations

from textual.message import Message


class SessionChanged(Message):
    """A screen changed the session (labels, fabric, a new solution); the app redraws all."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason
