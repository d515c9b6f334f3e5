"""Probe schedule: every device pair once, in rounds of disjoint host pairs.

Hosts play a round-robin tournament (the circle method): with ``H`` hosts (one
"bye" added when ``H`` is odd) there are ``H' - 1`` rounds of ``H' / 2`` host pairs,
every host pair meets exactly once, and no host is in two pairs of one round — so
concurrent transfers never share a host's NIC or CPU. A host pair's GPU pairs run in
sequence inside its slot. Intra-host pairs come first, in round 0, where every host
measures its own pairs at once (hosts are disjoint there too); with an odd number of
hosts each host measures them in the round it sits out instead.

Beyond tournament rounds, ``sequential`` puts every pair in a round of its own (one
pair at a time), the baseline the benchmark compares against. ``wanted`` keeps only
some pairs (a sampled sweep, a refresh) and ``groups`` marks the host pairs whose slot
ends with a concurrent test of all their device pairs.

The sweep runs each host's slots in round order but without a barrier between rounds:
a slot starts as soon as both its hosts are set up and done with their earlier slots,
so a host whose set-up is done early starts early and a short slot does not wait for
the longest one of its round.

Complexity: O(H^2 + P) for ``P`` device pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import AbstractSet, Sequence


@dataclass(frozen=True)
class Slot:
    """Device pairs ``(i, j)``, ``i < j``, run in sequence on ``hosts`` (1 or 2 host names)."""

    hosts: tuple[str, ...]
    pairs: tuple[tuple[int, int], ...]
    #: After the pairs, test all device pairs of the two hosts at once (sampled sweeps).
    group: bool = False


@dataclass(frozen=True)
class Round:
    """Slots that run concurrently; their host sets are disjoint."""

    index: int
    slots: tuple[Slot, ...]


def tournament(hosts: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Round-robin rounds of host pairs (circle method); each pair exactly once."""
    players: list[str | None] = list(hosts)
    if len(players) % 2:
        players.append(None)
    n = len(players)
    rounds = []
    for _ in range(n - 1):
        pairs = []
        for k in range(n // 2):
            a, b = players[k], players[n - 1 - k]
            if a is not None and b is not None:
                pairs.append((a, b))
        rounds.append(pairs)
        players = [players[0], players[-1], *players[1:-1]]
    return rounds


def schedule(device_hosts: Sequence[str], *, sequential: bool = False,
             wanted: AbstractSet[tuple[int, int]] | None = None,
             groups: AbstractSet[tuple[str, str]] = frozenset()) -> list[Round]:
    """Rounds covering every device pair once (or those ``wanted``, ``i < j``);
    ``device_hosts[i]`` is row ``i``'s host."""
    hosts = list(dict.fromkeys(device_hosts))
    rows: dict[str, list[int]] = {h: [] for h in hosts}
    for i, h in enumerate(device_hosts):
        rows[h].append(i)

    def keep(pairs) -> tuple[tuple[int, int], ...]:
        return tuple(p for p in pairs if wanted is None or p in wanted)

    groups_: list[list[Slot]] = []
    intra = {h: Slot((h,), keep(combinations(rows[h], 2))) for h in hosts if len(rows[h]) > 1}
    intra = {h: s for h, s in intra.items() if s.pairs}
    odd = len(hosts) % 2 == 1 and len(hosts) > 1
    if intra and not odd:
        groups_.append(list(intra.values()))
    for host_pairs in tournament(hosts):
        slots = []
        for a, b in host_pairs:
            pairs = keep(tuple(sorted((i, j))) for i in rows[a] for j in rows[b])
            group = (a, b) in groups or (b, a) in groups
            if pairs or group:
                slots.append(Slot((a, b), pairs, group))
        if odd:  # each host sits out one round: its own pairs fill that round
            playing = {h for pair in host_pairs for h in pair}
            slots += [intra[h] for h in hosts if h not in playing and h in intra]
        if slots:
            groups_.append(slots)
    if sequential:
        flat = [Slot(s.hosts, (p,)) for g in groups_ for s in g for p in s.pairs]
        flat += [Slot(s.hosts, (), True) for g in groups_ for s in g if s.group]
        return [Round(k, (s,)) for k, s in enumerate(flat)]
    return [Round(k, tuple(g)) for k, g in enumerate(groups_)]


def check_schedule(device_hosts: Sequence[str], rounds: Sequence[Round]) -> None:
    """Raise ``AssertionError`` unless ``rounds`` cover each pair once with disjoint hosts."""
    seen = []
    for rnd in rounds:
        used: set[str] = set()
        for slot in rnd.slots:
            if used & set(slot.hosts):
                raise AssertionError(f"round {rnd.index}: host in two slots: {sorted(used & set(slot.hosts))}")
            used |= set(slot.hosts)
            for i, j in slot.pairs:
                if {device_hosts[i], device_hosts[j]} != set(slot.hosts) and not (
                    len(slot.hosts) == 1 and device_hosts[i] == device_hosts[j] == slot.hosts[0]):
                    raise AssertionError(f"pair {(i, j)} not on slot hosts {slot.hosts}")
                seen.append((i, j))
    n = len(device_hosts)
    expected = sorted(combinations(range(n), 2))
    if sorted(seen) != expected:
        raise AssertionError(f"pairs covered {len(seen)} (with repeats), expected {len(expected)} distinct")
