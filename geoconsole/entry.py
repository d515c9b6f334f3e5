"""The ``geoconsole`` console script's first code.

Python takes about 0.3 s to import the command (typer, numpy); Ctrl-C in that time ended
in a KeyboardInterrupt traceback through the imports, and while click parsed the command
line in a silent exit 130. Until a command starts (:func:`command_starts`, called by
every command and by the console), a Ctrl-C here ends like any other interrupt before a
result exists: one line, exit 130. A process started with Ctrl-C ignored (a background
job) keeps ignoring it.
"""

from __future__ import annotations

import os
import signal


def _interrupted(signum, frame) -> None:
    os.write(2, b"error: interrupted\n")
    os._exit(130)  # mid-import: nothing to clean up, nothing printed yet


def command_starts() -> None:
    """Give Ctrl-C back to Python (KeyboardInterrupt, which commands handle) where this
    module took it; anywhere else, leave it be."""
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main() -> None:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)
    from geoconsole.cli import main as run

    run()
