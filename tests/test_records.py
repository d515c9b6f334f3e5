"""Run records: whole lines only, even when a write dies half-way."""

import json

import pytest

from geoconsole.records import append_record, read_records
from solver.files import FileError


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
    records = read_records(path)
    assert len(records) > 5
    assert [r["n"] for r in records] == list(range(len(records)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.jsonl"]
    # the next append repairs whatever the kill cut short: every line of the file is whole
    append_record(path, {"kind": "launch"})
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    docs = [json.loads(x) for x in lines[:-1]]
    assert [d.get("n") for d in docs[:-1]] == list(range(len(docs) - 1))
    assert docs[-1]["kind"] == "launch"


def test_a_torn_last_line_is_skipped_by_readers_and_truncated_by_the_next_append(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"kind": "solve"}\n{"kind": "sol')
    assert [r["kind"] for r in read_records(path)] == ["solve"]
    append_record(path, {"kind": "launch"})
    lines = path.read_text().splitlines()
    assert [json.loads(x)["kind"] for x in lines] == ["solve", "launch"]


def test_a_whole_last_line_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"kind": "solve"}\n{"kind": "validate"}')
    assert [r["kind"] for r in read_records(path)] == ["solve", "validate"]
    append_record(path, {"kind": "launch"})
    assert [json.loads(x)["kind"] for x in path.read_text().splitlines()] == ["solve", "validate", "launch"]


def test_a_torn_line_in_the_middle_is_named(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"kind": "solve"}\n{"kind": "sol\n{"kind": "launch"}\n')
    with pytest.raises(FileError, match="line 2"):
        read_records(path)


def test_non_finite_values_are_refused(tmp_path):
    with pytest.raises(ValueError):
        append_record(tmp_path / "r.jsonl", {"score_s": float("nan")})


def test_a_file_that_holds_no_records_is_refused_and_left_as_it_was(tmp_path):
    """Appending to notes, a fabric or a binary file would damage it: refused, unchanged."""
    for name, data in [("notes.txt", b"line one\nmy notes without a final newline"),
                       ("fabric.json", b'{\n "labels": ["a"]\n}\n'), ("blob.bin", bytes(range(256)) * 4),
                       ("compact.json", b'{"labels": ["a"], "alpha_ms": [[0]]}'),  # one line, as jq -c writes
                       ("compact-nl.json", b'{"a": 1}\n'), ("broken.json", b'{"a": \n{"kind": "solve"}\n'),
                       ("brace.txt", b"{not json, no newline")]:
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(FileError, match="is not a run-record file"):
            append_record(path, {"kind": "solve"})
        assert path.read_bytes() == data


def test_text_after_the_last_record_that_is_not_one_is_kept(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"kind": "solve"}\nsomeone\'s note')
    append_record(path, {"kind": "launch"})
    assert path.read_text().splitlines()[:2] == ['{"kind": "solve"}', "someone's note"]
    assert json.loads(path.read_text().splitlines()[2])["kind"] == "launch"


def test_a_one_line_file_longer_than_the_first_line_read_is_refused(tmp_path, monkeypatch):
    """A compact fabric of more than FIRST_LINE_MAX bytes is read cut short: not taken for
    a first append cut short, and left as it was."""
    import geoconsole.records as records

    monkeypatch.setattr(records, "FIRST_LINE_MAX", 16)
    path = tmp_path / "fabric.json"
    data = b'{"labels": ["a"], "alpha_ms": [[0]], "beta_gbps": [[0]]}'
    path.write_bytes(data)
    with pytest.raises(FileError, match="is not a run-record file"):
        append_record(path, {"kind": "solve"})
    assert path.read_bytes() == data


def test_a_record_file_whose_only_append_was_cut_short_takes_the_next(tmp_path):
    path = tmp_path / "runs.jsonl"
    path.write_text('{"kind": "sol')
    append_record(path, {"kind": "launch"})
    assert [json.loads(x)["kind"] for x in path.read_text().splitlines()] == ["launch"]


def test_a_record_path_that_is_an_input_is_refused(tmp_path):
    from geoconsole.records import check_record_path

    fabric = tmp_path / "f.json"
    fabric.write_text("{}")
    link = tmp_path / "link.jsonl"
    link.symlink_to(fabric)
    for path in (fabric, link, tmp_path / "." / "f.json"):
        with pytest.raises(FileError, match="is also the --matrix"):
            check_record_path(path, [("--matrix", fabric)])
    assert fabric.read_text() == "{}"


def test_a_record_file_that_cannot_be_written_fails_before_the_work(tmp_path, monkeypatch):
    """Checked only when the solve was done: a long --time-limit run was wasted. (Root may
    write anything, so the refusal of os.access is stood in for here.)"""
    import os

    from geoconsole.records import check_record_path

    existing = tmp_path / "runs.jsonl"
    existing.write_text("")
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(FileError, match=r"runs.jsonl: cannot write: permission denied$"):
        check_record_path(existing)
    with pytest.raises(FileError, match=r"new.jsonl: cannot write: permission denied \(its folder\)"):
        check_record_path(tmp_path / "new.jsonl")
