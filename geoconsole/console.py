"""Entry point of the Textual console (imports textual)."""

from __future__ import annotations

from pathlib import Path


def run_console(*, inventory: Path | None = None, session: Path | None = None) -> int:
    """Run the console app; returns the process exit code."""
    from geoconsole.app import create_app
    from geoconsole.cli.errors import exit_code_for, fail
    from geoconsole.errors import GeoconsoleError

    try:
        app = create_app(inventory=inventory, session=session)
    except GeoconsoleError as exc:  # a bad file: one line and its exit code, no traceback
        raise fail(str(exc), exit_code_for(exc)) from None
    app.run()
    return int(app.return_code or 0)
