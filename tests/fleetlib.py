"""An emulated SSH fleet on the test machine: network namespaces, real sshd, shaped links.

Each emulated host is one network namespace with its own UTS name (``hostname`` says
``h0``, ``h1``, ...), a real OpenSSH server, and one address inside 198.18.0.0/15 on
its loopback device. The hosts are joined by a full mesh of veth pairs, each shaped in
both directions by ``tbf`` at its own rate (100 Mbit .. 1 Gbit), with routes so that
host ``i`` reaches host ``j``'s address over the direct ``i``-``j`` link: exactly what
``ip route get <peer>`` then reports, and what ``GLOO_SOCKET_IFNAME`` must name.
The root namespace reaches every host over its own unshaped management veth, so SSH
from the test process works like SSH to a real machine.

Address plan (``B`` is a block free in the root namespace, held with a lock file so
that several fleets can exist at once)::

    host i address          198.18.B.(i+1)/32       on lo in namespace i
    management veth i       198.19.B.(4i+1)/30 root side, 198.19.B.(4i+2)/30 host side
    data link (i, j), #p    198.19.(128+p).1/30 on i ("to-h<j>"), .2/30 on j ("to-h<i>")

Usage (the ``emulated_fleet`` fixture in conftest.py does this once per session)::

    fleet = EmulatedFleet(hosts=4)
    fleet.build()
    ...  fleet.inventory_path, fleet.known_hosts_path, fleet.client_key_path
    fleet.teardown()      # no namespace, link or process is left behind

Everything here needs root, ``ip netns`` and ``/usr/sbin/sshd``; :func:`fleet_unavailable`
says why not when they are missing.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"
#: Rates (Mbit/s) given to the links, in pair order (0,1), (0,2), ..., cycled if needed.
DEFAULT_RATES_MBIT = (100, 250, 400, 600, 800, 1000)
#: Share of a tbf rate that TCP payload gets: 1448 payload bytes per 1514-byte frame.
TCP_PAYLOAD_SHARE = 1448 / 1514


def fleet_unavailable() -> str | None:
    """Why an emulated fleet cannot be built here, or ``None`` when it can."""
    if os.geteuid() != 0:
        return "the emulated fleet needs root (network namespaces, sshd)"
    for tool in ("ip", "tc", "unshare", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"the emulated fleet needs `{tool}` on PATH"
    if not os.path.exists(SSHD):
        return f"the emulated fleet needs OpenSSH server ({SSHD}); apt-get install openssh-server"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"`ip netns` does not work here: {probe.stderr.strip()}"
    return None


def _sh(*argv: str, check: bool = True, ns: str | None = None) -> subprocess.CompletedProcess:
    cmd = list(argv) if ns is None else ["ip", "netns", "exec", ns, *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


@dataclass
class FleetHost:
    """One emulated host."""

    index: int
    name: str
    namespace: str
    address: str
    #: Interface (inside this host's namespace) towards each peer host name.
    links: dict[str, str] = field(default_factory=dict)
    #: Folder first on PATH in this host's SSH sessions (for stub programs).
    bin_dir: Path | None = None
    sshd: subprocess.Popen | None = None


class EmulatedFleet:
    """Build, inspect and tear down an emulated fleet (see the module docstring).

    After :meth:`build`:

    * ``hosts``: list of :class:`FleetHost` (``name``, ``namespace``, ``address``, ``links``)
    * ``rates_mbit``: ``{(name_a, name_b): tbf rate}`` for both orders of every pair
    * ``inventory_path``: TOML inventory of all hosts (user root, the client key,
      ``python`` = this interpreter, so hosts run the same torch)
    * ``known_hosts_path``: known_hosts holding every host's key
    * ``client_key_path``: private key authorised on every host
    * ``dir``: the temporary folder holding all of it
    """

    def __init__(self, hosts: int = 4, rates_mbit: tuple[int, ...] = DEFAULT_RATES_MBIT,
                 python: str = sys.executable) -> None:
        if hosts < 2:
            raise ValueError("an emulated fleet needs at least 2 hosts")
        self.n = hosts
        self.python = python
        self._rates = rates_mbit
        self.tag = _fresh_tag()
        self.hosts: list[FleetHost] = []
        self.rates_mbit: dict[tuple[str, str], int] = {}
        self.dir: Path | None = None
        self.block: int | None = None
        self._lock_handle = None
        self._mgmt_links: list[str] = []
        self._built = False

    # -- set-up ----------------------------------------------------------------------

    def build(self) -> "EmulatedFleet":
        """Create namespaces, links, shaping, sshd and the client-side files."""
        _sh("mkdir", "-p", "/run/sshd")
        self.dir = Path(tempfile.mkdtemp(prefix=f"geofleet-{self.tag}-"))
        try:
            self._claim_block()
            self._make_hosts()
            self._make_links()
            self._make_keys()
            for host in self.hosts:
                self.start_sshd(host.name)
            self._write_client_files()
            self._built = True
        except BaseException:
            self.teardown()
            raise
        return self

    def _claim_block(self) -> None:
        routes = _sh("ip", "-o", "addr").stdout + _sh("ip", "-o", "route").stdout
        for block in range(1, 128):
            if f"198.19.{block}." in routes or f"198.18.{block}." in routes:
                continue
            handle = open(f"/tmp/.geoconsole-fleet-block-{block}.lock", "w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            self.block, self._lock_handle = block, handle
            return
        raise RuntimeError("no free 198.18.x.0/24 block for an emulated fleet")

    def _make_hosts(self) -> None:
        b = self.block
        for i in range(self.n):
            host = FleetHost(i, f"h{i}", f"{self.tag}-h{i}", f"198.18.{b}.{i + 1}")
            self.hosts.append(host)
            _sh("ip", "netns", "add", host.namespace)
            _sh("ip", "link", "set", "lo", "up", ns=host.namespace)
            _sh("ip", "addr", "add", f"{host.address}/32", "dev", "lo", ns=host.namespace)
            root_if, host_if = f"{self.tag}m{i}", "mgmt0"
            _sh("ip", "link", "add", root_if, "type", "veth", "peer", "name", host_if,
                "netns", host.namespace)
            self._mgmt_links.append(root_if)
            _sh("ip", "addr", "add", f"198.19.{b}.{4 * i + 1}/30", "dev", root_if)
            _sh("ip", "link", "set", root_if, "up")
            _sh("ip", "addr", "add", f"198.19.{b}.{4 * i + 2}/30", "dev", host_if, ns=host.namespace)
            _sh("ip", "link", "set", host_if, "up", ns=host.namespace)
            _sh("ip", "route", "add", f"{host.address}/32", "via", f"198.19.{b}.{4 * i + 2}")
            host.bin_dir = self.dir / host.name / "bin"
            host.bin_dir.mkdir(parents=True)

    def _make_links(self) -> None:
        for p, (a, b) in enumerate(itertools.combinations(self.hosts, 2)):
            rate = self._rates[p % len(self._rates)]
            self.rates_mbit[(a.name, b.name)] = self.rates_mbit[(b.name, a.name)] = rate
            if_a, if_b = f"to-{b.name}", f"to-{a.name}"
            tmp_a, tmp_b = f"{self.tag}a{p}", f"{self.tag}b{p}"
            _sh("ip", "link", "add", tmp_a, "netns", a.namespace, "type", "veth",
                "peer", "name", tmp_b, "netns", b.namespace)
            for host, tmp, ifname, peer, side in ((a, tmp_a, if_a, b, 1), (b, tmp_b, if_b, a, 2)):
                ns = host.namespace
                _sh("ip", "link", "set", tmp, "name", ifname, ns=ns)
                _sh("ip", "addr", "add", f"198.19.{128 + p}.{side}/30", "dev", ifname, ns=ns)
                _sh("ip", "link", "set", ifname, "up", ns=ns)
                other = 3 - side
                _sh("ip", "route", "add", f"{peer.address}/32", "via",
                    f"198.19.{128 + p}.{other}", "dev", ifname, ns=ns)
                # burst: 4 ms of tokens (tc-tbf's rate/HZ rule for HZ=250). A smaller bucket
                # loses throughput whenever the qdisc timer fires late on a busy machine.
                burst = max(rate * 1_000_000 // 8 // 250, 16 * 1514)
                _sh("tc", "qdisc", "add", "dev", ifname, "root", "tbf", "rate", f"{rate}mbit",
                    "burst", str(burst), "latency", "100ms", ns=ns)
                host.links[peer.name] = ifname

    def _make_keys(self) -> None:
        assert self.dir is not None
        self.client_key_path = self.dir / "client_ed25519"
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "geoconsole-test",
            "-f", str(self.client_key_path))
        (self.dir / "authorized_keys").write_text(
            Path(f"{self.client_key_path}.pub").read_text())
        for host in self.hosts:
            key = self.dir / host.name / "ssh_host_ed25519_key"
            _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", host.name, "-f", str(key))
            (self.dir / host.name / "sshd_config").write_text(self._sshd_config(host, key))

    def _sshd_config(self, host: FleetHost, key: Path) -> str:
        assert self.dir is not None
        path = f"{host.bin_dir}:/usr/local/bin:/usr/bin:/bin"
        return "\n".join([
            "Port 22",
            "ListenAddress 0.0.0.0",
            f"HostKey {key}",
            f"PidFile {self.dir / host.name / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
            "StrictModes no",
            "UsePAM no",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "MaxStartups 64",
            "MaxSessions 64",
            "UseDNS no",
            # The per-host bin folder comes first, so a stub nvidia-smi there is found.
            f"SetEnv PATH={path}",
            "Subsystem sftp internal-sftp",
            "LogLevel ERROR",
            "",
        ])

    def _write_client_files(self) -> None:
        assert self.dir is not None
        self.known_hosts_path = self.dir / "known_hosts"
        lines = []
        for host in self.hosts:
            pub = (self.dir / host.name / "ssh_host_ed25519_key.pub").read_text().split()
            lines.append(f"{host.address} {pub[0]} {pub[1]}")
        self.known_hosts_path.write_text("\n".join(lines) + "\n")
        self.inventory_path = self.write_inventory(self.dir / "hosts.toml")

    def write_inventory(self, path: str | os.PathLike[str], names: dict[str, str] | None = None,
                        extra: dict[str, dict[str, object]] | None = None,
                        hosts: list[str] | None = None) -> Path:
        """Write a TOML inventory of the fleet to ``path``.

        ``names`` renames hosts (fleet name -> inventory name, any text); ``extra`` adds
        fields per fleet host name (``{"h0": {"region": "eu", "gpus": [0]}}``);
        ``hosts`` keeps only these fleet hosts (default: all).
        """
        import json

        out = ["[defaults]", 'user = "root"', f"identity = {json.dumps(str(self.client_key_path))}",
               f"python = {json.dumps(self.python)}", ""]
        for host in self.hosts:
            if hosts is not None and host.name not in hosts:
                continue
            name = (names or {}).get(host.name, host.name)
            out += ["[[hosts]]", f"name = {json.dumps(name)}", f'address = "{host.address}"']
            for key, value in ((extra or {}).get(host.name) or {}).items():
                out.append(f"{key} = {json.dumps(value)}")
            out.append("")
        path = Path(path)
        path.write_text("\n".join(out))
        return path

    # -- control and inspection --------------------------------------------------------

    def host(self, name: str) -> FleetHost:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def start_sshd(self, name: str) -> None:
        """Start the host's sshd (its own UTS namespace, hostname = host name)."""
        host = self.host(name)
        assert self.dir is not None
        conf = self.dir / host.name / "sshd_config"
        log = self.dir / host.name / "sshd.log"
        host.sshd = subprocess.Popen(
            # nice -10: an emulated host stands for a dedicated machine; without it, other
            # work on a small shared test machine throttles a 1 Gbit link (CPU-bound gloo).
            ["nice", "-n", "-10", "ip", "netns", "exec", host.namespace, "unshare", "--uts", "sh", "-c",
             'hostname "$1" && exec "$2" -D -f "$3" -E "$4"', "sh", host.name, SSHD,
             str(conf), str(log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ss = _sh("ss", "-Hltn", "sport = :22", ns=host.namespace, check=False).stdout
            if ":22" in ss:
                return
            if host.sshd.poll() is not None:
                raise RuntimeError(f"sshd on {name} exited: {(self.dir / name / 'sshd.log').read_text()}")
            time.sleep(0.05)
        raise RuntimeError(f"sshd on {name} did not start listening within 10 s")

    def stop_sshd(self, name: str, sessions: bool = True) -> None:
        """Stop the host's sshd; with ``sessions`` (default) also every open SSH session,
        as when the host drops off the network. Processes the sessions started get EOF
        on their pipes; they are not killed here."""
        host = self.host(name)
        victims = [pid for pid, cmd in self.processes(name)
                   if cmd.startswith((SSHD, "sshd")) and (sessions or "-D" in cmd)]
        for pid in victims:
            _kill(pid, signal.SIGKILL)
        if host.sshd is not None:
            try:
                host.sshd.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            host.sshd = None

    def processes(self, name: str) -> list[tuple[int, str]]:
        """``(pid, command line)`` of every process inside the host's namespace."""
        host = self.host(name)
        pids = _sh("ip", "netns", "pids", host.namespace, check=False).stdout.split()
        out = []
        for pid in pids:
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            out.append((int(pid), raw.replace(b"\0", b" ").decode(errors="replace").strip()))
        return out

    def set_rate(self, a: str, b: str, mbit: int) -> None:
        """Change the tbf rate of the link between hosts ``a`` and ``b`` (both directions)."""
        for src, dst in ((a, b), (b, a)):
            host = self.host(src)
            burst = max(mbit * 1_000_000 // 8 // 250, 16 * 1514)
            _sh("tc", "qdisc", "change", "dev", host.links[dst], "root", "tbf", "rate", f"{mbit}mbit",
                "burst", str(burst), "latency", "100ms", ns=host.namespace)
        self.rates_mbit[(a, b)] = self.rates_mbit[(b, a)] = mbit

    def install_stub(self, name: str, program: str, script: str) -> Path:
        """Put an executable ``program`` (shell script text) first on the host's PATH."""
        path = self.host(name).bin_dir / program
        path.write_text(script)
        path.chmod(0o755)
        return path

    def remove_stub(self, name: str, program: str) -> None:
        (self.host(name).bin_dir / program).unlink(missing_ok=True)

    def leftovers(self) -> list[str]:
        """Anything of this fleet still present: namespaces, root links, processes."""
        out = []
        names = _sh("ip", "netns", "list", check=False).stdout
        out += [f"namespace {line.split()[0]}" for line in names.splitlines()
                if line.startswith(f"{self.tag}-")]
        links = _sh("ip", "-o", "link", check=False).stdout
        out += [f"link {line.split(':')[1].strip()}" for line in links.splitlines()
                if line.split(":")[1].strip().startswith(self.tag)]
        for host in self.hosts:
            if host.sshd is not None and host.sshd.poll() is None:
                out.append(f"process {host.sshd.pid} (sshd of {host.name})")
        return out

    # -- tear-down -------------------------------------------------------------------

    def teardown(self) -> None:
        """Kill every process in the namespaces, delete namespaces and links, files."""
        for host in self.hosts:
            for _ in range(3):
                procs = self.processes(host.name)
                if not procs:
                    break
                for pid, _cmd in procs:
                    _kill(pid, signal.SIGKILL)
                time.sleep(0.1)
            if host.sshd is not None:
                try:
                    host.sshd.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            _sh("ip", "netns", "delete", host.namespace, check=False)
        for link in self._mgmt_links:  # gone with their peers; make sure
            _sh("ip", "link", "delete", link, check=False)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None


def _fresh_tag() -> str:
    """A short prefix no namespace uses yet (interface names allow 15 characters)."""
    existing = _sh("ip", "netns", "list", check=False).stdout
    for letter in "abcdefghijklmnopqrstuvwxyz":
        tag = f"gf{os.getpid() % 100000}{letter}"
        if f"{tag}-" not in existing:
            return tag
    raise RuntimeError("no free emulated-fleet tag for this process")


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
