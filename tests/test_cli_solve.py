"""solve, score, demo and selftest through Typer's runner: exit codes and output."""

import json
import re

import pytest
from typer.testing import CliRunner

from geoconsole.cli import app
from geoconsole.demo_fabrics import worldwide_fabric
from geoconsole.records import read_records

runner = CliRunner()
WW = ["--pp", "8", "--dp", "8", "--c-pp", "0.512", "--c-dp", "0.65"]


def run(*args):
    return runner.invoke(app, ["--headless", *map(str, args)])


def one_line_error(result, code=2):
    assert result.exit_code == code, result.output
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_solve_prints_the_report_and_the_rank_map(ww_path):
    result = run("solve", "--matrix", ww_path, *WW, "--seed", "7", "--baseline-samples", "20", "--budget", "20000")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(r"Comm\s+51\.500 s\s+\(DataP 22\.758 s \+ Pipeline 28\.742 s\)", out)
    assert "random stage groups" in out and "random rank map" in out
    assert "lower bound" in out and "above the optimum" in out
    assert "gap (Comm - bound) / Comm = " in out and "worker(s)" in out and "trace " in out
    assert "stage  0" in out and "pipeline edges" in out
    ranks = re.search(r"^rank_map=\(([\d ]+)\)$", out, re.M).group(1).split()
    assert sorted(map(int, ranks)) == list(range(64))


def _untimed(doc):
    """The document without wall-clock figures (elapsed times, the trace's time column)."""
    search = {**doc["search"], "elapsed_s": None, "trace": [v for _, v in doc["search"]["trace"]]}
    return {**doc, "search": search, "lower_bound": {**doc["lower_bound"], "elapsed_s": None}}


def test_solve_json_carries_the_same_and_is_deterministic(ww_path):
    args = ("solve", "--matrix", ww_path, *WW, "--seed", "3", "--baseline-samples", "10", "--budget", "5000", "--json")
    a, b = run(*args), run(*args)
    assert a.exit_code == 0
    doc = json.loads(a.stdout)
    assert _untimed(doc) == _untimed(json.loads(b.stdout))
    assert doc["search"]["trace"] and doc["search"]["trace"][-1][1] == doc["score"]["comm_s"]
    assert doc["lower_bound"]["method"] and doc["lower_bound"]["elapsed_s"] >= 0
    assert doc["score"]["comm_s"] == pytest.approx(doc["score"]["data_p_s"] + doc["score"]["pipeline_s"])
    assert [d["name"] for d in doc["baselines"]] == ["random stage groups", "random rank map"]
    assert doc["lower_bound"]["comm_s"] <= doc["score"]["comm_s"]
    assert len(doc["score"]["stage_groups"]) == 8 and len(doc["score"]["pipeline_edges"]) == 7


def test_solve_record_appends_one_line_per_run(ww_path, tmp_path):
    record = tmp_path / "runs.jsonl"
    for seed in (1, 2):
        assert run("solve", "--matrix", ww_path, *WW, "--seed", seed, "--baseline-samples", "5",
                   "--budget", "2000", "--record", record).exit_code == 0
    rows = read_records(record)
    assert [r["seed"] for r in rows] == [1, 2]
    for key in ("matrix_sha256", "workload", "budget", "restarts", "score_s", "lower_bound_s",
                "lower_bound_method", "lower_bound_elapsed_s", "workers", "found_by", "trace",
                "baselines", "rank_map", "version", "timestamp"):
        assert key in rows[0]
    assert rows[0]["matrix_sha256"] == worldwide_fabric().sha256()


def test_solve_time_limit_and_restarts_flags(ww_path):
    result = run("solve", "--matrix", ww_path, *WW, "--time-limit", "0.2", "--restarts", "100",
                 "--baseline-samples", "0", "--json")
    assert result.exit_code == 0
    search = json.loads(result.stdout)["search"]
    assert search["restarts"] == 100 and search["message"].startswith(("time limit", "evaluation budget", "search converged"))
    assert search["budget"] is None  # a time limit alone: no budget (not an internal 2^62)


def test_a_datap_of_zero_names_no_device(ww_path):
    result = run("solve", "--matrix", ww_path, "--pp", "8", "--dp", "1", "--c-pp", "0.5", "--c-dp", "0.6",
                 "--baseline-samples", "0", "--budget", "1000", "--regions", "Oregon")
    assert result.exit_code == 0, result.output
    assert "DataP is 0: no device sets it" in result.stdout and "DataP is set by" not in result.stdout


def test_solve_infers_dp_from_pp(ww_path):
    result = run("solve", "--matrix", ww_path, "--pp", "4", "--c-pp", "0.5", "--c-dp", "0.6",
                 "--baseline-samples", "0", "--budget", "1000", "--json")
    assert json.loads(result.stdout)["workload"]["d_dp"] == 16


def test_an_unmet_required_locality_is_a_failed_result_exit_1(ww_path):
    result = run("solve", "--matrix", ww_path, "--c-pp", "0.5", "--c-dp", "0.6", "--pp", "8", "--dp", "8",
                 "--group-locality", "zone")
    assert "group_locality=zone: none of the 64 devices has a zone label" in one_line_error(result, code=1)


@pytest.mark.parametrize("args, message", [
    (["--pp", "7"], "D_PP 7 does not divide the 64 devices; give both D_PP and D_DP"),
    (["--pp", "100"], "64 devices cannot hold D_PP 100"),
    (["--pp", "8", "--dp", "9"], "cannot hold D_PP 8 x D_DP 9"),
    (["--pp", "8", "--estimate", "zone=1,1"], "--estimate: applies only with --fill-missing"),
    (["--pp", "8", "--fill-missing", "--estimate", "zone=abc"], "--estimate"),
    (["--pp", "0"], "Invalid value for '--pp'"),
    (["--pp", "8", "--budget", "-3"], "Invalid value for '--budget'"),
    (["--pp", "8", "--time-limit", "0"], "Invalid value for '--time-limit'"),
])
def test_solve_bad_flags_give_one_line_and_exit_2(ww_path, args, message):
    result = run("solve", "--matrix", ww_path, "--c-pp", "0.5", "--c-dp", "0.6", *args)
    assert message in one_line_error(result)


def test_solve_refuses_unmeasured_pairs_listing_them(tmp_path):
    doc = worldwide_fabric().to_json()
    for i, j in ((0, 9), (9, 0), (5, 40), (40, 5)):
        doc["alpha_ms"][i][j] = doc["beta_gbps"][i][j] = None
    path = tmp_path / "holes.json"
    path.write_text(json.dumps(doc))
    line = one_line_error(run("solve", "--matrix", path, *WW))
    assert "2 device pairs unmeasured: oregon-0:0 - virginia-1:0, oregon-5:0 - london-0:0" in line and "(--fill-missing)" in line


def test_solve_malformed_file_and_unwritable_record(tmp_path, ww_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"labels": ["a"], "alpha_ms": [[0]], "beta_gbps": [[0]')
    assert f"{bad}: invalid JSON" in one_line_error(run("solve", "--matrix", bad, "--c-pp", "1", "--c-dp", "1"))
    line = one_line_error(run("solve", "--matrix", ww_path, *WW, "--budget", "10", "--baseline-samples", "0",
                              "--record", tmp_path / "no" / "such" / "runs.jsonl"))
    assert "runs.jsonl: folder" in line and "does not exist" in line


def test_score_agrees_with_solve(ww_path, tmp_path):
    solved = run("solve", "--matrix", ww_path, *WW, "--seed", "7", "--budget", "5000", "--baseline-samples", "0", "--json")
    doc = json.loads(solved.stdout)
    saved = tmp_path / "solution.json"
    saved.write_text(solved.stdout)
    for rank_map in (str(saved), "rank_map=(" + " ".join(map(str, doc["rank_map"])) + ")",
                     ",".join(map(str, doc["rank_map"]))):
        result = run("score", "--matrix", ww_path, *WW, "--rank-map", rank_map, "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["comm_s"] == doc["score"]["comm_s"]
    identity = run("score", "--matrix", ww_path, *WW, "--rank-map", ",".join(map(str, range(64))))
    assert identity.exit_code == 0 and "Comm" in identity.stdout
    # the same document on another fabric of as many devices names what differs
    other = tmp_path / "other.json"
    fabric = worldwide_fabric()
    from solver.fabric import Device

    renamed = [Device(f"z{i // 8}", i % 8, d.region, d.zone, d.network_group) for i, d in enumerate(fabric.devices)]
    type(fabric)(fabric.alpha_ms, fabric.beta_gbps, fabric.labels, tuple(renamed), fabric.measured_at,
                 fabric.meta, fabric.extras, fabric.source).save(other)
    line = one_line_error(run("score", "--matrix", other, *WW, "--rank-map", saved))
    assert "solved on other devices than this fabric's (row " in line and "'z" in line


@pytest.mark.parametrize("rank_map, message", [
    ("0,1,2", "3 ranks for 64 devices"),
    (",".join(["0"] * 64), "not a permutation"),
    ("missing-file.txt", "no such rank map file"),
])
def test_score_bad_rank_maps(ww_path, rank_map, message):
    assert message in one_line_error(run("score", "--matrix", ww_path, *WW, "--rank-map", rank_map))


def test_demo_prints_both_fabrics_scores_medians_and_ratios():
    result = run("demo", "--baseline-samples", "30")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "worldwide" in out and "51.50 s" in out
    assert "two-datacenter  [SYNTHETIC" in out
    assert out.count("median") == 4 and out.count("x\n") >= 4


def test_demo_json():
    doc = json.loads(run("demo", "--baseline-samples", "10", "--json").stdout)
    assert set(doc) == {"worldwide", "two-datacenter"}
    assert doc["two-datacenter"]["synthetic"] is True and doc["worldwide"]["synthetic"] is False


def test_selftest_passes():
    result = run("selftest")
    assert result.exit_code == 0
    assert "bottleneck matching: 100/100 equal to brute force" in result.stdout
    assert "Held-Karp boundary rejected at 17 stages" in result.stdout
    assert result.stdout.strip().endswith("selftest passed")


def test_selftest_fails_with_exit_1_when_a_check_fails(monkeypatch):
    import geoconsole.selftest as selftest

    monkeypatch.setattr(selftest, "bottleneck_matching", lambda c: (0.0, list(range(len(c)))))
    result = run("selftest")
    assert result.exit_code == 1 and "FAIL" in result.stdout


def test_headless_without_command_prints_help():
    result = run()
    assert result.exit_code == 0 and "solve" in result.stdout


def test_solve_selects_the_tightest_devices_when_the_fleet_is_larger(ww_path):
    result = run("solve", "--matrix", ww_path, "--pp", "4", "--dp", "2", "--c-pp", "0.5", "--c-dp", "0.6",
                 "--baseline-samples", "0", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    sel = doc["selection"]
    assert len(sel["rows"]) == 8 and len(sel["left_out"]) == 56
    assert sel["summary"].startswith("same region")
    assert doc["fabric"]["devices"] == 8 and sorted(doc["rank_map"]) == list(range(8))


def test_solve_regions_filter_and_its_failure(ww_path):
    ok = run("solve", "--matrix", ww_path, "--pp", "4", "--dp", "4", "--c-pp", "0.5", "--c-dp", "0.6",
             "--regions", "Tokyo,Seoul", "--baseline-samples", "0")
    assert ok.exit_code == 0, ok.output
    assert "selected   16 devices" in ok.stdout and "spans 2 regions" in ok.stdout
    assert "left out   8 device(s): Oregon not in --regions Seoul, Tokyo" in ok.stdout
    bad = run("solve", "--matrix", ww_path, "--pp", "4", "--dp", "4", "--c-pp", "0.5", "--c-dp", "0.6",
              "--regions", "Tokyo")
    assert "--regions Tokyo: 8 of 64 devices match, the workload needs 16" in one_line_error(bad, code=2)


def test_solve_fill_missing_estimates_and_counts_pairs(tmp_path):
    doc = worldwide_fabric().to_json()
    for i, j in ((0, 9), (9, 0), (1, 2), (2, 1)):
        doc["alpha_ms"][i][j] = doc["beta_gbps"][i][j] = None
    path = tmp_path / "holes.json"
    path.write_text(json.dumps(doc))
    result = run("solve", "--matrix", path, *WW, "--fill-missing", "--baseline-samples", "0", "--budget", "2000")
    assert result.exit_code == 0, result.output
    assert "estimated  2 pair(s) filled from labels and links, not measured" in result.stdout
    as_json = json.loads(run("solve", "--matrix", path, *WW, "--fill-missing", "--baseline-samples", "0",
                             "--budget", "2000", "--json").stdout)
    assert as_json["estimated_pairs"] == 2
    # an estimate that fills a value out of range is the flag's error, the file named once
    line = one_line_error(run("solve", "--matrix", path, *WW, "--fill-missing", "--no-learn",
                              "--estimate", "region=1e308,1e-308", "--estimate", "any=1e308,1e-308"))
    assert line.startswith(f"error: --estimate: filling unmeasured pairs of {path} gave ") and line.count(str(path)) == 1


def test_ctrl_c_after_the_search_prints_and_records_the_result(ww_path, tmp_path):
    """SIGINT while the baselines are drawn (the search is long done): the finished
    placement is printed and recorded, the baselines are cut short, exit 130."""
    import signal
    import subprocess
    import sys
    import time

    record = tmp_path / "runs.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "geoconsole.cli", "--headless", "solve", "--matrix", str(ww_path),
         "--c-pp", "0.512", "--c-dp", "0.65", "--baseline-samples", "100000", "--restarts", "0",
         "--record", str(record), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)  # imports, the search (about a second), then 100,000 baselines for minutes
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "rank_map=(" in out and "Traceback" not in err
    assert "baselines stopped early" in err
    assert "of 100000 samples, cut short): min" in out  # how many of how many, on the line
    (line,) = record.read_text().splitlines()
    assert json.loads(line)["score_s"] > 0


def test_solve_workers_flag_and_bad_value(ww_path):
    result = run("solve", "--matrix", ww_path, *WW, "--workers", "1", "--restarts", "1",
                 "--baseline-samples", "0", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["search"]["workers"] == 1
    bad = run("solve", "--matrix", ww_path, *WW, "--workers", "0")
    assert bad.exit_code != 0 and "Traceback" not in bad.output


def test_a_record_that_is_the_fabric_or_no_record_file_is_refused_before_the_search(ww_path, tmp_path):
    fabric = tmp_path / "in.json"
    fabric.write_bytes(ww_path.read_bytes())
    line = one_line_error(run("solve", "--matrix", fabric, *WW, "--record", fabric))
    assert "is also the --matrix" in line and fabric.read_bytes() == ww_path.read_bytes()
    notes = tmp_path / "notes.txt"
    notes.write_text("line one\nmy notes")
    line = one_line_error(run("solve", "--matrix", ww_path, *WW, "--record", notes))
    assert "is not a run-record file" in line and notes.read_text() == "line one\nmy notes"


def test_a_file_name_cannot_add_a_line_to_the_output_or_drive_the_terminal(ww_path, tmp_path):
    """A newline in the fabric's name printed raw made a second rank_map=(...) line, the
    one score and export then took; names are printed with escapes."""
    name = tmp_path / "x\nrank_map=(7 6 5 4 3 2 1 0)\ny.json"
    name.write_bytes(ww_path.read_bytes())
    result = run("solve", "--matrix", name, *WW, "--budget", "2000", "--restarts", "0",
                 "--baseline-samples", "0", "--workers", "1")
    assert result.exit_code == 0, result.output
    assert [x for x in result.stdout.splitlines() if x.startswith("rank_map=")] == [
        re.search(r"^rank_map=\(.*\)$", result.stdout, re.M).group(0)]
    assert "x\\nrank_map=(7 6 5 4 3 2 1 0)\\ny.json" in result.stdout
    out = tmp_path / "solve.txt"
    out.write_text(result.stdout)
    scored = run("score", "--matrix", ww_path, *WW, "-r", out)
    assert scored.exit_code == 0, scored.output
    assert f"{float(re.search(r'Comm +([0-9.]+) s', result.stdout).group(1)):.3f}" in scored.stdout
    line = one_line_error(run("solve", "--matrix", tmp_path / "e\x1b[31mred.json", *WW))
    assert "\x1b" not in line and "e\\x1b[31mred.json" in line


def test_a_rank_map_file_with_two_different_maps_is_refused(ww_path, tmp_path):
    two = tmp_path / "two.txt"
    n = 64
    two.write_text(f"rank_map=({' '.join(map(str, range(n)))})\n"
                   f"rank_map=({' '.join(map(str, reversed(range(n))))})\n")
    assert "2 different rank_map=(...);" in one_line_error(run("score", "--matrix", ww_path, *WW, "-r", two))
    two.write_text(f"rank_map=({' '.join(map(str, range(n)))}) rank_map=({' '.join(map(str, reversed(range(n))))})\n")
    assert "2 different rank_map=(...);" in one_line_error(run("score", "--matrix", ww_path, *WW, "-r", two))


def test_a_seed_too_long_for_the_readers_is_refused(ww_path):
    result = run("solve", "--matrix", ww_path, *WW, "--seed", str(2**64))
    assert result.exit_code == 2 and "--seed" in result.output and "Traceback" not in result.output


def test_a_written_path_is_printed_with_escapes(ww_path, tmp_path):
    out = tmp_path / "sel\nrank_map=(9 9).json"
    result = run("select", "--matrix", ww_path, "--pp", "4", "--dp", "8", "-o", out)
    assert result.exit_code == 0, result.output
    assert "sel\\nrank_map=(9 9).json" in result.stdout
    assert not any(x.startswith("rank_map=") for x in result.stdout.splitlines())
    assert out.exists()


def test_export_to_a_dash_writes_standard_output(ww_path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run("export", "--matrix", ww_path, "-r", ",".join(map(str, range(64))), "-f", "json", "-o", "-")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["world_size"] == 64 and not (tmp_path / "-").exists()


def test_score_takes_the_shape_of_a_solve_document(ww_path, tmp_path):
    """Without --pp / --dp, score used 8 x 8 on a 4 x 16 solution: another Comm."""
    solved = run("solve", "--matrix", ww_path, "--pp", "4", "--dp", "16", "--c-pp", "0.512", "--c-dp", "0.65",
                 "--budget", "2000", "--restarts", "0", "--baseline-samples", "0", "--workers", "1", "--json")
    saved = tmp_path / "solution.json"
    saved.write_text(solved.stdout)
    result = run("score", "--matrix", ww_path, "--c-pp", "0.512", "--c-dp", "0.65", "-r", saved, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["comm_s"] == json.loads(solved.stdout)["score"]["comm_s"]
    for flags in (["--pp", "8", "--dp", "8"], ["--dp", "8"]):  # another shape: refused
        other = run("score", "--matrix", ww_path, "--c-pp", "0.512", "--c-dp", "0.65", "-r", saved, *flags)
        assert other.exit_code == 2 and "was solved for D_PP 4 x D_DP 16" in other.output, other.output
    same = run("score", "--matrix", ww_path, "--c-pp", "0.512", "--c-dp", "0.65", "-r", saved, "--pp", "4")
    assert same.exit_code == 0, same.output
    checked = run("validate", "--matrix", ww_path, "-i", tmp_path / "none.toml", "--c-pp", "0.512",
                  "--c-dp", "0.65", "-r", saved, "--pp", "8")
    assert checked.exit_code == 2 and "was solved for D_PP 4 x D_DP 16" in checked.output, checked.output
    doc = json.loads(solved.stdout)
    for bad, why in (({"d_pp": -4, "d_dp": -16}, "workload.d_pp"), ({"d_pp": 4.0, "d_dp": 16}, "workload.d_pp"),
                     ({"d_pp": 4, "d_dp": "16"}, "workload.d_dp"), (None, "workload: expected an object")):
        saved.write_text(json.dumps({**doc, "workload": bad}))  # scored under a guessed shape before
        for flags in ([], ["--pp", "64", "--dp", "1"]):
            line = one_line_error(run("score", "--matrix", ww_path, "--c-pp", "0.512", "--c-dp", "0.65",
                                      "-r", saved, *flags))
            assert why in line and "solution.json" in line, line


@pytest.mark.parametrize("flag", ["--time-limit", "--c-pp"])
@pytest.mark.parametrize("value", ["nan", "-NaN"])
def test_a_nan_number_flag_is_named_as_not_a_number(ww_path, flag, value):
    """NaN failed the range check, worded "should be less than or equal to 10000000"."""
    args = {"--time-limit": WW + ["--time-limit", value], "--c-pp": ["--pp", "8", "--dp", "8", "--c-pp", value,
                                                                    "--c-dp", "0.65"]}[flag]
    line = one_line_error(run("solve", "--matrix", ww_path, *args))
    assert f"Invalid value for '{flag}': '{value}' is not a number" in line


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_rank_map_says_so(ww_path, value):
    """-r "" read the path '.' and said ".: is a directory"."""
    line = one_line_error(run("score", "--matrix", ww_path, *WW, "--rank-map", value))
    assert line == "error: --rank-map: empty; give rank_map=(...), '0,1,..' or a file"


def test_a_fabric_key_given_twice_is_refused(tmp_path):
    """json keeps the last of two equal keys: the fabric was solved on its second matrix."""
    path = tmp_path / "twice.json"
    path.write_text('{"labels": ["a", "b"], "alpha_ms": [[null, 1], [1, null]], '
                    '"alpha_ms": [[null, 5], [5, null]], "beta_gbps": [[null, 1], [1, null]]}')
    line = one_line_error(run("solve", "--matrix", path, "--c-pp", "1", "--c-dp", "1"))
    assert line == f"error: {path}: invalid JSON: key 'alpha_ms' appears twice in one object"


def test_the_report_says_how_many_workers_were_lost(ww_path):
    from geoconsole.report import format_solve

    result = run("solve", "--matrix", ww_path, *WW, "--seed", "3", "--baseline-samples", "0", "--budget", "5000",
                 "--workers", "2", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["search"]["worker_errors"] == [] and "lost" not in format_solve(doc)
    doc["search"]["worker_errors"] = ["worker 1 exited with code -9"]
    assert f"{doc['search']['workers']} worker(s) started, 1 lost" in format_solve(doc)
