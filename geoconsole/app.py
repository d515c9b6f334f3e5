"""The Textual console: one app, one screen per step of the flow, one session.

``create_app`` is the only way the CLI and the tests build the app, so both run the
same thing. The app holds the :class:`~geoconsole.session.Session` and a ``revision``
counter; screens watch the counter and redraw from the session (attributes down), and
report changes with :class:`~screens.messages.SessionChanged` (messages up).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen
from textual.theme import Theme

from geoconsole.session import Clock, Session, SessionError, demo_session, load_session, utc_now
from screens.dialogs import PathDialog
from screens.fleet import FleetScreen
from screens.heatmap import HeatmapScreen
from screens.help import HelpScreen
from screens.labels import LabelsScreen
from screens.launch import LaunchScreen
from screens.messages import SessionChanged
from screens.rankmap import RankMapScreen
from screens.solve import SolveScreen

DEFAULT_SESSION_FILE = "geoconsole-session.json"

#: The console's theme: dark, blue accents, and the heatmap's red/green kept for data.
THEME = Theme(
    name="geoconsole",
    primary="#5fafff",
    secondary="#87afd7",
    accent="#ffaf5f",
    foreground="#d0d0d0",
    background="#121418",
    surface="#1b1e24",
    panel="#262a33",
    success="#87d75f",
    warning="#ffd75f",
    error="#ff5f5f",
    dark=True,
)

#: (mode, key, title) of each screen, in the order of the flow.
SCREENS = (
    ("fleet", "1", "Fleet"),
    ("fabric", "2", "Fabric"),
    ("labels", "3", "Labels"),
    ("solve", "4", "Solve"),
    ("rankmap", "5", "Rank map"),
    ("launch", "6", "Launch"),
)


class GeoConsoleApp(App[int]):
    """From fleet to reviewed rank map. Build it with :func:`create_app`."""

    TITLE = "geoconsole"
    CSS_PATH = "app.tcss"
    MODES = {
        "fleet": FleetScreen,
        "fabric": HeatmapScreen,
        "labels": LabelsScreen,
        "solve": SolveScreen,
        "rankmap": RankMapScreen,
        "launch": LaunchScreen,
    }
    BINDINGS = [
        *(Binding(key, f"show('{mode}')", title, show=False) for mode, key, title in SCREENS),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("ctrl+s", "save", "Save"),
        Binding("ctrl+o", "load", "Load", show=False),
        Binding("q", "quit", "Quit"),
    ]

    revision: reactive[int] = reactive(0)
    """Bumped after every change to the session; screens redraw when it moves."""

    def __init__(self, session: Session, *, clock: Clock | None = None, start: str = "fabric") -> None:
        super().__init__()
        self.register_theme(THEME)
        self.theme = THEME.name
        self.session = session
        self.clock: Clock = clock or utc_now
        self.start_mode = start

    def on_mount(self) -> None:
        self.sub_title = self.session.name
        self.switch_mode(self.start_mode)

    # -- session -----------------------------------------------------------------
    def on_session_changed(self, message: SessionChanged) -> None:
        self.revision += 1
        self.sub_title = f"{self.session.name} — {message.reason}"

    def replace_session(self, session: Session) -> None:
        self.session = session
        self.post_message(SessionChanged(f"loaded {session.path or session.name}"))

    def action_save(self) -> None:
        path = self.session.path or Path(DEFAULT_SESSION_FILE)
        try:
            written = self.session.save(path)
        except (OSError, ValueError) as exc:  # FileError: a folder, FIFO or device
            self.notify(" ".join(str(exc).split()), severity="error")
            return
        self.notify(f"session saved to {written}")

    def action_load(self) -> None:
        def load(path: str | None) -> None:
            if not path:
                return
            try:
                self.replace_session(load_session(path))
            except SessionError as exc:
                self.notify(str(exc), severity="error", timeout=8)
                return
            self.notify(f"session loaded from {path}")

        self.push_screen(PathDialog("Load session from", str(self.session.path or DEFAULT_SESSION_FILE)), load)

    # -- navigation --------------------------------------------------------------
    def action_show(self, mode: str) -> None:
        self.switch_mode(mode)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for mode, key, title in SCREENS:
            yield SystemCommand(f"Show {title}", f"Switch to the {title} screen ({key})", lambda m=mode: self.action_show(m))
        yield SystemCommand("Save session", "Write the session JSON atomically (ctrl+s)", self.action_save)
        yield SystemCommand("Load session", "Open a saved session (ctrl+o)", self.action_load)
        yield SystemCommand("Help", "Keys of every screen (?)", self.action_help)
        for title, help_text, action in getattr(screen, "COMMANDS_", ()):
            yield SystemCommand(title, help_text, getattr(screen, f"action_{action}"))


def create_app(
    inventory: str | Path | None = None,
    session: str | Path | None = None,
    *,
    demo: str = "worldwide",
    clock: Clock | None = None,
) -> GeoConsoleApp:
    """Build the console: from a saved session, an inventory, or the built-in demo.

    Raises a :class:`~geoconsole.errors.GeoconsoleError` (one-line message) for a bad file.
    """
    start = "fabric"
    if session is not None:
        state = load_session(session)
    elif inventory is not None:
        from screens.fleet import session_for_inventory

        state = session_for_inventory(Path(inventory))
        start = "fleet"
    else:
        state = demo_session(demo)
    return GeoConsoleApp(state, clock=clock, start=start)
