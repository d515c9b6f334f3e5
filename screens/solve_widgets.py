"""Widgets of the solve screen: the workload form and the baseline histogram."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, Label, Static

from geoconsole.solving import option_range_problem
from screens.fields import Field
from solver.workload import Workload, WorkloadError

BARS = " ▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class SolveOptions:
    """What the form asks for, validated."""

    workload: Workload
    seed: int
    budget: int | None
    time_limit: float | None
    restarts: int


#: (field id, label with unit, placeholder) of the form, in order.
FIELDS = (
    ("c_pp", "c_pp activations (GB)", "decimal GB per stage boundary"),
    ("c_dp", "c_dp gradients (GB)", "decimal GB per stage"),
    ("pp_messages", "pipeline messages", "transfers per step"),
    ("dp_messages", "data-parallel messages", "transfers per step"),
    ("d_pp", "D_PP stages", "whole number"),
    ("d_dp", "D_DP replicas", "whole number"),
    ("seed", "seed", "whole number"),
    ("budget", "budget (swaps)", "empty: default"),
    ("time_limit", "time limit (s)", "empty: none"),
    ("restarts", "restarts", "whole number"),
)


class WorkloadForm(Vertical):
    """Labelled inputs for the workload and solver options; :meth:`read` validates them."""

    DEFAULT_CSS = """
    WorkloadForm { height: auto; }
    WorkloadForm > Horizontal { height: 1; margin-bottom: 1; }
    WorkloadForm.compact > Horizontal { margin-bottom: 0; }
    WorkloadForm Label { width: 27; max-width: 60%; }
    WorkloadForm Input { width: 1fr; }
    """

    def compose(self) -> ComposeResult:
        for key, label, placeholder in FIELDS:
            with Horizontal():
                yield Label(label)
                yield Field(placeholder=placeholder, id=f"form-{key}", compact=True)

    def fill(self, workload: Workload, seed: int = 0, restarts: int | None = None, budget: int | None = None,
             time_limit: float | None = None) -> None:
        """Show ``workload`` and the options (a session's saved ones; None: empty or the
        solver's default)."""
        if restarts is None:  # the solver's own default, so the form and the CLI agree
            import inspect

            from solver.search import solve

            param = inspect.signature(solve).parameters.get("restarts")
            found = param is not None and param.default is not inspect.Parameter.empty
            restarts = param.default if found else 4
        values = {**workload.to_json(), "seed": seed, "budget": "" if budget is None else budget,
                  "time_limit": "" if time_limit is None else float(time_limit), "restarts": restarts}
        for key, _label, _ in FIELDS:
            self.query_one(f"#form-{key}", Input).value = f"{values[key]:g}" if isinstance(values[key], float) else str(values[key])

    def read(self, n_devices: int) -> SolveOptions:
        """The validated options; ValueError naming the field by its label otherwise."""
        raw = {key: self.query_one(f"#form-{key}", Input).value.strip() for key, _l, _p in FIELDS}
        label = {key: name for key, name, _p in FIELDS}

        def number(key: str, kind=float, optional: bool = False):
            text = raw[key]
            if text == "" and optional:
                return None
            if kind is int and len(text) > 40 and text.lstrip("+-").isdigit():  # int() refuses 4300+
                raise ValueError(f"{label[key]}: a whole number of {len(text)} digits is out of range")
            try:
                value = kind(text)
            except ValueError:
                raise ValueError(f"{label[key]}: expected {'a whole number' if kind is int else 'a number'}, "
                                 f"got {text[:40]!r}") from None
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{label[key]}: must be finite, got {text[:40]!r}")
            return value

        try:
            workload = Workload(
                d_pp=number("d_pp", int), d_dp=number("d_dp", int),
                c_pp=number("c_pp"), c_dp=number("c_dp"),
                pp_messages=number("pp_messages"), dp_messages=number("dp_messages"),
            )
        except WorkloadError as exc:  # the workload's own checks: worded with the form's labels
            raise ValueError(f"{label.get(exc.field, exc.field)}: {exc.why}") from None
        if workload.n_devices != n_devices:
            raise ValueError(f"D_PP x D_DP: {workload.d_pp} x {workload.d_dp} = {workload.n_devices}, the fabric has "
                             f"{n_devices} devices: the console places every device (headless solve selects "
                             "D_PP x D_DP of them)")
        budget = number("budget", int, optional=True)
        time_limit = number("time_limit", optional=True)
        restarts = number("restarts", int)
        seed = number("seed", int)
        for key, value in (("budget", budget), ("time_limit", time_limit), ("restarts", restarts), ("seed", seed)):
            problem = None if value is None else option_range_problem(key, value)
            if problem:  # the value as typed: 10000001 read 1e+07
                raise ValueError(f"{label[key]}: {problem}, got {raw[key][:40]}")
        return SolveOptions(workload, seed, budget, time_limit, restarts)


def sparkline_data(values: list[float]) -> tuple[list[float], str]:
    """The best-Comm chart's data and a note for its axis line. A best that never moved
    would draw as a solid block of full bars: draw nothing and say so instead."""
    if len(values) < 2 or max(values) - min(values) <= 1e-9 * max(abs(max(values)), 1.0):
        return [], " (unchanged during the run)"
    return values, ""


class Histogram(Static):
    """Random-placement distributions as bar rows on one axis, the solution marked."""

    DEFAULT_CSS = "Histogram { height: auto; }"

    def show(self, distributions: dict[str, list[float]], solution: float | None, bound: float | None,
             expected: int = 0) -> None:
        """Each distribution's bars on one axis; ``expected``: the samples asked for of
        each, so that a baseline the time limit or a cancel cut short says so."""
        if not distributions:
            self.update("")
            return
        width = max(self.size.width - 2, 30) if self.size.width else 60
        values = [v for vs in distributions.values() for v in vs]
        marks = [x for x in (solution, bound) if x is not None and math.isfinite(x)]
        lo, hi = min(values + marks), max(values + marks)
        span = max(hi - lo, 1e-9)

        def col(x: float) -> int:
            return min(int((x - lo) / span * (width - 1) + 0.5), width - 1)

        text = Text()
        for name, vs in distributions.items():
            counts = np.bincount([col(v) for v in vs], minlength=width)
            top = max(counts.max(), 1)
            bars = "".join(BARS[int(math.ceil(c / top * (len(BARS) - 1)))] for c in counts)
            text.append(f"{name}", style="bold")
            cut = f" of {expected} samples, cut short" if len(vs) < expected else " samples"
            text.append(f"  {len(vs)}{cut}, median {float(np.median(vs)):.2f} s\n")
            text.append(bars + "\n", style="cyan")
        axis = [" "] * width
        if bound is not None and math.isfinite(bound):
            axis[col(bound)] = "|"
        if solution is not None and math.isfinite(solution):
            axis[col(solution)] = "▲"
        text.append("".join(axis) + "\n", style="bold green")
        text.append(f"{lo:.2f} s".ljust(width - 12) + f"{hi:.2f} s".rjust(12) + "\n")
        if solution is not None:
            text.append(f"▲ solution {solution:.2f} s   ", style="bold green")
        if bound is not None:
            text.append(f"| lower bound {bound:.2f} s", style="green")
        self.update(text)
