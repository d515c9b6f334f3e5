"""The one launch flow: connect, find data interfaces, open enough channels, run, close.

Used by ``launch``, the console's Launch screen and ``validate`` (for each placement it
measures). Every step's remote failure becomes a :class:`~geoconsole.errors.RemoteError`
naming the host; every connection opened here is closed on the way out, whatever
happens (a failed rank, Ctrl-C, a cancelled worker).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterable, Mapping

from geoconsole.errors import RemoteError
from geoconsole.launch.plan import LaunchPlan


@dataclass(frozen=True)
class Reach:
    """How to reach the fleet: the inventory's hosts and the host-key policy."""

    ssh_hosts: Mapping[str, Any]
    known_hosts: str | None = None
    accept_new: bool = False

    def hosts_for(self, names: Iterable[str]) -> dict[str, Any]:
        """The inventory host of each fabric host name, in any case (as DNS: the plan keeps
        the fabric's spelling, the inventory may write it otherwise); RemoteError naming
        the first one the inventory lacks."""
        by_key = {name.lower(): h for name, h in self.ssh_hosts.items()}
        names = list(names)
        missing = sorted(n for n in names if n.lower() not in by_key)
        if missing:
            raise RemoteError(f"host {missing[0]!r} of the fabric is not in the inventory")
        return {n: by_key[n.lower()] for n in names}


@asynccontextmanager
async def connected(reach: Reach, counts: Mapping[str, int]) -> AsyncIterator[dict[str, list[Any]]]:
    """Sessions for every host of ``counts`` (host -> ranks): one connection per
    RANKS_PER_CONNECTION ranks, as sshd's MaxSessions requires. Closed on exit."""
    from geoconsole.launch.run import close_sessions, sessions_for_counts
    from probes.ssh import SSHError, SSHPool  # asyncssh: only where hosts are reached

    ssh = reach.hosts_for(counts)
    options: dict[str, Any] = {"accept_new": reach.accept_new}
    if reach.known_hosts:
        options["known_hosts"] = reach.known_hosts
    pool = SSHPool(**options)
    sessions: dict[str, list[Any]] = {}
    try:
        # every host's connect runs to its end (each bounded by the connect timeout), so
        # the error names every host that cannot be reached and none is left connecting
        results = await asyncio.gather(*(pool.session(ssh[h]) for h in counts),
                                       return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        for r in failed:
            if not isinstance(r, SSHError):
                raise r
        if failed:
            more = f" (and {len(failed) - 1} more: {', '.join(e.host for e in failed[1:])})" if len(failed) > 1 else ""
            raise RemoteError(f"{failed[0]}{more}")
        try:
            sessions = await sessions_for_counts(pool, ssh, counts)
        except SSHError as exc:
            raise RemoteError(str(exc)) from None
        yield sessions
    finally:
        close_sessions(sessions)
        await pool.close()


async def with_interfaces(plan: LaunchPlan, sessions: Mapping[str, Any],
                          rebuild: Callable[[dict[str, str]], LaunchPlan]) -> LaunchPlan:
    """The plan with every open gloo interface found by ``ip route get`` on its host."""
    from geoconsole.launch.run import resolve_interfaces
    from probes.ssh import SSHError

    if "gloo" not in plan.backend or all(p.interface is not None for p in plan.processes):
        return plan
    try:
        found = await resolve_interfaces(plan, sessions)
    except (RuntimeError, SSHError) as exc:
        raise RemoteError(str(exc)) from None
    return rebuild(found)


async def discover(sessions: Mapping[str, list[Any]], reach: Reach) -> dict[str, Any]:
    """What discovery reports now on every host of ``sessions`` (host -> HostInfo): the
    versions, interface, MTU and GPUs the measurement is compared with before a launch."""
    from probes.discovery import discover_host, peer_for
    from probes.ssh import SSHError

    names = list(sessions)  # the plan's (the fabric's) spelling, as the measurement names them
    ssh = reach.hosts_for(names)
    hosts = [ssh[n] for n in names]

    async def one(k: int) -> Any:
        return await discover_host(sessions[names[k]][0], hosts[k], peer=peer_for(hosts, k))

    try:
        found = await asyncio.gather(*(one(k) for k in range(len(hosts))))
    except SSHError as exc:
        raise RemoteError(str(exc)) from None
    return dict(zip(names, found))


async def connect_and_run(plan: LaunchPlan, reach: Reach, rebuild: Callable[[dict[str, str]], LaunchPlan], *,
                          sink=None, abort_on_failure: bool = True, grace_s: float | None = None,
                          on_step: Callable[[str], None] = lambda _m: None,
                          check: Callable[[dict[str, Any]], None] | None = None):
    """Run ``plan`` on the fleet: ``(result, final plan)``.

    ``rebuild(interfaces)`` makes the plan again with the interfaces found on the hosts
    (``build_plan`` with the caller's options). ``on_step`` hears "connecting", "starting".
    ``check(discovered)``, when given, sees every host's discovery (:func:`discover`)
    before any rank starts; raising there starts nothing.
    """
    from geoconsole.launch.run import DEFAULT_GRACE_S, default_sink, run_plan
    from probes.ssh import SSHError

    counts = Counter(p.host for p in plan.processes)
    on_step(f"connecting to {len(counts)} hosts")
    async with connected(reach, counts) as sessions:
        plan = await with_interfaces(plan, sessions, rebuild)
        if check is not None:
            on_step("comparing the measurement with the hosts")
            check(await discover(sessions, reach))
        on_step(f"starting {plan.world_size} ranks")
        try:
            result = await run_plan(plan, sessions, abort_on_failure=abort_on_failure,
                                    sink=sink or default_sink,
                                    grace_s=DEFAULT_GRACE_S if grace_s is None else grace_s)
        except SSHError as exc:
            raise RemoteError(str(exc)) from None
    return result, plan
