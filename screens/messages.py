"""Messages screens send up to the app ("attributes down, messages up")."""

from __future__ import annotations

from textual.message import Message


class SessionChanged(Message):
    """A screen changed the session (labels, fabric, a new solution); the app redraws all."""

    def __init__(self, reason: str, *, dirty: bool = True) -> None:
        super().__init__()
        self.reason = reason
        #: False for a change that leaves nothing unsaved (a session just loaded).
        self.dirty = dirty


class Activity(Message):
    """Background work changed: ``text`` is its one-line state for the status bar
    (None: the work is over). ``key`` names the work: 'solve', 'sweep', 'hosts'."""

    def __init__(self, key: str, text: object | None) -> None:
        super().__init__()
        self.key, self.text = key, text
