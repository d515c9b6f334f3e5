"""Run records: one JSON line per solve or launch, appended without ever tearing a line.

An append rewrites the file through a temporary copy and an atomic rename, under an
exclusive lock, so a crash at any point leaves either the old file or the old file plus
the whole new line. Records never hold secrets: no keys, passwords or environment.
"""

from __future__ import annotations

import fcntl
import json
import os
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from solver.fabric import write_atomic


def geoconsole_version() -> str:
    try:
        return version("geoconsole")
    except PackageNotFoundError:
        return "unknown"


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def append_record(path: str | os.PathLike[str], record: dict[str, Any]) -> dict[str, Any]:
    """Append ``record`` (plus ``version`` and ``timestamp`` if absent) as one JSON line."""
    path = Path(path)
    full = {"version": geoconsole_version(), "timestamp": now_utc(), **record}
    line = json.dumps(full, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"
    if path.parent and not path.parent.exists():
        raise FileNotFoundError(f"{path}: folder {path.parent} does not exist")
    lock_path = path.with_name(f".{path.name}.lock")
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = path.read_text() if path.exists() else ""
        if old and not old.endswith("\n"):
            old += "\n"
        write_atomic(path, old + line)
    return full


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All records of a file, oldest first."""
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]
