"""solve under signals and a failing standard output, as a real process: the best
placement so far is printed and recorded, one line of error at most, never a traceback."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest


WW = ["--pp", "8", "--dp", "8", "--c-pp", "0.512", "--c-dp", "0.65"]


def _solve(ww_path, *args, **popen):
    return subprocess.Popen([sys.executable, "-m", "geoconsole.cli", "--headless", "solve", "--matrix",
                             str(ww_path), *WW, "--no-progress", *map(str, args)],
                            stdout=popen.pop("stdout", subprocess.PIPE), stderr=subprocess.PIPE, text=True,
                            **popen)


def _wait_for_search(proc, then=1.5):
    """Until the solve's worker processes run (their forkserver is a child of ``proc``; the
    signal handlers are in place before), then ``then`` seconds into the rounds."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    forkserver = b"forkserver" in cmdline.read()
            except (OSError, ValueError, IndexError):
                continue
            if ppid == proc.pid and forkserver:
                time.sleep(then)
                return
        time.sleep(0.05)
    raise AssertionError("the solve never started its worker processes")


def _printed_and_recorded(proc, record, timeout=60):
    out, err = proc.communicate(timeout=timeout)  # a hang fails here
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert out.count("\nrank_map=(") == 1, out
    (line,) = record.read_text().splitlines()
    assert json.loads(line)["score_s"] > 0
    return out, err


@pytest.mark.slow
def test_sigterm_stops_the_search_and_keeps_the_best_like_ctrl_c(ww_path, tmp_path):
    """``kill`` sends SIGTERM to the command, ``timeout`` and batch systems to its whole
    process group: it used to die at once (nothing printed or recorded; its workers
    printed BrokenPipe tracebacks), and SIGTERM to the group ended the workers too."""
    for group in (False, True):
        record = tmp_path / f"runs-{group}.jsonl"
        proc = _solve(ww_path, "--time-limit", 300, "--workers", 2, "--record", record, start_new_session=True)
        _wait_for_search(proc)
        if group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        out, _ = _printed_and_recorded(proc, record)
        assert "cancelled; best placement so far" in out and "lost" not in out


@pytest.mark.slow
def test_a_second_ctrl_c_during_the_wind_down_still_prints_the_result(ww_path, tmp_path):
    """An operator's double tap: the second Ctrl-C used to quit without the result."""
    record = tmp_path / "runs.jsonl"
    proc = _solve(ww_path, "--time-limit", 300, "--workers", 2, "--record", record, start_new_session=True)
    _wait_for_search(proc)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = _printed_and_recorded(proc, record)
    assert "Ctrl-C again quits without it" in err


def test_two_signals_during_one_long_c_call_count_as_two(capfd):
    """Python runs a handler once for two deliveries that arrive while the main thread is
    inside one C call (a loaded machine, a quick double tap): the second Ctrl-C went
    uncounted, so it neither said so nor let a third quit. The taps come from another
    process (a thread of this one would wait for the GIL the C call holds)."""
    from geoconsole.cli.solve import _interruptible

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with _interruptible() as state:
        tapper = subprocess.Popen(["sh", "-c", f"sleep 0.3; kill -INT {os.getpid()}; sleep 0.05; "
                                               f"kill -INT {os.getpid()}; echo sent"], stdout=subprocess.PIPE)
        time.sleep(0.1)
        while tapper.poll() is None:  # each call a second of C: both taps land inside one
            sum(range(10**8))
    # stopped, the command is on its way out: further signals are ignored, not fatal
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    for s, handler in before.items():
        signal.signal(s, handler)
    assert tapper.stdout.read() == b"sent\n"
    assert state["signals"] == 2 and state["stop"]
    assert "Ctrl-C again quits without it" in capfd.readouterr().err
    assert signal.set_wakeup_fd(-1) == -1  # the wakeup pipe was taken down again


def test_a_second_sigterm_after_the_wind_down_still_exits_130(ww_path, tmp_path):
    """The wind-down takes under 0.1 s: a second SIGTERM (a group kill, then a timeout's)
    arriving after it found the default handler back and killed the process (-15)."""
    record = tmp_path / "runs.jsonl"
    proc = _solve(ww_path, "--time-limit", 300, "--workers", 2, "--record", record, start_new_session=True)
    _wait_for_search(proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.06)  # about when the wind-down ends: during it the second only says so
    proc.send_signal(signal.SIGTERM)
    _printed_and_recorded(proc, record)


@pytest.mark.slow
def test_ctrl_c_during_compare_seeds_stops_the_reruns(ww_path, tmp_path):
    """The --compare-seeds reruns ran on through Ctrl-C and the command exited 0."""
    record = tmp_path / "runs.jsonl"
    proc = _solve(ww_path, "--time-limit", 3, "--compare-seeds", 20, "--workers", 2, "--record", record,
                  start_new_session=True)
    _wait_for_search(proc, then=6)  # the first search (3 s) and the baselines are done
    os.killpg(proc.pid, signal.SIGINT)
    _printed_and_recorded(proc, record)
    # the reruns had begun (seeds are listed) and stopped (fewer than asked)
    assert 1 <= len(json.loads(record.read_text()).get("seeds", [])) < 20


def test_a_full_standard_output_is_one_line_and_the_record_is_written(ww_path, tmp_path):
    record = tmp_path / "runs.jsonl"
    with open("/dev/full", "w") as full:
        proc = _solve(ww_path, "--budget", 2000, "--restarts", 0, "--baseline-samples", 0, "--workers", 1,
                      "--record", record, stdout=full)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: standard output: cannot write"), err
    assert json.loads(record.read_text())["score_s"] > 0


def test_a_closed_standard_output_is_not_a_silent_success(ww_path, tmp_path):
    record = tmp_path / "runs.jsonl"
    command = " ".join([sys.executable, "-m", "geoconsole.cli", "--headless", "solve", "--matrix", str(ww_path),
                        *WW, "--budget", "2000", "--restarts", "0", "--baseline-samples", "0", "--workers", "1",
                        "--no-progress", "--record", str(record)])
    proc = subprocess.run(["bash", "-c", f"exec >&-; {command}"], capture_output=False, stderr=subprocess.PIPE,
                          text=True, timeout=120)
    assert proc.returncode == 1 and "standard output: cannot write the result (it is closed)" in proc.stderr
    assert json.loads(record.read_text())["score_s"] > 0


def test_ctrl_c_during_the_demo_stops_it_and_exits_130():
    """demo solves two fabrics; Ctrl-C used to cut only the current one's baselines, run
    the next one in full and exit 0. Now it prints what is done and exits 130."""
    proc = subprocess.Popen([sys.executable, "-m", "geoconsole.cli", "--headless", "demo",
                             "--baseline-samples", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)  # imports and the first fabric's solve; then its baselines run for about 25 s
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted: baselines stopped early; not run: " in err
    assert out.startswith("worldwide")


@pytest.mark.parametrize("args", [["selftest"], ["demo", "--baseline-samples", "0"], ["demo", "--json",
                                                                                      "--baseline-samples", "0"]])
def test_a_full_standard_output_is_one_line_for_other_commands_too(args):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "geoconsole.cli", "--headless", *args],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == ["error: standard output: cannot write (No space left on device)"]


@pytest.mark.parametrize("args", [["select", "--pp", "4", "--dp", "4"], ["labels", "show"]])
def test_a_closed_standard_output_fails_other_commands_too(ww_path, args):
    """Started with standard output closed, Python sets sys.stdout to None and click's
    echo prints nothing: select and labels show exited 0 having printed nothing."""
    command = " ".join([sys.executable, "-m", "geoconsole.cli", "--headless", *args, "--matrix", str(ww_path)])
    proc = subprocess.run(["bash", "-c", f"exec >&-; {command}"], stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip() == "error: standard output: cannot write (it is closed)"


@pytest.mark.parametrize("args", [["--help"], ["solve", "--help"], ["labels", "--help"]])
@pytest.mark.parametrize("stdout", ["closed", "full"])
def test_help_that_cannot_be_written_is_one_line_and_exit_1(args, stdout):
    """click prints --help before any command runs: into a closed standard output it
    exited 0 having printed nothing, into a full one with a traceback."""
    command = " ".join([sys.executable, "-m", "geoconsole.cli", "--headless", *args])
    redirect = ">&-" if stdout == "closed" else ">/dev/full"
    proc = subprocess.run(["bash", "-c", f"exec {redirect}; {command}"], stderr=subprocess.PIPE, text=True,
                          timeout=120)
    reason = "it is closed" if stdout == "closed" else "No space left on device"
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [f"error: standard output: cannot write ({reason})"]


@pytest.mark.parametrize("printer", ["print('x')", "__import__('rich.console').console.Console().print('x')"])
def test_a_closed_standard_output_is_one_line_for_print_and_rich_too(printer):
    """inventory and probe print with print() and Rich, which click's echo check missed:
    with ClosedStdout installed they ended in a traceback."""
    code = ("import sys, typer\nfrom geoconsole.cli.errors import cli_errors\n"
            f"run = cli_errors(lambda: {printer})\n"
            "try:\n    run()\nexcept typer.Exit as exc:\n    sys.exit(exc.exit_code)\n")
    proc = subprocess.run(["bash", "-c", f"exec >&-; {sys.executable} -c \"$0\"", code], stderr=subprocess.PIPE,
                          text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.strip() == "error: standard output: cannot write (it is closed)", \
        proc.stderr


@pytest.mark.parametrize("printer, code, unbuffered", [
    ("print('x')", 1, False),
    ("print('x')", 1, True),
    ("__import__('rich.console').console.Console().print('x')", 1, False),
    ("__import__('rich.console').console.Console().print('x')", 1, True),
    ("(print('x'), (_ for _ in ()).throw(typer.Exit(3)))", 3, False),
])
def test_a_full_standard_output_is_one_line_for_print_and_rich_too(printer, code, unbuffered):
    """Buffered, print() into a full disk failed only at the interpreter's last flush: exit
    120 and an 'Exception ignored' notice; unbuffered, at once, with a traceback. The
    command's own exit code is kept when it has one, else exit 1 and one line."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    program = ("import sys, typer\nfrom geoconsole.cli.errors import cli_errors\n"
               f"run = cli_errors(lambda: {printer})\n"
               "try:\n    run()\nexcept typer.Exit as exc:\n    sys.exit(exc.exit_code)\n")
    proc = subprocess.run(["bash", "-c", f"exec >/dev/full; {sys.executable} -c \"$0\"", program],
                          stderr=subprocess.PIPE, text=True, timeout=60, env=env)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.strip() == ("error: standard output: cannot write (No space left on device)" if code == 1
                                   else ""), proc.stderr


def test_score_and_inventory_fail_on_a_full_standard_output(ww_path, tmp_path):
    """score exited 0 having printed nothing; inventory ended in a traceback (Rich's write)."""
    inventory = tmp_path / "hosts.toml"
    inventory.write_text('[[hosts]]\nname = "loc"\naddress = "127.0.0.1"\nport = 2\n')  # nothing listens
    for args in (["score", "--matrix", str(ww_path), *WW, "-r", ",".join(map(str, range(64)))],
                 ["inventory", "-i", str(inventory), "--connect-timeout", "2"],
                 ["inventory", "-i", str(inventory), "--connect-timeout", "2", "--json"]):
        with open("/dev/full", "w") as full:
            proc = subprocess.run([sys.executable, "-m", "geoconsole.cli", "--headless", *args],
                                  stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
        assert proc.returncode == 1, (args, proc.stderr)
        assert proc.stderr.strip().splitlines() == ["error: standard output: cannot write (No space left on device)"]


def test_a_closed_standard_output_leaves_no_free_descriptor_1():
    """With descriptor 1 closed, the next file opened got it and became the standard
    output of every subprocess (ssh); cli_errors puts /dev/null there."""
    code = ("import os, typer\nfrom geoconsole.cli.errors import cli_errors\n"
            "fd = []\nrun = cli_errors(lambda: fd.append(os.open(os.devnull, os.O_RDONLY)))\nrun()\n"
            "os.write(2, str(fd[0]).encode())\n")
    proc = subprocess.run(["bash", "-c", f"exec >&-; {sys.executable} -c \"$0\"", code], stderr=subprocess.PIPE,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr.strip() not in ("", "1"), proc.stderr


def test_ctrl_c_while_the_command_is_still_importing_is_one_line():
    """The console script takes about 0.3 s to import the command: Ctrl-C then ended in a
    KeyboardInterrupt traceback through the imports."""
    code = "import sys; sys.argv[0] = 'geoconsole'; from geoconsole.entry import main; main()"
    proc = subprocess.Popen([sys.executable, "-c", code, "--headless", "demo", "--baseline-samples", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.12)  # past the interpreter's own start, inside the imports
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(("error: interrupted", "interrupted: "))
