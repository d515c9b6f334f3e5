"""The headless command line: the Typer app (:mod:`.main`), one module per command group.

``geoconsole.cli:main`` runs the command; the console script (:mod:`geoconsole.entry`) calls it. Nothing else imports it.
"""

from geoconsole.cli.main import app, main

__all__ = ["app", "main"]
