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
from textual.widgets import Input, Label, Log, Static

from screens.base import ConsoleScreen
from screens.fields import Field
from screens.messages import SessionChanged
from screens.statusbar import StatusBar
from screens.tabs import ScreenTabs
from screens.dialogs import ConfirmDialog, ask_path_then
from screens.widgets import STALE_NOTE, ConsoleFooter, advice_text, warning_style

DEFAULT_COMMAND = "train.py"
MODES = ("torchrun", "env")
#: How the plan leaves the console (v cycles): over SSH, one Slurm step inside the
#: console's allocation, a Slurm batch job, or Kubernetes manifests written to a file.
VIAS = ("ssh", "slurm", "slurm-submit", "k8s")
VIA_NAMES = {"ssh": "SSH", "slurm": "Slurm step", "slurm-submit": "Slurm submit", "k8s": "export for Kubernetes"}
K8S_FILE = "geoconsole-k8s.yaml"
#: Most characters of rank 0's command the launch question shows (the rest is counted).
LAUNCH_SHOWN_CHARS = 300


def plan_hosts(session) -> tuple[dict, list[str]]:
    """``(LaunchHost per host, fabric hosts the inventory lacks)``: from the inventory
    when there is one (plan.hosts_of_fabric, as the CLI), else host = address."""
    from geoconsole.launch.plan import LaunchHost, hosts_of_fabric

    hosts: dict = {}
    if session.inventory:
        from geoconsole.inventory import load_inventory

        for h in load_inventory(Path(session.inventory)).hosts:
            hosts[h.name] = LaunchHost.from_inventory(h)
    return hosts_of_fabric(session.devices(), hosts)


class LaunchScreen(ConsoleScreen):
    """Review the per-rank commands, launch after a confirmation, watch, abort."""

    AUTO_FOCUS = "#launch-plan"
    BINDINGS = [
        Binding("m", "cycle_mode", "Mode"),
        Binding("v", "cycle_via", "Via"),
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
        self.via = VIAS[0]
        self.plan: Any = None
        #: Hosts of the fabric the inventory lacks (plan_hosts): an SSH launch is refused.
        self.missing: list[str] = []
        self.running = False
        self.result: Any = None

    def compose(self) -> ComposeResult:
        yield ScreenTabs()
        with Vertical(id="launch-body"):
            with Horizontal(id="launch-form"):
                yield Label("training command ")
                yield Field(DEFAULT_COMMAND, id="launch-command", compact=True)
                image = (Label(" image ", id="launch-image-label"),
                         Field("", placeholder="registry/image:tag", id="launch-image", compact=True))
                for widget in image:  # shown only for the Kubernetes export
                    widget.display = False
                    yield widget
            yield Static(id="launch-summary", markup=False)
            yield Log(id="launch-plan", highlight=False, auto_scroll=False)
        yield StatusBar()
        yield ConsoleFooter()

    def on_input_submitted(self) -> None:
        from geoconsole.session import command_problem

        typed = self.query_one("#launch-command", Input).value
        why = command_problem(typed)
        if why:  # the session could not load it back
            self.notify(f"training command: {why}", severity="error")
            return
        if typed != (self.session.launch_command or DEFAULT_COMMAND):  # kept with the session: unsaved now
            self.session.launch_command = typed
            self.post_message(SessionChanged("training command set"))
        self.show_session()

    def _show_image_field(self) -> None:
        for wid in ("#launch-image", "#launch-image-label"):
            self.query_one(wid).display = self.via == "k8s"

    def action_cycle_via(self) -> None:
        if not self.running:
            self.via = VIAS[(VIAS.index(self.via) + 1) % len(VIAS)]
            self._show_image_field()
            self.show_session()

    def _via_lines(self, plan: Any) -> list[str]:
        """What leaves the console on this route: the srun/sbatch lines or the manifests."""
        from geoconsole.launch import slurm
        from geoconsole.launch.export import export

        if self.via == "k8s":
            image = self.query_one("#launch-image", Input).value.strip() or "<image>"
            return export(plan, "k8s", image=image, nodes=self._node_map("k8s_node")).splitlines()
        return slurm.describe_step(slurm.build_step(plan, self._node_map("slurm_node")),
                                   submit=self.via == "slurm-submit")

    def _node_map(self, field: str) -> dict:
        from geoconsole.launch.slurm import node_map

        if not self.session.inventory:
            return {}
        from geoconsole.inventory import load_inventory

        return node_map(load_inventory(Path(self.session.inventory)), field, {d.host for d in self.session.devices()})

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
        if s is not getattr(self, "_filled", None):  # a new session: its saved training command
            self._filled = s
            self.query_one("#launch-command", Input).value = s.launch_command or DEFAULT_COMMAND
        sol = s.current
        if sol is None or s.fabric is None:
            summary.update("No solution yet: the plan appears once a rank map is solved.")
            return
        try:
            command = shlex.split(self.query_one("#launch-command", Input).value)
            hosts, self.missing = plan_hosts(s)
            self.plan = build_plan(sol.rank_map.tolist(), s.devices(), hosts, command, mode=self.mode)
        except (LaunchError, ValueError) as exc:
            summary.update(Text(" ".join(str(exc).split()), style="bold red"))
            return
        plan = self.plan
        text = Text()
        text.append(f"Plan for {sol.name}", style="bold")
        if s.is_stale(sol):
            text.append(f"  {STALE_NOTE}", style=warning_style(self.app))
        text.append(f"\nmaster {plan.master_host} ({plan.master_addr}:{plan.master_port}), "
                    f"{plan.world_size} ranks on {len(plan.by_host())} hosts, mode {plan.mode} (m), {plan.backend}")
        if self.via != "ssh":
            text.append(f"\nvia {VIA_NAMES[self.via]} (v); l: "
                        + ("write " + K8S_FILE if self.via == "k8s" else "launch (asks first), a: abort"),
                        style="dim")
        elif s.inventory and self.missing:  # as the CLI's launch: refused, not reached by name
            more = f" and {len(self.missing) - 1} more" if len(self.missing) > 1 else ""
            text.append(f"\nthe inventory lacks host {self.missing[0]!r}{more} of the fabric: "
                        "review only (add them to launch over SSH)", style=warning_style(self.app))
        elif s.inventory:
            text.append("\nl: launch (asks first), a: abort", style="dim")
        else:
            text.append("\nno inventory: addresses are the fabric's host names; review only", style="dim")
        from geoconsole.advice import for_launch

        found = [a.to_json() for a in for_launch(s.fabric, sol.workload, now=self.app.clock())]
        if found:
            text.append("\n").append(advice_text(found))
        summary.update(text)
        if self.via == "ssh":
            log.write_lines(describe(plan))
        else:
            try:
                log.write_lines(self._via_lines(plan))
            except ValueError as exc:  # a node or image name the route cannot carry
                summary.update(Text(" ".join(str(exc).split()), style="bold red"))
                self.plan = None
                return
        if self.result is not None:
            self._show_result(self.result)

    # -- launching -----------------------------------------------------------------
    def action_launch(self) -> None:
        if self.running:
            self.notify("a launch is running (a aborts it)", severity="warning")
            return
        if self.plan is None:
            self.notify("no plan to launch", severity="warning")
            return
        if self.via == "k8s":
            self._write_k8s(self.plan)
            return
        if self.via == "ssh" and not self.session.inventory:
            self.notify("no inventory: open the console with --inventory to launch", severity="warning")
            return
        if self.via == "ssh" and self.missing:
            self.notify(f"the inventory lacks host {self.missing[0]!r} of the fabric: add it to launch over SSH",
                        severity="warning")
            return
        plan = self.plan
        shown = plan.processes[0].shell_command(plan.workdir)
        if len(shown) > LAUNCH_SHOWN_CHARS:  # said, never cut silently: a cut can read as a whole argument
            shown = f"{shown[:LAUNCH_SHOWN_CHARS]} ... ({len(shown) - LAUNCH_SHOWN_CHARS} more characters)"
        body = (f"{plan.world_size} ranks on {len(plan.by_host())} hosts, rendezvous "
                f"{plan.master_addr}:{plan.master_port} on {plan.master_host}.\n"
                f"rank 0: {shown}")

        def answer(yes: bool | None) -> None:
            if yes:
                (self.run_launch if self.via == "ssh" else self.run_slurm)(plan)

        title = "Launch the training job?" if self.via == "ssh" else f"Launch through {VIA_NAMES[self.via]}?"
        self.app.push_screen(ConfirmDialog(title, body, yes="Launch"), answer)

    def _write_k8s(self, plan: Any) -> None:
        """Ask where (K8S_FILE by default; an existing file only after a yes), then write
        the manifests; a stale plan says so in the questions."""
        from geoconsole.launch.export import export
        from solver.files import write_text

        image = self.query_one("#launch-image", Input).value.strip()
        try:
            text = export(plan, "k8s", image=image, nodes=self._node_map("k8s_node"))
        except ValueError as exc:
            self.notify(" ".join(str(exc).split()), severity="error")
            return

        def write(path: Path) -> None:
            try:
                written = write_text(path, text)
            except (OSError, ValueError) as exc:  # FileError: a folder, FIFO, device or an input
                self.notify(" ".join(str(exc).split()), severity="error")
                return
            self.notify(f"wrote {written} ({plan.world_size} ranks)")

        sol = self.session.current
        stale = STALE_NOTE if sol is not None and self.session.is_stale(sol) else ""
        ask_path_then(self.app, "Write the Kubernetes manifests to", K8S_FILE, write, note=stale)

    @work(exclusive=True, exit_on_error=False, group="launch", description="launch through Slurm")
    async def run_slurm(self, plan: Any) -> None:
        import asyncio

        from geoconsole.launch import slurm

        self.running = True
        self.result = None
        log = self.query_one(Log)
        log.clear()
        log.auto_scroll = True

        def sink(p: Any, stream: str, line: str) -> None:
            log.write_line(f"[rank {p.rank} {p.host}{' err' if stream == 'stderr' else ''}] {line}")

        try:
            step = slurm.build_step(plan, self._node_map("slurm_node"))
            if self.via == "slurm-submit":
                job, _path = await asyncio.to_thread(slurm.submit_step, step)
                log.write_line(f"-- submitted batch job {job}")
                return
            log.write_line(f"-- starting {plan.world_size} ranks in one srun step")
            result = await slurm.launch_step(step, sink=sink, note=lambda m: log.write_line(f"-- {m}"))
        except ValueError as exc:  # RemoteError, LaunchError: one line
            log.write_line(f"-- failed: {' '.join(str(exc).split())}")
            return
        finally:
            self.running = False
        log.write_line(f"-- Slurm step {result.step_id}")
        self._show_result(result)
        self.result = result

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

        def check(found: dict) -> None:  # the console warns; only the CLI's --strict refuses
            from geoconsole.advice import measurement_mismatch, mixed_gpus

            for a in measurement_mismatch(self.session.fabric, found) + mixed_gpus(self.session.fabric, found):
                log.write_line(f"-- {a.severity} {a.code}: {a.message}")

        try:
            result, _plan = await connect_and_run(plan, reach, rebuild, sink=sink, check=check,
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
