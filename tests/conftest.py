"""Shared fixtures. ``emulated_fleet``: a real SSH fleet in network namespaces.

Fleet tests carry ``@pytest.mark.fleet`` and use the session-scoped ``emulated_fleet``
fixture (see tests/fleetlib.py for the object it yields). Where the fleet cannot be
built (not root, no ``ip netns``, no sshd) they skip with the reason, except under
``CI=true``, where they fail instead: CI must exercise the real thing.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fleetlib import EmulatedFleet, fleet_unavailable  # noqa: E402

# A run started in the background (``nohup ... &``) inherits SIGINT ignored, and so would
# every command the tests start: Ctrl-C tests would then wait for an interrupt that never
# lands. A handler here (not SIG_IGN) makes exec'd children start with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def require_fleet() -> None:
    """Skip (or, under CI=true, fail) when an emulated fleet cannot be built here."""
    why = fleet_unavailable()
    if why is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {why}")
    pytest.skip(why)


@pytest.fixture(scope="session")
def emulated_fleet():
    """Four emulated hosts h0..h3 with real sshd and tbf-shaped links (100 Mbit..1 Gbit).

    Yields a :class:`fleetlib.EmulatedFleet`: ``inventory_path``, ``known_hosts_path``,
    ``client_key_path``, ``hosts`` (name, namespace, address, links), ``rates_mbit``,
    ``stop_sshd(name)``, ``start_sshd(name)``, ``processes(name)``,
    ``install_stub(name, program, script)``, ``write_inventory(path, names, extra)``.
    Tests that stop a host's sshd must start it again before they end.
    """
    require_fleet()
    fleet = EmulatedFleet(hosts=4).build()
    try:
        yield fleet
    finally:
        fleet.teardown()


@pytest.fixture(scope="module")
def ww_path(tmp_path_factory):
    """The world-wide demo fabric as a file (the CLI tests' --matrix)."""
    from geoconsole.demo_fabrics import worldwide_fabric

    path = tmp_path_factory.mktemp("fabric") / "worldwide.json"
    worldwide_fabric().save(path)
    return path
