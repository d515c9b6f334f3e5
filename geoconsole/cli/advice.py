"""The advice options and how the CLI says to act on each advice code.

Core advice (:mod:`geoconsole.advice`) names no flag; here each code gets the command
or flag that acts on it, appended to its message in text and in ``--json``.
"""

from __future__ import annotations

import typer

NO_ADVICE = typer.Option(False, "--no-advice", help="Print no advice (the spec's failure-mode checks).")
EXCLUDE = typer.Option(None, "--exclude", help="Leave out a device (HOST:GPU) or every device of a HOST (repeatable).")
COMPARE_SEEDS = typer.Option(1, "--compare-seeds", min=1, max=64,
                             help="Solve with this many seeds (--seed, --seed + 1, ...) and advise when Comm varies; each costs one search.")
STEP_COMPUTE = typer.Option(None, "--step-compute-s", min=0.0,
                            help="Compute seconds per training step: advise when communication cannot be hidden behind it.")
STRICT = typer.Option(False, "--strict", help="Exit non-zero, starting nothing, when the measurement is stale or does not match the hosts.")

#: code -> what to run about it ({subject} is the advice's subject).
HINTS = {
    "barely-beats-random": "--compare-seeds 4, --budget",
    "poor-device": "solve --exclude {subject}, or select --exclude {subject}",
    "stale-measurement": "geoconsole --headless probe",
    "measurement-mismatch": "geoconsole --headless probe",
}


def with_hints(items) -> list[dict]:
    """Advice as JSON, each message with the CLI's way to act on it."""
    out = []
    for a in items:
        hint = HINTS.get(a.code)
        out.append(a.with_hint(hint.format(subject=a.subject) if hint else None).to_json())
    return out


def echo_warnings(items) -> None:
    """Advice on stderr before something starts (launch), one line each."""
    for a in with_hints(items):
        typer.echo(f"{a['severity']}: {a['code']}: {a['message']}", err=True)

