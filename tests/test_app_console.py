"""Pilot tests of the console an operator lives in: focus, status bar, confirmations, undo."""

from __future__ import annotations

import pytest
from support import demo_app, region_pipelines, with_solutions
from textual.widgets import DataTable, Input

from screens.dialogs import ConfirmDialog, PathDialog
from screens.fields import Field
from screens.help import HelpScreen
from screens.statusbar import StatusBar, solve_eta
from screens.tabs import ScreenTabs

SIZE = (100, 30)


def bar(app) -> str:
    return str(app.screen.query_one(StatusBar).render())


async def save_as(pilot, path) -> None:
    """F2 (from no field), type ``path``, Enter."""
    pilot.app.screen.set_focus(None)
    await pilot.press("f2")
    await pilot.pause()
    pilot.app.screen.query_one("#path", Input).value = str(path)
    await pilot.press("enter")
    await pilot.pause()


async def test_escape_leaves_a_field_then_global_keys_work():
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await pilot.pause()
        field = app.screen.query_one("#form-restarts", Input)
        field.focus()
        await pilot.pause()
        assert field.selection.is_empty, "focusing a field must not select its text"
        await pilot.press("7")  # typed into the field while it has focus
        assert field.value.endswith("7")
        await pilot.press("escape")
        await pilot.pause()
        assert app.focused is None or not isinstance(app.focused, Input)
        await pilot.press("2")
        await pilot.pause()
        assert app.current_mode == "fabric"


async def test_second_escape_reaches_the_screen():
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await pilot.pause()
        screen = app.screen
        called = []
        screen.action_cancel = lambda: called.append(True)
        screen.query_one("#form-seed", Input).focus()
        await pilot.press("escape")
        assert not called  # the first Escape only leaves the field
        await pilot.press("escape")
        assert called


async def test_footer_says_how_to_leave_a_field():
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await pilot.pause()
        app.screen.query_one("#set-region", Input).focus()
        await pilot.pause()
        shown = {b.description for b in (x.binding for x in app.active_bindings.values()) if b.show}
        assert "Leave field" in shown


async def test_every_form_field_is_a_field():
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        for key in "346":
            await pilot.press(key)
            await pilot.pause()
            inputs = list(app.screen.query(Input))
            assert inputs and all(isinstance(i, Field) for i in inputs)


async def test_tab_bar_lists_the_screens_and_lights_the_current_one():
    app = demo_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        await pilot.pause()
        tabs = app.screen.query_one(ScreenTabs)
        text = tabs.render()
        plain = str(text)
        for label in ("1 Fleet", "2 Fabric", "3 Labels", "4 Solve", "5 Rank map", "6 Launch"):
            assert label in plain
        assert tabs.mode == "rankmap"


async def test_status_bar_shows_solution_stale_and_unsaved():
    app = with_solutions(demo_app(), region_pipelines(demo_app().session))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "solve #1 done: Comm 51.50 s" in bar(app)
        assert "unsaved" not in bar(app)
        await pilot.press("3", "space")
        app.screen.query_one("#set-zone", Input).value = "z1"
        await pilot.click("#apply")
        await pilot.pause()
        assert "STALE" in bar(app) and "unsaved changes" in bar(app)
        await pilot.press("1")  # every screen has the bar, up to date
        await pilot.pause()
        assert "STALE" in bar(app) and "unsaved changes" in bar(app)


async def test_status_bar_shows_a_running_solve_from_another_screen():
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        app.screen.query_one("#form-budget", Input).value = "500000000"
        app.screen.query_one("#form-restarts", Input).value = "10000"
        await pilot.press("ctrl+r")
        from support import wait_until

        await wait_until(lambda: "best" in str(app.activity.get("solve", "")))
        await pilot.press("2")
        await wait_until(lambda: app.current_mode == "fabric" and "solving: best" in bar(app))
        assert "bound" in bar(app)
        await pilot.press("4", "escape")
        await wait_until(lambda: app.session.current is not None and "solve" not in app.activity)


def test_eta_from_time_limit_or_budget():
    assert solve_eta(2.0, 100, 10.0, None) == pytest.approx(8.0)
    assert solve_eta(2.0, 100, None, 400) == pytest.approx(6.0)
    assert solve_eta(2.0, 100, None, None) is None


async def test_quit_with_unsaved_changes_asks_first(tmp_path):
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "space")
        app.screen.query_one("#set-zone", Input).value = "z1"
        await pilot.click("#apply")
        await pilot.pause()
        app.screen.set_focus(None)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog) and app.is_running
        await pilot.press("n")
        await pilot.pause()
        assert app.is_running and not isinstance(app.screen, ConfirmDialog)
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
    assert not app.is_running


async def test_quit_without_changes_exits_at_once():
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code is not None or not app.is_running


async def test_load_with_unsaved_changes_asks_first(tmp_path):
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "space")
        app.screen.query_one("#set-zone", Input).value = "z1"
        await pilot.click("#apply")
        await pilot.pause()
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        await pilot.pause()
        assert isinstance(app.screen, PathDialog)


async def test_save_as_asks_for_a_path_then_ctrl_s_reuses_it(tmp_path):
    app = demo_app()
    target = tmp_path / "mine.json"
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "space")
        app.screen.query_one("#set-zone", Input).value = "z1"
        await pilot.click("#apply")
        await pilot.pause()
        app.screen.set_focus(None)
        await pilot.press("f2")
        await pilot.pause()
        assert isinstance(app.screen, PathDialog)
        app.screen.query_one("#path", Input).value = str(target)
        await pilot.press("enter")
        await pilot.pause()
        assert target.exists() and app.session.path == target
        assert not app.dirty and "unsaved" not in bar(app)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert "Save session as" in titles


async def test_save_as_onto_an_existing_file_asks_first(tmp_path):
    app = demo_app()
    victim = tmp_path / "rank_map.json"
    victim.write_text('{"rank_map": [0]}')
    async with app.run_test(size=SIZE) as pilot:
        for answer, kept in (("n", True), ("y", False)):
            await save_as(pilot, victim)
            assert isinstance(app.screen, ConfirmDialog) and "Overwrite rank_map.json?" in app.screen.title_text
            await pilot.press(answer)
            await pilot.pause()
            assert (victim.read_text() == '{"rank_map": [0]}') == kept
        assert app.session.path == victim


async def test_confirmations_focus_no():
    """A stray Enter in a dialog whose yes quits, launches or overwrites answers no."""
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        app.dirty = True
        app.screen.set_focus(None)
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog) and app.screen.focused.id == "no"
        await pilot.press("enter")
        await pilot.pause()
        assert app.is_running and not isinstance(app.screen, ConfirmDialog)


async def test_palette_offers_other_screens_actions_and_runs_them_there():
    from support import wait_until
    from textual.command import CommandList

    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        assert "Alpha" not in commands  # sanity: titles are the COMMANDS_ titles
        for title in ("Show latency alpha", "Solve placement (Solve)", "Export rank map (Rank map)",
                      "Mark row (Labels)", "Connect all hosts (Fleet)", "Launch the job (Launch)"):
            assert title in commands
        await pilot.press("6", "ctrl+p", *"export")  # as shown in the palette, the tag too
        await pilot.pause()
        await wait_until(lambda: app.screen.query(CommandList) and app.screen.query_one(CommandList).option_count)
        shown = str(app.screen.query_one(CommandList).get_option_at_index(0).prompt)
        assert shown.startswith("Export rank map (Rank map)"), shown
        await pilot.press("escape")
        await pilot.pause()
        commands["Toggle diff (Rank map)"].callback()
        await pilot.pause()
        await pilot.pause()
        assert app.current_mode == "rankmap"


async def test_help_is_generated_from_the_bindings_and_fits_80_columns():
    app = demo_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = app.screen.help_text()
        for key, what in (("g", "Suggest groups"), ("[", "Prev edge"), ("m", "Mode"), ("F2", "Save as")):
            assert key in text and what in text
        box = app.screen.query_one("#help-body")
        assert box.region.width <= 80


async def test_suggested_groups_are_previewed_and_undone():
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await pilot.pause()
        before = app.session.devices()
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        body = " ".join(str(w.render()) for w in app.screen.query("Static"))
        assert "64 rows change" in body and "-> " in body
        await pilot.press("n")  # declined: nothing changed
        await pilot.pause()
        assert app.session.devices() == before and not app.dirty
        await pilot.press("g")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert all(d.network_group for d in app.session.devices())
        await pilot.press("z")
        await pilot.pause()
        assert app.session.devices() == before


async def test_label_edit_is_undone_and_the_cursor_stays_on_its_row():
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "down", "down")
        screen = app.screen
        table = screen.query_one(DataTable)
        row = screen.order[table.cursor_row]
        screen.query_one("#set-region", Input).value = "Ireland"  # re-sorts the row to the end
        await pilot.click("#apply")
        await pilot.pause()
        assert app.session.devices()[row].region == "Ireland"
        assert screen.order[table.cursor_row] == row
        assert "labels set on 1 row " in app.sub_title
        assert not screen.marked
        screen.set_focus(None)
        await pilot.press("z")
        await pilot.pause()
        assert app.session.devices()[row].region == "Oregon"


async def _relabel_the_cursor_row(app, pilot):
    """On the Labels tab, set the cursor row's region to Ireland (an undoable edit)."""
    await pilot.press("3")
    screen = app.screen
    screen.query_one("#set-region", Input).value = "Ireland"
    await pilot.click("#apply")
    await pilot.pause()
    return screen


async def test_undo_and_marks_do_not_reach_into_a_session_loaded_since(tmp_path):
    """z after loading another session put the earlier session's labels (even its fabric)
    into the loaded one, which ctrl+s then wrote over the loaded file; marks were rows of
    the earlier fabric."""
    from geoconsole.session import demo_session, load_session

    other = demo_session()
    other.save(tmp_path / "other.json")
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await _relabel_the_cursor_row(app, pilot)
        await pilot.press("space")  # a mark on the earlier session's table
        assert screen.marked and len(screen.undo_stack) == 1
        app.replace_session(load_session(tmp_path / "other.json"))
        await pilot.pause()
        assert not screen.marked
        loaded = app.session
        before = [d.region for d in loaded.devices()]
        screen.set_focus(None)
        await pilot.press("z")
        await pilot.pause()
        assert app.session is loaded and [d.region for d in loaded.devices()] == before
        assert not screen.undo_stack


async def test_undo_does_not_put_back_a_fabric_replaced_since():
    """Edit a label, leave a device out (x) and solve: z brought the 64-device fabric back
    under a 63-device solution, and the saved session did not load again."""
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        screen = await _relabel_the_cursor_row(app, pilot)
        app.session.leave_out(["oregon-0:0"])
        screen.set_focus(None)
        await pilot.press("z")
        await pilot.pause()
        assert app.session.fabric.n == 63 and not screen.undo_stack


async def test_labels_filter_and_sort():
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await pilot.pause()
        screen = app.screen
        table = screen.query_one(DataTable)
        await pilot.press("slash")
        await pilot.press(*"tokyo")
        await pilot.pause()
        assert table.row_count == 8
        assert all(app.session.devices()[r].host.startswith("tokyo") for r in screen.order)
        await pilot.press("enter")  # back to the table, filter kept
        await pilot.pause()
        assert isinstance(app.focused, DataTable) and table.row_count == 8
        await pilot.press("space")  # marks act on the filtered rows
        assert app.session.devices()[next(iter(screen.marked))].host.startswith("tokyo")
        await pilot.press("s", "s")  # sort by host (column 1)
        await pilot.pause()
        hosts = [app.session.devices()[r].host for r in screen.order]
        assert hosts == sorted(hosts)
        assert [c.label.plain for c in table.columns.values()][1] == "host ▲"
        await pilot.click("#labels-table", offset=(12, 0))  # the host header again: reversed
        await pilot.pause()
        assert screen.sort_column == 1 and screen.sort_reverse


async def test_fleet_filter_keeps_the_selection_on_the_shown_rows():
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("1")
        await pilot.pause()
        screen = app.screen
        await pilot.press("slash", *"seoul-3")
        await pilot.press("enter")
        await pilot.pause()
        assert screen.query_one(DataTable).row_count == 1
        assert screen._selected().name == "seoul-3"


def test_a_best_that_never_moved_draws_no_solid_block():
    from screens.solve_widgets import sparkline_data

    assert sparkline_data([5.0, 5.0, 5.0]) == ([], " (unchanged during the run)")
    assert sparkline_data([6.0, 5.0]) == ([6.0, 5.0], "")


async def test_screens_are_built_ahead_and_switching_shows_them():
    from support import wait_until

    from geoconsole.app import SCREENS

    app = demo_app(prebuild=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(lambda: all(m in app._screen_stacks for m, _k, _t in SCREENS))
        await pilot.pause()
        assert app.current_mode == "fabric"  # building them did not switch the display
        for mode, key, _title in SCREENS:
            await pilot.press(key)
            await pilot.pause()
            assert app.current_mode == mode
            assert app.screen.query_one(ScreenTabs).mode == mode


def test_host_counts_for_the_status_bar():
    from screens.fleet import host_counts

    assert host_counts({"connected": 3, "failed": 1}) == "hosts 3/4 connected, 1 failed"
    assert host_counts({"not connected": 2, "connecting": 2}) == "hosts 0/4 connected, 2 connecting"


async def test_status_bar_counts_failed_hosts_on_every_screen(tmp_path):
    from support import wait_until

    inventory = tmp_path / "hosts.toml"  # port 1 on loopback refuses at once
    inventory.write_text('[[hosts]]\nname = "dead-1"\naddress = "127.0.0.1"\nport = 1\nuser = "nobody"\n')
    app = demo_app(inventory=inventory)
    app.session.known_hosts = str(tmp_path / "known_hosts")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("c")
        await wait_until(lambda: "1 failed" in bar(app), timeout=20)
        assert "hosts 0/1 connected, 1 failed" in bar(app)
        await pilot.press("3")
        await pilot.pause()
        assert "hosts 0/1 connected, 1 failed" in bar(app)


async def test_the_solve_form_fits_80x24_without_scrolling():
    """At 80 x 24 every field, the buttons and the first field's label are on screen when
    the tab opens (the focused Solve button used to scroll the first field away)."""
    from screens.solve_widgets import FIELDS

    app = demo_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        pane = app.screen.query_one("#solve-form-pane")
        assert pane.scroll_y == 0
        region = pane.region
        for key, _label, _p in FIELDS:
            assert region.contains_region(app.screen.query_one(f"#form-{key}").region), key
        assert region.contains_region(app.screen.query_one("#solve-run").region)
    async with demo_app().run_test(size=(120, 45)) as pilot:  # room enough: blank lines between fields
        await pilot.press("4")
        await pilot.pause()
        assert not pilot.app.screen.query_one("WorkloadForm").has_class("compact")


async def test_baselines_cut_short_say_so():
    from support import make_solution

    from screens.solve import baseline_samples

    app = demo_app()
    sol = make_solution(app.session, region_pipelines(app.session), samples=baseline_samples(64))
    first = next(iter(sol.baselines))
    sol.baselines[first] = sol.baselines[first][:37]  # the time limit ended the draw there
    sol.status = "2"
    app.session.add_solution(sol)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await pilot.pause()
        shown = str(app.screen.query_one("#solve-histogram").render())
        assert f"{first}  37 of {baseline_samples(64)} samples, cut short" in shown
        assert shown.count("cut short") == 1  # the other baseline is whole
    app = demo_app()
    sol = make_solution(app.session, region_pipelines(app.session))
    sol.baselines, sol.status = {}, "3"  # cancelled before any was drawn
    app.session.add_solution(sol)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await pilot.pause()
        assert "none drawn before the solve ended" in str(app.screen.query_one("#solve-histogram").render())


async def test_a_saved_session_keeps_the_solve_options_and_the_training_command(tmp_path):
    from support import wait_until

    from geoconsole.session import load_session

    app = demo_app()
    target = tmp_path / "s.json"
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await pilot.pause()
        for key, value in (("seed", "5"), ("time_limit", "0.5"), ("restarts", "1")):
            app.screen.query_one(f"#form-{key}", Input).value = value
        await pilot.press("ctrl+r")
        await wait_until(lambda: app.session.current is not None)
        await pilot.press("6")
        await pilot.pause()
        app.dirty = False  # as after a save: the command's Enter alone marks it unsaved
        app.screen.query_one("#launch-command", Input).value = "train.py\t--steps 100"
        app.screen.query_one("#launch-command", Input).focus()
        await pilot.press("enter")  # a tab is kept; a control character is refused, nothing changed
        await pilot.pause()
        assert app.session.launch_command == "train.py\t--steps 100" and app.dirty
        app.dirty = False
        app.screen.query_one("#launch-command", Input).value = "train.py\x1b[31m"
        await pilot.press("enter")
        await pilot.pause()
        assert app.session.launch_command == "train.py\t--steps 100" and not app.dirty
        app.screen.query_one("#launch-command", Input).value = "train.py --steps 100"
        app.screen.query_one("#launch-command", Input).focus()
        await pilot.press("enter")
        await pilot.pause()
        assert app.dirty and app.session.launch_command == "train.py --steps 100"
        app.session.save(target)
    loaded = load_session(target)
    assert loaded.solve_options == {"seed": 5, "time_limit": 0.5, "restarts": 1}
    assert loaded.launch_command == "train.py --steps 100"
    app = demo_app()
    app.replace_session(loaded)  # as ctrl+o does
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        await pilot.pause()
        assert app.screen.query_one("#form-time_limit", Input).value == "0.5"
        assert app.screen.query_one("#form-seed", Input).value == "5"
        await pilot.press("6")
        await pilot.pause()
        assert app.screen.query_one("#launch-command", Input).value == "train.py --steps 100"


@pytest.mark.parametrize("text", ["eu[/]", "[bold]eu", "x[link=file:///etc]y"])
async def test_markup_in_labels_and_typed_values_is_shown_as_text(text, tmp_path):
    """A label, a typed value or a path holding markup is data: shown as it is, never
    parsed (``[/]`` raised MarkupError and stopped the console)."""
    from support import wait_until

    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3", "space")
        app.screen.query_one("#set-region", Input).value = text
        await pilot.click("#apply")
        await pilot.pause()
        assert app.session.devices()[0].region == text
        await pilot.press("4")
        await pilot.pause()
        app.screen.query_one("#form-seed", Input).value = text
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert repr(text)[1:-1] in str(app.screen.query_one("#solve-error").render())
        app.screen.query_one("#form-seed", Input).value = "0"
        await pilot.press("ctrl+r")
        await wait_until(lambda: app.session.current is not None)
        for key in "561234":  # every screen draws the label
            await pilot.press(key)
            await pilot.pause()
        assert app.is_running
        app.screen.notify(f"wrote {tmp_path / text}")  # a path in a notification, as screens send it
        await pilot.pause()
        saved = tmp_path / f"{text.replace('/', '')}[b].json"  # and in the save dialog's answer
        await save_as(pilot, saved)
        assert saved.exists() and app.is_running


def test_a_long_duration_reads_in_hours_or_days():
    """A 10^7 s time limit showed 'ETA 166667 min' in the bar and 'ETA 9999999 s' in the tab."""
    from screens.statusbar import duration

    assert [duration(s) for s in (42, 900, 5 * 3600, 1e7)] == ["42 s", "15 min", "5 h", "116 days"]


async def test_the_palettes_screenshot_is_written_beside_the_session(tmp_path, monkeypatch):
    """Textual writes it to ~/Downloads, missing on most servers: 'Failed to save screenshot'."""
    from support import wait_until

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    app = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        (command,) = [c for c in app.get_system_commands(app.screen) if c.title == "Screenshot"]
        command.callback()  # as the palette runs it
        await wait_until(lambda: list(tmp_path.glob("*.svg")))
        await pilot.pause()
    (shot,) = tmp_path.glob("*.svg")
    assert shot.read_text().lstrip().startswith("<svg")
