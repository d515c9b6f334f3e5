"""The CLI's edge: core errors become one line on stderr and an exit code.

Only here are errors mapped to exit codes (:data:`EXIT_CODES`). The core raises its own
errors (:mod:`geoconsole.errors`, and the solver's and probes' ValueErrors); a command
wraps a core call in :func:`flag` when the message should name the flag it came from.
"""

from __future__ import annotations

import functools
import sys
from contextlib import contextmanager

import typer

from geoconsole.cli.exitcodes import ExitCode
from geoconsole.errors import GeoconsoleError, PolicyError, RemoteError


class UserError(Exception):
    """An error of the command line itself (a flag); ``str()`` is the one-line message."""

    def __init__(self, message: str, code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.code = code


def _domain_errors() -> tuple[type[BaseException], ...]:
    from solver.fabric import FabricError
    from solver.files import FileError
    from solver.selection import SelectionError

    return (GeoconsoleError, FabricError, FileError, SelectionError)


def exit_code_for(exc: BaseException) -> ExitCode:
    """The exit code of an expected failure: remote 3, unmet policy 1, bad input 2."""
    if isinstance(exc, UserError):
        return exc.code
    if isinstance(exc, RemoteError):
        return ExitCode.REMOTE
    if isinstance(exc, PolicyError):
        return ExitCode.FAILED
    from solver.selection import SelectionError

    if isinstance(exc, SelectionError):  # the policy cannot be met on this fabric
        return ExitCode.FAILED
    return ExitCode.USAGE


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> "typer.Exit":
    """Print ``error: message`` on stderr (one line) and return the Exit to raise."""
    one_line = " ".join(str(message).split())
    print(f"error: {one_line}", file=sys.stderr)
    return typer.Exit(int(code))


@contextmanager
def flag(name: str):
    """Prefix a core error raised inside with the flag it came from (``--estimate: ...``)."""
    try:
        yield
    except _domain_errors() as exc:
        raise UserError(f"{name}: {exc}", exit_code_for(exc)) from None


def cli_errors(func):
    """Decorate a Typer command: expected errors and Ctrl-C become one line and an exit code.

    Anything else is a bug and keeps its traceback.
    """

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except (UserError, *_domain_errors()) as exc:
            raise fail(str(exc), exit_code_for(exc)) from None
        except KeyboardInterrupt:
            raise fail("interrupted", ExitCode.INTERRUPTED) from None

    return wrapper
