"""The README's command opens the console in a real terminal and quits on q."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_in_pty(argv: list[str], keys: bytes, wait_for: bytes, timeout: float = 60.0) -> tuple[int, bytes]:
    """Start ``argv`` on a pseudo-terminal, send ``keys`` once ``wait_for`` was drawn."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    env.pop("TEXTUAL", None)
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT, close_fds=True)
    os.close(slave)
    seen = b""
    sent = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
            if not sent and wait_for in seen:
                time.sleep(0.3)
                os.write(master, keys)
                sent = True
            if proc.poll() is not None:
                break
        code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return code, seen


def test_geoconsole_opens_the_demo_and_quits_on_q():
    exe = Path(sys.executable).parent / "geoconsole"
    if not exe.exists():
        pytest.skip(f"{exe} not installed (run scripts/setup-env)")
    code, seen = run_in_pty([str(exe)], b"q", wait_for=b"demo:worldwide")
    assert b"demo:worldwide" in seen, seen[-500:]
    assert code == 0


def test_a_bad_session_file_is_one_line_and_exit_code_2(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text("{")
    proc = subprocess.run(
        [sys.executable, "-m", "geoconsole.cli", "--session", str(bad)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {bad}: invalid JSON at line 1 column 2: Expecting property name enclosed in double quotes"
