"""Run records: one JSON line per solve, launch or validation, appended without tearing.

An append is one ``write(2)`` of the whole line on an ``O_APPEND`` descriptor under an
``flock`` (solver.files.append_line): concurrent appends never interleave, a crash leaves
the old file or the old file plus the whole new line, and nothing is left beside the
file (no temporary copy, no lock file). Only regular files or new paths are written.
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
    append_line(path, json.dumps(full, sort_keys=True, separators=(",", ":"), allow_nan=False))
    return full


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All records of a file, oldest first (FileError naming the line that is not a record)."""
    from solver.files import FileError, parse_json, read_text

    out = []
    for k, line in enumerate(read_text(path, "run record").splitlines(), 1):
        if not line.strip():
            continue
        doc = parse_json(line, f"{path}: line {k}")
        if not isinstance(doc, dict):
            raise FileError(f"{path}: line {k}: expected a JSON object")
        out.append(doc)
    return out
