"""Launch screen: the plan for the current rank map, read-only, for review.

The plan comes from :mod:`geoconsole.launch_plan` (master host, per-rank environment and
command, every value shell-quoted). Running it from the console is not wired yet: this
screen shows exactly what ``geoconsole --headless launch`` would run, for review.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header, Input, Label, Log, Static

from screens.base import ConsoleScreen

DEFAULT_COMMAND = "train.py"


def plan_hosts(session) -> dict:
    """LaunchHost per host: from the inventory when there is one, else host = address."""
    from geoconsole.launch_plan import LaunchHost

    hosts: dict = {}
    if session.inventory:
        from geoconsole.inventory import load_inventory

        for h in load_inventory(Path(session.inventory)).hosts:
            hosts[h.name] = LaunchHost.from_inventory(h)
    for d in session.devices():
        hosts.setdefault(d.host, LaunchHost(name=d.host, address=d.host))
    return hosts


class LaunchScreen(ConsoleScreen):
    """The per-host commands of the current solution, read-only."""

    AUTO_FOCUS = "#launch-plan"

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="launch-body"):
            with Horizontal(id="launch-form"):
                yield Label("training command ")
                yield Input(DEFAULT_COMMAND, id="launch-command", compact=True)
            yield Static(id="launch-summary")
            yield Log(id="launch-plan", highlight=False, auto_scroll=False)
        yield Footer()

    def on_input_submitted(self) -> None:
        self.show_session()

    def show_session(self) -> None:
        from geoconsole.launch_plan import LaunchError, build_plan, describe

        summary = self.query_one("#launch-summary", Static)
        log = self.query_one(Log)
        log.clear()
        s = self.session
        sol = s.current
        if sol is None or s.fabric is None:
            summary.update("No solution yet: the plan appears once a rank map is solved.")
            return
        command = self.query_one("#launch-command", Input).value.split()
        try:
            plan = build_plan(sol.rank_map.tolist(), s.devices(), plan_hosts(s), command)
        except (LaunchError, ValueError) as exc:
            summary.update(Text(" ".join(str(exc).split()), style="bold red"))
            return
        text = Text()
        text.append(f"Plan for {sol.name} (read-only review)", style="bold")
        if s.is_stale(sol):
            text.append("  STALE: labels or fabric changed since this solution", style="bold yellow")
        text.append(f"\nmaster {plan.master_host} ({plan.master_addr}:{plan.master_port}), "
                    f"{plan.world_size} ranks on {len(plan.by_host())} hosts, {plan.mode}, {plan.backend}")
        if not s.inventory:
            text.append("\nno inventory: addresses are the fabric's host names", style="dim")
        text.append("\nLaunching from the console is not wired yet: run `geoconsole --headless launch`.", style="dim")
        summary.update(text)
        log.write_lines(describe(plan))
