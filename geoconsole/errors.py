"""One-line error reporting for the command line: no tracebacks for expected failures."""

from __future__ import annotations

import sys

import typer

from geoconsole.exitcodes import ExitCode


class UserError(Exception):
    """An error the operator can fix; ``str()`` is the whole one-line message."""

    def __init__(self, message: str, code: ExitCode = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> "typer.Exit":
    """Print ``error: message`` on stderr (one line) and return the Exit to raise."""
    one_line = " ".join(str(message).split())
    print(f"error: {one_line}", file=sys.stderr)
    return typer.Exit(int(code))


def cli_errors(func):
    """Decorate a Typer command: UserError and Ctrl-C become one line and an exit code.

    Anything else is a bug and keeps its traceback.
    """
    import functools

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except UserError as exc:
            raise fail(str(exc), exc.code) from None
        except KeyboardInterrupt:
            raise fail("interrupted", ExitCode.INTERRUPTED) from None

    return wrapper
