"""The CLI's edge: core errors become one line on stderr and an exit code.

Only here are errors mapped to exit codes (:data:`EXIT_CODES`). The core raises its own
errors (:mod:`geoconsole.errors`, and the solver's and probes' ValueErrors); a command
wraps a core call in :func:`flag` when the message should name the flag it came from.
"""

from __future__ import annotations

import errno
import functools
import io
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


#: Core error ``field`` -> the flag it came from. A flag in parentheses is a hint put after
#: the message; any other replaces the field's name that starts the message, or leads it.
FLAGS = {
    "estimate": "--estimate", "group_locality": "--group-locality", "regions": "--regions",
    "exclude": "--exclude", "mode": "--mode", "backend": "--backend", "port": "--port", "env": "--env", "workdir": "--workdir",
    "interface": "--interface", "shape": "(--pp, --dp)", "fill_missing": "(--fill-missing)",
}


def with_flag(exc: BaseException) -> str:
    """The message of ``exc`` with the flag its ``field`` came from (see FLAGS)."""
    text, field = str(exc), getattr(exc, "field", None)
    flag_name = FLAGS.get(field)
    if flag_name is None:
        return text
    if flag_name.startswith("("):
        return f"{text} {flag_name}"
    for word in (field.replace("_", " "), field):
        if text.startswith(word):
            return flag_name + text[len(word):]
    return f"{flag_name}: {text}"


class ClosedStdout(io.TextIOBase):
    """Standard output for a process started with it closed (``>&-``; Python sets
    ``sys.stdout`` to None and click's ``echo`` then prints nothing): every write fails
    as a closed descriptor would (strerror "it is closed", which solve's message
    repeats), so a command that prints its result reports it."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "it is closed")

    def fileno(self) -> int:
        raise io.UnsupportedOperation("standard output is closed")


class WatchedStdout:
    """``sys.stdout`` as it was, noting the write or flush that failed: print() and Rich
    raise from C or from deep inside, and unbuffered (``PYTHONUNBUFFERED``) their failure
    leaves nothing to flush later, so only the stream can tell it was standard output."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.failed: OSError | None = None

    def write(self, text):
        try:
            return self._inner.write(text)
        except OSError as exc:
            self.failed = exc
            raise

    def flush(self) -> None:
        try:
            self._inner.flush()
        except OSError as exc:
            self.failed = exc
            raise

    def __getattr__(self, name):
        return getattr(self._inner, name)


def close_stdout() -> None:
    """Install :class:`ClosedStdout` for a process started with standard output closed,
    and put /dev/null on descriptor 1: a file opened later would otherwise get that
    descriptor and become the standard output of every subprocess (ssh)."""
    import os

    sys.stdout = ClosedStdout()
    try:
        os.fstat(1)
    except OSError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            if devnull != 1:
                os.dup2(devnull, 1)
                os.close(devnull)
        except OSError:
            pass


def silence_stdout() -> None:
    """Point standard output at /dev/null after a write to it failed (a full disk, a closed
    pipe), so the interpreter's last flush at exit cannot fail again with a traceback."""
    import os

    if isinstance(sys.stdout, ClosedStdout):
        sys.stdout = open(os.devnull, "w")
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


#: The longest error line printed whole; a longer one keeps its start (the flag or file)
#: and its end (what is wrong) around a note of what was cut.
MAX_ERROR_CHARS = 600


def settle_stdout() -> None:
    """Flush standard output now; where that fails (a full disk, a closed pipe) point it
    at /dev/null, so the interpreter's own flush at exit cannot fail later (a traceback-like
    notice and exit status 120 in place of the command's)."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError:
        silence_stdout()


def fail(message: str, code: ExitCode = ExitCode.USAGE) -> "typer.Exit":
    """Print ``error: message`` on stderr (one line) and return the Exit to raise."""
    from solver.files import shown

    settle_stdout()
    one_line = shown(" ".join(str(message).split()))  # no line breaks, no escape sequences
    if len(one_line) > MAX_ERROR_CHARS:  # a 10,000-character name made a 10 KB line
        head, tail = MAX_ERROR_CHARS * 2 // 3, MAX_ERROR_CHARS // 4
        cut = len(one_line) - head - tail
        one_line = f"{one_line[:head]} ...({cut} characters)... {one_line[-tail:]}"
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
        from geoconsole.entry import command_starts

        command_starts()  # Ctrl-C from here on is this command's to handle
        if sys.stdout is None:
            close_stdout()
        if not isinstance(sys.stdout, (ClosedStdout, WatchedStdout)):
            sys.stdout = WatchedStdout(sys.stdout)
        try:
            out = func(*args, **kwargs)
            sys.stdout.flush()  # what print() left buffered fails here, not at exit
            return out
        except typer.Exit:  # the command's own exit code, whatever standard output did
            settle_stdout()
            raise
        except (UserError, *_domain_errors()) as exc:
            raise fail(with_flag(exc), exit_code_for(exc)) from None
        except KeyboardInterrupt:
            raise fail("interrupted", ExitCode.INTERRUPTED) from None
        except OSError as exc:
            if not _stdout_failed(exc):
                raise
            raise stdout_failure(exc) from None

    return wrapper


def stdout_failure(exc: OSError) -> "typer.Exit":
    """The one line and exit code for a standard output that cannot be written."""
    silence_stdout()
    return fail(f"standard output: cannot write ({exc.strerror or exc})", ExitCode.FAILED)


def run_app(app) -> None:
    """Run the Typer ``app`` as the ``geoconsole`` command. Output click writes before any
    command runs (``--help``) fails like a command's: one line and exit 1 when standard
    output is closed or full, never a traceback or a silent exit 0."""
    if sys.stdout is None:
        close_stdout()
    try:
        app()
    except OSError as exc:
        if not _stdout_failed(exc):
            raise
        raise SystemExit(stdout_failure(exc).exit_code) from None


def _stdout_failed(exc: OSError) -> bool:
    """Whether ``exc`` came from writing standard output (a full disk, a closed pipe):
    raised inside click's ``echo``, or standard output still cannot flush (a ``print``
    whose text is still buffered)."""
    if isinstance(sys.stdout, ClosedStdout):  # every write to it fails: print, Rich, echo
        return True
    if isinstance(sys.stdout, WatchedStdout) and sys.stdout.failed is exc:
        return True
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "echo" and "click" in code.co_filename:
            return True
        tb = tb.tb_next
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except OSError:
        return True
    return False
