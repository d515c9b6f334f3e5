"""A real Slurm cluster on an emulated fleet (tests/fleetlib.py): Debian's slurm 22.05.

- ``munged`` runs in the root namespace as user munge, with its own key and socket;
- ``slurmctld`` runs in the root namespace under its own UTS name (it refuses to start
  unless its host name matches ``SlurmctldHost``), listening on an address added to the
  root namespace's loopback, which every host namespace reaches over its management link;
- one ``slurmd`` per host namespace, with the host's UTS name and the host's address as
  ``NodeAddr``.

Plugins that need neither systemd nor a cgroup set-up: ``proctrack/linuxproc``,
``task/none``, ``select/linear`` (whole nodes), and a ``cgroup.conf`` naming
``cgroup/v1``, which slurmd loads on this kernel's hybrid hierarchy. Nodes declare
:data:`NODE_CPUS` CPUs (``SlurmdParameters=config_overrides``) so several ranks fit on
one emulated host. :meth:`SlurmCluster.stop` ends every daemon it started and removes
its files and the controller address.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from fleetlib import EmulatedFleet, _kill, _sh

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
NODE_CPUS = 8


def slurm_unavailable() -> str | None:
    """Why a Slurm cluster cannot run here, or ``None``."""
    for path in DAEMONS + ("/usr/bin/srun", "/usr/sbin/mungekey"):
        if not os.path.exists(path):
            return f"a real Slurm needs {path} (apt-get install slurmctld slurmd slurm-client munge)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


class SlurmCluster:
    """Start with :meth:`start`, stop with :meth:`stop`; ``env`` is what a client needs
    (``SLURM_CONF``), ``nodes`` the node names (the fleet's host names)."""

    def __init__(self, fleet: EmulatedFleet) -> None:
        self.fleet = fleet
        b = fleet.block
        self.controller = f"gctl{b}"
        self.controller_addr = f"198.18.{b}.254"
        self.nodes = [h.name for h in fleet.hosts]
        self.procs: list[subprocess.Popen] = []
        self.dir: Path | None = None
        self.munge_dir: Path | None = None
        self._addr_added = False

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def start(self) -> "SlurmCluster":
        try:
            self._files()
            self._munged()
            self._network()
            self._slurmctld()
            for host in self.fleet.hosts:
                self._slurmd(host)
            self._wait_idle()
        except BaseException:
            self.stop()
            raise
        return self

    # -- set-up ----------------------------------------------------------------------

    def _files(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="geoslurm-"))
        self.dir.chmod(0o755)
        # munged checks that its folders are not writable by others and owned by it
        self.munge_dir = Path(tempfile.mkdtemp(prefix="geomunge-"))
        shutil.chown(self.munge_dir, "munge", "munge")
        self.munge_dir.chmod(0o755)
        self.munge_key = self.munge_dir / "munge.key"
        _sh("mungekey", "--create", f"--keyfile={self.munge_key}")
        shutil.chown(self.munge_key, "munge", "munge")
        self.munge_key.chmod(0o400)
        self.munge_socket = self.munge_dir / "munge.socket"
        for sub in ("state", "spool"):
            (self.dir / sub).mkdir()
        self.ctl_port, self.slurmd_port = _free_port(), _free_port()
        d = self.dir
        nodes = "\n".join(
            f"NodeName={h.name} NodeAddr={h.address} CPUs={NODE_CPUS} RealMemory=1000 State=UNKNOWN"
            for h in self.fleet.hosts)
        self.conf = d / "slurm.conf"
        self.conf.write_text(f"""\
ClusterName=geo{self.fleet.block}
SlurmctldHost={self.controller}({self.controller_addr})
SlurmctldPort={self.ctl_port}
SlurmdPort={self.slurmd_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.%n.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
KillWait=2
MinJobAge=2
InactiveLimit=0
MessageTimeout=20
SlurmctldTimeout=60
SlurmdTimeout=60
{nodes}
PartitionName=geo Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        (d / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")

    def _spawn(self, argv: list[str], ns: str | None = None) -> subprocess.Popen:
        cmd = argv if ns is None else ["ip", "netns", "exec", ns, *argv]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        return proc

    def _munged(self) -> None:
        m = self.munge_dir
        self._spawn(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "-F",
                     f"--socket={self.munge_socket}", f"--key-file={self.munge_key}",
                     f"--log-file={m}/munged.log", f"--pid-file={m}/munged.pid",
                     f"--seed-file={m}/munged.seed"])
        self._wait(lambda: self.munge_socket.exists(), "munged socket", f"{m}/munged.log")

    def _network(self) -> None:
        b = self.fleet.block
        _sh("ip", "addr", "add", f"{self.controller_addr}/32", "dev", "lo")
        self._addr_added = True
        for h in self.fleet.hosts:
            _sh("ip", "route", "replace", f"{self.controller_addr}/32", "via",
                f"198.19.{b}.{4 * h.index + 1}", "dev", "mgmt0", ns=h.namespace)

    def _slurmctld(self) -> None:
        self._spawn(["unshare", "--uts", "sh", "-c", 'hostname "$1" && exec "$2" -D -c -f "$3"', "sh",
                     self.controller, "/usr/sbin/slurmctld", str(self.conf)])
        self._wait(lambda: self.scontrol("ping").returncode == 0, "slurmctld",
                   f"{self.dir}/slurmctld.log")

    def _slurmd(self, host) -> None:
        self._spawn(["unshare", "--uts", "sh", "-c",
                     'hostname "$1" && exec "$2" -D -N "$1" -f "$3"', "sh", host.name,
                     "/usr/sbin/slurmd", str(self.conf)], ns=host.namespace)

    def _wait_idle(self) -> None:
        def idle() -> bool:
            out = self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.split("\n")
            states = dict(line.split() for line in out if line.strip())
            return all(states.get(n) == "idle" for n in self.nodes)
        self._wait(idle, "every slurmd idle", f"{self.dir}/slurmctld.log", timeout=60)

    def _wait(self, ok, what: str, log: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            dead = [p for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{what}: {dead[0].args} exited; log: {_tail(log)}")
            time.sleep(0.2)
        raise RuntimeError(f"{what}: not ready after {timeout} s; log: {_tail(log)}")

    # -- use -------------------------------------------------------------------------

    def run(self, *argv: str, ns: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
        cmd = list(argv) if ns is None else ["ip", "netns", "exec", ns, *argv]
        return subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=timeout)

    def scontrol(self, *args: str) -> subprocess.CompletedProcess:
        return self.run("scontrol", *args)

    def queue(self) -> list[str]:
        """Jobs and steps squeue still lists (empty when the cluster is clean)."""
        jobs = self.run("squeue", "-h", "-o", "%i %T").stdout.split("\n")
        steps = self.run("squeue", "-h", "-s", "-o", "%i").stdout.split("\n")
        return [j for j in jobs + steps if j.strip()]

    def wait_clean(self, timeout: float = 60) -> list[str]:
        """Wait until squeue lists nothing; what it still lists after ``timeout``."""
        deadline = time.monotonic() + timeout
        while (left := self.queue()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    # -- tear-down -------------------------------------------------------------------

    def leftovers(self) -> list[str]:
        return [f"process {p.pid} ({p.args[0]})" for p in self.procs if p.poll() is None]

    def stop(self) -> None:
        """Stop every daemon (slurmd first, then slurmctld, munged), remove the files."""
        for p in reversed(self.procs):
            _signal_group(p, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in reversed(self.procs):
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait(timeout=5)
        if self._addr_added:
            for h in self.fleet.hosts:
                _sh("ip", "route", "del", f"{self.controller_addr}/32", ns=h.namespace, check=False)
            _sh("ip", "addr", "del", f"{self.controller_addr}/32", "dev", "lo", check=False)
            self._addr_added = False
        for d in (self.dir, self.munge_dir):
            if d is not None:
                shutil.rmtree(d, ignore_errors=True)


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        _kill(p.pid, sig)


def _tail(path: str, lines: int = 15) -> str:
    try:
        return " | ".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
