"""A hostile corpus: malformed files, hostile names and paths, bad flags, for every command.

Every case must end with one line on stderr that starts with ``error:`` and names the
culprit (file, field, flag or host), the documented exit code, no traceback, and every
file of the case exactly as it was (content and mode; nothing created beside them).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from geoconsole.cli import app
from geoconsole.demo_fabrics import worldwide_fabric

WW = worldwide_fabric().to_json()


def small_fabric(n: int = 4) -> dict:
    return {
        "labels": [f"d{i}" for i in range(n)],
        "alpha_ms": [[0 if i == j else 1 for j in range(n)] for i in range(n)],
        "beta_gbps": [[0 if i == j else 10 for j in range(n)] for i in range(n)],
        "devices": [{"host": f"h{i // 2}", "gpu": i % 2} for i in range(n)],
    }


def edit(path_to_value, value, base=None):
    doc = json.loads(json.dumps(base or small_fabric()))
    target = doc
    for key in path_to_value[:-1]:
        target = target[key]
    target[path_to_value[-1]] = value
    return doc


def nested(depth: int, inner="1") -> str:
    return "[" * depth + inner + "]" * depth


# -- fabric files given to solve -------------------------------------------------------
FABRIC_TEXTS = {
    "not json": ("hello", "invalid JSON"),
    "empty file": ("", "invalid JSON"),
    "truncated": (json.dumps(small_fabric())[:40], "invalid JSON"),
    "top-level list": ("[1, 2]", "expected a JSON object"),
    "top-level string": ('"fabric"', "expected a JSON object"),
    "deep nesting": (nested(5000), "nested"),
    "deep nesting in meta": (json.dumps(edit(["meta"], {})).replace('"meta": {}', '"meta": {"x": ' + nested(100) + "}"), "nested more than"),
    "integer with 300 digits": (json.dumps(small_fabric()).replace('"alpha_ms": [[0, 1', '"alpha_ms": [[0, 1' + "7" * 300, 1), "301 digits"),
    "1e400": (json.dumps(small_fabric()).replace('[[0, 1', '[[0, 1e400', 1), "out of range"),
    "NaN": (json.dumps(small_fabric()).replace('[[0, 1', '[[0, NaN', 1), "NaN"),
    "-Infinity": (json.dumps(small_fabric()).replace('[[0, 1', '[[0, -Infinity', 1), "Infinity"),
}
FABRIC_DOCS = {
    "missing labels": ({k: v for k, v in small_fabric().items() if k != "labels"}, "labels"),
    "missing beta": ({k: v for k, v in small_fabric().items() if k != "beta_gbps"}, "beta_gbps"),
    "misspelt alpha": ({**{k: v for k, v in small_fabric().items() if k != "alpha_ms"},
                        "alpah_ms": small_fabric()["alpha_ms"]}, "alpah_ms"),
    "unknown key": ({**small_fabric(), "colour": 1}, "colour"),
    "labels not a list": (edit(["labels"], "d0"), "labels"),
    "label an int": (edit(["labels", 1], 7), "labels"),
    "labels empty": ({**small_fabric(), "labels": [], "alpha_ms": [], "beta_gbps": [], "devices": []}, "labels"),
    "label with newline": (edit(["labels", 0], "a\nb"), "labels[0]"),
    "label 1000 chars": (edit(["labels", 0], "x" * 1000), "labels[0]"),
    "label only spaces": (edit(["labels", 0], "   "), "labels[0]"),
    "too few rows": (edit(["alpha_ms"], small_fabric()["alpha_ms"][:3]), "alpha_ms"),
    "short row": (edit(["beta_gbps", 2], [10, 10]), "beta_gbps[2]"),
    "string entry": (edit(["alpha_ms", 0, 1], "1"), "alpha_ms[0][1]"),
    "bool entry": (edit(["beta_gbps", 0, 1], True), "beta_gbps[0][1]"),
    "object entry": (edit(["beta_gbps", 0, 1], {}), "beta_gbps[0][1]"),
    "negative latency": (edit(["alpha_ms", 1, 0], -1), "alpha_ms[1][0]"),
    "zero bandwidth": (edit(["beta_gbps", 1, 0], 0), "beta_gbps[1][0]"),
    "subnormal bandwidth": (edit(["beta_gbps", 1, 0], 1e-320), "beta_gbps[1][0]"),
    "bandwidth 1e300": (edit(["beta_gbps", 1, 0], 1e300), "beta_gbps[1][0]"),
    "latency 1e300": (edit(["alpha_ms", 1, 0], 1e300), "alpha_ms[1][0]"),
    "half-null pair": (edit(["alpha_ms", 0, 1], None), "alpha_ms and beta_gbps"),
    "meta a list": (edit(["meta"], [1]), "meta"),
    "measured_at a number": (edit(["measured_at"], 5), "measured_at"),
    "measured_at not a date": (edit(["measured_at"], "not a date"), "measured_at: expected an ISO 8601"),
    "measured_at zero": (edit(["measured_at"], 0), "measured_at: expected an ISO 8601"),
    "estimated short": (edit(["estimated"], [[False] * 4] * 3), "estimated: expected 4 x 4 booleans, got 3 rows"),
    "estimated a string": (edit(["estimated"], "yes"), "estimated: expected 4 x 4 booleans, got str"),
    "estimated numbers": (edit(["estimated"], [[5] * 4] * 4), "estimated[0][0]: expected boolean"),
    "inferred a short row": (edit(["inferred"], [[False] * 4] * 3 + [[False]]), "inferred[3]: expected 4 booleans"),
    "fit_r2 strings": (edit(["fit_r2"], [["0.9"] * 4] * 4), "fit_r2[0][0]: expected numbers or nulls"),
    "fit_flag an object": (edit(["fit_flag"], {}), "fit_flag: expected 4 x 4 strings or nulls, got dict"),
    "probe_interface numbers": (edit(["probe_interface"], [[5] * 4] * 4), "probe_interface[0][0]"),
    "devices short": (edit(["devices"], small_fabric()["devices"][:2]), "devices"),
    "device not an object": (edit(["devices", 0], "h0"), "devices[0]"),
    "device without host": (edit(["devices", 0], {"gpu": 0}), "devices[0]"),
    "host empty": (edit(["devices", 0, "host"], ""), "devices[0].host"),
    "host an option": (edit(["devices", 0, "host"], "-oProxyCommand=touch${IFS}x"), "devices[0].host"),
    "host with space": (edit(["devices", 0, "host"], "h 0"), "devices[0].host"),
    "host with newline": (edit(["devices", 0, "host"], "h0\nrm"), "devices[0].host"),
    "host with NUL": (edit(["devices", 0, "host"], "h0\x00"), "devices[0].host"),
    "host with escape": (edit(["devices", 0, "host"], "h0\x1b[31m"), "devices[0].host"),
    "host 300 chars": (edit(["devices", 0, "host"], "h" * 300), "devices[0].host"),
    "host an int": (edit(["devices", 0, "host"], 3), "devices[0].host"),
    "gpu -1": (edit(["devices", 0, "gpu"], -1), "devices[0].gpu"),
    "gpu text": (edit(["devices", 0, "gpu"], "0"), "devices[0].gpu"),
    "gpu bool": (edit(["devices", 0, "gpu"], True), "devices[0].gpu"),
    "region with space": (edit(["devices", 0, "region"], "eu west"), "devices[0].region"),
    "region 1000 chars": (edit(["devices", 0, "region"], "r" * 1000), "devices[0].region"),
    "region an option": (edit(["devices", 0, "region"], "-r"), "devices[0].region"),
    "zone an int": (edit(["devices", 0, "zone"], 4), "devices[0].zone"),
    "network group tab": (edit(["devices", 0, "network_group"], "a\tb"), "devices[0].network_group"),
    "unknown device field": (edit(["devices", 0, "hots"], "x"), "'hots'"),
}

SOLVE = ["--c-pp", "0.1", "--c-dp", "0.1", "--pp", "2", "--dp", "2", "--baseline-samples", "2"]


def snapshot(root: Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode):
            out[str(p)] = (p.read_bytes(), stat.S_IMODE(st.st_mode))
        elif stat.S_ISLNK(st.st_mode):
            out[str(p)] = ("link", os.readlink(p))
        else:
            out[str(p)] = ("kind", stat.S_IFMT(st.st_mode))
    return out


def expect_one_line(root: Path, args: list[str], code: int, *culprits: str) -> str:
    before = snapshot(root)
    result = CliRunner().invoke(app, ["--headless", *args])
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output and "np.float64" not in result.output
    for culprit in culprits:
        assert culprit in lines[0], (culprit, lines[0])
    assert snapshot(root) == before
    return lines[0]


@pytest.mark.parametrize("name", sorted(FABRIC_TEXTS))
def test_malformed_fabric_text(tmp_path, name):
    text, culprit = FABRIC_TEXTS[name]
    path = tmp_path / "fabric.json"
    path.write_text(text)
    expect_one_line(tmp_path, ["solve", "--matrix", str(path), *SOLVE], 2, "fabric.json", culprit)


@pytest.mark.parametrize("name", sorted(FABRIC_DOCS))
def test_malformed_fabric_document(tmp_path, name):
    doc, culprit = FABRIC_DOCS[name]
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps(doc))
    expect_one_line(tmp_path, ["solve", "--matrix", str(path), *SOLVE], 2, "fabric.json", culprit)


@pytest.mark.parametrize("command", ["solve", "score", "labels show", "select", "export", "launch"])
def test_non_utf8_fabric(tmp_path, command):
    path = tmp_path / "fabric.json"
    path.write_bytes(b'{"labels": ["\xff\xfe"]}')
    extra = {"solve": SOLVE, "score": [*SOLVE[:-2], "-r", "0,1,2,3"], "labels show": [],
             "select": ["--pp", "2", "--dp", "2"], "export": ["-r", "0,1,2,3"],
             "launch": ["-r", "0,1,2,3", "--dry-run", "--", "t.py"]}[command]
    expect_one_line(tmp_path, [*command.split(), "--matrix", str(path), *extra], 2, "fabric.json", "UTF-8")


# -- paths that are not regular files --------------------------------------------------
def special_path(tmp_path: Path, kind: str) -> str:
    p = tmp_path / "thing"
    if kind == "missing":
        return str(p)
    if kind == "directory":
        p.mkdir()
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "char device":
        return "/dev/null"
    elif kind == "dangling symlink":
        p.symlink_to(tmp_path / "nowhere")
    elif kind == "symlink to a directory":
        (tmp_path / "d").mkdir()
        p.symlink_to(tmp_path / "d")
    elif kind == "symlink loop":
        p.symlink_to(p)
    return str(p)


KINDS = ["missing", "directory", "fifo", "char device", "dangling symlink", "symlink to a directory",
         "symlink loop"]


@pytest.mark.parametrize("kind", KINDS)
def test_fabric_path_that_is_not_a_file(tmp_path, kind):
    path = special_path(tmp_path, kind)
    expect_one_line(tmp_path, ["solve", "--matrix", path, *SOLVE], 2, path)


@pytest.mark.parametrize("kind", KINDS)
def test_rank_map_path_that_is_not_a_file(tmp_path, kind):
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps(small_fabric()))
    path = special_path(tmp_path, kind)
    expect_one_line(tmp_path, ["score", "--matrix", str(fabric), *SOLVE[:-2], "--rank-map", path], 2, path)


@pytest.mark.parametrize("kind", KINDS)
def test_inventory_path_that_is_not_a_file(tmp_path, kind):
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps(small_fabric()))
    path = special_path(tmp_path, kind)
    expect_one_line(tmp_path, ["export", "--matrix", str(fabric), "-r", "0,1,2,3", "-i", path], 2, path)


@pytest.mark.parametrize("kind", KINDS)
def test_session_path_that_is_not_a_file(tmp_path, kind):
    path = special_path(tmp_path, kind)
    before = snapshot(tmp_path)
    result = CliRunner().invoke(app, ["--session", path])
    assert result.exit_code == 2 and result.stderr.startswith("error: ") and path in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert snapshot(tmp_path) == before


# -- rank maps ---------------------------------------------------------------------------
RANK_MAPS = {
    "letters": ("abc", "expected rank_map"),
    "empty rank_map": ("rank_map=()", "ranks for 4 devices"),
    "a letter inside": ("rank_map=(0,1,x,3)", "expected rank_map"),
    "negative": ("-1,0,1,2", "expected rank_map"),
    "repeated rank": ("0,0,1,2", "rank"),
    "too few": ("0,1,2", "3 ranks for 4 devices"),
    "too many": ("0,1,2,3,4", "5 ranks for 4 devices"),
    "huge rank": ("0,1,2," + "9" * 300, "expected rank_map"),
    "unicode digits": ("٠,١,٢,٣", "expected rank_map"),
    "json deep": (nested(3000), "nested"),
    "json strings": ('["0", "1", "2", "3"]', "whole numbers"),
    "json bools": ("[true, false, true, false]", "whole numbers"),
    "json object without rank map": ('{"score": 1}', "expected rank_map"),
    "json floats": ("[0.0, 1.0, 2.0, 3.0]", "whole numbers"),
    "selection rows repeated": (json.dumps({"rank_map": [0, 1], "selection": {"rows": [0, 0]}}), "appears twice"),
    "selection rows outside": (json.dumps({"rank_map": [0, 1], "selection": {"rows": [0, 9]}}), "outside"),
    "selection rows text": (json.dumps({"rank_map": [0, 1], "selection": {"rows": "0,1"}}), "selection.rows"),
    "selection rows short": (json.dumps({"rank_map": [0, 1], "selection": {"rows": [0]}}), "selection.rows"),
}


@pytest.mark.parametrize("name", sorted(RANK_MAPS))
@pytest.mark.parametrize("command", ["score", "export"])
def test_bad_rank_map(tmp_path, name, command):
    value, culprit = RANK_MAPS[name]
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps(small_fabric()))
    holder = tmp_path / "rm.txt"
    holder.write_text(value)
    extra = SOLVE[:-2] if command == "score" else []
    expect_one_line(tmp_path, [command, "--matrix", str(fabric), *extra, "--rank-map", str(holder)], 2,
                    culprit)


# -- sessions --------------------------------------------------------------------------
def session_doc() -> dict:
    from geoconsole.session import demo_session

    s = demo_session()
    return json.loads(json.dumps(s.to_json(), default=lambda v: v.tolist() if hasattr(v, "tolist") else v))


def solution() -> dict:
    return {"name": "s", "rank_map": list(range(64)), "fun": 51.5, "digest": "x", "created_at": "2026-12-01T10:00:00Z",
            "workload": session_doc()["workload"]}


def current(**changes) -> dict:
    """A solution of the demo session's fabric as it is (its digest), the identity map."""
    from geoconsole.session import demo_session

    return {**solution(), "digest": demo_session().digest(), "fun": _identity_comm(), **changes}


def _identity_comm() -> float:
    from geoconsole.session import demo_session
    from solver.cost import CostModel

    s = demo_session()
    return float(CostModel.from_fabric(s.fabric, s.workload).score_rank_map(list(range(64))).comm)


SESSIONS = {
    "not a session": (lambda d: [1, 2], "expected a JSON object"),
    "solution fun unlike its rank map": (lambda d: {**d, "solutions": [current(fun=1.0)]}, "solutions[0].fun"),
    "solution bound above its Comm": (lambda d: {**d, "solutions": [current(bound=1e6)]}, "solutions[0].bound"),
    "unknown top-level field": (lambda d: {**d, "solutons": []}, "unknown field 'solutons' (did you mean 'solutions'?)"),
    "unknown solution field": (lambda d: {**d, "solutions": [{**solution(), "fn": 1}]}, "solutions[0]: unknown field"),
    "created_at not a time": (lambda d: {**d, "solutions": [{**solution(), "created_at": "yesterday"}]},
                              "solutions[0].created_at"),
    "elapsed negative": (lambda d: {**d, "solutions": [{**solution(), "elapsed_s": -5}]}, "solutions[0].elapsed_s"),
    "known_hosts with a line break": (lambda d: {**d, "known_hosts": "a\nb"}, "known_hosts: holds the control"),
    "name with ESC": (lambda d: {**d, "name": "\x1b[31mred"}, "name: holds the control or format character"),
    "name with a right-to-left override": (lambda d: {**d, "name": "a\u202eb"}, "name: holds the control or format"),
    "name with a line separator": (lambda d: {**d, "name": "a\u2028b"}, "name: holds the control or format"),
    "name of 5000 characters": (lambda d: {**d, "name": "n" * 5000}, "name: 5000 characters"),
    "solutions without a fabric": (lambda d: {**d, "fabric": None, "solutions": [solution()]}, "without the fabric"),
    "wrong format": (lambda d: {**d, "format": "other"}, "format"),
    "no workload": (lambda d: {k: v for k, v in d.items() if k != "workload"}, "workload"),
    "workload a list": (lambda d: {**d, "workload": [8, 8]}, "workload"),
    "solve options a list": (lambda d: {**d, "solve_options": [1]}, "solve_options: expected an object"),
    "solve options seed -1": (lambda d: {**d, "solve_options": {"seed": -1}}, "solve_options.seed"),
    "solve options time 0": (lambda d: {**d, "solve_options": {"time_limit": 0}}, "solve_options.time_limit"),
    "solve options unknown": (lambda d: {**d, "solve_options": {"sead": 1}}, "'sead'"),
    "launch command a list": (lambda d: {**d, "launch_command": ["a"]}, "launch_command"),
    "launch command two lines": (lambda d: {**d, "launch_command": "a\nrm -rf /"}, "launch_command"),
    "workload bad field": (lambda d: {**d, "workload": {**d["workload"], "d_pp": "8"}}, "workload"),
    "solutions an object": (lambda d: {**d, "solutions": {"a": 1}}, "solutions"),
    "solution a number": (lambda d: {**d, "solutions": [3]}, "solutions[0]"),
    "solution not a permutation": (lambda d: {**d, "solutions": [{**solution(), "rank_map": [0] * 64}]},
                                   "solutions[0].rank_map"),
    "solution too short": (lambda d: {**d, "solutions": [{**solution(), "rank_map": [0, 1]}]},
                           "solutions[0]"),
    "solution workload does not fit": (lambda d: {**d, "solutions": [{**solution(), "workload": {
        **d["workload"], "d_pp": 4}}]}, "solutions[0].workload"),
    "history of triples": (lambda d: {**d, "solutions": [{**solution(), "history": [[1, 2, 3]]}]},
                           "solutions[0].history[0]"),
    "history text": (lambda d: {**d, "solutions": [{**solution(), "history": "x"}]}, "solutions[0].history"),
    "baselines a list": (lambda d: {**d, "solutions": [{**solution(), "baselines": [1, 2]}]},
                         "solutions[0].baselines"),
    "fun text": (lambda d: {**d, "solutions": [{**solution(), "fun": "fast"}]}, "solutions[0].fun"),
    "seed negative": (lambda d: {**d, "solutions": [{**solution(), "seed": -3}]}, "solutions[0].seed"),
    "inventory a list": (lambda d: {**d, "inventory": ["a"]}, "inventory"),
    "fabric host an option": (lambda d: {**d, "fabric": edit(["devices", 0, "host"], "-oX", d["fabric"])},
                              "devices[0].host"),
}


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_bad_session(tmp_path, name):
    make, culprit = SESSIONS[name]
    path = tmp_path / "session.json"
    path.write_text(json.dumps(make(session_doc())))
    before = snapshot(tmp_path)
    result = CliRunner().invoke(app, ["--session", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "session.json" in lines[0], result.stderr
    assert culprit in lines[0] and "Traceback" not in result.output
    assert snapshot(tmp_path) == before


def test_a_probe_meta_of_the_wrong_type_is_ignored_not_a_crash(tmp_path):
    from geoconsole.app import create_app

    doc = session_doc()
    doc["fabric"]["meta"] = {"hosts": {doc["fabric"]["devices"][0]["host"]: {"location_source": [],
                                                                              "torch": {"x": 1}}}}
    path = tmp_path / "session.json"
    path.write_text(json.dumps(doc))
    assert create_app(session=path).session.fabric.n == 64


# -- inventories ---------------------------------------------------------------------------
INVENTORIES = {
    "address an option": ('[[hosts]]\naddress = "-oProxyCommand=touch /tmp/x"\n', "hosts[0].address"),
    "user an option": ('[[hosts]]\naddress = "h0"\nuser = "-oProxyCommand=x"\n', "hosts[0].user"),
    "address with space": ('[[hosts]]\naddress = "h 0"\n', "hosts[0].address"),
    "name with newline": ('[[hosts]]\naddress = "h0"\nname = "h0\\nx"\n', "hosts[0].name"),
    "region with space": ('[[hosts]]\naddress = "h0"\nregion = "us west"\n', "hosts[0].region"),
    "region 1000 chars": ('[[hosts]]\naddress = "h0"\nregion = "' + "r" * 1000 + '"\n', "hosts[0].region"),
    "zone with escape": ('[[hosts]]\naddress = "h0"\nzone = "z\\u001b[31m"\n', "hosts[0].zone"),
    "port text": ('[[hosts]]\naddress = "h0"\nport = "ssh"\n', "hosts[0].port"),
    "port zero": ('[[hosts]]\naddress = "h0"\nport = 0\n', "hosts[0].port"),
    "port 70000": ('[[hosts]]\naddress = "h0"\nport = 70000\n', "hosts[0].port"),
    "port 300 digits": ('[[hosts]]\naddress = "h0"\nport = ' + "9" * 300 + "\n", "hosts[0].port"),
    "port unicode digits": ('[[hosts]]\naddress = "h0"\nport = "２２"\n', "hosts[0].port"),
    "gpus negative": ('[[hosts]]\naddress = "h0"\ngpus = [-1]\n', "hosts[0].gpus"),
    "gpus text": ('[[hosts]]\naddress = "h0"\ngpus = "x"\n', "hosts[0].gpus"),
    "gpus repeated": ('[[hosts]]\naddress = "h0"\ngpus = [0, 0]\n', "hosts[0].gpus"),
    "gpus huge index": ('[[hosts]]\naddress = "h0"\ngpus = [' + "9" * 30 + "]\n", "hosts[0].gpus"),
    "unknown field": ('[[hosts]]\naddress = "h0"\nadress = "x"\n', "hosts[0].adress"),
    "unknown table": ('[host]\naddress = "h0"\n', "host"),
    "toml syntax": ('[[hosts]\naddress = "h0"\n', "invalid TOML"),
    "deep inline tables": ("x = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n", "TOML"),
    "interface injection": ('[[hosts]]\naddress = "h0"\ninterface = "eth0;rm"\n', "hosts[0].interface"),
    "interface leading dash": ('[[hosts]]\naddress = "h0"\ninterface = "-x"\n', "hosts[0].interface"),
    "python with newline": ('[[hosts]]\naddress = "h0"\npython = "py\\nrm"\n', "hosts[0].python"),
    "identity an option": ('[[hosts]]\naddress = "h0"\nidentity = "-i"\n', "hosts[0].identity"),
    "duplicate names": ('[[hosts]]\naddress = "h0"\n[[hosts]]\naddress = "h0"\n', "duplicate host name"),
    "no hosts": ('[defaults]\nuser = "u"\n', "no [[hosts]]"),
    "defaults user an option": ('[defaults]\nuser = "-x"\n[[hosts]]\naddress = "h0"\n', "defaults.user"),
}
HOSTFILES = {
    "slots first": ("slots=2\n", "no host name first"),
    "zero slots": ("h0 slots=0\n", "slots"),
    "letter slots": ("h0 slots=x\n", "slots"),
    "huge slots": ("h0 slots=100000000\n", "slots"),
    "unicode slots": ("h0 slots=٣\n", "slots"),
    "unknown key": ("h0 foo=1\n", "foo=1"),
    "slots twice": ("h0 slots=1 slots=2\n", "slots given twice"),
    "host an option": ("-oProxyCommand=x slots=1\n", "no host name first"),
    "host a dash": ("-h slots=1\n", "address"),
    "host with escape": ("h0\x1b slots=1\n", "address"),
}


def export_with_inventory(tmp_path: Path, inventory: Path) -> list[str]:
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps(small_fabric()))
    return ["export", "--matrix", str(fabric), "-r", "0,1,2,3", "-i", str(inventory)]


@pytest.mark.parametrize("name", sorted(INVENTORIES))
def test_bad_toml_inventory(tmp_path, name):
    text, culprit = INVENTORIES[name]
    inv = tmp_path / "hosts.toml"
    inv.write_text(text)
    expect_one_line(tmp_path, export_with_inventory(tmp_path, inv), 2, "hosts.toml", culprit)


@pytest.mark.parametrize("name", sorted(HOSTFILES))
def test_bad_hostfile(tmp_path, name):
    text, culprit = HOSTFILES[name]
    inv = tmp_path / "hostfile"
    inv.write_text(text)
    expect_one_line(tmp_path, export_with_inventory(tmp_path, inv), 2, "hostfile:1", culprit)


def test_non_utf8_inventory(tmp_path):
    inv = tmp_path / "hosts.toml"
    inv.write_bytes(b'[[hosts]]\naddress = "h\xff"\n')
    expect_one_line(tmp_path, export_with_inventory(tmp_path, inv), 2, "hosts.toml", "UTF-8")


SSH_CONFIGS = {
    "include loop": (lambda d: f"Include {d}/cfg\n", "Include loop"),
    "include a fifo": (lambda d: f"Include {d}/fifo\n", "FIFO"),
    "not utf-8": (None, "UTF-8"),
    "hostname an option": (lambda d: "Host h0\n  HostName -oProxyCommand=x\n", "HostName"),
}


@pytest.mark.parametrize("name", sorted(SSH_CONFIGS))
def test_bad_ssh_config(tmp_path, name):
    make, culprit = SSH_CONFIGS[name]
    cfg = tmp_path / "cfg"
    os.mkfifo(tmp_path / "fifo")
    if make is None:
        cfg.write_bytes(b"Host h0\n  User \xff\n")
    else:
        cfg.write_text(make(tmp_path))
    inv = tmp_path / "hosts.toml"
    inv.write_text('[[hosts]]\naddress = "h0"\n')
    expect_one_line(tmp_path, ["inventory", "-i", str(inv), "--ssh-config", str(cfg)], 2, culprit)


# -- outputs ------------------------------------------------------------------------------
def export_args(tmp_path: Path) -> list[str]:
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps(small_fabric()))
    return ["export", "--matrix", str(fabric), "-r", "0,1,2,3", "--format", "json"]


@pytest.mark.parametrize("target", ["matrix", "inventory", "directory", "fifo", "char device", "rank map"])
def test_export_never_overwrites_an_input_or_a_special_file(tmp_path, target):
    args = export_args(tmp_path)
    inv = tmp_path / "hosts.toml"
    inv.write_text('[[hosts]]\naddress = "h0"\n[[hosts]]\naddress = "h1"\n')
    rm = tmp_path / "rm.txt"
    rm.write_text("0,1,2,3")
    args = [*args, "-i", str(inv)]
    if target == "rank map":
        args[args.index("-r") + 1] = str(rm)
    out = {"matrix": str(tmp_path / "f.json"), "inventory": str(inv), "rank map": str(rm),
           "char device": "/dev/null"}.get(target) or special_path(tmp_path, target)
    expect_one_line(tmp_path, [*args, "-o", out], 2, out)


@pytest.mark.parametrize("target", ["directory", "fifo", "char device", "missing folder"])
def test_record_refuses_special_files(tmp_path, target):
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps(small_fabric()))
    out = "/dev/null" if target == "char device" else (
        str(tmp_path / "no" / "runs.jsonl") if target == "missing folder" else special_path(tmp_path, target))
    expect_one_line(tmp_path, ["solve", "--matrix", str(fabric), *SOLVE, "--record", out], 2, out)


@pytest.mark.parametrize("target", ["directory", "fifo", "char device"])
def test_labels_set_refuses_special_outputs(tmp_path, target):
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps(small_fabric()))
    out = "/dev/null" if target == "char device" else special_path(tmp_path, target)
    expect_one_line(tmp_path, ["labels", "set", "--matrix", str(fabric), "-o", out, "--host", "h0",
                               "--region", "eu"], 2, out)


def test_writes_go_through_a_symlink_and_keep_the_mode(tmp_path):
    args = export_args(tmp_path)
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o644)
    link = tmp_path / "link.json"
    link.symlink_to(real)
    result = CliRunner().invoke(app, ["--headless", *args, "-o", str(link)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and json.loads(real.read_text())["world_size"] == 4
    assert stat.S_IMODE(real.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json", "link.json", "real.json"]


def test_concurrent_in_place_label_edits_lose_nothing(tmp_path):
    fabric = tmp_path / "f.json"
    doc = small_fabric(16)
    doc["devices"] = [{"host": f"h{i}", "gpu": 0} for i in range(16)]
    fabric.write_text(json.dumps(doc))
    procs = [subprocess.Popen([sys.executable, "-m", "geoconsole.cli", "--headless", "labels", "set",
                               "--matrix", str(fabric), "-o", str(fabric), "--host", f"h{i}",
                               "--region", f"r{i}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for i in range(6)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    devices = json.loads(fabric.read_text())["devices"]
    assert [d["region"] for d in devices[:6]] == [f"r{i}" for i in range(6)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]


# -- flags --------------------------------------------------------------------------------
FLAGS = {
    "seed negative": (["--seed", "-1"], "--seed"),
    "baseline samples huge": (["--baseline-samples", "1000000000"], "--baseline-samples"),
    "pp huge": (["--pp", "9" * 40], "--pp"),
    "time limit nan": (["--time-limit", "nan"], "--time-limit"),
    "c-pp negative": (["--c-pp", "-1"], "--c-pp"),
    "c-dp inf": (["--c-dp", "inf"], "--c-dp: must be"),
    "pp messages 1e12": (["--pp-messages", "1e12"], "--pp-messages: must be"),
    "regions empty name": (["--regions", ","], "--regions"),
    "estimate not numbers": (["--fill-missing", "--estimate", "zone=a,b"], "--estimate"),
    "group locality unknown": (["--group-locality", "rack"], "--group-locality"),
    "budget negative": (["--budget", "-5"], "--budget"),
}


def _small_fabric_file(tmp_path: Path) -> Path:
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps(small_fabric()))
    return fabric


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_bad_solve_flag(tmp_path, name):
    extra, culprit = FLAGS[name]
    fabric = _small_fabric_file(tmp_path)
    args = [*SOLVE]
    for k in range(0, len(extra), 2):
        if extra[k] in args:
            i = args.index(extra[k])
            del args[i:i + 2]
    expect_one_line(tmp_path, ["solve", "--matrix", str(fabric), *args, *extra], 2, culprit)


EMPTY_PATHS = {  # Path('') is the current folder: refused as empty, not as "a directory"
    "solve --matrix": (["solve", "--matrix", "", *SOLVE], "--matrix"),
    "solve --record": (["solve", "--matrix", "F", *SOLVE, "--record", " "], "--record"),
    "labels show --matrix": (["labels", "show", "-m", ""], "--matrix"),
    "export --output": (["export", "-m", "F", "-r", "0,1,2,3", "--output", ""], "--output"),
    "probe --inventory": (["probe", "-i", ""], "--inventory"),
    "probe --known-hosts": (["probe", "-i", "INV", "-o", "OUT", "--known-hosts", ""], "--known-hosts"),
    "console --session": (["--session", ""], "--session"),
}


@pytest.mark.parametrize("name", sorted(EMPTY_PATHS))
def test_empty_path_flag(tmp_path, name):
    args, culprit = EMPTY_PATHS[name]
    fabric = _small_fabric_file(tmp_path)
    inventory = tmp_path / "hosts"
    inventory.write_text("h1 slots=1\n")
    args = [{"F": str(fabric), "INV": str(inventory), "OUT": str(tmp_path / "o.json")}.get(a, a) for a in args]
    line = expect_one_line(tmp_path, args, 2, culprit, "empty path")
    assert "directory" not in line


@pytest.mark.parametrize("command", [["labels", "set", "-m", "F", "--host", "h1", "--region", "zz", "-o", "OUT/"],
                                     ["export", "-m", "F", "-r", "0,1,2,3", "-f", "json", "-o", "OUT/"],
                                     ["solve", "--matrix", "F", *SOLVE, "--record", "OUT/"]])
def test_an_output_path_ending_in_a_slash_is_refused_and_the_file_kept(tmp_path, command):
    """``Path('out.json/')`` is ``out.json``: the slash named a folder, the file was replaced."""
    fabric = _small_fabric_file(tmp_path)
    out = tmp_path / "o.json"
    out.write_text("mine")
    for ending in ("/", "/.", "/.."):
        args = [{"F": str(fabric), "OUT/": f"{out}{ending}"}.get(a, a) for a in command]
        expect_one_line(tmp_path, args, 2, "ends with '/'")
        assert out.read_text() == "mine"


LAUNCH_FLAGS = {
    "env without equals": (["--env", "NOEQUALS"], "--env"),
    "port zero": (["--port", "0"], "--port"),
    "mode unknown": (["--mode", "mpi"], "--mode"),
    "interface injection": (["--interface", "eth0;rm"], "--interface"),
    "interface leading dash": (["--interface", "-x"], "--interface"),
    "env twice": (["--env", "A=1", "--env", "A=2"], "--env A: given twice"),
    "sbatch script over ssh": (["--sbatch-script", "x.sh"], "--sbatch-script: needs --via slurm"),
    "submit over ssh": (["--submit"], "--submit: needs --via slurm"),
}


@pytest.mark.parametrize("name", sorted(LAUNCH_FLAGS))
def test_bad_launch_flag(tmp_path, name):
    extra, culprit = LAUNCH_FLAGS[name]
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps(small_fabric()))
    expect_one_line(tmp_path, ["launch", "--matrix", str(fabric), "-r", "0,1,2,3", "--dry-run", *extra,
                               "--", "train.py"], 2, culprit)


@pytest.mark.parametrize("fmt, extra, culprit", [
    ("slurm", ["--env", "A=1"], "--env does not apply"), ("rankfile", ["--mode", "env"], "--mode does not apply"),
    ("slurm", ["--workdir", "/x", "--port", "1234", "--", "train.py"], "--port, --workdir do not apply"),
    ("json", ["--image", "r/i:1"], "--image does not apply (k8s only)"),
    ("torchrun", ["--mode", "env", "--", "t.py"], "--mode env: --format torchrun"),
    ("torchrun", ["--mode", "mpi", "--", "t.py"], "--mode 'mpi': expected torchrun or env"),
    ("rankfile", ["--port", "29500"], "--port does not apply")])  # a default typed in is given too
def test_export_options_a_format_does_not_use_are_refused(tmp_path, fmt, extra, culprit):
    fabric = _small_fabric_file(tmp_path)
    expect_one_line(tmp_path, ["export", "-m", str(fabric), "-r", "0,1,2,3", "-f", fmt, *extra], 2, culprit)


def test_export_format_unknown(tmp_path):
    expect_one_line(tmp_path, [*export_args(tmp_path)[:-2], "--format", "yaml"], 2, "--format")


# -- an exported script run with hostile names --------------------------------------------
HOSTILE_HOSTS = ["h1/;e$(touch${IFS}PWNED);s/x/", "h2'\"`touch${IFS}PWNED2`\\"]


def test_an_exported_torchrun_script_treats_hostile_names_as_data(tmp_path):
    doc = small_fabric()
    doc["devices"] = [{"host": HOSTILE_HOSTS[i // 2], "gpu": i % 2} for i in range(4)]
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps(doc))
    script = tmp_path / "run.sh"
    result = CliRunner().invoke(app, ["--headless", "export", "--matrix", str(fabric), "-r", "0,1,2,3",
                                      "--format", "torchrun", "-o", str(script), "--", "train.py"])
    assert result.exit_code == 0, result.output
    stub = tmp_path / "ssh"
    stub.write_text('#!/bin/sh\nfor a in "$@"; do printf "arg:%s\\n" "$a"; done\nprintf "line two\\r\\n"\n')
    stub.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    run = subprocess.run(["bash", str(script)], cwd=work, env={**os.environ, "SSH": str(stub)},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert not list(work.iterdir()) and not (tmp_path / "PWNED").exists()
    lines = run.stdout.splitlines()
    for rank, host in enumerate(h for h in HOSTILE_HOSTS for _ in range(2)):
        mine = [x for x in lines if x.startswith(f"[rank {rank} {host}] ")]
        args = [x.split("] ", 1)[1] for x in mine]
        assert "arg:--" in args and args[args.index("arg:--") + 1].endswith(host)  # -- before the destination
        assert f"[rank {rank} {host}] line two" in mine  # the CR is dropped, the prefix is literal


def test_an_exported_torchrun_script_offers_the_inventorys_identity(tmp_path):
    """The console's SSH uses a host's identity; the exported script passes it with -i
    (as one argument, whatever its characters); a host without one gets no -i."""
    doc = small_fabric()
    doc["devices"] = [{"host": f"h{i // 2 + 1}", "gpu": i % 2} for i in range(4)]
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps(doc))
    key = tmp_path / "my key $(touch PWNED).pem"
    inventory = tmp_path / "inv.toml"
    inventory.write_text(f'[[hosts]]\nname = "h1"\naddress = "10.0.0.1"\nidentity = {json.dumps(str(key))}\n'
                         '[[hosts]]\nname = "h2"\naddress = "10.0.0.2"\n')
    script = tmp_path / "run.sh"
    result = CliRunner().invoke(app, ["--headless", "export", "--matrix", str(fabric), "-r", "0,1,2,3", "-i",
                                      str(inventory), "--format", "torchrun", "-o", str(script), "--", "train.py"])
    assert result.exit_code == 0, result.output
    stub = tmp_path / "ssh"
    stub.write_text('#!/bin/sh\nfor a in "$@"; do printf "arg:%s\\n" "$a"; done\n')
    stub.chmod(0o755)
    run = subprocess.run(["bash", str(script)], cwd=tmp_path, env={**os.environ, "SSH": str(stub)},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    for rank, host in enumerate(["h1", "h1", "h2", "h2"]):
        args = [x.split("] ", 1)[1] for x in run.stdout.splitlines() if x.startswith(f"[rank {rank} {host}] ")]
        assert ("arg:-i" in args) == (host == "h1"), args
        if host == "h1":
            assert args[args.index("arg:-i") + 1] == f"arg:{key}"
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("content, why", [
    ("my notes\n", "line 1: expected hosts, key type and key"),
    ("# mine\n\nhost1 ssh-ed25519 !!!notbase64\n", "line 3: the key is not base64"),
    ("@trusted host1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA==\n", "line 1: unknown marker '@trusted'"),
])
def test_a_malformed_known_hosts_line_is_refused_before_any_host_is_reached(tmp_path, content, why):
    """asyncssh skipped these lines without a word: the file trusted nothing it seemed to."""
    known = tmp_path / "known"
    known.write_text(content)
    inventory = tmp_path / "hosts"
    inventory.write_text("nonexistent.invalid slots=1\n")
    line = expect_one_line(tmp_path, ["inventory", "-i", str(inventory), "--known-hosts", str(known)], 2,
                           "--known-hosts")
    assert why in line


def test_a_well_formed_known_hosts_file_is_read(tmp_path):
    from probes.ssh import read_known_hosts

    known = tmp_path / "known"
    known.write_text("# comment\n\n|1|c2FsdA==|aGFzaA== ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOh0 a comment\n"
                     "@cert-authority *.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOh0\n"
                     "[h1]:2222,10.0.0.1 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOh0\n")
    read_known_hosts(known)  # no FileError


@pytest.mark.parametrize("score", [None, "x", [1, 2]])
def test_a_solve_document_whose_score_is_no_object_is_read_like_other_json(tmp_path, score):
    """``score``: null in a solve --json document ended in an AttributeError traceback."""
    fabric = _small_fabric_file(tmp_path)
    doc = tmp_path / "sol.json"
    doc.write_text(json.dumps({"rank_map": [0, 1, 2, 3], "score": score}))
    result = CliRunner().invoke(app, ["--headless", "score", "--matrix", str(fabric), "-r", str(doc),
                                      "--c-pp", "0.1", "--c-dp", "0.1", "--pp", "2", "--dp", "2"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output


@pytest.mark.parametrize("entry", [{"gpus": 5}, {"gpus": "A100"}, {"gpus": ["A100"], "gpu_memory_mib": 5},
                                   {"gpus": ["A100"], "gpu_memory_mib": "x"}, 7])
def test_free_form_meta_of_another_shape_is_not_read_as_the_sweeps(tmp_path, entry):
    """``meta`` is free-form: ``meta.hosts.h0.gpus = 5`` ended solve's advice in a TypeError."""
    fabric = tmp_path / "f.json"
    fabric.write_text(json.dumps({**small_fabric(), "meta": {"hosts": {"h0": entry, "h1": {"gpus": ["H100"]}}}}))
    result = CliRunner().invoke(app, ["--headless", "solve", "--matrix", str(fabric), *SOLVE])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output


def test_a_huge_value_makes_an_error_line_of_bounded_length(tmp_path):
    """A 10,000-character --exclude was echoed whole: one 10 KB error line."""
    fabric = _small_fabric_file(tmp_path)
    line = expect_one_line(tmp_path, ["select", "--matrix", str(fabric), "--pp", "2", "--dp", "2",
                                      "--exclude", "x" * 10000], 2, "--exclude: 'xxx", "characters)...",
                           "' matches no device")
    assert len(line) < 700


@pytest.mark.parametrize("extra, culprit", [
    (["--job-name", "A"], "error: --job-name 'A': lowercase letters"),
    (["--image", "-x"], "error: --image '-x': a reference"),
])
def test_k8s_export_errors_name_their_flag(tmp_path, extra, culprit):
    """They said ``--format k8s: k8s: name 'A': ...``, naming neither flag."""
    fabric = _small_fabric_file(tmp_path)
    args = ["export", "--matrix", str(fabric), "-r", "0,1,2,3", "-f", "k8s", "--image", "img:1", *extra, "--", "t.py"]
    assert expect_one_line(tmp_path, args, 2).startswith(culprit)


@pytest.mark.parametrize("doc, words", [("null", "got null"), ("[1]", "got an array"), ('"x"', "got a string"),
                                        ("5", "got a number")])
def test_a_fabric_that_is_no_object_says_what_it_is_in_json_words(tmp_path, doc, words):
    path = tmp_path / "f.json"
    path.write_text(doc)
    expect_one_line(tmp_path, ["solve", "--matrix", str(path), *SOLVE], 2, f"expected a JSON object, {words}")


def test_a_session_whose_solutions_score_as_stored_loads(tmp_path):
    """The rescoring check refuses only what disagrees: a current solution with its own Comm
    (and a stale one, of another fabric digest, with any) loads."""
    from geoconsole.session import session_from_json

    doc = {**session_doc(), "solutions": [current(bound=_identity_comm() - 1.0), {**solution(), "fun": 1.0}]}
    loaded = session_from_json(json.loads(json.dumps(doc)), "s.json")
    assert [round(s.fun, 6) for s in loaded.solutions] == [round(_identity_comm(), 6), 1.0]


def test_what_the_console_itself_saves_loads(tmp_path):
    """The loader's text checks refused sessions the console wrote: a worker's multi-line
    error in a solution's message, a narrow no-break space in an inventory path, a fleet
    session named after a long inventory file."""
    from geoconsole.session import session_from_json

    doc = {**session_doc(), "inventory": "/x/hosts\u202fold.toml", "name": "fleet " + "h" * 250,
           "solutions": [{**solution(), "message": "worker processes could not start (a\nb\tc)"}]}
    loaded = session_from_json(json.loads(json.dumps(doc)), "s.json")
    assert loaded.solutions[0].message == "worker processes could not start (a b c)"
    assert loaded.inventory == "/x/hosts\u202fold.toml"


@pytest.mark.parametrize("line", ["old 1024 35 135970715082735453", "[h1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOh0\r"])
def test_known_hosts_lines_openssh_reads_or_skips_are_not_refused(tmp_path, line):
    """An SSH1 key (bits, exponent, modulus), which OpenSSH skips; a CRLF line."""
    from probes.ssh import read_known_hosts

    known = tmp_path / "known"
    known.write_text(line + "\n")
    read_known_hosts(known)


def _probe_files(tmp_path):
    inventory = tmp_path / "hosts.toml"
    inventory.write_text('[[hosts]]\nname = "a"\naddress = "nonexistent.invalid"\n')
    config, known = tmp_path / "ssh_config", tmp_path / "known_hosts"
    config.write_text("")
    known.write_text("")
    return inventory, config, known


@pytest.mark.parametrize("target, flag, culprit", [
    ("hosts.toml", "-o", "--out: "), ("ssh_config", "-o", "is also the --ssh-config"),
    ("known_hosts", "-o", "is also the --known-hosts"), ("ssh_config", "--events", "is also the --ssh-config"),
    ("known_hosts", "--events", "is also the --known-hosts"),
])
def test_probe_never_writes_over_its_own_inputs(tmp_path, target, flag, culprit):
    """probe -o wrote the fabric over its inventory, ssh config or known_hosts; --events
    over the known_hosts, whose next read then failed."""
    inventory, config, known = _probe_files(tmp_path)
    args = ["probe", "-i", str(inventory), "--ssh-config", str(config), "--known-hosts", str(known),
            "--connect-timeout", "2", "--host-timeout", "5"]
    args += ["-o", str(tmp_path / target)] if flag == "-o" else ["-o", str(tmp_path / "f.json"), flag, str(tmp_path / target)]
    expect_one_line(tmp_path, args, 2, culprit)


@pytest.mark.parametrize("extra, culprit", [
    (["--region", "a,b"], "--region: may not hold ','"), (["--zone", "z" * 64], "--zone"),
    (["--network-group", "a\x1bb"], "--network-group"), (["--ssh-config", "FOLDER"], "is a folder"),
])
def test_fleet_flags_are_checked_before_any_host_is_reached(tmp_path, extra, culprit):
    """Location flags were written into the fabric unchecked (no command could load it
    back); a folder --ssh-config was read as an empty config."""
    inventory, config, known = _probe_files(tmp_path)
    (tmp_path / "folder").mkdir()
    extra = [{"NOFILE": str(tmp_path / "nofile"), "FOLDER": str(tmp_path / "folder")}.get(a, a) for a in extra]
    for command in (["probe", "-o", str(tmp_path / "f.json")], ["inventory"]):
        args = [*command, "-i", str(inventory), "--known-hosts", str(known), "--connect-timeout", "2", *extra]
        if "--ssh-config" not in extra:
            args += ["--ssh-config", str(config)]
        expect_one_line(tmp_path, args, 2, culprit)


def test_a_missing_ssh_config_named_on_the_command_line_is_noted(tmp_path):
    inventory, _config, known = _probe_files(tmp_path)
    result = CliRunner().invoke(app, ["--headless", "inventory", "-i", str(inventory), "--known-hosts", str(known),
                                      "--ssh-config", str(tmp_path / "typo"), "--connect-timeout", "2"])
    assert result.exit_code == 3 and "note: --ssh-config: " in result.stderr and "typo: no such file" in result.stderr


@pytest.mark.parametrize("extra, culprit", [
    (["--share", "0.5"], "--share: only with --refresh"), (["--seed", "3"], "--seed: only with --refresh"),
    (["--sizes-mb", "1,,2"], "--sizes-mb: an empty item"),
])
def test_probe_options_it_would_not_use_are_refused(tmp_path, extra, culprit):
    """--share or --solution without --refresh were dropped and a full sweep ran instead."""
    inventory, config, known = _probe_files(tmp_path)
    expect_one_line(tmp_path, ["probe", "-i", str(inventory), "-o", str(tmp_path / "f.json"), "--ssh-config",
                               str(config), "--known-hosts", str(known), "--connect-timeout", "2", *extra], 2, culprit)


@pytest.mark.parametrize("target, culprit", [("F", "is also the --matrix"), ("DIR", "is a directory")])
def test_an_sbatch_script_path_is_checked_by_a_dry_run_too(tmp_path, target, culprit):
    fabric = _small_fabric_file(tmp_path)
    (tmp_path / "dir").mkdir()
    path = {"F": str(fabric), "DIR": str(tmp_path / "dir")}[target]
    expect_one_line(tmp_path, ["launch", "-m", str(fabric), "-r", "0,1,2,3", "--via", "slurm", "--submit",
                               "--dry-run", "--sbatch-script", path, "--", "t.py"], 2, "--sbatch-script: ", culprit)
