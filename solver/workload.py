"""Workload: the pipeline x data-parallel shape and the payloads it moves per step."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


class WorkloadError(ValueError):
    """A workload field out of range: ``field`` names it, ``why`` says why (the message
    is ``"field: why"``), so that callers can word it with their own flag or label."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}")
        self.field, self.why = field, why


@dataclass(frozen=True)
class Workload:
    """A ``d_pp``-stage pipeline replicated ``d_dp`` times (``d_pp * d_dp`` devices).

    c_pp:
        Decimal GB of activations crossing one stage boundary per step (one direction).
    c_dp:
        Decimal GB of one stage's gradient buffer entering the sharded exchange.
    pp_messages, dp_messages:
        Transfers that carry those payloads (each costs one latency ``alpha``).
    """

    d_pp: int
    d_dp: int
    c_pp: float
    c_dp: float
    pp_messages: float = 1.0
    dp_messages: float = 1.0

    def __post_init__(self) -> None:
        for name in ("d_pp", "d_dp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise WorkloadError(name, f"must be a whole number >= 1, got {v!r}")
        for name in ("c_pp", "c_dp", "pp_messages", "dp_messages"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not (0 <= float(v) < 1e9):
                raise WorkloadError(name, f"must be a finite number >= 0 and below 1e9, got {v!r}")

    @property
    def n_devices(self) -> int:
        return self.d_pp * self.d_dp

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


#: The spec's world-wide reference workload: 8 x 8, the corrected 0.512 GB activation and
#: the scheduler's 0.65 GB FP32 stage buffer, one message each.
DTFM_WORKLOAD = Workload(d_pp=8, d_dp=8, c_pp=0.512, c_dp=0.65)
