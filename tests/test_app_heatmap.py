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
