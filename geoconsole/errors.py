"""The core's errors: one base, a subclass per domain; the CLI maps them to exit codes.

Every error here is something the operator can fix or must know about; ``str()`` is the
whole one-line message, naming the file, field or host. Core code never names CLI flags
and never chooses an exit code: :mod:`geoconsole.cli.errors` does both at the edge.
"""

from __future__ import annotations


class GeoconsoleError(ValueError):
    """Base of the core's expected failures (a ValueError, as scipy's bad-input errors).

    ``field`` names the option at fault (``"estimate"``, ``"mode"``, ...) when one is, so
    that the command line can name the flag it came from without reading the message.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InputError(GeoconsoleError):
    """A malformed file, field or value (fabric, inventory, session, rank map, label)."""


class RemoteError(GeoconsoleError):
    """Hosts that cannot be reached or refuse: connection, host key, remote command."""


class PolicyError(GeoconsoleError):
    """The input is well formed but the request cannot be met (a required locality)."""
