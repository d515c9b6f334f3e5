"""The Textual console: one app, one screen per step of the flow, one session.

``create_app`` is the only way the CLI and the tests build the app, so both run the
same thing. The app holds the :class:`~geoconsole.session.Session` and a ``revision``
counter; screens watch the counter and redraw from the session (attributes down), and
report changes with :class:`~screens.messages.SessionChanged` (messages up).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Iterable

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen
from textual.theme import Theme
from textual.worker import WorkerState

from geoconsole.errors import GeoconsoleError
from geoconsole.session import Clock, Session, demo_session, load_session, utc_now
from screens.dialogs import ConfirmDialog, PathDialog, ask_path_then
from screens.fleet import FleetScreen
from screens.heatmap import HeatmapScreen
from screens.help import HelpScreen
from screens.labels import LabelsScreen
from screens.launch import LaunchScreen
from screens.messages import Activity, SessionChanged
from screens.rankmap import RankMapScreen
from screens.solve import SolveScreen
from screens.tabs import SCREENS

DEFAULT_SESSION_FILE = "geoconsole-session.json"
#: Seconds after start-up before the other screens are built.
PREBUILD_AFTER_S = 0.3
#: Modules the screens import on first use, loaded in a thread after the first frame.
PRELOAD = ("solver.search", "solver.cost", "solver.bounds", "solver.suggest", "geoconsole.solving",
           "geoconsole.prepare", "geoconsole.launch.plan")

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

__all__ = ["SCREENS", "GeoConsoleApp", "create_app"]


#: Worker group -> what quitting does to it (the quit dialog lists the running ones).
BUSY = {
    "solve": "A solve is running: quitting stops it, and its best placement so far is lost.",
    "launch": "A launch is running: quitting stops it and every rank it started "
              "(a batch job already submitted to Slurm keeps running).",
    "sweep": "A fabric sweep or refresh is running: quitting stops it before it is done.",
}


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
        # Most terminals cannot send ctrl+shift+s; F2 is the key that always arrives.
        Binding("f2,ctrl+shift+s", "save_as", "Save as", key_display="F2", show=False),
        Binding("ctrl+o", "load", "Load", show=False),
        Binding("q", "quit", "Quit"),
    ]

    revision: reactive[int] = reactive(0)
    """Bumped after every change to the session; screens redraw when it moves."""

    activity_rev: reactive[int] = reactive(0)
    """Bumped when the background work in :attr:`activity` changes; status bars redraw."""

    dirty: reactive[bool] = reactive(False)
    """The session changed since it was loaded or saved: quit and load ask first."""

    def __init__(self, session: Session, *, clock: Clock | None = None, start: str = "fabric",
                 prebuild: bool = True) -> None:
        super().__init__()
        self.register_theme(THEME)
        self.theme = THEME.name
        self.session = session
        self.clock: Clock = clock or utc_now
        self.start_mode = start
        #: Build the other screens in the background after the first frame (tests that
        #: drive keys from the first instant turn it off: background work makes timing vary).
        self.prebuild_screens = prebuild
        #: The latest status-bar line of each piece of background work ('solve', 'sweep', 'hosts').
        self.activity: dict[str, object] = {}

    def on_mount(self) -> None:
        self.sub_title = self.session.name
        self.switch_mode(self.start_mode)
        if self.prebuild_screens:
            # Later, so that the first frame is on the terminal before the work starts.
            self.set_timer(PREBUILD_AFTER_S, self.prebuild)

    # -- speed: the first frame first, then everything else ahead of time -------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="prebuild", description="load modules")
    def preload_modules(self) -> None:
        """Import what the other screens need (scipy and the solver: about 0.9 s) off the
        event loop, so that neither the first frame nor a key waits for it."""
        import importlib

        for name in PRELOAD:
            importlib.import_module(name)

    async def prebuild(self) -> None:
        """Build every screen ahead of time, after the first frame: a switch then only
        shows a screen that exists. Uses Textual's mode initialisation (``_init_mode``);
        without it screens are built on their first visit, as before."""
        init = getattr(self, "_init_mode", None)
        await self.preload_modules().wait()
        for mode, _key, _title in SCREENS:
            if init is None or not self.is_running:
                return
            if mode not in self._screen_stacks:
                await init(mode)
                # Style it now too, or the first switch restyles the whole app.
                screen = self._screen_stacks[mode][0]
                self.stylesheet.update(screen, animate=False)
                screen._css_update_count = self._css_update_count
                await asyncio.sleep(0)  # keys and refreshes in between

    # -- session -----------------------------------------------------------------
    def on_session_changed(self, message: SessionChanged) -> None:
        self.dirty = message.dirty
        self.revision += 1
        self.sub_title = f"{self.session.name} — {message.reason}"

    def on_activity(self, message: Activity) -> None:
        if message.text is None:
            self.activity.pop(message.key, None)
        else:
            self.activity[message.key] = message.text
        self.activity_rev += 1

    def notify(self, message: str, *, title: str = "", severity: str = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Notifications carry names, paths and typed values: always shown as text, never
        markup, whatever a screen's ``notify`` passes on (a label or a path holding
        ``[/]`` raised MarkupError and stopped the console)."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def replace_session(self, session: Session) -> None:
        self.session = session
        self.post_message(SessionChanged(f"loaded {session.path or session.name}", dirty=False))

    def action_save(self) -> None:
        if self.session.path is None:
            self.action_save_as()
            return
        self._save_to(self.session.path)

    def action_save_as(self) -> None:
        default = str(self.session.path or DEFAULT_SESSION_FILE)
        ask_path_then(self, "Save session as", default, self._save_to)

    def _save_to(self, path: Path) -> None:
        try:
            written = self.session.save(path)
        except (OSError, ValueError) as exc:  # FileError: a folder, FIFO or device
            self.notify(" ".join(str(exc).split()), severity="error")
            return
        self.dirty = False
        self.activity_rev += 1
        self.notify(f"session saved to {written}")

    def running_work(self) -> list[str]:
        """What quitting would stop: one line per running worker group of :data:`BUSY`."""
        live = (WorkerState.PENDING, WorkerState.RUNNING)
        groups = {w.group for w in self.workers if w.state in live}
        return [line for group, line in BUSY.items() if group in groups]

    def _confirm_discard(self, what: str, then, busy: list[str] | None = None) -> None:
        """Run ``then`` now when nothing is unsaved and no ``busy`` work runs, else after
        the operator says yes. The question follows the work while it is open: a solve
        that ends meanwhile turns "stop the running work" into "without saving"."""
        if not self.dirty and not busy:
            then()
            return
        if isinstance(self.screen, ConfirmDialog):
            return
        watch = bool(busy)
        shown = {"dirty": self.dirty, "running": list(busy or [])}  # what the question said last

        def text() -> tuple[str, str]:
            running = self.running_work() if watch else []
            shown["dirty"], shown["running"] = self.dirty, list(running)
            lines = list(running)
            if watch and not running:
                lines.append("The running work has ended.")
            if self.dirty:
                lines.append("The session has changes that are not saved; ctrl+s or F2 (save as) keeps them.")
                title = f"{what} without saving?"
            elif running:
                title = f"{what} and stop the running work?"
            else:
                title = f"{what}?"
            lines.append(f"y: {what.lower()} anyway; n or escape: stay.")
            return title, "\n".join(lines)

        def answered(yes: bool) -> None:
            if not yes:
                return
            now = self.running_work()
            ended = any(line not in now for line in shown["running"])  # said to run, ended since
            if self.dirty and (not shown["dirty"] or ended):  # changed since the question last did
                self._confirm_discard(what, then, self.running_work())
                return
            then()

        title, body = text()
        self.push_screen(ConfirmDialog(title, body, yes=what, refresh=text), answered)

    async def action_quit(self) -> None:
        self._confirm_discard("Quit", self.exit, self.running_work())

    def action_load(self) -> None:
        self._confirm_discard("Load", self._ask_load)

    def _ask_load(self) -> None:
        def load(path: str | None) -> None:
            if not path:
                return
            try:
                self.replace_session(load_session(path))
            except (GeoconsoleError, OSError) as exc:  # SessionError, and any other refusal: never a crash
                self.notify(" ".join(str(exc).split()), severity="error", timeout=8)
                return
            self.notify(f"session loaded from {path}")

        self.push_screen(PathDialog("Load session from", str(self.session.path or DEFAULT_SESSION_FILE)), load)

    # -- navigation --------------------------------------------------------------
    def action_show(self, mode: str) -> None:
        self.switch_mode(mode)

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """Screenshots (the palette's, the screenshot action) go to the session's folder,
        else the working folder: Textual's default, the Downloads folder, is missing on
        most servers ('Failed to save screenshot')."""
        folder = path or (str(Path(self.session.path).resolve().parent) if self.session.path else os.getcwd())
        return super().deliver_screenshot(filename, folder, time_format)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for mode, key, title in SCREENS:
            yield SystemCommand(f"Show {title}", f"Switch to the {title} screen ({key})", lambda m=mode: self.action_show(m))
        yield SystemCommand("Save session", "Write the session JSON atomically (ctrl+s)", self.action_save)
        yield SystemCommand("Save session as", "Write the session to a path you choose (F2)", self.action_save_as)
        yield SystemCommand("Load session", "Open a saved session (ctrl+o)", self.action_load)
        yield SystemCommand("Help", "Keys of every screen (?)", self.action_help)
        # Every screen's actions, from any screen: switch there first, then run it.
        titles = dict((m, t) for m, _k, t in SCREENS)
        for mode, screen_class in self.MODES.items():
            here = isinstance(screen, screen_class)
            where = "" if here else f" ({titles[mode]})"  # brackets would be read as markup
            described = set()
            for title, help_text, action in getattr(screen_class, "COMMANDS_", ()):
                described.add(action)
                yield SystemCommand(f"{title}{where}", help_text, lambda m=mode, a=action: self.run_on(m, a))
            for binding in screen_class.BINDINGS:  # every key of the footer and ? too, by its name
                if isinstance(binding, Binding) and binding.description and binding.action not in described:
                    described.add(binding.action)
                    key = binding.key_display or binding.key
                    yield SystemCommand(f"{binding.description}{where}", f"{binding.description} ({key})",
                                        lambda m=mode, a=binding.action: self.run_on(m, a))

    def run_on(self, mode: str, action: str) -> None:
        """Run screen action ``action`` on the screen of ``mode`` (switching to it first)."""
        async def go() -> None:
            if self.current_mode != mode:
                await self.switch_mode(mode)
            await self.screen.run_action(action)

        self.call_later(go)


def create_app(
    inventory: str | Path | None = None,
    session: str | Path | None = None,
    *,
    demo: str = "worldwide",
    clock: Clock | None = None,
    prebuild: bool = True,
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
    return GeoConsoleApp(state, clock=clock, start=start, prebuild=prebuild)
