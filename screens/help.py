"""The ``?`` help screen, generated from the bindings of the app, its screens and their
widgets, so that it cannot drift from the keys that work."""

from __future__ import annotations

from typing import Iterable

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

#: Key names as an operator reads them.
KEY_NAMES = {
    "question_mark": "?", "left_square_bracket": "[", "right_square_bracket": "]", "escape": "esc",
    "plus": "+", "minus": "-", "slash": "/", "equals_sign": "=", "less_than_sign": "<",
    "greater_than_sign": ">", "full_stop": ".", "comma": ",",
}
#: What the console adds to Textual's own keys everywhere.
EXTRA_GLOBAL = (("ctrl+p", "command palette: every action of every screen by name"),
                ("esc", "leave a text field (then the screen's keys work again)"))


def _as_binding(b: Binding | tuple) -> Binding:
    return b if isinstance(b, Binding) else Binding(*b)


def key_text(binding: Binding) -> str:
    if binding.key_display:
        return binding.key_display
    return " / ".join(KEY_NAMES.get(k.strip(), k.strip()) for k in binding.key.split(","))


def binding_rows(bindings: Iterable[Binding | tuple]) -> list[tuple[str, str]]:
    """(keys, what) per binding; the six screen keys fold into one row."""
    rows: list[tuple[str, str]] = []
    screens: list[str] = []
    for b in map(_as_binding, bindings):
        if b.action.startswith("show("):
            screens.append(b.description.lower())
            continue
        rows.append((key_text(b), b.description or b.action))
    if screens:
        rows.insert(0, (f"1 .. {len(screens)}", "screens: " + ", ".join(screens)))
    return rows


def help_sections(app) -> list[tuple[str, list[tuple[str, str]]]]:
    """('Everywhere', rows), then one section per screen, in the order of the flow."""
    from screens.tabs import SCREENS

    sections = [("Everywhere", [*binding_rows(type(app).BINDINGS), *EXTRA_GLOBAL])]
    for mode, _key, title in SCREENS:
        cls = app.MODES.get(mode)
        if not isinstance(cls, type):
            continue
        bindings = [*getattr(cls, "BINDINGS", ())]
        for widget in getattr(cls, "HELP_WIDGETS", ()):
            bindings.extend(widget.BINDINGS)
        sections.append((title, binding_rows(bindings)))
    return sections


def help_table(app) -> Table:
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for n, (title, rows) in enumerate(help_sections(app)):
        if n:
            table.add_row("", "")
        table.add_row(Text(title, style="bold underline"), "")
        for key, what in rows:
            table.add_row(key, what)
    return table


class HelpScreen(ModalScreen[None]):
    """Keys of every screen; any of escape, ? or q closes it; scrolls on a small terminal."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 76; max-width: 100%; height: auto; max-height: 100%; border: round $accent; padding: 0 1; background: $surface; }
    """
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]
    AUTO_FOCUS = "#help-body"

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Static(Text("geoconsole — keys (scroll: arrows, pgup/pgdn)", style="bold"))
            yield Static(help_table(self.app))

    def help_text(self) -> str:
        """Every key and what it does, as plain text (for tests and the README)."""
        return "\n".join(f"{k}  {w}" for _t, rows in help_sections(self.app) for k, w in rows)
