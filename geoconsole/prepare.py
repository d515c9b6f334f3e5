"""Preparing a solve: the workload's shape, the devices that take part, estimates, seeds.

One path for every caller (``solve``, ``validate``, the console's Solve screen):
:func:`workload_for` sizes the workload from the fabric, :func:`prepare_for_solve`

1. fills unmeasured pairs with estimates when asked, on the *whole* fabric, so that
   estimates learn from every measured pair (solver.estimate),
2. selects ``D_PP x D_DP`` devices when the fabric has more, or when a locality policy, a
   region list or devices left out by the operator (``exclude``) ask (solver.selection;
   an unmet required policy is a PolicyError),
3. refuses a fabric that still has unmeasured pairs (one message, naming them),
4. derives the topology seed orders of the selected rows (solver.orders).

Errors are the core's (:mod:`geoconsole.errors`) and name no command-line flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from geoconsole.errors import InputError, PolicyError
from solver.fabric import Fabric
from solver.workload import Workload, WorkloadError


class UnmeasuredPairsError(InputError):
    """The fabric has pairs with no measurement and no estimate."""


class UnknownDeviceError(InputError):
    """A device to leave out that the fabric does not have."""


@dataclass(eq=False)
class Prepared:
    """A fabric made ready for the search: selected, filled, with topology seed orders.

    fabric:
        What to solve on (the selected rows, estimates filled).
    selection:
        The Selection when rows were chosen (``fabric.subset`` of them), else None.
    filled_pairs:
        Pairs of ``fabric`` that are estimated, not measured (counted after selection).
    seed_orders:
        ``seed_orders_for(fabric)`` for ``solve(..., seed_orders=...)``.
    """

    fabric: Fabric
    selection: Any
    filled_pairs: int
    seed_orders: list[list[int]]
    #: Pairs of ``fabric`` inferred from sampled pairs of the same two hosts (a sampled sweep).
    inferred_pairs: int = 0

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"estimated_pairs": self.filled_pairs, "inferred_pairs": self.inferred_pairs}
        if self.selection is not None:
            doc["selection"] = self.selection.to_json()
        return doc

    def lines(self) -> list[str]:
        """What was selected and estimated, for a report."""
        out = []
        if self.selection is not None:
            sel = self.selection
            out.append(f"selected   {len(sel.rows)} devices (group_locality={sel.policy}, "
                       f"level {sel.level}): {sel.summary}")
            reasons: dict[str, int] = {}
            for _row, why in sel.left_out:
                reasons[why] = reasons.get(why, 0) + 1
            for why, count in sorted(reasons.items()):
                out.append(f"left out   {count} device(s): {why}")
        if self.filled_pairs:
            out.append(f"estimated  {self.filled_pairs} pair(s) filled from labels and links, not measured")
        if self.inferred_pairs:
            out.append(f"inferred   {self.inferred_pairs} pair(s) inferred from sampled pairs of the same hosts "
                       "(not measured)")
        return out


def workload_for(n_devices: int, source: str, pp: int | None, dp: int | None, c_pp: float, c_dp: float,
                 pp_messages: float = 1.0, dp_messages: float = 1.0) -> Workload:
    """The workload for a fabric of ``n_devices``: missing D_PP / D_DP derived from it.

    Neither given: D_PP = 8 when it divides the device count, else all devices in one
    pipeline. Both given with ``D_PP x D_DP`` below the count: a subset is selected later.
    """
    n = n_devices
    if (pp is None) != (dp is None) and 0 < (pp or dp) <= n and n % (pp or dp):
        given = f"D_PP {pp}" if pp is not None else f"D_DP {dp}"
        raise InputError(f"{source}: {given} does not divide the {n_devices} devices; give both D_PP and D_DP "
                         f"(D_PP x D_DP <= {n_devices} uses a subset)", "shape")
    if pp is not None and dp is not None and pp * dp < n:
        n = pp * dp
    if pp is None and dp is None:
        pp = 8 if n % 8 == 0 else n
    if pp is None:
        pp = n // dp if dp and n % dp == 0 else 0
    if dp is None:
        dp = n // pp if pp and n % pp == 0 else 0
    if pp < 1 or dp < 1 or pp * dp != n:
        raise InputError(f"{source}: {n_devices} devices cannot hold D_PP {pp or '?'} x D_DP {dp or '?'}; "
                         f"choose D_PP x D_DP <= {n_devices}", "shape")
    try:
        return Workload(pp, dp, c_pp, c_dp, pp_messages, dp_messages)
    except WorkloadError as exc:  # say the flag the field came from
        flag = f"--{exc.field.replace('_', '-')}" if exc.field in _FLAG_FIELDS else exc.field
        raise InputError(f"{flag}: {exc.why}") from None


#: Workload fields set by a flag of the same name (``c_pp`` by ``--c-pp``).
_FLAG_FIELDS = {"c_pp", "c_dp", "pp_messages", "dp_messages"}


def parse_regions(text: str | None) -> list[str] | None:
    """``"a, b"`` -> ``["a", "b"]``; None stays None; an empty name is an InputError."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise InputError(f"empty name in {text!r}; expected names separated by commas", "regions")
    return parts


def selected_fabric(fabric: Fabric, chosen) -> Fabric:
    """The sub-fabric of the chosen rows, recording the selection in ``meta``."""
    sub = fabric.subset(list(chosen.rows))
    meta: dict[str, Any] = dict(sub.meta)
    meta["selection"] = {
        "from": fabric.source,
        "from_sha256": fabric.sha256(),
        "rows": list(chosen.rows),
        "policy": chosen.policy,
        "level": chosen.level,
        "summary": chosen.summary,
        "left_out": len(chosen.left_out),
    }
    sub.meta = meta
    return sub


def unmeasured_message(fabric: Fabric) -> str | None:
    """The one message for a fabric with unmeasured pairs (None when every pair is known)."""
    from probes.result import unmeasured_message as names

    found = names(fabric)
    return None if found is None else f"{found}; measure them, or fill them with estimates from the labels"


def excluded_rows(fabric: Fabric, names: Sequence[str]) -> list[int]:
    """Rows named by ``HOST`` (every device of the host) or ``HOST:GPU`` (one device), host
    names in any case (as DNS; a fabric never holds two that differ only in case);
    InputError naming the first name that matches no device."""
    rows: list[int] = []
    for name in names:
        key = name.lower()
        as_device = [i for i in range(fabric.n) if fabric.device_name(i).lower() == key]
        as_host = [i for i in range(fabric.n) if fabric.devices is not None and fabric.devices[i].host.lower() == key]
        if as_device and as_host and set(as_device) != set(as_host):
            # host "a:1" and GPU 1 of host "a" are both written a:1 (host names may hold ':')
            other = fabric.devices[next(i for i in as_device if i not in as_host)]
            raise InputError(f"{name!r} names both host {name!r} and a device of host {other.host!r} "
                             f"in {fabric.source}; rename the host (its HOST:GPU names are ambiguous)", "exclude")
        found = as_device or as_host
        if not found:
            raise UnknownDeviceError(f"{name!r} matches no device of {fabric.source} (expected HOST or HOST:GPU)",
                                     "exclude")
        rows += [i for i in found if i not in rows]
    return sorted(rows)


def select(fabric: Fabric, size: int, policy: str | None = None, regions: Sequence[str] | None = None,
           exclude: Sequence[str] = ()):
    """``select_devices`` with the fabric's own torch versions and links, leaving out the
    ``exclude`` devices (:func:`excluded_rows`); InputError when too few devices take part,
    PolicyError when the policy is unmet."""
    from solver.estimate import links_from_meta
    from solver.selection import POLICIES, SelectionError, TooFewDevices, select_devices, torch_versions_of

    if policy is not None and policy not in POLICIES:
        raise InputError(f"group locality: expected one of {', '.join(POLICIES)}, got {policy!r}", "group_locality")
    rows = excluded_rows(fabric, exclude)
    try:
        return select_devices(fabric, size, policy or "prefer", regions, torch_versions_of(fabric),
                              links_from_meta(fabric), exclude=rows)
    except TooFewDevices as exc:  # bad input (exit 2, as solve's shape check), not an unmet policy
        # the shape's hint only where the shape alone is short (--regions, --exclude name themselves)
        raise InputError(f"{fabric.source}: {exc}", None if exc.regions or rows else "shape") from None
    except SelectionError as exc:
        raise PolicyError(f"{fabric.source}: {exc}") from None


def fill(fabric: Fabric, estimates: Sequence[str] = (), learn: bool = True) -> tuple[Fabric, int]:
    """Fill unmeasured pairs from labels and links: ``(fabric, pairs filled)``."""
    from solver.estimate import defaults_from_flags, fill_missing

    try:
        defaults = defaults_from_flags(list(estimates), learn)
    except ValueError as exc:
        raise InputError(f"estimate: {exc}", "estimate") from None
    try:
        return fill_missing(fabric, defaults)
    except ValueError as exc:
        text = str(exc).removeprefix(f"{fabric.source}: ")  # the filled fabric's check names it too
        if estimates:  # a value the operator gave filled it
            raise InputError(f"estimate: filling unmeasured pairs of {fabric.source} gave {text}", "estimate") from None
        raise InputError(f"{fabric.source}: {text}") from None


def prepare_for_solve(
    fabric: Fabric,
    size: int,
    *,
    fill_missing: bool = False,
    estimates: Sequence[str] = (),
    learn: bool = True,
    group_locality: str | None = None,
    regions: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
) -> Prepared:
    """Fill (when asked) on the whole fabric, select ``size`` devices, then seed orders.

    See the module text for the order and why. Raises InputError (bad estimates,
    unmeasured pairs left, bad policy name) or PolicyError (a policy that cannot be met).
    """
    from solver.estimate import estimated_pair_count, inferred_pair_count, measured_mask
    from solver.orders import seed_orders_for

    if estimates and not fill_missing:
        raise InputError("estimates apply only when unmeasured pairs are filled")
    if fill_missing:
        fabric, _ = fill(fabric, estimates, learn)
    selection = None
    if fabric.n > size or regions is not None or group_locality is not None or exclude:
        selection = select(fabric, size, group_locality, regions, exclude)
        fabric = selected_fabric(fabric, selection)
    message = unmeasured_message(fabric)
    if message is not None:
        raise UnmeasuredPairsError(message, "fill_missing")
    try:
        count, inferred = estimated_pair_count(fabric), inferred_pair_count(fabric)
    except ValueError as exc:
        raise InputError(f"{fabric.source}: {exc}") from None
    return Prepared(fabric, selection, count, seed_orders_for(fabric, measured_mask(fabric)), inferred)
