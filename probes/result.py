"""Reading a measured fabric back: which pairs are unmeasured, and why.

Used by ``solve`` to refuse a fabric with holes (naming them) and by ``probe`` for its
summary. Pure: imports only the solver's fabric model (no asyncssh).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from solver.fabric import Fabric


@dataclass(frozen=True)
class Unmeasured:
    """An unordered device pair with at least one direction unmeasured."""

    i: int
    j: int
    src: str
    dst: str
    #: The probe's reason (``fit_flag``) if the fabric records one.
    reason: str | None


def unmeasured_pairs(fabric: Fabric) -> list[Unmeasured]:
    """Every pair ``i < j`` that :meth:`Fabric.missing_pairs` reports, with names and reasons."""
    flags = fabric.extras.get("fit_flag")
    out = []
    for i, j in fabric.missing_pairs():
        reason = None
        if isinstance(flags, list) and len(flags) == fabric.n:
            for a, b in ((i, j), (j, i)):
                value = flags[a][b] if isinstance(flags[a], list) else None
                bad = not (math.isfinite(fabric.alpha_ms[a, b]) and math.isfinite(fabric.beta_gbps[a, b]))
                if bad and isinstance(value, str):
                    reason = value
                    break
        out.append(Unmeasured(i, j, fabric.device_name(i), fabric.device_name(j), reason))
    return out


def unmeasured_message(fabric: Fabric, limit: int = 8) -> str | None:
    """One line naming the unmeasured pairs (the first ``limit``), or None if complete.

    Example: ``fabric.json: 3 device pairs unmeasured: h0 - h2 (host-lost: h2: ...), ...``
    """
    missing = unmeasured_pairs(fabric)
    if not missing:
        return None
    parts = [f"{m.src} - {m.dst}" + (f" ({m.reason})" if m.reason else "") for m in missing[:limit]]
    more = f", and {len(missing) - limit} more" if len(missing) > limit else ""
    noun = "pair" if len(missing) == 1 else "pairs"
    return f"{fabric.source}: {len(missing)} device {noun} unmeasured: {', '.join(parts)}{more}"


def poor_fits(fabric: Fabric) -> list[tuple[str, str, float | None, str]]:
    """Measured directions kept with a fit flag: ``(src, dst, r2, flag)``."""
    flags, r2 = fabric.extras.get("fit_flag"), fabric.extras.get("fit_r2")
    out = []
    if not isinstance(flags, list):
        return out
    for i in range(fabric.n):
        for j in range(fabric.n):
            if i != j and isinstance(flags[i][j], str) and math.isfinite(fabric.beta_gbps[i, j]):
                value = r2[i][j] if isinstance(r2, list) else None
                out.append((fabric.device_name(i), fabric.device_name(j), value, flags[i][j]))
    return out
