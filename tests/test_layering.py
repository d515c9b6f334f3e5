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


# -- the core never reaches the shell ----------------------------------------------------
SHELL = ("geoconsole.cli", "geoconsole.app", "geoconsole.console")


def test_the_core_imports_neither_the_shell_nor_textual_nor_torch():
    code = ("import pkgutil, importlib, geoconsole, geoconsole.launch\n"
            "for pkg in (geoconsole, geoconsole.launch):\n"
            "    for m in pkgutil.iter_modules(pkg.__path__):\n"
            "        name = pkg.__name__ + '.' + m.name\n"
            f"        if not name.startswith({SHELL!r}):\n"
            "            importlib.import_module(name)\n")
    loaded = modules_after(code, full=True)
    assert not {m for m in loaded if m.startswith(SHELL)}
    assert not {m.split(".")[0] for m in loaded} & {"textual", "torch", "typer"}


# -- every headless command, run for real ---------------------------------------------------
RUN = """
import json, sys
from typer.testing import CliRunner
from geoconsole.cli import app
r = CliRunner().invoke(app, ['--headless'] + json.loads(sys.argv[1]))
print(json.dumps({{"code": r.exit_code, "out": r.output[-400:]}}))
print(json.dumps(sorted(sys.modules)))
"""


def run_command(args: list[str]) -> tuple[int, set[str]]:
    out = subprocess.run([sys.executable, "-c", RUN.format(), json.dumps(args)], capture_output=True,
                         text=True, check=True, timeout=300)
    lines = out.stdout.strip().splitlines()
    result, names = json.loads(lines[-2]), json.loads(lines[-1])
    return result["code"], {m.split(".")[0] for m in names}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from geoconsole.demo_fabrics import worldwide_fabric

    root = tmp_path_factory.mktemp("layering")
    fabric = worldwide_fabric()
    fabric.save(root / "f.json")
    (root / "hosts.toml").write_text('[[hosts]]\nname = "nobody"\naddress = "127.0.0.1"\nport = 1\n')
    return root


def commands(root) -> dict[str, tuple[list[str], int]]:
    f, inv = str(root / "f.json"), str(root / "hosts.toml")
    work = ["--c-pp", "0.5", "--c-dp", "0.6", "--pp", "8", "--dp", "8"]
    ranks = ",".join(str(i) for i in range(64))
    return {
        "solve": (["solve", "-m", f, *work, "--budget", "50", "--baseline-samples", "2"], 0),
        "score": (["score", "-m", f, *work, "-r", ranks], 0),
        "demo": (["demo", "--baseline-samples", "2"], 0),
        "selftest": (["selftest"], 0),
        "labels show": (["labels", "show", "-m", f], 0),
        "labels suggest": (["labels", "suggest", "-m", f], 0),
        "labels set": (["labels", "set", "-m", f, "-o", str(root / "g.json"), "--host", "oregon-0",
                        "--zone", "z"], 0),
        "labels fill": (["labels", "fill", "-m", f, "-o", str(root / "h.json")], 0),
        "select": (["select", "-m", f, "--pp", "2", "--dp", "2"], 0),
        "export": (["export", "-m", f, "-r", ranks, "--format", "slurm"], 0),
        "launch --dry-run": (["launch", "-m", f, "-r", ranks, "--dry-run", "--", "train.py"], 0),
        "inventory": (["inventory", "-i", inv, "--connect-timeout", "2"], 3),
        "probe": (["probe", "-i", inv, "-o", str(root / "p.json"), "--connect-timeout", "2"], 3),
    }


NO_SSH = ["solve", "score", "demo", "selftest", "labels show", "labels suggest", "labels set",
          "labels fill", "select", "export", "launch --dry-run"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NO_SSH + ["inventory", "probe"])
def test_each_headless_command_runs_without_textual_or_torch(files, name):
    args, code = commands(files)[name]
    got, loaded = run_command(args)
    assert got == code
    assert not loaded & {"textual", "torch", "screens"}
    if name in NO_SSH:
        assert "asyncssh" not in loaded
