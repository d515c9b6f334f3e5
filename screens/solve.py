"""Solve screen: the workload form, the solver in a thread worker, the score falling live.

The worker talks to the screen only through messages: :class:`SolveScreen.Progress`
(throttled, and coalesced in the queue with ``can_replace``) and
:class:`SolveScreen.Finished`. Cancelling sets an event the solver's callback checks; the
callback raises ``StopIteration`` and ``solve`` returns the best placement so far.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import Any

import numpy as np
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import Button, Sparkline, Static

from geoconsole.session import Solution, iso
from screens.base import ConsoleScreen
from screens.statusbar import StatusBar, duration, solve_eta, solve_running
from screens.tabs import ScreenTabs
from screens.messages import Activity, SessionChanged
from screens.solve_widgets import Histogram, SolveOptions, WorkloadForm, sparkline_data
from screens.widgets import STALE_NOTE, ConsoleFooter, advice_text

#: Seconds between progress messages; the solver may call back far more often.
PROGRESS_INTERVAL_S = 0.1
#: Below this many terminal rows the form drops the blank line between its fields, so
#: that every field, an error and the buttons fit without scrolling (80 x 24: 21 rows).
COMPACT_FORM_ROWS = 32
#: GIL switch interval while a solve runs. The event loop gives up the GIL at every
#: select(); with the default 5 ms each loop turn can wait 5 ms for the solver thread to
#: yield, which makes mounting a screen take seconds. 0.5 ms keeps keys prompt for a few
#: percent of solver throughput.
SOLVING_SWITCH_INTERVAL_S = 0.0005


def baseline_samples(n: int) -> int:
    """Random placements to sample: the spec's 200 on small fabrics, fewer on huge ones."""
    return 200 if n <= 128 else 40 if n <= 512 else 10


def strongest_bound(known: list[tuple[float, float | None]], comm: float, bound: float | None) -> float | None:
    """A run's lower bound ``bound``, or a stronger one an earlier solve of the same
    fabric, labels and workload found (``known``: their (Comm, bound) pairs; a cancelled
    or shorter run computes a weaker bound; each is valid, so the largest is), never one
    above a Comm reached there, the run's ``comm`` included (no valid bound is: a session
    file's could be)."""
    from solver.bounds import ROUNDING

    reached = min([comm] + [fun for fun, _b in known])
    # a bound that met its run's Comm may lie above it by rounding (solver.bounds.ROUNDING)
    found = [min(b, reached) for _f, b in known if b is not None and b <= reached * (1 + ROUNDING)]
    found += [] if bound is None else [float(bound)]
    return max(found) if found else None


class SolveScreen(ConsoleScreen):
    """Set the workload, solve, watch the best Comm fall toward the lower bound."""

    AUTO_FOCUS = "#solve-run"

    BINDINGS = [
        Binding("ctrl+r", "solve", "Solve"),
        Binding("escape", "cancel", "Cancel"),
        Binding("r", "review", "Review"),
    ]
    COMMANDS_ = (
        ("Solve placement", "Run the solver with the form's workload", "solve"),
        ("Cancel solve", "Stop the solver and keep the best so far", "cancel"),
    )

    class Progress(Message):
        """The best Comm so far (posted from the solver thread)."""

        def __init__(self, fun: float, nit: int, nfev: int, elapsed_s: float, phase: str) -> None:
            super().__init__()
            self.fun, self.nit, self.nfev, self.elapsed_s, self.phase = fun, nit, nfev, elapsed_s, phase

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, SolveScreen.Progress)

    class Started(Message):
        """The lower bound is known and the search begins: ``bound`` the strongest known
        for the instance, ``own`` the run's."""

        def __init__(self, bound: float, own: float) -> None:
            super().__init__()
            self.bound, self.own = bound, own

    class Finished(Message):
        """The solver returned (done, budget, time limit or cancelled)."""

        def __init__(self, result: Any, bound: float, baselines: dict[str, list[float]], options: SolveOptions, digest: str,
                     advice: list[dict] | None = None) -> None:
            super().__init__()
            self.result, self.bound, self.baselines, self.options, self.digest = result, bound, baselines, options, digest
            self.advice = advice or []

    def __init__(self) -> None:
        super().__init__()
        self._cancel = threading.Event()
        self.running = False
        self.history: list[float] = []
        self.bound: float | None = None
        self._own_bound: float | None = None  # the running solve's own bound (Started)
        self.options: SolveOptions | None = None

    def compose(self) -> ComposeResult:
        yield ScreenTabs()
        with Horizontal(id="solve-body"):
            with VerticalScroll(id="solve-form-pane"):
                yield WorkloadForm(id="solve-form")
                yield Static("", id="solve-error", classes="error", markup=False)
                with Horizontal(id="solve-buttons"):
                    yield Button("Solve", id="solve-run", variant="primary", compact=True)
                    yield Button("Cancel", id="solve-cancel", variant="error", disabled=True, compact=True)
            with VerticalScroll(id="solve-live"):
                yield Static("Ready: press Solve (ctrl+r).", id="solve-status", markup=False)
                yield Sparkline([], id="solve-sparkline")
                yield Static("", id="solve-axis", markup=False)
                yield Histogram(id="solve-histogram")
                yield Static("", id="solve-advice", markup=False)  # hidden while there is no advice
        yield StatusBar()
        yield ConsoleFooter()

    def on_resize(self) -> None:
        self.query_one(WorkloadForm).set_class(self.size.height < COMPACT_FORM_ROWS, "compact")

    def show_session(self) -> None:
        if self.running:
            return
        if self.session.workload is not getattr(self, "_filled", None):
            # A new session (or a sweep) brought its own workload: show it in the form.
            self._filled = self.session.workload
            self.query_one(WorkloadForm).fill(self.session.workload, **self.session.solve_options)
        sol = self.session.current
        if sol is not None:
            self._show_solution(sol)

    # -- actions -----------------------------------------------------------------
    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "solve-run":
            self.action_solve()
        elif event.button.id == "solve-cancel":
            self.action_cancel()

    def on_input_submitted(self) -> None:
        self.action_solve()

    def on_input_changed(self) -> None:
        """An edit makes the last error stale: it is cleared, and the next solve checks again."""
        error = self.query_one("#solve-error", Static)
        if str(error.render()):
            error.update("")

    def action_solve(self) -> None:
        if self.running:
            return
        from geoconsole.prepare import prepare_for_solve
        from geoconsole.solving import cost_model

        error = self.query_one("#solve-error", Static)
        fabric = self.session.fabric
        if fabric is None:
            error.update("no fabric: measure the fleet first (Fabric screen, s)")
            return
        try:
            options = self.query_one(WorkloadForm).read(fabric.n)
            prepared = prepare_for_solve(fabric, options.workload.n_devices)
            model = cost_model(prepared.fabric, options.workload)
        except ValueError as exc:
            error.update(" ".join(str(exc).split()))
            self.call_after_refresh(error.scroll_visible, animate=False)
            return
        error.update("")
        self.session.workload = self._filled = options.workload
        self.options = options
        self._cancel.clear()
        self._set_running(True)
        self.history = []
        self.bound = self._own_bound = None
        self.query_one(Histogram).show({}, None, None)
        self.query_one("#solve-advice", Static).display = False
        self.query_one("#solve-status", Static).update("Computing the lower bound...")
        digest = self.session.digest()
        self.run_solver(model, prepared, options, digest, self._known(digest, options.workload))

    def on_unmount(self) -> None:
        # A thread cannot be killed: make the solver stop so the app can exit promptly.
        self._cancel.set()

    def action_cancel(self) -> None:
        if self.running:
            self._cancel.set()
            self.query_one("#solve-status", Static).update("Cancelling: keeping the best so far...")

    def action_review(self) -> None:
        self.app.switch_mode("rankmap")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """While a solve runs, Solve shows dimmed in the footer (pressing it did nothing)."""
        if action == "solve" and self.running:
            return None
        return True

    def _set_running(self, running: bool) -> None:
        self.running = running
        self.refresh_bindings()
        self.query_one("#solve-run", Button).disabled = running
        self.query_one("#solve-cancel", Button).disabled = not running

    def worker_failed(self) -> None:
        """Called by the app's worker-error handler for this screen's workers."""
        self._set_running(False)
        self.query_one("#solve-status", Static).update(Text("The solver failed (see the notification).", style="bold red"))
        self.post_message(Activity("solve", None))

    # -- the worker (runs in a thread) ---------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="solve", description="solve placement")
    def run_solver(self, model: Any, prepared: Any, options: SolveOptions, digest: str,
                   known: list[tuple[float, float | None]]) -> None:
        """``known``: (Comm, bound) of the earlier solves of the same instance."""
        previous_interval = sys.getswitchinterval()
        sys.setswitchinterval(min(previous_interval, SOLVING_SWITCH_INTERVAL_S))
        try:
            self._solve_and_report(model, prepared, options, digest, known)
        finally:
            sys.setswitchinterval(previous_interval)

    def _solve_and_report(self, model: Any, prepared: Any, options: SolveOptions, digest: str,
                          known: list[tuple[float, float | None]]) -> None:
        import dataclasses

        from geoconsole import solving
        from solver.bounds import bound_budget_s, lower_bound

        started = time.monotonic()  # the time limit covers the bound too
        found_bound = lower_bound(model, bound_budget_s(options.time_limit), stop=self._cancel.is_set)
        self.post_message(self.Started(strongest_bound(known, math.inf, found_bound.value), found_bound.value))
        last = [0.0]

        def callback(progress: Any) -> None:
            now = time.monotonic()
            if now - last[0] >= PROGRESS_INTERVAL_S:
                last[0] = now
                self.post_message(self.Progress(progress.fun, progress.nit, progress.nfev, progress.elapsed_s, progress.phase))

        core = solving.SolveOptions(seed=options.seed, budget=options.budget, restarts=options.restarts,
                                    time_limit=options.time_limit, baseline_samples=baseline_samples(model.n))
        outcome = solving.run_placement(model, core, seed_orders=prepared.seed_orders, callback=callback,
                                        should_stop=self._cancel.is_set, bound=found_bound, started=started)
        baselines = {d.name: [float(v) for v in d.values] for d in outcome.baselines}
        from geoconsole.advice import for_solve  # one small re-solve: the poor-device check

        # the advice judges the answer by the strongest bound known, as the screen shows it
        bound = strongest_bound(known, float(outcome.result.fun), found_bound.value)
        found = for_solve(prepared.fabric, model, outcome.result, outcome.baselines,
                          dataclasses.replace(found_bound, value=bound),
                          now=self.app.clock(), check_device=not self._cancel.is_set(),
                          time_limit=options.time_limit)
        self.post_message(self.Finished(outcome.result, bound, baselines, options, digest,
                                        [a.to_json() for a in found]))

    # -- messages from the worker --------------------------------------------------
    def on_solve_screen_started(self, message: Started) -> None:
        self.bound, self._own_bound = message.bound, message.own
        self.query_one("#solve-status", Static).update(f"Searching... lower bound {message.bound:.2f} s")
        self.post_message(Activity("solve", solve_running(None, message.bound, 0.0, None)))

    def on_solve_screen_progress(self, message: Progress) -> None:
        if not self.running:
            return
        self.history.append(message.fun)
        if self.bound is not None and message.fun < self.bound:
            self.bound = self._own_bound  # a bound this run went below (a session file's): its own
        data, flat = sparkline_data(self.history[-200:])
        self.query_one(Sparkline).data = data
        bound = f", lower bound {self.bound:.2f} s" if self.bound is not None else ""
        self.query_one("#solve-axis", Static).update(
            f"best Comm so far: {self.history[0]:.2f} s -> {message.fun:.2f} s{flat}{bound}"
        )
        eta = solve_eta(message.elapsed_s, message.nfev, self.options.time_limit, self.options.budget)
        self.query_one("#solve-status", Static).update(self._status_text(
            message.fun, message.nit, message.nfev, message.elapsed_s, message.phase, eta=eta
        ))
        self.post_message(Activity("solve", solve_running(message.fun, self.bound, message.elapsed_s, eta)))

    def on_solve_screen_finished(self, message: Finished) -> None:
        from solver.search import CANCELLED

        self._set_running(False)
        self.post_message(Activity("solve", None))
        r = message.result
        kept = self.session.current
        if (r.status == CANCELLED and kept is not None and kept.digest == message.digest
                and kept.workload == message.options.workload and kept.fun <= float(r.fun)):
            # a cancelled run that did not beat the plan does not replace it
            self._show_solution(kept, note=f"a cancelled run's best Comm {float(r.fun):.2f} s is not below "
                                           f"{kept.name}'s {kept.fun:.2f} s: {kept.name} stays the plan")
            return
        number = len(self.session.solutions) + 1
        solution = Solution(
            name=f"solve #{number}", rank_map=np.asarray(r.x), fun=float(r.fun),
            workload=message.options.workload, digest=message.digest, created_at=iso(self.app.clock),
            bound=self._strongest_bound(message), status=str(int(r.status)), message=r.message, seed=message.options.seed,
            nit=int(r.nit), nfev=int(r.nfev), elapsed_s=float(r.elapsed_s),
            history=[(float(t), float(v)) for t, v in r.history], baselines=message.baselines,
            advice=message.advice, found_by=str(r.start),
        )
        self.session.add_solution(solution)
        o = message.options  # saved with the session, with the solution they made
        chosen = dict(seed=o.seed, budget=o.budget, time_limit=o.time_limit, restarts=o.restarts)
        self.session.solve_options = {k: v for k, v in chosen.items() if v is not None}
        self.post_message(SessionChanged(f"{solution.name}: Comm {solution.fun:.2f} s"))

    def _known(self, digest: str, workload: Any) -> list[tuple[float, float | None]]:
        """(Comm, bound) of the session's solves of one instance (fabric, labels, workload)."""
        return [(s.fun, s.bound) for s in self.session.solutions if s.digest == digest and s.workload == workload]

    def _strongest_bound(self, message: Finished) -> float | None:
        """:func:`strongest_bound` over the session's solves of the run's instance now."""
        return strongest_bound(self._known(message.digest, message.options.workload),
                               float(message.result.fun), message.bound)

    def _status_text(self, fun: float, nit: int, nfev: int, elapsed: float, phase: str, done: str = "",
                     eta: float | None = None, found_by: str = "") -> Text:
        """Best Comm and bound, then how it ended (``done``) and who found it, then the work:
        the lines that matter first, since a narrow terminal cuts the last."""
        text = Text()
        text.append(f"best Comm {fun:.2f} s", style="bold green")
        if self.bound is not None:
            gap = (fun - self.bound) / fun * 100 if fun > 0 else 0.0
            text.append(f"   lower bound {self.bound:.2f} s\ngap (Comm - bound)/Comm {gap:.1f}%")
        if done:
            text.append(f"\n{done}", style="bold")
        if found_by:
            text.append(f"\nfound by {found_by}")
        text.append(f"\n{nit} descent moves, {nfev} swaps scored, {elapsed:.1f} s")
        if not done:
            text.append(f", {phase}")
        if eta is not None:
            text.append(f", ETA {duration(eta)}")
        return text

    def _show_solution(self, sol: Solution, note: str = "") -> None:
        self.bound = sol.bound
        values = [v for _t, v in sol.history] or [sol.fun]
        data, flat = sparkline_data(values)
        self.query_one(Sparkline).data = data
        bound = f", lower bound {sol.bound:.2f} s" if sol.bound is not None else ""
        self.query_one("#solve-axis", Static).update(
            f"best Comm over {sol.elapsed_s:.1f} s: {values[0]:.2f} s -> {values[-1]:.2f} s{flat}{bound}"
        )
        stale = f"   {STALE_NOTE}; solve again." if self.session.is_stale(sol) else ""
        self.query_one("#solve-status", Static).update(self._status_text(
            sol.fun, sol.nit, sol.nfev, sol.elapsed_s, "done",
            done=f"{sol.name}: {note or sol.message}{stale}  (r: review)", found_by=sol.found_by,
        ))
        from solver.search import CANCELLED, TIME_LIMIT

        # only a cancel or the time limit cuts the baselines short (older sessions drew fewer)
        ended = sol.status in (str(int(CANCELLED)), str(int(TIME_LIMIT)))
        expected = baseline_samples(len(sol.rank_map)) if ended else 0
        self.query_one(Histogram).show(sol.baselines, sol.fun, sol.bound, expected=expected)
        if not sol.baselines and ended:
            self.query_one(Histogram).update(Text("random baselines: none drawn before the solve ended", style="italic"))
        shown = self.query_one("#solve-advice", Static)
        shown.display = bool(sol.advice)
        shown.update(advice_text(sol.advice))
