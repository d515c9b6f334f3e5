"""The heatmap's layout: grouping, aggregation when cells would be too small, colours."""

from __future__ import annotations

import numpy as np
import pytest

from geoconsole.demo_fabrics import worldwide_fabric
from screens.heatmap_view import block_means, build_layout, colour_index, fit_layout, metric_matrix, row_order
from solver.fabric import Device, Fabric
from solver.workload import DTFM_WORKLOAD, Workload


def big_fabric(hosts: int = 64, gpus: int = 8, seed: int = 0) -> Fabric:
    """``hosts`` x ``gpus`` devices in 8 regions with random links (fast inside a host)."""
    rng = np.random.default_rng(seed)
    devices = tuple(Device(f"h{h:03d}", g, f"r{h % 8}") for h in range(hosts) for g in range(gpus))
    n = len(devices)
    alpha = rng.uniform(5, 200, (n, n))
    beta = rng.uniform(0.3, 2.0, (n, n))
    host = np.repeat(np.arange(hosts), gpus)
    same = host[:, None] == host[None, :]
    alpha[same], beta[same] = 0.01, 100.0
    np.fill_diagonal(alpha, 0)
    np.fill_diagonal(beta, 0)
    return Fabric(alpha, beta, tuple(d.region for d in devices), devices)


def test_rows_are_grouped_by_label_in_order_of_first_appearance():
    devices = (Device("b", 0, "west"), Device("a", 0, "east"), Device("c", 0, "west"), Device("d", 0, None))
    order = row_order(devices, ("west", "east", "west", "lab"))
    assert order == [0, 2, 1, 3]


@pytest.mark.parametrize("width, height, level, k", [(600, 300, "device", 512), (100, 60, "host", 64), (30, 20, "label", 8)])
def test_cells_aggregate_when_they_would_be_smaller_than_a_character(width, height, level, k):
    f = big_fabric()
    devices = f.devices
    lay = build_layout(f, DTFM_WORKLOAD, "alpha", devices, width, height)
    assert (lay.level, lay.k) == (level, k)
    assert lay.k * lay.cell <= width


def test_fit_layout_prefers_bigger_cells_and_refuses_what_cannot_fit():
    assert fit_layout(8, 100, 50) == 12  # cells grow to fill the space
    assert fit_layout(8, 40, 50) == 4
    assert fit_layout(64, 64, 32) == 1
    assert fit_layout(65, 64, 40) == 0
    assert fit_layout(64, 200, 31) == 0


def test_block_means_match_brute_force_and_skip_unmeasured_and_self():
    rng = np.random.default_rng(1)
    m = rng.uniform(1, 10, (7, 7))
    m[0, 3] = np.nan
    blocks = [np.array([0, 1]), np.array([2, 3, 4]), np.array([5, 6])]
    got = block_means(m, blocks)
    for a, ra in enumerate(blocks):
        for b, rb in enumerate(blocks):
            vals = [m[i, j] for i in ra for j in rb if i != j and np.isfinite(m[i, j])]
            assert got[a, b] == pytest.approx(np.mean(vals))


def test_colours_put_good_links_first_on_the_scale_for_every_metric():
    values = np.array([[0.0, 5.0, 200.0], [5.0, 0.0, 50.0], [200.0, 50.0, 0.0]])
    idx, lo, hi = colour_index(values, "alpha", np.eye(3, dtype=bool))
    assert (lo, hi) == (5.0, 200.0)
    assert idx[0, 1] == 0 and idx[0, 2] == 8 and idx[0, 0] == -2
    bw = np.array([[0.0, 2.0], [0.3, 0.0]])
    idx, _, _ = colour_index(bw, "beta", np.eye(2, dtype=bool))
    assert idx[0, 1] == 0 and idx[1, 0] == 8  # high bandwidth = good = first colour


def test_a_block_of_one_device_is_self_not_unmeasured():
    """A region of one device (an operator's new label) has no pair inside it: its own
    cell showed the unmeasured glyph, and its details '0 pairs, 0 measured'."""
    from dataclasses import replace

    f = worldwide_fabric()
    lone = replace(f.devices[3], region="tokyo", zone=None)
    devices = (*f.devices[:3], lone, *f.devices[4:])
    lay = build_layout(f, DTFM_WORKLOAD, "alpha", devices, 60, 30)
    assert lay.level != "device"
    (k,) = [i for i, b in enumerate(lay.blocks) if len(b) == 1]
    assert lay.colour[k, k] == -2 and (lay.colour[np.arange(lay.k) != k, k] >= 0).all()


def test_unmeasured_pairs_are_drawn_as_unmeasured_never_as_a_value():
    f = worldwide_fabric()
    f.alpha_ms[0, 9] = f.beta_gbps[0, 9] = np.nan
    lay = build_layout(f, DTFM_WORKLOAD, "alpha", f.devices, 200, 100)
    assert lay.colour[0, 9] == -1
    t = metric_matrix(f, DTFM_WORKLOAD, "transfer")
    assert np.isnan(t[0, 9]) and np.isnan(t[9, 0])


def test_transfer_metric_follows_the_workload():
    f = worldwide_fabric()
    small = metric_matrix(f, Workload(8, 8, 0.1, 0.1), "transfer")
    large = metric_matrix(f, Workload(8, 8, 1.0, 0.1), "transfer")
    assert large[0, 63] > small[0, 63]
    assert small[0, 63] == pytest.approx(f.alpha_ms[0, 63] / 1000 + 8 * 0.1 / f.beta_gbps[0, 63])


def test_estimated_pairs_are_drawn_faded_and_said_so():
    from screens.heatmap_view import ESTIMATED_OFFSET

    f = worldwide_fabric()
    est = [[False] * f.n for _ in range(f.n)]
    est[0][9] = True
    f.extras["estimated"] = est
    lay = build_layout(f, DTFM_WORKLOAD, "alpha", f.devices, 200, 100)
    assert lay.colour[0, 9] >= ESTIMATED_OFFSET
    assert (lay.colour >= ESTIMATED_OFFSET).sum() == 1


async def test_zoom_pans_with_the_cursor_shows_values_and_keeps_the_pair_on_resize():
    from support import demo_app

    from screens.heatmap_view import Heatmap

    app = demo_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        heatmap = app.screen.query_one(Heatmap)
        assert heatmap.layout_.level == "label"  # 64 devices do not fit 80 x 24
        await pilot.press("plus", "plus", "plus", "plus")
        await pilot.pause()
        lay = heatmap.layout_
        assert lay.level == "device" and lay.cell >= 6 and heatmap.visible()[1] < 64
        for _ in range(20):
            await pilot.press("right")
        await pilot.press("down")
        await pilot.pause()
        r, c = heatmap.cursor
        assert heatmap.view[1] <= c < heatmap.view[1] + heatmap.visible()[1]  # the window followed
        lines = "".join(seg.text for y in range(heatmap.size.height) for seg in heatmap.render_line(y))
        assert " 5 " in lines or "67" in lines  # values printed in the cells
        # the cursor's own cell prints its value too (it was left blank)
        from screens.heatmap_view import cell_value

        value = cell_value(float(lay.values[r, c]))
        cursor = heatmap.colour(-4)
        under = [seg.text for y in range(heatmap.size.height) for seg in heatmap.render_line(y)
                 if seg.style is not None and seg.style.bgcolor is not None and seg.style.bgcolor.name == cursor]
        assert under and value.strip() in [t.strip() for t in under], (value, under)
        pair = (int(lay.blocks[r][0]), int(lay.blocks[c][0]))
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        lay = heatmap.layout_
        r, c = heatmap.cursor
        assert (int(lay.blocks[r][0]), int(lay.blocks[c][0])) == pair
        await pilot.press("0")  # back to fitting: the same pair, now at the device level
        await pilot.pause()
        lay = heatmap.layout_
        r, c = heatmap.cursor
        assert lay.level == "device" and (int(lay.blocks[r][0]), int(lay.blocks[c][0])) == pair


async def test_details_show_the_new_region_after_a_relabel():
    from support import demo_app
    from textual.widgets import Input

    app = demo_app()
    async with app.run_test(size=(120, 45)) as pilot:
        await pilot.press("3", "space")
        app.screen.query_one("#set-region", Input).value = "Virginia"
        await pilot.click("#apply")
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        await pilot.press("down", "up")
        await pilot.pause()
        details = str(app.screen.query_one("#pair-details").render())
        assert "oregon-0:0 (Virginia)" in details


async def test_hovering_a_cell_names_the_pair_in_full():
    from support import demo_app

    from screens.heatmap_view import Heatmap

    app = demo_app()
    async with app.run_test(size=(120, 45)) as pilot:
        await pilot.pause()
        heatmap = app.screen.query_one(Heatmap)
        await pilot.hover(Heatmap, offset=(1 + heatmap.label_width + 10, 2 + 3))
        await pilot.pause()
        assert heatmap.tooltip == "oregon-6:0 -> virginia-2:0: 67"


def inferred_fabric() -> Fabric:
    """Two hosts of three CPU slots; all but two device pairs between them inferred."""
    devices = tuple(Device(f"h{h}", None, "lab", slot=k) for h in range(2) for k in range(3))
    n = len(devices)
    alpha, beta = np.full((n, n), 1.0), np.full((n, n), 0.5)
    inferred = [[devices[i].host != devices[j].host for j in range(n)] for i in range(n)]
    for i, j in ((0, 3), (1, 4)):
        inferred[i][j] = inferred[j][i] = False
    basis = [[("h0 -> h1: median of 2 sampled pairs" if inferred[i][j] else None) for j in range(n)]
             for i in range(n)]
    np.fill_diagonal(alpha, 0)
    np.fill_diagonal(beta, 0)
    return Fabric(alpha, beta, ("lab",) * n, devices, extras={"inferred": inferred, "inferred_basis": basis})


def test_inferred_pairs_are_drawn_with_their_own_glyph_and_said_so():
    from screens.heatmap import describe_pair
    from screens.heatmap_view import INFERRED_OFFSET

    f = inferred_fabric()
    lay = build_layout(f, DTFM_WORKLOAD, "beta", f.devices, 200, 100)
    assert lay.level == "device"
    assert int((lay.colour >= INFERRED_OFFSET).sum()) == 2 * 9 - 4
    assert lay.colour[0, 3] < INFERRED_OFFSET and lay.colour[0, 4] >= INFERRED_OFFSET
    said = describe_pair(f, DTFM_WORKLOAD, 0, 4).plain
    assert "inferred, not measured: h0 -> h1: median of 2 sampled pairs" in said
    assert "inferred" not in describe_pair(f, DTFM_WORKLOAD, 0, 3).plain


async def test_the_heatmap_draws_inferred_cells_with_the_shade_glyph():
    from textual.app import App

    from screens.heatmap_view import INFERRED_GLYPH, Heatmap

    f = inferred_fabric()

    class One(App):
        def compose(self):
            yield Heatmap()

    app = One()
    async with app.run_test(size=(16, 20)) as pilot:  # one character per column: cell 1
        heatmap = app.query_one(Heatmap)
        heatmap.set_data(f, DTFM_WORKLOAD, f.devices)
        heatmap.cursor = (5, 0)  # the crosshair (row 5, column 0) away from the cells read below
        await pilot.pause()
        lines = ["".join(seg.text for seg in heatmap.render_line(y)) for y in range(2, 2 + heatmap.layout_.k)]
    cell = heatmap.layout_.cell
    assert cell == 1
    # Rows 0 and 1 (h0:cpu0, h0:cpu1) share the first character line: columns of h1 are
    # inferred in both rows except (0, 3) and (1, 4), which are measured.
    row = lines[0][heatmap.label_width:]
    glyphs = [row[c * cell] for c in range(6)]
    assert glyphs[5] == INFERRED_GLYPH and glyphs[3] == "▀" and glyphs[4] == "▀"
    assert glyphs[0] == "▀"
    assert any(INFERRED_GLYPH in line for line in lines)


async def test_the_fabric_title_and_legend_count_inferred_and_estimated_pairs_apart():
    from support import demo_app

    f = inferred_fabric()  # 15 pairs: 6 inside the hosts, 2 sampled, 7 inferred
    est = [[False] * f.n for _ in range(f.n)]
    est[0][1] = est[1][0] = True
    f.extras["estimated"] = est
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        app.session.set_fabric(f)
        app.screen.show_session()
        await pilot.pause()
        title = str(app.screen.query_one("#fabric-title").render())
        legend = str(app.screen.query_one("#legend").render())
    assert "7/15 pairs measured, 7 inferred, 1 estimated" in title
    assert "inferred" in legend and "estimated" in legend


async def test_unmeasured_and_estimated_pairs_have_a_glyph_even_at_half_line_cells():
    """Not colour alone: where both halves of a character are unmeasured the cell reads ╳,
    where both are estimated ░ (the first two rows share one character line)."""
    from textual.app import App

    from screens.heatmap_view import ESTIMATED_GLYPH, UNMEASURED_GLYPH, Heatmap

    n = 6
    devices = tuple(Device(f"h{i}", 0, "lab") for i in range(n))
    alpha, beta = np.full((n, n), 1.0), np.full((n, n), 2.0)
    for i in (0, 1):
        for j in (4,):
            alpha[i, j] = alpha[j, i] = beta[i, j] = beta[j, i] = np.nan
    np.fill_diagonal(alpha, 0)
    np.fill_diagonal(beta, 0)
    estimated = [[i in (0, 1) and j == 5 for j in range(n)] for i in range(n)]
    f = Fabric(alpha, beta, ("lab",) * n, devices, extras={"estimated": estimated})

    class One(App):
        def compose(self):
            yield Heatmap()

    app = One()
    async with app.run_test(size=(16, 20)) as pilot:
        heatmap = app.query_one(Heatmap)
        heatmap.set_data(f, DTFM_WORKLOAD, f.devices)
        heatmap.cursor = (5, 0)  # the crosshair away from rows 0-1 and columns 4-5
        await pilot.pause()
        assert heatmap.layout_.cell == 1 and heatmap.layout_.cell_h == 1
        row = "".join(seg.text for seg in heatmap.render_line(2))[heatmap.label_width:]
    assert row[4] == UNMEASURED_GLYPH and row[5] == ESTIMATED_GLYPH and row[3] == "▀"


@pytest.mark.parametrize("region", ["東京都", "é\u0301\u0301e", "서울특별시"])
async def test_wide_and_combining_labels_keep_the_map_in_its_columns(region):
    """Row names were padded by characters, not screen cells: a wide or combining region
    shifted its row's cells right (and the header's names off their columns)."""
    from rich.cells import cell_len
    from support import demo_app
    from textual.widgets import Input

    from screens.heatmap_view import Heatmap

    app = demo_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("3", "space")
        app.screen.query_one("#set-region", Input).value = region
        await pilot.click("#apply")
        await pilot.pause()
        await pilot.press("2")
        await pilot.pause()
        heatmap = app.screen.query_one(Heatmap)
        gutter = heatmap.label_width
        for y in range(heatmap.size.height):
            segments = list(heatmap._line(y))
            text = "".join(seg.text for seg in segments)
            first = segments[0].text if segments else ""
            assert cell_len(first) in (0, gutter), (y, first)  # the gutter is as wide on every line
            assert cell_len(text) <= heatmap.size.width, (y, text)


async def test_groups_sharing_a_line_at_fit_zoom_say_how_many_more():
    """30 regions over 64 devices: two groups start on one screen line, and the later
    name hid the earlier; the line names the first and counts the rest."""
    from dataclasses import replace

    from support import demo_app

    from geoconsole.session import Session
    from screens.heatmap_view import Heatmap
    from solver.fabric import Device

    base = demo_app().session
    fabric = base.fabric
    devices = tuple(Device(d.host, d.gpu, region=f"region-{i % 30:02d}") for i, d in enumerate(fabric.devices))
    app = demo_app()
    app.session = Session(fabric=replace(fabric, devices=devices), workload=base.workload)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        heatmap = app.screen.query_one(Heatmap)
        gutters = [next(iter(heatmap._line(y))).text for y in range(2, heatmap.size.height)]
        assert any("+" in g for g in gutters), gutters
