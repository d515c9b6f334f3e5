"""The ``?`` help screen: what each screen is for and its keys."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

GLOBAL_KEYS = (
    ("1 .. 6", "fleet, fabric, labels, solve, rank map, launch"),
    ("?", "this help"),
    ("ctrl+p", "command palette: every action by name"),
    ("ctrl+s", "save the session (JSON, written atomically)"),
    ("ctrl+o", "load a session"),
    ("q", "quit"),
)

SCREEN_KEYS = {
    "Fleet": (("c", "connect all hosts"), ("r", "retry the selected host"), ("k", "accept the selected host's new key (after showing its fingerprint)")),
    "Fabric": (("a / b / t", "alpha, beta, transfer time"), ("arrows, hjkl, mouse", "move the cursor"), ("s / x", "start / cancel a sweep")),
    "Labels": (("space", "mark a row (several at once)"), ("h", "mark every GPU of the row's host"), ("enter", "apply the form to the marked rows"), ("u", "unmark all")),
    "Solve": (("enter", "solve with the form's workload"), ("escape", "cancel: keep the best so far"), ("r", "review the result")),
    "Rank map": (("d", "diff with the previous solution"), ("e", "export JSON and rank_map=(...)"), ("o", "load a rank map to compare")),
    "Launch": (("m", "torchrun or env mode"), ("l", "launch on the fleet (after a confirmation)"), ("a", "abort: stop every rank")),
}


def help_table() -> Table:
    table = Table(show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    table.add_row(Text("Everywhere", style="bold underline"), "")
    for key, what in GLOBAL_KEYS:
        table.add_row(key, what)
    for screen, keys in SCREEN_KEYS.items():
        table.add_row("", "")
        table.add_row(Text(screen, style="bold underline"), "")
        for key, what in keys:
            table.add_row(key, what)
    return table


class HelpScreen(ModalScreen[None]):
    """Keys of every screen; any of escape, ? or q closes it."""

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 84; height: auto; max-height: 90%; border: round $accent; padding: 0 1; background: $surface; }
    """
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(Text("geoconsole — keys", style="bold"))
            yield Static(help_table())
