"""Console session state: fabric, workload, labels, solutions; saved as one JSON file.

The session is plain data (no textual): the app holds one and the screens read it.
Labels live on the fabric's devices (region, zone, network group per row), so the
fabric JSON inside a session is the labelled fabric. A solution remembers the digest of
the fabric and labels it was solved on; it is *stale* when either has changed since,
computed on demand rather than stored as a flag that could fall out of step.
"""

from __future__ import annotations

import hashlib
import json
import math
import unicodedata
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from geoconsole.errors import InputError
from geoconsole.labels import LabelError, LabelSet, validate_label
from solver.fabric import Device, Fabric, FabricError, fabric_from_json, parse_timestamp, write_atomic
from solver.workload import Workload

SESSION_FORMAT = "geoconsole-session/1"

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso(clock: Clock) -> str:
    return clock().astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class SessionError(InputError):
    """A session file is malformed; the message is one line naming the file and field."""


@dataclass(eq=False)
class Solution:
    """One placement: the rank map and what it was computed from.

    ``rank_map[i]`` is the global rank of fabric row ``i``; ``fun`` the Comm seconds.
    ``baselines`` maps a distribution name to its sampled values (seconds).
    """

    name: str
    rank_map: np.ndarray
    fun: float
    workload: Workload
    digest: str
    created_at: str
    bound: float | None = None
    status: str = ""
    message: str = ""
    seed: int | None = None
    nit: int = 0
    nfev: int = 0
    elapsed_s: float = 0.0
    history: list[tuple[float, float]] = field(default_factory=list)
    baselines: dict[str, list[float]] = field(default_factory=dict)
    #: What geoconsole.advice found about this solution (``Advice.to_json`` each).
    advice: list[dict[str, Any]] = field(default_factory=list)
    #: Which strategy (and worker) found it, e.g. "worker 0: parallel tempering, then descent".
    found_by: str = ""

    def __post_init__(self) -> None:
        self.rank_map = np.asarray(self.rank_map, dtype=int)

    def rank_map_text(self) -> str:
        """The ``rank_map=(...)`` form ``solve`` prints (a bash array: ranks apart by spaces)."""
        from geoconsole.report import format_rank_map

        return format_rank_map(self.rank_map)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rank_map": [int(r) for r in self.rank_map],
            "fun": self.fun,
            "workload": self.workload.to_json(),
            "digest": self.digest,
            "created_at": self.created_at,
            "bound": self.bound,
            "status": self.status,
            "message": self.message,
            "seed": self.seed,
            "nit": self.nit,
            "nfev": self.nfev,
            "elapsed_s": self.elapsed_s,
            "history": [[t, v] for t, v in self.history],
            "baselines": self.baselines,
            "advice": self.advice,
            "found_by": self.found_by,
        }

    @classmethod
    def from_json(cls, doc: Any, where: str) -> "Solution":
        """A solution from its JSON; SessionError naming the field (``where.field``)."""
        if not isinstance(doc, dict):
            raise SessionError(f"{where}: expected an object")
        for key in ("name", "rank_map", "fun", "workload", "digest", "created_at"):
            if key not in doc:
                raise SessionError(f"{where}: missing field {key!r}")
        _known_fields(doc, SOLUTION_FIELDS, where)
        if parse_timestamp(doc["created_at"]) is None:
            raise SessionError(f"{where}.created_at: expected an ISO 8601 time, got {repr(doc['created_at'])[:40]}")
        opt = lambda key, default: doc.get(key, default) if doc.get(key) is not None else default  # noqa: E731
        return cls(
            name=_text(doc["name"], f"{where}.name", MAX_NAME_CHARS),
            rank_map=np.asarray(_permutation(doc["rank_map"], f"{where}.rank_map"), dtype=int),
            fun=_number(doc["fun"], f"{where}.fun"),
            workload=_workload(doc["workload"], f"{where}.workload"),
            digest=_text(doc["digest"], f"{where}.digest"),
            created_at=_text(doc["created_at"], f"{where}.created_at"),
            bound=None if doc.get("bound") is None else _number(doc["bound"], f"{where}.bound"),
            status=_one_line(opt("status", ""), f"{where}.status"),
            message=_one_line(opt("message", ""), f"{where}.message"),
            seed=None if doc.get("seed") is None else _whole(doc["seed"], f"{where}.seed"),
            nit=_whole(opt("nit", 0), f"{where}.nit"),
            nfev=_whole(opt("nfev", 0), f"{where}.nfev"),
            elapsed_s=_seconds(opt("elapsed_s", 0.0), f"{where}.elapsed_s"),
            history=_history(opt("history", []), f"{where}.history"),
            baselines=_baselines(opt("baselines", {}), f"{where}.baselines"),
            advice=_advice(opt("advice", []), f"{where}.advice"),
            found_by=_one_line(opt("found_by", ""), f"{where}.found_by"),
        )


# -- typed fields of a session file -----------------------------------------------------
def _advice(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(a, dict) for a in value):
        raise SessionError(f"{where}: expected a list of objects (code, severity, message, subject)")
    for k, a in enumerate(value):
        for key, v in a.items():
            if not isinstance(v, (str, type(None))):
                raise SessionError(f"{where}[{k}].{key}: expected text")
    return [dict(a) for a in value]


#: Longest text field a session keeps (paths, messages), and longest name (the tab bar
#: shows it: a 5,000-character name emptied the bar; a fleet session is named after its
#: inventory file, up to 255 characters).
MAX_TEXT_CHARS = 4096
MAX_NAME_CHARS = 300


def _text(value: Any, where: str, most: int = MAX_TEXT_CHARS) -> str:
    """Text of one line: no control characters (an ESC drew colours, a line break split
    the Solve tab's status), at most ``most`` characters."""
    if not isinstance(value, str):
        raise SessionError(f"{where}: expected text, got {type(value).__name__}")
    if len(value) > most:
        raise SessionError(f"{where}: {len(value)} characters, at most {most}")
    bad = next((c for c in value if unicodedata.category(c) in _NOT_TEXT), None)
    if bad is not None:  # a no-break or narrow space in a path is text (Zs); these are not
        raise SessionError(f"{where}: holds the control or format character {bad!r}")
    return value


#: Unicode categories a session's text may not hold: controls (ESC, line breaks), format
#: characters (a right-to-left override, a zero-width space) and line or paragraph
#: separators, which redraw or hide what the console shows.
_NOT_TEXT = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _one_line(value: Any, where: str) -> str:
    """What the solver wrote (status, message, strategy): line breaks and other control
    characters folded to spaces (a worker's multi-line error made the session unloadable)."""
    if not isinstance(value, str):
        raise SessionError(f"{where}: expected text, got {type(value).__name__}")
    folded = " ".join("".join(" " if unicodedata.category(c) in _NOT_TEXT else c for c in value).split())
    return _text(folded[:MAX_TEXT_CHARS], where)


#: The fields a session and each of its solutions are written with (Session.to_json,
#: Solution.to_json): any other is refused, with the nearest of these.
SESSION_FIELDS = frozenset({"format", "name", "inventory", "known_hosts", "workload", "fabric", "fabric_source",
                            "labels", "solutions", "solve_options", "launch_command"})
SOLUTION_FIELDS = frozenset({"name", "rank_map", "fun", "workload", "digest", "created_at", "bound", "status",
                             "message", "seed", "nit", "nfev", "elapsed_s", "history", "baselines", "advice",
                             "found_by"})


def _known_fields(doc: dict, known, where: str) -> None:
    """SessionError for a field the session format does not have (a typo is not ignored)."""
    from solver.fabric import _nearest

    unknown = sorted(set(doc) - set(known))
    if unknown:
        raise SessionError(f"{where}: unknown field {unknown[0]!r}{_nearest(unknown[0], known)}")


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SessionError(f"{where}: expected a finite number, got {str(value)[:40]}")
    return float(value)


def _seconds(value: Any, where: str) -> float:
    seconds = _number(value, where)
    if seconds < 0:
        raise SessionError(f"{where}: expected seconds >= 0, got {seconds:g}")
    return seconds


def _whole(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SessionError(f"{where}: expected a whole number >= 0, got {str(value)[:40]}")
    return value


def _permutation(value: Any, where: str) -> list[int]:
    if not isinstance(value, list) or not value:
        raise SessionError(f"{where}: expected a list of ranks")
    if not all(isinstance(r, int) and not isinstance(r, bool) for r in value):
        raise SessionError(f"{where}: expected whole-number ranks")
    if sorted(value) != list(range(len(value))):
        raise SessionError(f"{where}: not a permutation of 0..{len(value) - 1}")
    return value


def _workload(value: Any, where: str) -> Workload:
    if not isinstance(value, dict):
        raise SessionError(f"{where}: expected an object")
    try:
        return Workload(**value)
    except TypeError as exc:
        raise SessionError(f"{where}: {' '.join(str(exc).split())}") from None
    except ValueError as exc:
        raise SessionError(f"{where}: {exc}") from None


def _history(value: Any, where: str) -> list[tuple[float, float]]:
    if not isinstance(value, list):
        raise SessionError(f"{where}: expected a list of [seconds, Comm] pairs")
    out = []
    for k, item in enumerate(value):
        if not isinstance(item, list) or len(item) != 2:
            raise SessionError(f"{where}[{k}]: expected [seconds, Comm]")
        out.append((_number(item[0], f"{where}[{k}][0]"), _number(item[1], f"{where}[{k}][1]")))
    return out


def _baselines(value: Any, where: str) -> dict[str, list[float]]:
    if not isinstance(value, dict):
        raise SessionError(f"{where}: expected an object of name -> list of seconds")
    out = {}
    for name, values in value.items():
        if not isinstance(values, list):
            raise SessionError(f"{where}.{name}: expected a list of seconds")
        out[name] = [_number(v, f"{where}.{name}[{k}]") for k, v in enumerate(values)]
    return out


def fabric_digest(fabric: Fabric) -> str:
    """Hash of what a score depends on plus the labels a review shows.

    Hashes the raw array bytes rather than ``fabric.sha256()`` (canonical JSON): the
    screens ask on every redraw, and the JSON form takes seconds at 1024 devices.
    """
    h = hashlib.sha256()
    for m in (fabric.alpha_ms, fabric.beta_gbps):
        h.update(np.ascontiguousarray(m, dtype=float).tobytes())
    h.update(json.dumps(list(fabric.labels)).encode())
    if fabric.devices is not None:
        h.update(json.dumps([d.to_json() for d in fabric.devices], sort_keys=True).encode())
    return h.hexdigest()[:16]


@dataclass(eq=False)
class Session:
    """Everything the console works on. ``fabric`` is None until a fleet is measured."""

    fabric: Fabric | None
    workload: Workload
    inventory: str | None = None
    solutions: list[Solution] = field(default_factory=list)
    path: Path | None = None
    name: str = "session"
    #: known_hosts file for SSH (None: ~/.ssh/known_hosts).
    known_hosts: str | None = None
    #: Region / zone / network group per host and per GPU, with their sources.
    labels: LabelSet = field(default_factory=LabelSet)
    #: The Solve form's options of the last solve (seed, budget, time_limit, restarts).
    solve_options: dict[str, Any] = field(default_factory=dict)
    #: The Launch screen's training command as typed (None: the screen's default).
    launch_command: str | None = None

    def __post_init__(self) -> None:
        if self.fabric is not None:
            self.set_fabric(self.fabric, keep_labels=bool(self.labels.hosts or self.labels.gpus))

    # -- solutions ---------------------------------------------------------------
    @property
    def current(self) -> Solution | None:
        return self.solutions[-1] if self.solutions else None

    @property
    def previous(self) -> Solution | None:
        return self.solutions[-2] if len(self.solutions) > 1 else None

    def digest(self) -> str:
        return "" if self.fabric is None else fabric_digest(self.fabric)

    def is_stale(self, solution: Solution | None) -> bool:
        """True when the fabric or its labels changed since ``solution`` was computed."""
        return solution is not None and solution.digest != self.digest()

    def add_solution(self, solution: Solution) -> None:
        self.solutions.append(solution)

    # -- labels ------------------------------------------------------------------
    def devices(self) -> tuple[Device, ...]:
        """The fabric's devices, labelled."""
        if self.fabric is None:
            return ()
        assert self.fabric.devices is not None  # set_fabric gives every fabric devices
        return self.fabric.devices

    def set_fabric(self, fabric: Fabric, keep_labels: bool = True) -> None:
        """Use ``fabric`` (e.g. a finished sweep); the session's labels win over its own.

        A fabric without device records gets one device per row (``row<i>``, region =
        the row's label) so that it can be labelled.
        """
        if fabric.devices is None:
            devices = tuple(Device(host=f"row{i}", region=lab or None) for i, lab in enumerate(fabric.labels))
            fabric = replace(fabric, devices=devices)
        if keep_labels:
            fabric = self.labels.apply(fabric, keep_unset=True)
        self.labels = LabelSet.from_fabric(fabric)
        self.fabric = self.labels.apply(fabric, keep_unset=False)

    def edit_labels(self, rows: list[int], changes: dict[str, str | None]) -> int:
        """Set (None: clear) labels on fabric ``rows`` as the operator.

        A host whose every GPU is in ``rows`` is labelled once per host (and its GPU
        overrides of those fields dropped); other rows get per-GPU overrides. Raises
        LabelError on an invalid value. Returns the number of rows changed.
        """
        if self.fabric is None:
            raise ValueError("no fabric to label")
        devices = self.devices()
        chosen = {int(r) for r in rows}
        by_host: dict[str, list[int]] = {}
        for i, d in enumerate(devices):
            by_host.setdefault(d.host, []).append(i)
        for field_name, value in changes.items():
            validate_label(field_name, value)
        labels = self.labels.copy()
        for host, members in by_host.items():
            picked = [i for i in members if i in chosen]
            if not picked:
                continue
            whole = len(picked) == len(members)
            for field_name, value in changes.items():
                if whole:
                    labels.set(host, field_name, value)
                    for i in members:
                        labels.gpus.get((host, devices[i].gpu), {}).pop(field_name, None)
                else:
                    for i in picked:
                        labels.set(host, field_name, value, gpu=devices[i].gpu)
        self.labels = labels
        self.fabric = labels.apply(self.fabric, keep_unset=False)
        return len(chosen)

    def leave_out(self, names: list[str]) -> int:
        """Drop the named devices (``HOST`` or ``HOST:GPU``, as ``solve --exclude``) from the
        fabric. Solutions are cleared: a rank map covers every device of the fabric (the
        session file checks it). Returns the devices left."""
        from geoconsole.prepare import excluded_rows

        if self.fabric is None:
            raise ValueError("no fabric to leave devices out of")
        drop = set(excluded_rows(self.fabric, names))
        self.set_fabric(self.fabric.subset([i for i in range(self.fabric.n) if i not in drop]))
        self.solutions = []
        return self.fabric.n

    def accept_suggested_groups(self) -> str:
        """Cluster the measured fabric and accept its network groups (source "suggested").

        An operator's label is never replaced. Returns a one-line summary.
        """
        from geoconsole.labels import apply_suggestions
        from solver.suggest import suggest_network_groups

        if self.fabric is None:
            raise ValueError("no fabric to cluster")
        found = suggest_network_groups(self.fabric)
        if found.clusters is None:
            return f"no network groups suggested: {found.reason}"
        labels = self.labels.copy()
        count, kept = apply_suggestions(labels, self.devices(), found.changes)
        self.labels = labels
        self.fabric = labels.apply(self.fabric, keep_unset=False)
        note = f"; kept {len(kept)} operator label(s)" if kept else ""
        return f"{len(found.names)} network group(s) suggested, {count} label(s) set{note}"

    # -- persistence -------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": SESSION_FORMAT,
            "name": self.name,
            "inventory": self.inventory,
            "known_hosts": self.known_hosts,
            "workload": self.workload.to_json(),
            "fabric": None if self.fabric is None else self.fabric.to_json(),
            "fabric_source": None if self.fabric is None else self.fabric.source,
            "labels": self.labels.to_json(),
            "solutions": [s.to_json() for s in self.solutions],
            "solve_options": dict(self.solve_options),
            "launch_command": self.launch_command,
        }

    def save(self, path: str | Path) -> Path:
        """Write the session JSON atomically; returns the path written."""
        path = Path(path)
        text = json.dumps(self.to_json(), indent=1, allow_nan=False, default=_json_default) + "\n"
        write_atomic(path, text)
        self.path = path
        return path


def _json_default(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        v = float(value)
        return v if math.isfinite(v) else None
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def session_from_json(doc: Any, source: str) -> Session:
    if not isinstance(doc, dict):
        raise SessionError(f"{source}: expected a JSON object")
    if doc.get("format") != SESSION_FORMAT:
        raise SessionError(f"{source}: format: expected {SESSION_FORMAT!r}, got {doc.get('format')!r}")
    if "workload" not in doc:
        raise SessionError(f"{source}: missing field 'workload'")
    _known_fields(doc, SESSION_FIELDS, source)
    workload = _workload(doc["workload"], f"{source}: workload")
    for key in ("fabric_source", "inventory", "name", "known_hosts"):
        if doc.get(key) is not None:
            _text(doc[key], f"{source}: {key}", MAX_NAME_CHARS if key == "name" else MAX_TEXT_CHARS)
    fabric = None
    if doc.get("fabric") is not None:
        try:
            fabric = fabric_from_json(doc["fabric"], doc.get("fabric_source") or f"{source}#fabric")
        except FabricError as exc:
            raise SessionError(f"{source}: fabric: {exc}") from None
    try:
        labels = LabelSet.from_json(doc.get("labels") or {}, f"{source}: labels")
    except LabelError as exc:
        raise SessionError(str(exc)) from None
    raw = doc.get("solutions") or []
    if not isinstance(raw, list):
        raise SessionError(f"{source}: solutions: expected a list")
    solutions = [Solution.from_json(s, f"{source}: solutions[{i}]") for i, s in enumerate(raw)]
    if solutions and fabric is None:  # screens disagreed: Solve showed one, Rank map "no solution"
        raise SessionError(f"{source}: solutions: {len(solutions)} without the fabric they place (no 'fabric')")
    for i, s in enumerate(solutions):
        if fabric is not None and len(s.rank_map) != fabric.n:
            raise SessionError(f"{source}: solutions[{i}].rank_map: {len(s.rank_map)} entries for {fabric.n} devices")
        if s.workload.n_devices != len(s.rank_map):
            raise SessionError(f"{source}: solutions[{i}].workload: D_PP {s.workload.d_pp} x D_DP "
                               f"{s.workload.d_dp} does not fit its {len(s.rank_map)} ranks")
    command = doc.get("launch_command")
    why = "expected text" if command is not None and not isinstance(command, str) else command_problem(command or "")
    if why:
        raise SessionError(f"{source}: launch_command: {why}")
    inventory = doc.get("inventory")
    try:
        session = Session(
            fabric=fabric,
            workload=workload,
            inventory=None if inventory is None else str(inventory),
            solutions=solutions,
            path=Path(source),
            name=str(doc.get("name") or "session"),
            known_hosts=None if doc.get("known_hosts") is None else str(doc["known_hosts"]),
            labels=labels,
            solve_options=_solve_options(doc.get("solve_options"), f"{source}: solve_options"),
            launch_command=command,
        )
    except LabelError as exc:  # the fabric's own labels (a row label with a space, say)
        raise SessionError(f"{source}: fabric: {' '.join(str(exc).split())}") from None
    _check_scores(session, source)
    return session


def _check_scores(session: Session, source: str) -> None:
    """SessionError unless each solution computed on the session's fabric as it is (same
    digest) has the Comm its rank map scores there, and no bound above it: the Solve tab
    showed a stored ``fun`` of 1.0 s (gap -4750%) where the Rank map tab rescored 51.50 s.
    One cost model per distinct workload, O(N^2) each; solutions of another fabric
    (stale) are left as stored, and so is a fabric with unmeasured pairs."""
    from solver.cost import CostModel

    if session.fabric is None or session.fabric.missing_pairs():
        return
    digest, models = session.digest(), {}
    for i, s in enumerate(session.solutions):
        if s.digest != digest:
            continue
        key = json.dumps(s.workload.to_json(), sort_keys=True)
        if key not in models:
            models[key] = CostModel.from_fabric(session.fabric, s.workload)
        comm = float(models[key].score_rank_map(s.rank_map).comm)
        if not math.isclose(comm, s.fun, rel_tol=1e-6, abs_tol=1e-9):
            raise SessionError(f"{source}: solutions[{i}].fun: {s.fun:.6g} s, but its rank map scores "
                               f"{comm:.6g} s on the session's fabric")
        if s.bound is not None and s.bound > s.fun * (1 + 1e-6) + 1e-9:
            raise SessionError(f"{source}: solutions[{i}].bound: {s.bound:.6g} s lies above its Comm "
                               f"{s.fun:.6g} s (a lower bound cannot)")


#: Longest training command a session keeps.
MAX_COMMAND_CHARS = 4096


def command_problem(text: str) -> str | None:
    """Why ``text`` cannot be kept as a session's training command (None: it can): the
    Launch screen checks it on Enter with the same rule the session's loader applies."""
    import unicodedata

    if len(text) > MAX_COMMAND_CHARS:
        return f"at most {MAX_COMMAND_CHARS} characters, got {len(text)}"
    bad = next((c for c in text if unicodedata.category(c) == "Cc" and c != "\t"), None)
    if bad is not None:
        return f"one line without control characters, got {bad!r}"
    return None


def _solve_options(value: Any, where: str) -> dict[str, Any]:
    """The Solve form's saved options, each checked against the CLI's limits (absent or
    null ones are left out: the form's defaults)."""
    from geoconsole.solving import option_range_problem

    if value is None:
        return {}
    if not isinstance(value, dict):
        raise SessionError(f"{where}: expected an object")
    unknown = sorted(set(value) - {"seed", "budget", "time_limit", "restarts"})
    if unknown:
        raise SessionError(f"{where}: unknown field {unknown[0]!r}")
    out: dict[str, Any] = {}
    for key in ("seed", "budget", "restarts", "time_limit"):
        if value.get(key) is None:
            continue
        got = _number(value[key], f"{where}.{key}") if key == "time_limit" else _whole(value[key], f"{where}.{key}")
        problem = option_range_problem(key, got)
        if problem:
            raise SessionError(f"{where}.{key}: {problem}, got {got:g}" if key == "time_limit" else
                               f"{where}.{key}: {problem}, got {got}")
        out[key] = got
    return out


#: Largest session file read (a 4096-device fabric with a few solutions fits).
MAX_SESSION_BYTES = 1 << 30


def load_session(path: str | Path) -> Session:
    """Read a saved session; raises SessionError with a one-line message."""
    from solver.files import load_json

    return session_from_json(load_json(path, "session", max_bytes=MAX_SESSION_BYTES, error=SessionError),
                             str(path))


def demo_session(name: str = "worldwide") -> Session:
    """A session on one of the built-in demo fabrics."""
    from geoconsole.demo_fabrics import DEMOS

    if name not in DEMOS:
        raise SessionError(f"demo: unknown demo {name!r} (choose from {', '.join(DEMOS)})")
    make, workload = DEMOS[name]
    return Session(fabric=make(), workload=workload, name=f"demo {name}")
