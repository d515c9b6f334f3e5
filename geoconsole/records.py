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
from typing import Any



def geoconsole_version() -> str:
    try:
        return version("geoconsole")
    except PackageNotFoundError:
        return "unknown"


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def append_record(path: str | os.PathLike[str], record: dict[str, Any]) -> dict[str, Any]:
    """Append ``record`` (plus ``version`` and ``timestamp`` if absent) as one JSON line.

    FileError (one line naming the file) for a folder, FIFO or device, a missing folder,
    or a write that fails.
    """
    from solver.files import append_line

    full = {"version": geoconsole_version(), "timestamp": now_utc(), **record}
    append_line(path, json.dumps(full, sort_keys=True, separators=(",", ":"), allow_nan=False),
                torn=_torn)
    return full


def _torn(tail: bytes) -> bool:
    """True when an unterminated last line is not a whole JSON object (a cut-short append)."""
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
