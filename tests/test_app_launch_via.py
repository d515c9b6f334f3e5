"""The Launch screen's routes (v): SSH, Slurm step, Slurm submit, export for Kubernetes."""

from __future__ import annotations

import json

from support import demo_app, region_pipelines, with_solutions
from textual.widgets import Input

from geoconsole.launch.k8s import documents
from screens.dialogs import ConfirmDialog, PathDialog

SIZE = (140, 40)


async def test_v_cycles_the_routes_and_shows_what_leaves_the_console(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = demo_app()
    with_solutions(app, region_pipelines(app.session))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        await pilot.pause()
        screen = app.screen
        assert not screen.query_one("#launch-image").display
        await pilot.press("v")
        await pilot.pause()
        lines = list(screen.query_one("#launch-plan").lines)
        assert any(line.startswith("SLURM_HOSTFILE=hostfile srun --ntasks=64 --distribution=arbitrary")
                   for line in lines)
        assert lines[1] == screen.plan.processes[0].host  # hostfile line 0 = rank 0's node
        await pilot.press("v")
        await pilot.pause()
        assert any(line.startswith("#SBATCH --ntasks=64") for line in screen.query_one("#launch-plan").lines)
        await pilot.press("v")
        await pilot.pause()
        assert screen.query_one("#launch-image").display
        screen.query_one("#launch-image", Input).value = "registry.example/train:2"
        await pilot.press("l")  # asks where, geoconsole-k8s.yaml offered
        await pilot.pause()
        assert isinstance(app.screen, PathDialog) and app.screen.query_one("#path", Input).value == "geoconsole-k8s.yaml"
        await pilot.press("enter")
        await pilot.pause()
        target = tmp_path / "geoconsole-k8s.yaml"
        docs = documents(target.read_text())
        assert len([d for d in docs if d["kind"] == "Pod"]) == 64
        assert json.dumps(docs).count("registry.example/train:2") == 64
        target.write_text(target.read_text() + "# my edits\n")
        await pilot.press("l", "enter")  # the file exists now: asked first, No focused
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog) and app.screen.focused.id == "no"
        await pilot.press("enter")
        await pilot.pause()
        assert target.read_text().endswith("# my edits\n")  # kept
        await pilot.press("l", "enter")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert not target.read_text().endswith("# my edits\n")  # replaced after the yes
        await pilot.press("v")
        await pilot.pause()
        assert screen.via == "ssh" and not screen.query_one("#launch-image").display
