"""Fleet inventory: which hosts to reach over SSH, how, and where they are.

Two file formats are read:

* **TOML** (``*.toml``): an optional ``[defaults]`` table and one ``[[hosts]]`` table per
  host::

      [defaults]
      user = "ubuntu"
      identity = "~/.ssh/id_ed25519"
      python = "/opt/venv/bin/python"

      [[hosts]]
      name = "oregon-1"            # shown everywhere; defaults to the address
      address = "10.0.0.5"         # or an alias from ~/.ssh/config
      port = 22
      interface = "ens5"           # data interface for probes; else `ip route get <peer>`
      gpus = [0, 1]                # GPUs to use; "all" (default)
      region = "us-west1"
      zone = "us-west1-b"
      network_group = "rack-7"
      slurm_node = "gpu-017"       # Slurm's name for the host, when it differs
      k8s_node = "node-17"         # Kubernetes' node name (kubernetes.io/hostname)

* **Hostfile** (any other name), the DeepSpeed / MPI form: one ``host slots=N`` per line,
  ``#`` comments; ``slots`` is the number of GPUs to use (the first ``N``).

Addresses (and hostfile host names) that match a ``Host`` alias in ``~/.ssh/config``
take its ``HostName``, ``User``, ``Port`` and ``IdentityFile``. Precedence: the host's
own entry, then ``~/.ssh/config``, then ``[defaults]``, then built-ins (port 22, the
local user, ``python3``, all GPUs).

Every malformed entry is reported as one line naming the file, the entry and the field
(:class:`InventoryError`, an :class:`~geoconsole.errors.InputError`).
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from geoconsole.errors import InputError
from solver import names
from solver.files import read_text

DEFAULT_SSH_CONFIG = "~/.ssh/config"
#: Most devices one host may have (slots, gpus): far above any machine built.
MAX_SLOTS = 1024
#: Largest inventory file read (a hostfile of 100,000 hosts is about 4 MB).
MAX_INVENTORY_BYTES = 64 << 20
#: Most hosts in one inventory: the placement is built for up to 4 096 GPUs, and a file
#: of hundreds of thousands of lines took 20 s to resolve before it was refused.
MAX_HOSTS = 8192
#: A line that opens a ``[[hosts]]`` table (counted before a large TOML is parsed).
_HOSTS_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*hosts[ \t]*\]\]", re.MULTILINE)
#: A TOML inventory of more characters than this is refused by its count of ``[[hosts]]``
#: lines before it is parsed (64 MB of TOML takes about 20 s to parse); a smaller one is
#: parsed first and its tables counted, so ``[[hosts]]`` lines inside a multi-line string
#: do not count.
PRECOUNT_CHARS = 1 << 20

_HOST_FIELDS = {
    "name", "address", "port", "user", "identity", "python", "interface", "gpus",
    "region", "zone", "network_group", "slurm_node", "k8s_node",
}
#: Fields naming the host in a scheduler: per host, never in [defaults].
NODE_FIELDS = ("slurm_node", "k8s_node")
_DEFAULT_FIELDS = _HOST_FIELDS - {"name", "address", *NODE_FIELDS}
LABEL_FIELDS = ("region", "zone", "network_group")


class InventoryError(InputError):
    """A malformed inventory; the message is one line naming file, entry and field."""


@dataclass(frozen=True)
class Host:
    """One fleet host, fully resolved (ssh config and defaults applied).

    ``gpus`` is ``None`` for "all GPUs the host has"; a tuple of indices otherwise.
    Labels (``region``, ``zone``, ``network_group``) may be ``None`` until discovery or
    the operator fills them.
    """

    name: str
    address: str
    port: int = 22
    user: str | None = None
    identity: str | None = None
    python: str = "python3"
    interface: str | None = None
    gpus: tuple[int, ...] | None = None
    region: str | None = None
    zone: str | None = None
    network_group: str | None = None
    #: Slurm's node name for this host, when it differs from ``name``.
    slurm_node: str | None = None
    #: Kubernetes' node name (label ``kubernetes.io/hostname``), when it differs from ``name``.
    k8s_node: str | None = None
    #: Where the entry came from (``file:line`` or ``file: hosts[i]``), for messages.
    source: str = ""


@dataclass(frozen=True)
class Inventory:
    """The hosts of one inventory file, in file order."""

    hosts: tuple[Host, ...]
    path: Path

    def __len__(self) -> int:
        return len(self.hosts)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def with_labels(self, region: str | None = None, zone: str | None = None,
                    network_group: str | None = None) -> "Inventory":
        """Fill labels that hosts leave empty (the ``--region/--zone/--network-group`` flags)."""
        hosts = tuple(
            replace(h, region=h.region or region, zone=h.zone or zone,
                    network_group=h.network_group or network_group)
            for h in self.hosts
        )
        return Inventory(hosts, self.path)


# -- ~/.ssh/config ---------------------------------------------------------------------


@dataclass(frozen=True)
class _SSHConfigBlock:
    patterns: tuple[str, ...]
    options: tuple[tuple[str, str], ...]


#: Deepest chain of ``Include`` (OpenSSH allows 16).
MAX_INCLUDE_DEPTH = 16
#: Largest ssh config file read.
MAX_SSH_CONFIG_BYTES = 4 << 20
#: Most file reads one config may make, itself and its Includes in all: room for a file
#: per host of a large fleet (config.d/*), not for globs that fan out at every level (42
#: files read 3^14 times never finished).
MAX_SSH_CONFIG_FILES = 10_000
#: ``Key value`` or ``Key=value`` (ssh_config(5)); an ``=`` inside the value is the value's.
_SSH_OPTION = re.compile(r"([^\s=]+)\s*(?:=\s*|\s+)(.*)")


def read_ssh_config(path: str | os.PathLike[str] | None = DEFAULT_SSH_CONFIG, *,
                    _chain: tuple[str, ...] = (), _read: list | None = None) -> list[_SSHConfigBlock]:
    """Parse the ``Host`` blocks of an OpenSSH client config (``Match`` blocks are skipped).

    A missing file (or folder) is an empty config. ``Include`` is followed (globs,
    relative to ``~/.ssh``); a loop or a chain deeper than MAX_INCLUDE_DEPTH, a FIFO or
    device, or a file that is not UTF-8 is an InventoryError naming the file.
    """
    if path is None:
        return []
    file = Path(os.path.expanduser(str(path)))
    real = os.path.realpath(file)
    if real in _chain:
        raise InventoryError(f"{file}: Include loop ({' -> '.join(_chain + (real,))})")
    if len(_chain) >= MAX_INCLUDE_DEPTH:
        raise InventoryError(f"{file}: Include nested more than {MAX_INCLUDE_DEPTH} deep")
    if not file.exists() or file.is_dir():
        return []
    _read = [0, file] if _read is None else _read  # reads so far, the config given
    _read[0] += 1
    if _read[0] > MAX_SSH_CONFIG_FILES:
        raise InventoryError(f"{_read[1]}: its Includes read more than {MAX_SSH_CONFIG_FILES} files in all "
                             f"(at {file})")
    text = read_text(file, "ssh config", max_bytes=MAX_SSH_CONFIG_BYTES, error=InventoryError)
    blocks: list[_SSHConfigBlock] = []
    patterns: tuple[str, ...] = ("*",)
    options: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SSH_OPTION.match(line)
        key, value = (match.group(1), match.group(2)) if match else (line, "")
        key, value = key.lower(), value.strip().strip('"')
        if key in ("host", "match"):
            blocks.append(_SSHConfigBlock(patterns, tuple(options)))
            patterns = tuple(value.split()) if key == "host" else ()
            options = []
        elif key == "include":
            blocks.append(_SSHConfigBlock(patterns, tuple(options)))
            options = []
            for item in value.split():
                item = os.path.expanduser(item)
                if not os.path.isabs(item):
                    item = os.path.join(os.path.expanduser("~/.ssh"), item)
                for inc in sorted(glob.glob(item)):
                    blocks.extend(read_ssh_config(inc, _chain=_chain + (real,), _read=_read))
        else:
            options.append((key, value))
    blocks.append(_SSHConfigBlock(patterns, tuple(options)))
    return blocks


def ssh_config_for(alias: str, blocks: list[_SSHConfigBlock]) -> dict[str, str]:
    """Options for ``alias``: first value wins, as in OpenSSH."""
    out: dict[str, str] = {}
    for block in blocks:
        if not _host_matches(alias, block.patterns):
            continue
        for key, value in block.options:
            out.setdefault(key, value)
    return out


def _host_matches(alias: str, patterns: tuple[str, ...]) -> bool:
    matched = False
    for pattern in patterns:
        if pattern.startswith("!"):
            if fnmatch.fnmatchcase(alias, pattern[1:]):
                return False
        elif fnmatch.fnmatchcase(alias, pattern):
            matched = True
    return matched


# -- loading ---------------------------------------------------------------------------


def load_inventory(path: str | os.PathLike[str], *,
                   ssh_config: str | os.PathLike[str] | None = DEFAULT_SSH_CONFIG) -> Inventory:
    """Read a TOML inventory or a hostfile (by suffix). Raises :class:`InventoryError`."""
    path = Path(path)
    text = read_text(path, "inventory", max_bytes=MAX_INVENTORY_BYTES, error=InventoryError)
    if text.startswith("\ufeff"):  # TOML said "Invalid statement (at line 1, column 1)"
        raise InventoryError(f"{path}: starts with a byte order mark (U+FEFF); save it as UTF-8 without one")
    blocks = read_ssh_config(ssh_config)
    if path.suffix.lower() == ".toml":
        entries = _toml_entries(path, text)
    else:
        entries = _hostfile_entries(path, text)
    config = str(ssh_config) if ssh_config is not None else DEFAULT_SSH_CONFIG
    hosts = [_resolve(path, where, entry, defaults, blocks, config) for where, entry, defaults in entries]
    if not hosts:
        raise InventoryError(f"{path}: no hosts")
    seen: dict[str, tuple[str, str]] = {}  # name lowercased (DNS ignores case) -> (name, where)
    for h in hosts:
        other = seen.get(h.name.lower())
        if other is not None:
            same = "" if other[0] == h.name else f" as {other[0]!r}: host names ignore case"
            raise InventoryError(f"{h.source}: duplicate host name {h.name!r} (also {other[1]}{same})")
        seen[h.name.lower()] = (h.name, h.source)
    reached: dict[tuple[str, int], list[Host]] = {}  # one machine under two names: probed twice
    for h in hosts:
        key = (h.address.lower(), h.port)
        for other in reached.get(key, []):
            if not (h.gpus and other.gpus and not set(h.gpus) & set(other.gpus)):
                raise InventoryError(f"{h.source}: host {h.name!r} has the address {h.address}:{h.port} of "
                                     f"{other.name!r} ({other.source}): its GPUs would be probed and launched "
                                     "twice (split one machine by disjoint gpus lists)")
        reached.setdefault(key, []).append(h)
    return Inventory(tuple(hosts), path)


def _toml_entries(path: Path, text: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    if len(text) > PRECOUNT_CHARS:  # before parsing: 64 MB of TOML takes about 20 s
        headers = len(_HOSTS_HEADER.findall(text))
        if headers > MAX_HOSTS:
            raise InventoryError(f"{path}: {headers} lines open [[hosts]] tables; at most {MAX_HOSTS} hosts")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise InventoryError(f"{path}: invalid TOML: nested too deeply") from None
    unknown = set(doc) - {"defaults", "hosts"}
    if unknown:
        raise InventoryError(f"{path}: unknown top-level key {sorted(unknown)[0]!r} (expected [defaults] and [[hosts]])")
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise InventoryError(f"{path}: defaults: expected a table")
    for key in defaults:
        if key not in _DEFAULT_FIELDS:
            raise InventoryError(f"{path}: defaults.{key}: unknown field")
    hosts = doc.get("hosts")
    if hosts is None:
        raise InventoryError(f"{path}: no [[hosts]] entries")
    if not isinstance(hosts, list) or not all(isinstance(h, dict) for h in hosts):
        raise InventoryError(f"{path}: hosts: expected [[hosts]] tables")
    if len(hosts) > MAX_HOSTS:
        raise InventoryError(f"{path}: {len(hosts)} [[hosts]] entries; at most {MAX_HOSTS}")
    out = []
    for i, entry in enumerate(hosts):
        for key in entry:
            if key not in _HOST_FIELDS:
                raise InventoryError(f"{path}: hosts[{i}].{key}: unknown field")
        out.append((f"{path}: hosts[{i}]", entry, defaults))
    return out


def _hostfile_entries(path: Path, text: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    out = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{lineno}"
        if len(out) == MAX_HOSTS:
            raise InventoryError(f"{where}: more than {MAX_HOSTS} hosts; at most {MAX_HOSTS} in one inventory")
        host, *rest = line.split()
        if "=" in host:
            raise InventoryError(f"{where}: expected 'host slots=N', got {line[:80]!r} (no host name first)")
        entry: dict[str, Any] = {"address": host}
        if "@" in host:  # Open MPI's user@host: the login is the entry's user
            entry["user"], _, entry["address"] = host.rpartition("@")
        given: set[str] = set()
        for item in rest:
            key, sep, value = item.partition("=")
            if not sep or key not in ("slots", "max_slots"):
                raise InventoryError(f"{where}: expected 'host slots=N', got {item[:80]!r}")
            if key in given:  # which one was meant?
                raise InventoryError(f"{where}: {key} given twice")
            given.add(key)
            if not (value.isascii() and value.isdigit()) or not 1 <= int(value[:9] or 0) <= MAX_SLOTS \
                    or len(value) > 9:
                raise InventoryError(f"{where}: {key}: expected a whole number 1-{MAX_SLOTS}, got {value[:24]!r}")
            if key == "slots":
                entry["gpus"] = list(range(int(value)))
        out.append((where, entry, {}))
    return out


def _resolve(path: Path, where: str, entry: dict[str, Any], defaults: dict[str, Any],
             blocks: list[_SSHConfigBlock], config: str = DEFAULT_SSH_CONFIG) -> Host:
    def text(key: str, value: Any, scope: str) -> str | None:
        if value is None:
            return None
        if key in LABEL_FIELDS:
            why = names.label_problem(value)
        elif key in NODE_FIELDS:
            why = names.name_problem(value, "node name")
        elif key in ("python", "identity"):
            why = names.path_problem(value, key)
        elif key == "user":
            why = names.name_problem(value, "user name", names.MAX_USER_CHARS)
        else:
            why = names.name_problem(value, "host name" if key == "name" else "host address")
        if why:
            raise InventoryError(f"{scope}.{key}: {why}")
        return value or None

    d_scope = f"{path}: defaults"
    merged_defaults = {k: v for k, v in defaults.items()}
    address = text("address", entry.get("address"), where)
    name = text("name", entry.get("name"), where)
    if address is None:
        if name is None:
            raise InventoryError(f"{where}: needs an address (or a name that resolves)")
        address = name
    if name is None:
        name = address
    ssh = ssh_config_for(address, blocks)
    real_address = text("address", ssh.get("hostname", address).replace("%h", address),
                        f"{where} ({config} HostName)")

    def pick(key: str, ssh_key: str | None = None) -> tuple[Any, str]:
        if key in entry:
            return entry[key], where
        if ssh_key and ssh_key in ssh:
            return ssh[ssh_key], f"{where} ({config} {ssh_key})"
        if key in merged_defaults:
            return merged_defaults[key], d_scope
        return None, where

    port_value, port_scope = pick("port", "port")
    port = _port(port_value, port_scope)
    user_value, user_scope = pick("user", "user")
    ident_value, ident_scope = pick("identity", "identityfile")
    python_value, python_scope = pick("python")
    iface_value, iface_scope = pick("interface")
    gpus_value, gpus_scope = pick("gpus")
    labels = {}
    for key in ("region", "zone", "network_group"):
        value, scope = pick(key)
        labels[key] = text(key, value, scope)
    identity = text("identity", ident_value, ident_scope)
    nodes = {key: text(key, entry.get(key), where) for key in NODE_FIELDS}
    return Host(
        name=name,
        address=real_address,
        port=port,
        user=text("user", user_value, user_scope),
        identity=os.path.expanduser(identity) if identity else None,
        python=text("python", python_value, python_scope) or "python3",
        interface=_interface(iface_value, iface_scope),
        gpus=_gpus(gpus_value, gpus_scope),
        source=where,
        **labels,
        **nodes,
    )


def _port(value: Any, scope: str) -> int:
    if value is None:
        return 22
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 5:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise InventoryError(f"{scope}.port: expected an integer 1-65535, got {str(value)[:24]!r}")
    return value


def _interface(value: Any, scope: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not names.INTERFACE_NAME.match(value):
        raise InventoryError(f"{scope}.interface: expected a network interface name, got {str(value)[:40]!r}")
    return value


def _gpus(value: Any, scope: str) -> tuple[int, ...] | None:
    if value is None or value == "all":
        return None
    if not isinstance(value, list) or not value:
        raise InventoryError(f"{scope}.gpus: expected \"all\" or a list of GPU indices, got {str(value)[:40]!r}")
    if len(value) > MAX_SLOTS:
        raise InventoryError(f"{scope}.gpus: at most {MAX_SLOTS} devices per host, got {len(value)}")
    for g in value:
        if isinstance(g, bool) or not isinstance(g, int) or not 0 <= g < 1 << 16:
            raise InventoryError(f"{scope}.gpus: expected GPU indices 0-65535, got {str(g)[:24]}")
    if len(set(value)) != len(value):
        raise InventoryError(f"{scope}.gpus: repeated GPU index in {value!r}")
    return tuple(value)
