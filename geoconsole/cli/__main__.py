"""``python -m geoconsole.cli``: the same as the ``geoconsole`` command."""

from geoconsole.cli.main import main

main()
