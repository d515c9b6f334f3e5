"""Run records: one JSON line per solve, launch or validation, appended without tearing.

An append is one ``write(2)`` of the whole line on an ``O_APPEND`` descriptor under an
``flock`` (solver.files.append_line): concurrent appends never interleave and nothing is
left beside the file (no temporary copy, no lock file). Linux may cut a large write
short when the writer is killed (SIGKILL, OOM), leaving part of a line with no newline:
readers skip such an unterminated tail that is not a record (:func:`read_records`), and
the next append truncates it away under the lock, so every complete line stays a record.
Only regular files or new paths are written.
Records never hold secrets: no keys, passwords or environment.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Sequence



def geoconsole_version() -> str:
    try:
        return version("geoconsole")
    except PackageNotFoundError:
        return "unknown"


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


#: Most bytes of a record file's first line read to tell that it holds records.
FIRST_LINE_MAX = 64 << 20


def check_record_path(path: str | os.PathLike[str], inputs: Sequence[tuple[str, Any]] = ()) -> None:
    """FileError (one line naming the file) unless run records can be appended to ``path``.

    Refused: one of the command's ``inputs`` (``(name, path)`` pairs, e.g. the
    ``--matrix``), a missing folder, a folder, FIFO or device, and an existing file that
    does not hold run records (its first line is not a JSON object with a ``kind``,
    ``_starts_records``): appending would
    damage a fabric, a script or someone's notes. Commands call it before their work, so
    a bad ``--record`` fails at once, not after a search; ``append_record`` checks again.
    """
    from solver.files import FileError, check_not_input, write_target

    check_not_input(path, inputs)
    real, st = write_target(path)
    where = real if st is not None else (os.path.dirname(os.path.abspath(real)) or ".")
    if not os.access(where, os.W_OK):  # found now, not after the search it would record
        raise FileError(f"{path}: cannot write: permission denied"
                        + (" (its folder)" if st is None else ""))
    if st is None or st.st_size == 0:
        return
    try:
        with open(real, "rb") as handle:
            first = handle.readline(FIRST_LINE_MAX)
    except OSError as exc:
        raise FileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not _starts_records(first, whole=len(first) == st.st_size):
        raise FileError(f"{path}: is not a run-record file (its first line is not a JSON record); "
                        "name a new file or one that --record wrote")


def _starts_records(first: bytes, whole: bool) -> bool:
    """Whether a file's first line is that of a record file: a JSON object with the
    ``kind`` every record has (a fabric, a session or a solve written on one line is a
    JSON object too, without one), or, when it is the ``whole`` file, unterminated, the
    start of one (a first append cut short: ``{"`` and not JSON). A first line longer than
    FIRST_LINE_MAX is read cut short, not whole: no record file."""
    try:
        doc = json.loads(first)
    except (ValueError, RecursionError):
        return whole and not first.endswith(b"\n") and first.lstrip().startswith(b'{"')
    return isinstance(doc, dict) and isinstance(doc.get("kind"), str)


def append_record(path: str | os.PathLike[str], record: dict[str, Any],
                  inputs: Sequence[tuple[str, Any]] = ()) -> dict[str, Any]:
    """Append ``record`` (plus ``version`` and ``timestamp`` if absent) as one JSON line.

    FileError (one line naming the file) for what ``check_record_path`` refuses, or a
    write that fails.
    """
    from solver.files import append_line

    check_record_path(path, inputs)
    full = {"version": geoconsole_version(), "timestamp": now_utc(), **record}
    append_line(path, json.dumps(full, sort_keys=True, separators=(",", ":"), allow_nan=False),
                torn=_torn)
    return full


def _torn(tail: bytes) -> bool:
    """True when an unterminated last line is a cut-short append: it starts as a record
    does (``{``) but is not a whole JSON object. Other text is never taken for one."""
    if not tail.lstrip().startswith(b"{"):
        return False
    try:
        return not isinstance(json.loads(tail), dict)
    except (ValueError, RecursionError):
        return True


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All records of a file, oldest first (FileError naming the line that is not a record).

    An unterminated last line that is not a JSON object is skipped: it is an append still
    being written or one cut short by a killed writer, never a record.
    """
    from solver.files import FileError, parse_json, read_text

    text = read_text(path, "run record")
    lines = text.splitlines()
    if lines and not text.endswith("\n") and _torn(lines[-1].encode("utf-8")):
        lines.pop()  # an append being written, or one cut short by a killed writer
    out = []
    for k, line in enumerate(lines, 1):
        if not line.strip():
            continue
        doc = parse_json(line, f"{path}: line {k}")
        if not isinstance(doc, dict):
            raise FileError(f"{path}: line {k}: expected a JSON object")
        out.append(doc)
    return out
