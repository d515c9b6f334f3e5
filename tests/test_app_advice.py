"""Pilot tests: the console shows advice on the Solve and Rank map screens; x leaves the
poor device out."""

from __future__ import annotations

from advice_fabrics import advice_app, region_fabric, with_advised_solution
from test_app_flows import SIZE, text_of, wait_until
from textual.widgets import Input, Static


async def _solve(pilot, app) -> None:
    await pilot.press("4")
    await pilot.pause()
    app.screen.query_one("#form-budget", Input).value = "5000"
    await pilot.press("ctrl+r")
    await wait_until(lambda: app.session.current is not None and not app.screen.running)
    await pilot.pause()


async def test_solving_a_fabric_with_a_poor_device_advises_on_solve_and_rank_map():
    app = advice_app()
    async with app.run_test(size=SIZE) as pilot:
        await _solve(pilot, app)
        shown = app.screen.query_one("#solve-advice", Static)
        assert shown.display and "poor-device" in text_of(shown) and "h5:0" in text_of(shown)
        assert app.session.current.advice[0]["subject"] == "h5:0"
        await pilot.press("5")
        await pilot.pause()
        summary = text_of(app.screen.query_one("#rankmap-summary", Static))
        assert "warning poor-device: h5:0" in summary and "x: leave it out" in summary
        await pilot.press("x")
        await pilot.pause()
        names = [d.name for d in app.session.devices()]
        assert len(names) == 15 and "h5:0" not in names and app.session.solutions == []


async def test_a_nearly_uniform_fabric_is_called_out_and_x_has_nothing_to_leave_out():
    app = advice_app(region_fabric(jitter=0.005, regions=0))
    async with app.run_test(size=SIZE) as pilot:
        await _solve(pilot, app)
        text = text_of(app.screen.query_one("#solve-advice", Static))
        assert "barely-beats-random" in text and "uniform-fabric" in text
        await pilot.press("5", "x")
        await pilot.pause()
        assert app.session.fabric.n == 16 and len(app.session.solutions) == 1


async def test_a_fabric_of_regions_shows_no_advice():
    app = advice_app(region_fabric())
    async with app.run_test(size=SIZE) as pilot:
        await _solve(pilot, app)
        assert app.session.current.advice == []
        assert not app.screen.query_one("#solve-advice", Static).display


async def test_advice_survives_a_session_round_trip(tmp_path):
    from geoconsole.session import load_session

    app = with_advised_solution(advice_app())
    path = app.session.save(tmp_path / "s.json")
    assert load_session(path).current.advice == app.session.current.advice != []


async def test_the_launch_screen_warns_about_a_stale_fabric():
    from dataclasses import replace

    app = with_advised_solution(advice_app(replace(region_fabric(), measured_at="2026-01-01T00:00:00+00:00")))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        await pilot.pause()
        summary = text_of(app.screen.query_one("#launch-summary", Static))
        assert "warning stale-measurement: the fabric was measured 332 days ago" in summary
