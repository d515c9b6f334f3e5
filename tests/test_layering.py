"""The dependency direction of DESIGN.md, checked in fresh interpreters via sys.modules."""

import json
import subprocess
import sys

import pytest

PROBE = """
import json, sys
{code}
print(json.dumps(sorted(sys.modules)))
"""


def modules_after(code: str, *, full: bool = False) -> set[str]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(code=code)], capture_output=True,
                         text=True, check=True)
    names = json.loads(out.stdout.strip().splitlines()[-1])
    return set(names) if full else {m.split(".")[0] for m in names}


def test_solver_imports_no_ui_ssh_torch_or_app_code():
    code = "import pkgutil, importlib, solver\n" \
           "[importlib.import_module('solver.' + m.name) for m in pkgutil.iter_modules(solver.__path__)]"
    loaded = modules_after(code)
    assert not loaded & {"textual", "asyncssh", "torch", "geoconsole", "screens", "probes", "typer", "rich"}


def test_probes_never_import_textual_or_torch():
    code = "import pkgutil, importlib, probes\n" \
           "[importlib.import_module('probes.' + m.name) for m in pkgutil.iter_modules(probes.__path__)\n" \
           " if not m.name.endswith('worker')]"
    loaded = modules_after(code)
    assert not loaded & {"textual", "torch", "screens"}


def test_screens_do_not_import_the_cli():
    code = "import pkgutil, importlib, screens\n" \
           "[importlib.import_module('screens.' + m.name) for m in pkgutil.iter_modules(screens.__path__)]"
    loaded = modules_after(code, full=True)
    assert not {m for m in loaded if m.startswith("geoconsole.cli")}
    assert "torch" not in loaded


@pytest.mark.parametrize("command", ["solve", "score", "demo", "selftest"])
def test_headless_solver_commands_never_import_textual_or_asyncssh(command, tmp_path):
    code = ("import sys\nfrom geoconsole.cli import app\n"
            "from typer.testing import CliRunner\n"
            f"r = CliRunner().invoke(app, ['--headless', {command!r}, '--help'])\n"
            "assert r.exit_code == 0, r.output\n")
    loaded = modules_after(code)
    assert "textual" not in loaded and "asyncssh" not in loaded and "torch" not in loaded


def test_headless_solve_run_never_imports_textual_or_asyncssh(tmp_path):
    code = ("from geoconsole.cli import app\nfrom typer.testing import CliRunner\n"
            "from geoconsole.demo_fabrics import worldwide_fabric\n"
            f"worldwide_fabric().save({str(tmp_path / 'f.json')!r})\n"
            f"r = CliRunner().invoke(app, ['--headless', 'solve', '--matrix', {str(tmp_path / 'f.json')!r},"
            " '--c-pp', '0.5', '--c-dp', '0.6', '--budget', '100', '--baseline-samples', '2'])\n"
            "assert r.exit_code == 0, r.output\n")
    loaded = modules_after(code)
    assert not loaded & {"textual", "asyncssh", "torch"}
