"""SSH sessions to fleet hosts (asyncssh), with host keys checked against known_hosts.

The rules every caller gets for free:

* **Host keys** are verified against a known_hosts file. An unknown key, or one that
  differs from the recorded key, is refused with its SHA256 fingerprint
  (:class:`HostKeyError`). Only an explicit ``accept_new=True`` (the CLI's
  ``--accept-new``) trusts an *unknown* key, and it is then appended to known_hosts; a
  *changed* key is refused even then, as OpenSSH's ``StrictHostKeyChecking=accept-new``
  does.
* **Keys** come from the host's ``identity`` (inventory) or, without one, from the SSH
  agent and the default ``~/.ssh/id_*`` files.
* **Timeouts**: a connect (name resolution + TCP + handshake + login) timeout, a
  per-command timeout, and keepalives so that a dead host is noticed within
  ``keepalive_interval * (keepalive_count_max + 1)`` seconds.
* **Connect failures are one host's error**: a name that does not resolve, a refused or
  unreachable port, a timeout, a refused login or host key, an unreadable known_hosts:
  each is a :class:`ConnectError` (or :class:`HostKeyError`) naming the host, with
  ``kind`` saying which; nothing else escapes :meth:`SSHPool.connect`. Name resolution
  runs in a daemon thread under the connect timeout, so a resolver that never answers
  neither holds the connect nor the process's exit.
* **Concurrency**: at most ``max_connecting`` handshakes at once (sshd's ``MaxStartups``
  refuses bursts of unauthenticated connections, by default beyond 10).
* **Reconnect once**: :meth:`HostSession.run` reconnects once when the connection has
  dropped, and runs the command again.
* **Quoting**: commands are given as argument lists and every argument is
  ``shlex.quote``d; environment variables are placed in the command line through
  ``env`` (sshd drops channel environment variables unless ``AcceptEnv`` lists them).

A host is anything with the attributes ``name``, ``address``, ``port``, ``user`` and
``identity`` (``geoconsole.inventory.Host`` or :class:`SSHTarget`).

Example::

    pool = SSHPool(known_hosts="~/.ssh/known_hosts")
    session = await pool.session(host)
    result = await session.run(["uname", "-r"], timeout=10)
    print(result.stdout)
    await pool.close()
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import errno
import getpass
import ipaddress
import logging
import os
import shlex
import socket
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

with warnings.catch_warnings():
    # cryptography 51 deprecates DSA, and asyncssh's modules name its classes
    # when imported: a CryptographyDeprecationWarning on stderr before every command's
    # own output (a one-line error became eleven lines). DSA keys are not used here.
    warnings.filterwarnings("ignore", message=r".*\bDSA\b", module=r"asyncssh\b")
    import asyncssh

from solver.files import FileError, append_line, read_text

#: Handshakes an SSHPool runs at once by default (sshd's MaxStartups starts refusing at 10).
MAX_CONNECTING = 10

# asyncssh logs every channel at INFO; the console shows its own one-line errors.
logging.getLogger("asyncssh").setLevel(logging.WARNING)

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
#: Largest known_hosts file read (OpenSSH's own are kilobytes).
MAX_KNOWN_HOSTS_BYTES = 16 << 20


class HostLike(Protocol):
    name: str
    address: str
    port: int
    user: str | None
    identity: str | None


@dataclass(frozen=True)
class SSHTarget:
    """The minimal host description :class:`SSHPool` needs."""

    name: str
    address: str
    port: int = 22
    user: str | None = None
    identity: str | None = None


class SSHError(Exception):
    """Remote trouble with one host; ``str()`` is a one-line message naming the host."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.host = host
        #: The message without the host name (for a table row that already names it).
        self.reason = message


class HostKeyError(SSHError):
    """The server's host key is unknown (``kind='unknown'``) or differs (``'changed'``)."""

    def __init__(self, host: str, kind: str, algorithm: str, fingerprint: str, known_hosts: str) -> None:
        if kind == "unknown":
            why = (
                f"host key {algorithm} {fingerprint} is not in {known_hosts}; "
                "refused (run with --accept-new to trust it and record it)"
            )
        else:
            why = (
                f"host key CHANGED: offered {algorithm} {fingerprint} differs from the key "
                f"recorded in {known_hosts}; refused (remove the old entry if the change is expected)"
            )
        super().__init__(host, why)
        self.kind = kind
        self.algorithm = algorithm
        self.fingerprint = fingerprint


class ConnectError(SSHError):
    """The host could not be reached or refused the login.

    ``kind``: ``"resolve"`` (the name does not resolve), ``"refused"`` (nothing listens),
    ``"unreachable"`` (no route), ``"timeout"``, ``"login"`` (authentication refused),
    ``"known_hosts"`` (the known_hosts file cannot be read or written) or ``"other"``.
    """

    def __init__(self, host: str, message: str, kind: str = "other") -> None:
        super().__init__(host, message)
        self.kind = kind


class CommandTimeout(SSHError):
    """A remote command ran past its timeout (it was killed)."""


@dataclass(frozen=True)
class CommandResult:
    """Outcome of one remote command."""

    command: str
    exit_status: int | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0


def quote_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """One shell command line: ``env K=V ... argv...``, every piece ``shlex.quote``d.

    Variable names must be identifiers (they cannot be quoted); values can be anything.
    """
    if isinstance(argv, (str, bytes)):
        raise TypeError("argv must be a sequence of arguments, not a string")
    parts: list[str] = []
    if env:
        parts.append("env")
        for key, value in env.items():
            if not key.isidentifier():
                raise ValueError(f"environment variable name {key!r} is not an identifier")
            parts.append(shlex.quote(f"{key}={value}"))
    parts.extend(shlex.quote(str(a)) for a in argv)
    return " ".join(parts)


def read_known_hosts(path: str | os.PathLike[str]) -> asyncssh.SSHKnownHosts:
    """The entries of the known_hosts file ``path``; a missing file holds none.

    A folder, FIFO or device, an unreadable, oversized, non-UTF-8 or malformed file is a
    :class:`~solver.files.FileError` with one line naming the file (check it before
    connecting: the CLI does, for ``--known-hosts``).
    """
    path = Path(os.path.expanduser(str(path)))
    try:
        os.stat(path)
    except FileNotFoundError:
        return asyncssh.import_known_hosts("")
    except OSError:
        pass  # read_text says why
    text = read_text(path, "known_hosts", max_bytes=MAX_KNOWN_HOSTS_BYTES)
    _check_known_hosts_lines(path, text)
    try:
        return asyncssh.import_known_hosts(text)
    except ValueError as exc:
        raise FileError(f"{path}: {_short(str(exc))}") from None


def _check_known_hosts_lines(path: Path, text: str) -> None:
    """Each entry is ``[@marker] hosts keytype base64-key [comment]`` (sshd(8)); asyncssh
    skips some malformed lines without a word (``my notes``, a key that is not base64),
    so a file of typos trusted nothing and every host then failed its key check."""
    for number, line in enumerate(text.splitlines(), 1):  # the lines asyncssh's parser reads
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if fields[0].startswith("@"):
            if fields[0] not in ("@cert-authority", "@revoked"):
                raise FileError(f"{path}: line {number}: unknown marker {_short(fields[0])!r}")
            fields = fields[1:]
        if len(fields) >= 4 and all(f.isdigit() for f in fields[1:4]):
            continue  # an SSH1 RSA key (bits, exponent, modulus): OpenSSH skips it, so do we
        if len(fields) < 3:
            raise FileError(f"{path}: line {number}: expected hosts, key type and key")
        try:
            base64.b64decode(fields[2], validate=True)
        except (binascii.Error, ValueError):
            raise FileError(f"{path}: line {number}: the key is not base64") from None


def known_hosts_pattern(address: str, port: int) -> str:
    """The known_hosts host field for ``address:port`` (``[addr]:port`` off port 22)."""
    return address if port == 22 else f"[{address}]:{port}"


class _VerifyingClient(asyncssh.SSHClient):
    """Decides on host keys that known_hosts does not already trust."""

    def __init__(self, pool: "SSHPool", host: HostLike) -> None:
        self._pool = pool
        self._host = host
        self.rejected: SSHError | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        path = self._pool.known_hosts_path
        algorithm = key.get_algorithm()
        fingerprint = key.get_fingerprint("sha256")
        try:
            recorded = self._pool._recorded_keys(self._host, addr, port)
            if recorded:
                self.rejected = HostKeyError(self._host.name, "changed", algorithm, fingerprint, str(path))
                return False
            if not self._pool.accept_new:
                self.rejected = HostKeyError(self._host.name, "unknown", algorithm, fingerprint, str(path))
                return False
            self._pool._record_key(self._host, port, key)
        except ConnectError as exc:
            self.rejected = exc
            return False
        return True


class SSHPool:
    """Connections to many hosts with shared settings; one connection per host.

    Parameters are keyword-only; see the module docstring for what each rule means.
    ``accepted`` lists ``(host name, algorithm, fingerprint)`` of keys recorded under
    ``accept_new``.
    """

    def __init__(
        self,
        *,
        known_hosts: str | os.PathLike[str] = DEFAULT_KNOWN_HOSTS,
        accept_new: bool = False,
        connect_timeout: float = 10.0,
        command_timeout: float = 60.0,
        keepalive_interval: float = 5.0,
        keepalive_count_max: int = 3,
        max_connecting: int = MAX_CONNECTING,
        client_keys: Sequence[str] | None = None,
    ) -> None:
        self.known_hosts_path = Path(os.path.expanduser(str(known_hosts)))
        self.accept_new = accept_new
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self.keepalive_interval = keepalive_interval
        self.keepalive_count_max = keepalive_count_max
        self.client_keys = list(client_keys) if client_keys else None
        self.accepted: list[tuple[str, str, str]] = []
        self.max_connecting = max_connecting
        self._connecting = asyncio.Semaphore(max_connecting)
        self._sessions: dict[str, HostSession] = {}

    # -- known_hosts ---------------------------------------------------------------

    def _known_for(self, host: HostLike) -> asyncssh.SSHKnownHosts:
        try:
            return read_known_hosts(self.known_hosts_path)
        except FileError as exc:
            raise ConnectError(host.name, f"known_hosts: {exc}", "known_hosts") from None

    def _recorded_keys(self, host: HostLike, addr: str, port: int) -> list[asyncssh.SSHKey]:
        """Keys known_hosts holds for ``host`` (by its address) or for the IP ``addr``.

        asyncssh reads its ``addr`` argument as an IP address; a name goes in ``host`` only.
        """
        trusted, *_ = self._known_for(host).match(host.address, addr if _is_ip(addr) else "", port)
        return list(trusted)

    def _record_key(self, host: HostLike, port: int, key: asyncssh.SSHKey) -> None:
        address = host.address
        line = f"{known_hosts_pattern(address, port)} {key.export_public_key().decode().strip()}"
        path = self.known_hosts_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:  # a new known_hosts is private, as OpenSSH's ~/.ssh is
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
            except FileExistsError:
                pass
            append_line(path, line)
        except (OSError, FileError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ConnectError(host.name, f"known_hosts: cannot record the new key: {why}", "known_hosts") from None
        self.accepted.append((address, key.get_algorithm(), key.get_fingerprint("sha256")))

    # -- connections ---------------------------------------------------------------

    async def connect(self, host: HostLike) -> asyncssh.SSHClientConnection:
        """Open a new verified connection to ``host``.

        Raises only :class:`SSHError` subclasses (see :class:`ConnectError` ``kind``),
        within about ``connect_timeout`` seconds of getting a handshake slot.
        """
        client = _VerifyingClient(self, host)
        username = host.user or getpass.getuser()
        options: dict[str, Any] = dict(
            port=host.port,
            username=username,
            known_hosts=self._known_for(host),
            client_factory=lambda: client,
            connect_timeout=self.connect_timeout,
            login_timeout=self.connect_timeout,
            keepalive_interval=self.keepalive_interval,
            keepalive_count_max=self.keepalive_count_max,
            config=None,
        )
        identity = getattr(host, "identity", None)
        if identity:
            options["client_keys"] = [os.path.expanduser(identity)]
            options["agent_path"] = None
        elif self.client_keys:
            options["client_keys"] = self.client_keys
        where = f"{host.address}:{host.port}"
        async with self._connecting:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.connect_timeout
            await _resolve(host, self.connect_timeout)
            left = max(deadline - loop.time(), 0.1)
            try:
                return await asyncio.wait_for(asyncssh.connect(host.address, **options), left + 1)
            except asyncssh.HostKeyNotVerifiable:
                if client.rejected is not None:
                    raise client.rejected from None
                raise ConnectError(host.name, f"host key of {where} not verifiable", "login") from None
            except asyncssh.PermissionDenied:
                raise ConnectError(host.name, f"login refused at {where} (user {username})", "login") from None
            except (asyncio.TimeoutError, TimeoutError):
                raise ConnectError(host.name, f"connect to {where} timed out after {self.connect_timeout:g} s",
                                   "timeout") from None
            except socket.gaierror as exc:
                raise _not_resolved(host, exc) from None
            except ConnectionRefusedError:
                raise ConnectError(host.name, f"connection refused at {where} (no SSH server listening)",
                                   "refused") from None
            except ConnectionResetError:
                # a server that drops the handshake may do so with a reset: a changed key type
                # (asyncssh offers only the recorded types) looks like this too
                changed = await self._changed_key_error(host)
                if changed is not None:
                    raise changed from None
                raise ConnectError(host.name, f"cannot connect to {where}: connection reset by the server") from None
            except OSError as exc:
                if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL):
                    raise ConnectError(host.name, f"{where} is unreachable: {exc.strerror}", "unreachable") from None
                if identity and exc.filename and os.path.expanduser(identity) == str(exc.filename):
                    raise ConnectError(host.name, f"identity {identity}: {exc.strerror or exc}", "login") from None
                raise ConnectError(host.name, f"cannot connect to {where}: {exc.strerror or exc}") from None
            except asyncssh.KeyImportError as exc:
                raise ConnectError(host.name, f"identity {identity or '(default keys)'}: {exc}", "login") from None
            except asyncssh.Error as exc:
                # With keys recorded, asyncssh offers only their types; a server whose key
                # changed type then drops the handshake. Tell that apart from other failures.
                changed = await self._changed_key_error(host)
                if changed is not None:
                    raise changed from None
                raise ConnectError(host.name, f"cannot connect to {where}: {exc.reason or exc}") from None
            except ValueError as exc:  # asyncssh's checks of options and keys
                raise ConnectError(host.name, f"cannot connect to {where}: {exc}") from None

    async def _changed_key_error(self, host: HostLike) -> HostKeyError | None:
        """A HostKeyError if the host now offers a key that known_hosts does not hold."""
        recorded = self._recorded_keys(host, host.address, host.port)
        if not recorded:
            return None
        try:
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(host.address, host.port), self.connect_timeout)
        except Exception:
            return None
        if key is None or key in recorded:
            return None
        return HostKeyError(host.name, "changed", key.get_algorithm(), key.get_fingerprint("sha256"),
                            str(self.known_hosts_path))

    async def session(self, host: HostLike) -> "HostSession":
        """The pool's session for ``host``, connecting on first use."""
        existing = self._sessions.get(host.name)
        if existing is not None and not existing.closed:
            return existing
        session = HostSession(self, host, await self.connect(host))
        self._sessions[host.name] = session
        return session

    async def close(self) -> None:
        """Close every connection of the pool."""
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for s in sessions:
            s.close()
        await asyncio.gather(*(s.wait_closed() for s in sessions), return_exceptions=True)

    async def __aenter__(self) -> "SSHPool":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class HostSession:
    """One host's connection: run commands, start long-lived processes."""

    def __init__(self, pool: SSHPool, host: HostLike, conn: asyncssh.SSHClientConnection) -> None:
        self.pool = pool
        self.host = host
        self.conn = conn
        self.reconnects = 0

    @property
    def closed(self) -> bool:
        return self.conn is None or self.conn.is_closed()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    async def wait_closed(self) -> None:
        if self.conn is not None:
            await self.conn.wait_closed()

    async def reconnect(self) -> None:
        """Replace the connection with a fresh one (raises :class:`SSHError`)."""
        self.close()
        self.reconnects += 1
        self.conn = await self.pool.connect(self.host)

    async def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float | None = None,
        check: bool = False,
        retry: bool = True,
    ) -> CommandResult:
        """Run ``argv`` (quoted) and wait for it; reconnects once if the link dropped.

        Raises :class:`CommandTimeout` after ``timeout`` (default: the pool's command
        timeout), :class:`SSHError` when the host is gone or (with ``check``) the command
        exits non-zero.
        """
        command = quote_command(argv, env)
        return await self.run_shell(command, input=input, timeout=timeout, check=check, retry=retry)

    async def run_shell(
        self,
        command: str,
        *,
        input: str | None = None,
        timeout: float | None = None,
        check: bool = False,
        retry: bool = True,
    ) -> CommandResult:
        """Run a command line the caller has already quoted (a fixed script, say).

        Only for text that holds no inventory or label values unquoted; prefer
        :meth:`run`.
        """
        limit = self.pool.command_timeout if timeout is None else timeout
        for attempt in (0, 1):
            if self.closed:
                await self.reconnect()
            process = None
            try:
                process = await self.conn.create_process(command, input=input)
                proc = await asyncio.wait_for(process.wait(check=False), limit)
            except (asyncio.TimeoutError, TimeoutError):
                # Close the channel: sshd closes the command's pipes (EOF, SIGPIPE).
                # Long-running remote work should be started like the probe workers
                # (setsid + pid file) so that it can be killed for certain.
                if process is not None:
                    process.close()
                raise CommandTimeout(self.host.name, f"command timed out after {limit:g} s: {_short(command)}") from None
            except (asyncssh.ConnectionLost, asyncssh.DisconnectError, asyncssh.ChannelOpenError, BrokenPipeError, ConnectionError) as exc:
                if attempt == 0 and retry:
                    self.close()
                    continue
                raise SSHError(self.host.name, f"connection lost: {getattr(exc, 'reason', exc)}") from None
            result = CommandResult(command, proc.exit_status, _text(proc.stdout), _text(proc.stderr))
            if check and not result.ok:
                tail = (result.stderr.strip().splitlines() or [""])[-1]
                raise SSHError(self.host.name, f"{_short(command)} exited {result.exit_status}: {tail}")
            return result
        raise AssertionError("unreachable")

    async def start(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None
    ) -> asyncssh.SSHClientProcess:
        """Start ``argv`` (quoted) as a long-lived process with text stdin/stdout pipes.

        Raises :class:`SSHError` when the host cannot be reached or refuses the channel.
        """
        if self.closed:
            await self.reconnect()
        command = quote_command(argv, env)
        try:
            return await self.conn.create_process(command, encoding="utf-8")
        except (asyncssh.Error, OSError) as exc:
            raise SSHError(self.host.name, f"cannot start {_short(command)}: {getattr(exc, 'reason', None) or exc}") from None

    async def write_file(self, path: str, text: str, *, mode: str = "600") -> None:
        """Write ``text`` to ``path`` on the host (relative paths are under $HOME)."""
        parent = os.path.dirname(path) or "."
        script = (
            f"umask 077 && mkdir -p {shlex.quote(parent)} && cat > {shlex.quote(path)}.tmp.$$ "
            f"&& chmod {shlex.quote(mode)} {shlex.quote(path)}.tmp.$$ && mv -f {shlex.quote(path)}.tmp.$$ {shlex.quote(path)}"
        )
        await self.run_shell(script, input=text, check=True)


def _is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _not_resolved(host: HostLike, exc: socket.gaierror) -> ConnectError:
    why = exc.strerror or str(exc)
    return ConnectError(host.name, f"name does not resolve: {host.address} ({why})", "resolve")


async def _resolve(host: HostLike, timeout: float) -> None:
    """Check that ``host.address`` resolves, within ``timeout`` (ConnectError otherwise).

    ``getaddrinfo`` runs in a daemon thread: one that never returns is abandoned, and
    holds neither the event loop's executor nor the process's exit.
    """
    if _is_ip(host.address):
        return
    loop = asyncio.get_running_loop()
    done: asyncio.Future[BaseException | None] = loop.create_future()

    def settle(outcome: BaseException | None) -> None:
        if not done.done():
            done.set_result(outcome)

    def lookup() -> None:
        outcome: BaseException | None = None
        try:
            socket.getaddrinfo(host.address, host.port, type=socket.SOCK_STREAM)
        except BaseException as exc:  # handed to the loop, raised there
            outcome = exc
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:  # the loop is gone: nobody waits any more
            pass

    threading.Thread(target=lookup, name=f"resolve {host.name}", daemon=True).start()
    try:
        outcome = await asyncio.wait_for(done, timeout)
    except (asyncio.TimeoutError, TimeoutError):
        raise ConnectError(host.name, f"name {host.address} did not resolve within {timeout:g} s",
                           "timeout") from None
    if isinstance(outcome, socket.gaierror):
        raise _not_resolved(host, outcome)
    if isinstance(outcome, (OSError, UnicodeError, ValueError)):
        raise ConnectError(host.name, f"name does not resolve: {host.address} ({outcome})", "resolve")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _short(command: str, limit: int = 80) -> str:
    one = " ".join(command.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."
