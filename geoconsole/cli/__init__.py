"""The headless command line: the Typer app (:mod:`.main`), one module per command group.

``geoconsole.cli:main`` is the console script. Nothing outside this package imports it.
"""

from geoconsole.cli.main import app, main

__all__ = ["app", "main"]
