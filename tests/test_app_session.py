"""Session state: save and load round trips, staleness, label edits, bad files, the factory."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support import demo_app, make_solution, region_pipelines

from geoconsole.app import create_app
from geoconsole.errors import GeoconsoleError
from geoconsole.labels import LabelError
from geoconsole.session import SessionError, demo_session, load_session


def test_round_trip_keeps_fabric_labels_workload_and_solutions(tmp_path):
    s = demo_session()
    s.edit_labels([0, 1], {"zone": "us-west1-b"})
    s.add_solution(make_solution(s, region_pipelines(s), samples=5))
    s.current.found_by = "worker 0: parallel tempering, then descent"
    path = s.save(tmp_path / "s.json")
    back = load_session(path)
    assert back.current.found_by == "worker 0: parallel tempering, then descent"
    assert back.fabric.sha256() == s.fabric.sha256()
    assert back.devices() == s.devices()
    assert back.labels == s.labels
    assert back.workload == s.workload
    sol, back_sol = s.current, back.current
    assert back_sol.rank_map.tolist() == sol.rank_map.tolist()
    assert back_sol.fun == sol.fun and back_sol.baselines == sol.baselines
    # Saved after the edit, the solution is still current after loading.
    assert not back.is_stale(back_sol)


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path):
    s = demo_session()
    path = tmp_path / "s.json"
    path.write_text("old")
    s.save(path)
    assert json.loads(path.read_text())["format"] == "geoconsole-session/1"
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]


def test_label_edit_marks_solutions_stale():
    s = demo_session()
    s.add_solution(make_solution(s, region_pipelines(s), samples=5))
    assert not s.is_stale(s.current)
    s.edit_labels([5], {"network_group": "rack-1"})
    assert s.is_stale(s.current)


def test_whole_host_edit_is_per_host_partial_is_per_gpu():
    s = demo_session("two-datacenter")
    host0 = [i for i, d in enumerate(s.devices()) if d.host == "dc0-host0"]
    s.edit_labels(host0, {"network_group": "rack-a"})
    assert s.labels.hosts["dc0-host0"]["network_group"].value == "rack-a"
    s.edit_labels(host0[:2], {"network_group": "rack-b"})
    assert s.labels.gpus[("dc0-host0", 0)]["network_group"].value == "rack-b"
    groups = [s.devices()[i].network_group for i in host0]
    assert groups == ["rack-b", "rack-b"] + ["rack-a"] * 6
    s.edit_labels(host0[:1], {"network_group": None})
    # Clearing a GPU's override falls back to its host's label.
    assert s.devices()[host0[0]].network_group == "rack-a"


def test_invalid_label_is_refused_and_changes_nothing():
    s = demo_session()
    before = s.devices()
    with pytest.raises(LabelError, match="whitespace"):
        s.edit_labels([0], {"region": "two words"})
    assert s.devices() == before


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "invalid JSON at line 1"),
        ('{"format": "other"}', "format: expected 'geoconsole-session/1'"),
        ('{"format": "geoconsole-session/1"}', "missing field 'workload'"),
        ('{"format": "geoconsole-session/1", "workload": {"d_pp": 0, "d_dp": 1, "c_pp": 1, "c_dp": 1}}',
         "workload: d_pp: must be a whole number"),
    ],
)
def test_bad_session_file_is_one_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(SessionError) as info:
        load_session(path)
    text = str(info.value)
    assert text.startswith(str(path)) and message in text and "\n" not in text


def test_bad_solution_in_session_names_the_entry(tmp_path):
    s = demo_session()
    s.add_solution(make_solution(s, region_pipelines(s), samples=5))
    doc = s.to_json()
    doc["solutions"][0]["rank_map"] = [0, 1]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SessionError, match=r"solutions\[0\]\.rank_map: 2 entries for 64 devices"):
        load_session(path)


def test_factory_turns_bad_files_into_user_errors(tmp_path):
    with pytest.raises(GeoconsoleError, match="no such session file"):
        create_app(session=tmp_path / "missing.json")
    bad = tmp_path / "hosts.toml"
    bad.write_text("[[hosts]]\nport = 'x'\n")
    with pytest.raises(GeoconsoleError):
        create_app(inventory=bad)
    with pytest.raises(GeoconsoleError, match="unknown demo"):
        create_app(demo="nowhere")


async def test_ctrl_s_saves_and_load_restores(tmp_path):
    app = demo_app()
    app.session.path = tmp_path / "console.json"
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert (tmp_path / "console.json").exists()
        app.session.edit_labels([0], {"zone": "z1"})
        await pilot.press("ctrl+o")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert app.session.devices()[0].zone is None


async def test_loading_a_bad_session_keeps_the_current_one(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    app = demo_app()
    before = app.session
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+o")
        await pilot.pause()
        app.screen.query_one("#path").value = str(bad)
        await pilot.press("enter")
        await pilot.pause()
        assert app.session is before
        assert any("expected a JSON object" in n.message for n in app._notifications)


def test_session_without_device_records_gets_rows_to_label():
    from solver.fabric import Fabric
    from solver.workload import Workload

    from geoconsole.session import Session

    f = Fabric(np.zeros((2, 2)), np.full((2, 2), 1.0), ("a", "b"))
    s = Session(fabric=f, workload=Workload(1, 2, 0.1, 0.1))
    assert [d.host for d in s.devices()] == ["row0", "row1"]
    assert [d.region for d in s.devices()] == ["a", "b"]


async def test_loading_a_session_whose_fabric_labels_are_refused_is_an_error_not_a_crash(tmp_path):
    """A device-less fabric's row labels are its regions: one with a space cannot be a
    label. ctrl+o said so with a traceback and the console exited."""
    import json

    from support import demo_app
    from textual.widgets import Input

    from geoconsole.session import SessionError, demo_session, load_session

    doc = demo_session().to_json()
    doc["fabric"]["devices"] = None
    doc["fabric"]["labels"] = [f"Oregon DC {i // 8}" for i in range(len(doc["fabric"]["labels"]))]
    doc["labels"] = {}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SessionError, match="s.json: fabric: "):
        load_session(path)
    app = demo_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+o")
        await pilot.pause()
        app.screen.query_one("#path", Input).value = str(path)
        await pilot.press("enter")
        await pilot.pause()
        assert app.is_running and any("s.json: fabric: " in n.message for n in app._notifications)
