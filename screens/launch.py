"""Launch screen: the plan for the current rank map, a confirmation, live output, abort.

The plan comes from :mod:`geoconsole.launch.plan` (master host, per-rank environment and
command, every value shell-quoted) and runs through :mod:`geoconsole.launch.run` (each
rank under a supervisor that stops its whole process tree on abort). The SSH work is
an async worker on the app's loop; output lines go straight to the log as they arrive.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Input, Label, Log, Static

from screens.base import ConsoleScreen
from screens.fields import Field
from screens.statusbar import StatusBar
from screens.tabs import ScreenTabs
from screens.dialogs import ConfirmDialog
from screens.widgets import warning_style

DEFAULT_COMMAND = "train.py"
MODES = ("torchrun", "env")


def plan_hosts(session) -> dict:
    """LaunchHost per host: from the inventory when there is one, else host = address."""
    from geoconsole.launch.plan import LaunchHost

    hosts: dict = {}
    if session.inventory:
        from geoconsole.inventory import load_inventory

        for h in load_inventory(Path(session.inventory)).hosts:
            hosts[h.name] = LaunchHost.from_inventory(h)
    for d in session.devices():
        hosts.setdefault(d.host, LaunchHost(name=d.host, address=d.host))
    return hosts


class LaunchScreen(ConsoleScreen):
    """Review the per-rank commands, launch after a confirmation, watch, abort."""

    AUTO_FOCUS = "#launch-plan"
    BINDINGS = [
        Binding("m", "cycle_mode", "Mode"),
        Binding("l", "launch", "Launch"),
        Binding("a", "abort", "Abort"),
    ]
    COMMANDS_ = (
        ("Launch the job", "Run the plan on the fleet after a confirmation", "launch"),
        ("Abort the launch", "Stop every rank (SIGTERM, then SIGKILL)", "abort"),
    )

    def __init__(self) -> None:
        super().__init__()
        self.mode = MODES[0]
        self.plan: Any = None
        self.running = False
        self.result: Any = None

    def compose(self) -> ComposeResult:
        yield ScreenTabs()
        with Vertical(id="launch-body"):
            with Horizontal(id="launch-form"):
                yield Label("training command ")
                yield Field(DEFAULT_COMMAND, id="launch-command", compact=True)
            yield Static(id="launch-summary")
            yield Log(id="launch-plan", highlight=False, auto_scroll=False)
        yield StatusBar()
        yield Footer()

    def on_input_submitted(self) -> None:
        self.show_session()

    def action_cycle_mode(self) -> None:
        if not self.running:
            self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]
            self.show_session()

    def show_session(self) -> None:
        if self.running:
            return
        from geoconsole.launch.plan import LaunchError, build_plan, describe

        summary = self.query_one("#launch-summary", Static)
        log = self.query_one(Log)
        log.clear()
        self.plan = None
        s = self.session
        sol = s.current
        if sol is None or s.fabric is None:
            summary.update("No solution yet: the plan appears once a rank map is solved.")
            return
        try:
            command = shlex.split(self.query_one("#launch-command", Input).value)
            self.plan = build_plan(sol.rank_map.tolist(), s.devices(), plan_hosts(s), command, mode=self.mode)
        except (LaunchError, ValueError) as exc:
            summary.update(Text(" ".join(str(exc).split()), style="bold red"))
            return
        plan = self.plan
        text = Text()
        text.append(f"Plan for {sol.name}", style="bold")
        if s.is_stale(sol):
            text.append("  STALE: labels or fabric changed since this solution", style=warning_style(self.app))
        text.append(f"\nmaster {plan.master_host} ({plan.master_addr}:{plan.master_port}), "
                    f"{plan.world_size} ranks on {len(plan.by_host())} hosts, mode {plan.mode} (m), {plan.backend}")
        if s.inventory:
            text.append("\nl: launch (asks first), a: abort", style="dim")
        else:
            text.append("\nno inventory: addresses are the fabric's host names; review only", style="dim")
        summary.update(text)
        log.write_lines(describe(plan))
        if self.result is not None:
            self._show_result(self.result)

    # -- launching -----------------------------------------------------------------
    def action_launch(self) -> None:
        if self.running:
            self.notify("a launch is running (a aborts it)", severity="warning")
            return
        if not self.session.inventory:
            self.notify("no inventory: open the console with --inventory to launch", severity="warning")
            return
        if self.plan is None:
            self.notify("no plan to launch", severity="warning")
            return
        plan = self.plan
        body = (f"{plan.world_size} ranks on {len(plan.by_host())} hosts, rendezvous "
                f"{plan.master_addr}:{plan.master_port} on {plan.master_host}.\n"
                f"rank 0: {plan.processes[0].shell_command(plan.workdir)[:300]}")

        def answer(yes: bool | None) -> None:
            if yes:
                self.run_launch(plan)

        self.app.push_screen(ConfirmDialog("Launch the training job?", body, yes="Launch"), answer)

    def action_abort(self) -> None:
        if self.running:
            self.query_one(Log).write_line("-- aborting: stopping every rank")
            self.workers.cancel_group(self, "launch")

    def worker_failed(self) -> None:
        self.running = False

    @work(exclusive=True, exit_on_error=False, group="launch", description="launch")
    async def run_launch(self, plan: Any) -> None:
        from geoconsole.errors import RemoteError
        from geoconsole.launch.flow import Reach, connect_and_run
        from geoconsole.launch.plan import build_plan

        self.running = True
        self.result = None
        log = self.query_one(Log)
        log.clear()
        log.auto_scroll = True
        reach = Reach(_inventory_hosts(self.session.inventory), self.session.known_hosts or None)

        def rebuild(found: dict) -> Any:
            return build_plan(plan.rank_map, self.session.devices(), plan.hosts, plan.command,
                              mode=plan.mode, backend=plan.backend, port=plan.master_port,
                              workdir=plan.workdir, interfaces=found)

        def sink(p: Any, stream: str, line: str) -> None:
            log.write_line(f"[rank {p.rank} {p.host}{' err' if stream == 'stderr' else ''}] {line}")

        try:
            result, _plan = await connect_and_run(plan, reach, rebuild, sink=sink,
                                                  on_step=lambda m: log.write_line(f"-- {m}"))
        except RemoteError as exc:
            log.write_line(f"-- failed: {' '.join(str(exc).split())}")
            return
        finally:
            self.running = False
        self._show_result(result)
        self.result = result  # set last: watchers see the verdict already written

    def _show_result(self, result: Any) -> None:
        log = self.query_one(Log)
        for o in result.outcomes:
            state = "ok" if o.ok else (o.error or f"exit {o.exit_status}")
            log.write_line(f"-- rank {o.rank} {o.host}: {state}")
        verdict = "all ranks finished" if result.ok else f"failed: {result.reason or 'see ranks'}"
        if result.interrupted:
            verdict = "aborted by the operator"
        log.write_line(f"-- {verdict} ({result.elapsed_s:.1f} s)")


def _inventory_hosts(path: str) -> dict:
    from geoconsole.inventory import load_inventory

    return {h.name: h for h in load_inventory(Path(path)).hosts}
