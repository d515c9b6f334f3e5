"""Run records: whole lines only, even when a write dies half-way."""

import json

import pytest

from geoconsole.records import append_record, read_records


def test_append_adds_version_and_timestamp(tmp_path):
    path = tmp_path / "runs.jsonl"
    append_record(path, {"kind": "solve", "score_s": 1.5})
    append_record(path, {"kind": "launch"})
    rows = read_records(path)
    assert [r["kind"] for r in rows] == ["solve", "launch"]
    assert rows[0]["version"] and rows[0]["timestamp"].endswith("+00:00")
    assert path.read_text().count("\n") == 2


def test_a_killed_writer_leaves_whole_lines_and_nothing_beside_the_file(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "runs.jsonl"
    code = ("import sys\nfrom geoconsole.records import append_record\n"
            "for k in range(100000):\n"
            "    append_record(sys.argv[1], {'kind': 'solve', 'n': k, 'rank_map': list(range(2048))})\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)])
    deadline = time.monotonic() + 60
    while (not path.exists() or path.stat().st_size < 200_000) and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lines = path.read_text().splitlines()
    assert len(lines) > 5
    assert [json.loads(x)["n"] for x in lines] == list(range(len(lines)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.jsonl"]


def test_a_torn_last_line_from_elsewhere_is_not_glued_to_the_next(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"kind": "solve"}\n{"kind": "sol')
    append_record(path, {"kind": "launch"})
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["kind"] == "launch"


def test_non_finite_values_are_refused(tmp_path):
    with pytest.raises(ValueError):
        append_record(tmp_path / "r.jsonl", {"score_s": float("nan")})
