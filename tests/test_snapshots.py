"""Snapshots of every console screen (pytest-textual-snapshot).

Deterministic: the built-in demo fabric (fixed host names), a fixed clock, solutions
scored from fixed rank maps with fixed times, a fixed terminal size and no blinking
cursor. Update with ``pytest tests/test_snapshots.py --snapshot-update`` after checking
the reviewer's notes in each docstring against the new SVGs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support import demo_app, region_pipelines, with_solutions
from textual.widgets import Input

SIZE = (120, 45)
#: The sizes every screen is checked at: a default tmux pane and a large terminal.
SIZES = [(80, 24), (160, 48)]


async def steady(pilot) -> None:
    """No blinking cursor; let every pending refresh land."""
    for inp in pilot.app.screen.query(Input):
        inp.cursor_blink = False
    await pilot.pause()


class TestFabric:
    def test_worldwide_alpha(self, snap_compare):
        """The 64-GPU world-wide fabric, one cell per GPU: 8 dark (viridis) blocks on the
        diagonal (5 ms inside a region), bright yellow far pairs (Tokyo/Seoul to Europe). Regions label the rows
        and columns; the cursor (pink cell on a lighter crosshair, ▶ and ▼) sits on oregon-2 -> oregon-1 and the
        details read alpha 5 ms, beta 2 Gbps, measured. Legend 5 .. 238 ms."""
        assert snap_compare(demo_app(), press=["down", "down", "right"], terminal_size=SIZE, run_before=steady)

    def test_worldwide_beta_aggregated_by_label(self, snap_compare):
        """A small terminal (70 x 24): the map aggregates to 8 x 8 region blocks, 'cells: label'.
        Bandwidth: dark = fast. The cursor block is Oregon -> Virginia with 64 pairs measured."""
        assert snap_compare(demo_app(), press=["b", "right"], terminal_size=(70, 24), run_before=steady)

    def test_transfer_time(self, snap_compare):
        """Transfer time T for c_pp = 0.512 GB: the legend reads 'transfer time T (s)' from
        about 2.05 s (inside a region) upward."""
        assert snap_compare(demo_app(), press=["t"], terminal_size=SIZE, run_before=steady)


class TestLabels:
    def test_after_an_edit(self, snap_compare):
        """oregon-0 and oregon-1 marked (●) and moved to region Virginia (source 'operator');
        the stage-group list below the form starts with STALE and stages 0 and 1 span 7 regions."""
        app = with_solutions(demo_app(), np.arange(64))

        async def edit(pilot) -> None:
            await pilot.press("3", "space", "space")
            pilot.app.screen.query_one("#set-region", Input).value = "Virginia"
            await pilot.click("#apply")
            await steady(pilot)

        assert snap_compare(app, terminal_size=SIZE, run_before=edit)


class TestSolve:
    def test_with_a_solution(self, snap_compare):
        """The form holds the DT-FM workload (0.512 / 0.65 GB, 8 x 8). Right: best Comm 51.50 s,
        lower bound and gap, the sparkline falling, and two histograms (random rank map,
        random stage groups) with ▲ at the solution far left of both."""
        app = demo_app()
        with_solutions(app, region_pipelines(app.session))
        assert snap_compare(app, press=["4"], terminal_size=SIZE, run_before=steady)

    def test_invalid_form(self, snap_compare):
        """D_DP set to 3: the error line under the form says 8 x 3 = 24 but the fabric has 64."""

        async def typo(pilot) -> None:
            await pilot.press("4")
            pilot.app.screen.query_one("#form-d_dp", Input).value = "3"
            await pilot.press("ctrl+r")
            await steady(pilot)

        assert snap_compare(demo_app(), terminal_size=SIZE, run_before=typo)


class TestRankMap:
    def test_review(self, snap_compare):
        """The 8 x 8 grid: each replica row one region (one colour per row), each stage column
        one GPU from every region. Summary: Comm 51.50 s = DataP + Pipeline, worst device named.
        'stage k: spans 8 regions' for all 8 stages; 7 pipeline edges, the first highlighted."""
        app = demo_app()
        with_solutions(app, region_pipelines(app.session))
        assert snap_compare(app, press=["5"], terminal_size=SIZE, run_before=steady)

    def test_diff(self, snap_compare):
        """Side by side: solve #2 (left, the region layout) and solve #1 (right, a seeded
        random map); cells whose rank differs are underlined; the next edge is selected."""
        app = demo_app()
        with_solutions(app, np.random.default_rng(3).permutation(64), region_pipelines(app.session))
        assert snap_compare(app, press=["5", "d", "right_square_bracket"], terminal_size=(180, 45), run_before=steady)

    def test_empty(self, snap_compare):
        """No solution yet: one line pointing at the Solve screen (4)."""
        assert snap_compare(demo_app(), press=["5"], terminal_size=SIZE, run_before=steady)


class TestOthers:
    def test_launch_plan(self, snap_compare):
        """The plan: master oregon-0 on port 29500, 64 ranks on 64 hosts, mode torchrun (m),
        nccl; the note that without an inventory it is for review only; per rank its host
        and exact command."""
        app = demo_app()
        with_solutions(app, region_pipelines(app.session))
        assert snap_compare(app, press=["6"], terminal_size=SIZE, run_before=steady)

    def test_fleet_failing_host(self, snap_compare, tmp_path, monkeypatch):
        """An inventory of one host whose SSH port refuses: after c, its state is 'failed'
        and the last-error column reads 'connection refused at 127.0.0.1:1 (...)'; the line
        under the table repeats the selected host's whole error in red."""
        monkeypatch.chdir(tmp_path)  # the summary names the inventory: keep the path fixed
        Path("hosts.toml").write_text('[[hosts]]\nname = "dead-1"\naddress = "127.0.0.1"\nport = 1\nuser = "nobody"\n')
        app = demo_app(inventory="hosts.toml")
        app.session.known_hosts = "known_hosts"

        async def connect(pilot) -> None:
            await pilot.press("c")
            for _ in range(200):
                if pilot.app.screen.fleet.rows["dead-1"].state == "failed":
                    break
                await pilot.pause(0.05)
            await steady(pilot)

        assert snap_compare(app, terminal_size=(140, 12), run_before=connect)

    def test_fleet_demo(self, snap_compare):
        """The demo's 64 hosts, state 'demo', 1 GPU each, regions in the labels column."""
        assert snap_compare(demo_app(), press=["1"], terminal_size=SIZE, run_before=steady)

    def test_help(self, snap_compare):
        """The help modal over the fabric screen, generated from the bindings: 'Everywhere'
        (1 .. 6 screens, ?, ctrl+s, F2 save as, ctrl+o, q, ctrl+p, esc), then each screen's keys."""
        assert snap_compare(demo_app(), press=["question_mark"], terminal_size=SIZE, run_before=steady)

    def test_help_at_80x24(self, snap_compare):
        """The help fits 80 x 24: a bordered box no wider than the terminal, scrollable
        (a scrollbar on its right), its first lines the global keys."""
        assert snap_compare(demo_app(), press=["question_mark"], terminal_size=(80, 24), run_before=steady)

class TestAdvice:
    def test_solve_with_advice(self, snap_compare):
        """16 devices in 4 regions, h5 slow to everyone (D_PP = D_DP = 4). Under the two
        histograms, in yellow: 'warning poor-device: h5:0 sets DataP ...' with Comm with a
        typical device in its place, and the Rank map key to leave it out."""
        from advice_fabrics import advice_app, with_advised_solution

        assert snap_compare(with_advised_solution(advice_app()), press=["4"], terminal_size=SIZE,
                            run_before=steady)

    def test_rank_map_with_advice(self, snap_compare):
        """The same solution on the Rank map: the summary ends with the poor-device warning
        naming h5:0 and 'x: leave it out'; the footer shows x Leave out."""
        from advice_fabrics import advice_app, with_advised_solution

        assert snap_compare(with_advised_solution(advice_app()), press=["5"], terminal_size=SIZE,
                            run_before=steady)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
class TestEveryScreen:
    """Each screen with a solution, at 80 x 24 and 160 x 48. On every one: the tab bar on
    top (the screen's own key lit, the session name after │), the status bar above the
    footer ('solve #1 done: Comm 51.50 s │ nothing to save'), nothing cut off that the
    screen cannot scroll to."""

    @pytest.mark.parametrize("key", ["1", "2", "3", "4", "5", "6"])
    def test_screen(self, snap_compare, size, key):
        """1 Fleet: 64 demo hosts. 2 Fabric: the heatmap (8 x 8 region blocks at 80 x 24,
        a cell per GPU at 160 x 48) in viridis, dark = good. 3 Labels: the table and the
        form. 4 Solve: form, best Comm and histograms. 5 Rank map: the legend of region
        colours above the grid; at 80 x 24 the grid scrolls sideways. 6 Launch: the plan."""
        app = demo_app()
        with_solutions(app, region_pipelines(app.session))
        assert snap_compare(app, press=[key], terminal_size=size, run_before=steady)

    def test_heatmap_zoomed(self, snap_compare, size):
        """Zoomed in four steps (+): one block per GPU, 6 characters wide, the value
        (ms) printed in each cell, the window following the cursor (3 right, 2 down) with
        a lighter row and column crosshair; device names in the gutter; the legend says
        'zoom 4 (+/-)'."""
        presses = ["plus"] * 4 + ["right"] * 3 + ["down"] * 2
        assert snap_compare(demo_app(), press=presses, terminal_size=size, run_before=steady)
