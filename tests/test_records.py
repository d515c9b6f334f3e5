"""Run records: whole lines only, even when a write dies half-way."""

import json
import os

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


def test_a_crash_while_writing_leaves_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "runs.jsonl"
    append_record(path, {"kind": "solve", "n": 1})
    before = path.read_bytes()

    def dying_fsync(fd):
        raise OSError("disk vanished")

    monkeypatch.setattr(os, "fsync", dying_fsync)
    with pytest.raises(OSError):
        append_record(path, {"kind": "solve", "n": 2, "rank_map": list(range(4096))})
    assert path.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_torn_last_line_from_elsewhere_is_not_glued_to_the_next(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"kind": "solve"}\n{"kind": "sol')
    append_record(path, {"kind": "launch"})
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["kind"] == "launch"


def test_non_finite_values_are_refused(tmp_path):
    with pytest.raises(ValueError):
        append_record(tmp_path / "r.jsonl", {"score_s": float("nan")})
