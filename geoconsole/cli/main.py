"""The ``geoconsole`` command: the console by default, headless sub-commands for scripts.

Import cost matters here: ``geoconsole --headless ...`` must never import textual, and
``solve`` never imports asyncssh. Sub-command modules import their heavy dependencies
inside the command functions.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

import typer
from typer._click import exceptions as click_exceptions  # typer vendors click

from geoconsole.cli import fleet as cli_fleet, labels as cli_labels, launch as cli_launch, solve as cli_solve
from geoconsole.cli.errors import run_app
from geoconsole.cli.options import path_option


def _one_line_usage_error(self: click_exceptions.UsageError, file=None) -> None:
    """Bad flags get one line, like every other input error (click prints three). A
    number flag given NaN says so (the range check said "should be <= 10000000")."""
    where = self.ctx.command_path if self.ctx is not None else "geoconsole"
    message = " ".join(self.format_message().split())
    param, errors = getattr(self, "param", None), getattr(self.__cause__, "errors", None)
    if getattr(param, "opts", None) and callable(errors):  # typer's validation of the value
        try:
            given = [e.get("input") for e in errors()]
        except Exception:  # noqa: BLE001 -- only the wording is at stake
            given = []
        for raw in given:
            try:
                nan = math.isnan(float(raw))
            except (TypeError, ValueError):
                continue
            if nan:
                message = f"Invalid value for '{param.opts[0]}': {str(raw)!r} is not a number"
    print(f"error: {where}: {message} (see --help)", file=sys.stderr)


click_exceptions.UsageError.show = _one_line_usage_error

app = typer.Typer(
    name="geoconsole",
    help="Place pipeline x data-parallel training on GPUs spread over slow, uneven networks.",
    invoke_without_command=True,
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def root(
    ctx: typer.Context,
    headless: bool = typer.Option(
        False, "--headless", help="Run a sub-command without the console (for scripts and CI)."
    ),
    inventory: Optional[Path] = path_option(
        None, "--inventory", "-i", help="Open the console on this fleet (TOML or hostfile)."
    ),
    session: Optional[Path] = path_option(
        None, "--session", help="Open a saved console session (JSON)."
    ),
) -> None:
    """With no command, open the console (on the built-in demo fabric without a fleet)."""
    if ctx.invoked_subcommand is not None:
        return
    if headless:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    from geoconsole.console import run_console  # textual: imported only for the console
    from geoconsole.entry import command_starts

    command_starts()
    raise typer.Exit(run_console(inventory=inventory, session=session))


for _module in (cli_solve, cli_fleet, cli_labels, cli_launch):
    _module.register(app)


def main() -> None:
    run_app(app)


if __name__ == "__main__":
    main()
