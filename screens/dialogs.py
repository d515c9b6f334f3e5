"""Small modal dialogs reused by several screens: ask for a path, confirm an action."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static


class PathDialog(ModalScreen[str | None]):
    """Ask for a file path; dismisses with the path, or None when cancelled."""

    DEFAULT_CSS = """
    PathDialog { align: center middle; }
    PathDialog > Vertical { width: 70; height: auto; border: round $accent; padding: 0 1; background: $surface; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, title: str, default: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(self.title_text))  # Text: a path's [brackets] are not markup
            yield Input(self.default, id="path")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)


class ConfirmDialog(ModalScreen[bool]):
    """Show ``body`` and ask yes or no; dismisses with True only on yes."""

    DEFAULT_CSS = """
    ConfirmDialog { align: center middle; }
    ConfirmDialog > Vertical { width: 80; height: auto; border: round $warning; padding: 0 1; background: $surface; }
    ConfirmDialog Horizontal { height: auto; align-horizontal: right; }
    """
    BINDINGS = [Binding("escape,n", "answer(False)", "No"), Binding("y", "answer(True)", "Yes")]
    #: A stray Enter answers no: the yes button starts ranks, quits or overwrites.
    AUTO_FOCUS = "#no"

    #: Seconds between two reads of ``refresh`` while the dialog is open.
    REFRESH_S = 0.25

    def __init__(self, title: str, body: str, yes: str = "Yes",
                 refresh: Callable[[], tuple[str, str]] | None = None) -> None:
        """``refresh``: called while the dialog is open, gives the ``(title, body)`` to show
        now (the quit question: a solve that ends meanwhile leaves unsaved work, not
        running work)."""
        super().__init__()
        self.title_text, self.body, self.yes = title, body, yes
        self._refresh_text = refresh

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(Text(self.title_text), id="confirm-title")  # Text: names, paths and commands are not markup
            yield Static(Text(self.body), id="confirm-body")
            with Horizontal():
                yield Button(self.yes, id="yes", variant="warning")
                yield Button("No", id="no")

    def on_mount(self) -> None:
        if self._refresh_text is not None:
            self.set_interval(self.REFRESH_S, self._show_now)

    def _show_now(self) -> None:
        if self.app.screen is not self:  # answered (or covered): the question is no longer read
            return
        title, body = self._refresh_text()
        if (title, body) != (self.title_text, self.body):
            self.title_text, self.body = title, body
            self.query_one("#confirm-title", Label).update(Text(title))
            self.query_one("#confirm-body", Static).update(Text(body))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


def ask_path_then(app, title: str, default: str, write: Callable[[Path], None], *, note: str = "") -> None:
    """Ask for a path (``PathDialog``), then ``write(path)``; an existing file is only
    overwritten after a yes (``ConfirmDialog``, focus on No). ``note`` (a warning such as
    a stale plan) heads the overwrite question and the path prompt."""
    def chosen(text: str | None) -> None:
        if not text:
            return
        from solver.files import names_a_folder

        if names_a_folder(text):  # Path drops the slash: the file it names would be written
            app.notify(f"{text}: ends with '/' (or '/.'), which names a folder; give a file", severity="error")
            return
        path = Path(text).expanduser()
        if path.is_file():
            body = (note + "\n" if note else "") + f"{path} exists; writing replaces what it holds."

            def answered(yes: bool | None) -> None:
                if yes:
                    write(path)

            app.push_screen(ConfirmDialog(f"Overwrite {path.name}?", body, yes="Overwrite"), answered)
            return
        write(path)

    app.push_screen(PathDialog(f"{title}{'  (' + note + ')' if note else ''}", default), chosen)
