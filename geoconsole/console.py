"""Entry point of the Textual console (imports textual)."""

from __future__ import annotations

from pathlib import Path


def run_console(*, inventory: Path | None = None, session: Path | None = None) -> int:
    """Run the console app; returns the process exit code."""
    from geoconsole.app import create_app
    from geoconsole.errors import UserError, fail

    try:
        app = create_app(inventory=inventory, session=session)
    except UserError as exc:  # a bad file: one line and its exit code, no traceback
        raise fail(str(exc), exc.code) from None
    app.run()
    return int(app.return_code or 0)
