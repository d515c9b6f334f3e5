"""Options shared by several commands (one definition, one help text) and the loaders
that turn them into core objects."""

from __future__ import annotations

from pathlib import Path

import typer


def cli_path(value) -> Path:
    """A path flag's value: a file. An empty one is refused (``Path('')`` is the current
    folder), and so is one that names a folder by its ending (``names_a_folder``):
    ``Path`` drops a trailing ``/``, and a write to ``out.json/`` replaced ``out.json``."""
    if isinstance(value, Path):
        return value
    text = str(value)
    if not text.strip():
        raise typer.BadParameter("empty path")
    from solver.files import names_a_folder

    if names_a_folder(text):
        raise typer.BadParameter(f"{text!r} ends with '/' (or '/.'), which names a folder; give a file")
    return Path(value)



def path_option(default, *names: str, **settings):
    """``typer.Option`` for a file: parsed by ``cli_path``, shown as ``<path>``."""
    return typer.Option(default, *names, parser=cli_path, metavar="<path>", **settings)


MATRIX = path_option(..., "--matrix", "-m",
                      help="Fabric JSON (labels, alpha_ms, beta_gbps; devices name a host and GPU per row).")
JSON_OUT = typer.Option(False, "--json", help="Print one JSON document instead of text.")
INVENTORY = path_option(None, "--inventory", "-i",
                         help="Fleet inventory (TOML or hostfile): addresses, users, keys, python.")
INVENTORY_REQUIRED = path_option(..., "--inventory", "-i",
                                  help="Fleet inventory (TOML or hostfile 'host slots=N'): addresses, users, keys, python.")
RANK_MAP = typer.Option(..., "--rank-map", "-r",
                        help="rank_map=(...) / '0,1,..' / a file holding either (or solve --json output).")
PP = typer.Option(None, "--pp", min=1, help="Pipeline stages D_PP (default: devices / D_DP; with no --dp "
                                             "either, 8 when it divides the devices, else all of them).")
DP = typer.Option(None, "--dp", min=1, help="Data-parallel replicas D_DP (default: devices / D_PP).")
PP_OF_MAP = typer.Option(None, "--pp", min=1, help="Pipeline stages D_PP (default: the solve --json rank map's; "
                                                   "else devices / D_DP; with no --dp either, 8 when it divides "
                                                   "the devices, else all of them).")
DP_OF_MAP = typer.Option(None, "--dp", min=1, help="Data-parallel replicas D_DP (default: the solve --json rank "
                                                   "map's; else devices / D_PP).")
C_PP = typer.Option(..., "--c-pp", min=0.0, help="Activation payload per stage boundary, decimal GB.")
C_DP = typer.Option(..., "--c-dp", min=0.0, help="Stage gradient buffer entering the exchange, decimal GB.")
PP_MSG = typer.Option(1.0, "--pp-messages", min=0.0, help="Transfers carrying c_pp.")
DP_MSG = typer.Option(1.0, "--dp-messages", min=0.0, help="Transfers per peer per exchange round.")
RECORD = path_option(None, "--record", help="Append a run record (JSON line) to this file.")
KNOWN_HOSTS = typer.Option("~/.ssh/known_hosts", "--known-hosts", help="known_hosts file checked for host keys.")
ACCEPT_NEW = typer.Option(False, "--accept-new",
                          help="Trust and record unknown host keys (changed keys are always refused).")
GROUP_LOCALITY = typer.Option(
    None, "--group-locality",
    help="When the fabric has more devices than D_PP x D_DP: prefer (default: tightest available), "
         "network_group, zone, region (required), or any.")
REGIONS = typer.Option(None, "--regions", help="Only devices whose region or zone is in this comma-separated list.")
FILL_MISSING = typer.Option(False, "--fill-missing",
                            help="Estimate unmeasured pairs from labels and topology (marked estimated).")
ESTIMATE = typer.Option(
    None, "--estimate",
    help="LEVEL=ALPHA_MS,BETA_GBPS default for estimates (host, network_group, zone, region, any, or a "
         "link class NV1/PIX/PXB/PHB/NODE/SYS); repeatable. Example: --estimate zone=0.5,5")
LEARN = typer.Option(True, "--learn/--no-learn",
                     help="Estimate from measured pairs at the same level before the defaults.")


def known_hosts_flag(value: str) -> Path:
    """The ``--known-hosts`` file, checked before any host is reached: a missing file is
    fine (nothing trusted yet); a folder, FIFO, device, unreadable or malformed file is
    one line naming the flag (exit 2)."""
    from geoconsole.cli.errors import UserError
    from probes.ssh import read_known_hosts  # asyncssh: only commands that reach hosts
    from solver.files import FileError

    if not value.strip():
        raise UserError("--known-hosts: empty path")
    path = Path(value).expanduser()
    try:
        read_known_hosts(path)
    except FileError as exc:
        raise UserError(f"--known-hosts: {exc}") from None
    return path


def load_fabric(path: Path, *, devices: bool = False):
    """The fabric at ``path`` (FabricError, one line, when malformed). ``devices``: the
    fabric must name a host per row (launch, export, validate)."""
    from solver.fabric import FabricError, load_fabric as load

    fabric = load(path)
    if devices and fabric.devices is None:
        raise FabricError(f"{path}: devices: the fabric names no host per row; "
                          "measure it with the fleet or add devices")
    return fabric


def check_rank_map(ranks, workload) -> None:
    """UserError ``--rank-map: ...`` unless ``ranks`` is a rank map of ``workload``'s
    shape (a permutation of its ranks): score and validate check it before their work."""
    from geoconsole.cli.errors import UserError
    from solver.cost import grid_from_rank_map

    try:
        grid_from_rank_map(ranks, workload.d_pp, workload.d_dp)
    except ValueError as exc:
        raise UserError(f"--rank-map: {exc}") from None


def given_on_the_command_line(ctx: typer.Context) -> set[str]:
    """The command's parameters set on its command line (a default typed in too): options
    a command would not use are refused, not dropped."""
    return {name for name in ctx.params
            if getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"}
