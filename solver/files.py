"""Guarded file input and safe file output, for every file the project reads or writes.

Reading (:func:`read_text`, :func:`parse_json`, :func:`load_json`):

- regular files only: a FIFO, device, socket or folder is refused with one line before
  it is opened for reading (a FIFO would block forever), and ``O_NONBLOCK`` plus a second
  ``fstat`` close the race of a file swapped in between;
- a size cap per kind of file, UTF-8 text with the offending byte offset named;
- JSON with a nesting-depth cap, no NaN/Infinity, integers of at most ``MAX_INT_DIGITS``
  digits and finite floats, no key twice in one object, each refused with the JSON path
  when known.

Writing (:func:`write_text`, :func:`append_line`, :func:`locked_update`):

- only regular files or new paths; a symlink is written through to its target;
- the existing file's permission bits are kept (new files get ``0666 & ~umask``);
- a rewrite goes through a temporary file in the same folder and an atomic rename, so a
  reader sees the old or the new file, whole; temporary files of writers that died are
  removed by the next write;
- an append is one ``write(2)`` of a whole line on an ``O_APPEND`` descriptor under an
  ``flock``: no temporary copy, no lock file left behind; a line cut short by a writer
  killed mid-write is truncated away by the next append when the caller can tell it is
  torn (run records: an unterminated tail that is not a JSON object);
- an in-place edit holds an ``flock`` on the file across read-modify-write and re-checks
  that the locked inode is still the one at the path, so concurrent edits never lose one.

Errors are :class:`FileError` (a ValueError) with a one-line message naming the file.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

#: Default size cap for an input file (fabrics of thousands of devices fit).
MAX_BYTES = 1 << 30
#: Longest unterminated last line an append reads to tell whether it is torn (a longer
#: one is kept, and the new line starts on a fresh line).
MAX_TAIL = 64 << 20
#: Deepest nesting of JSON arrays and objects accepted anywhere.
MAX_DEPTH = 64
#: Longest integer literal accepted in JSON (2**63 has 19 digits).
MAX_INT_DIGITS = 20

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class FileError(ValueError):
    """A file that cannot be read or written as asked; ``str()`` is one line."""


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _a(word: str) -> str:
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n} bytes"


def read_bytes(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_BYTES,
               error: type[Exception] = FileError) -> bytes:
    """The bytes of the regular file ``path`` (``error`` with one line otherwise)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{path}: no such {what} file") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: is {_kind(st.st_mode)}, expected {_a(what)} file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: is {_kind(st.st_mode)}, expected {_a(what)} file")
        if st.st_size > max_bytes:
            raise error(f"{path}: is {_size(st.st_size)}; {_a(what)} file may be at most {_size(max_bytes)}")
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise error(f"{path}: is over {_size(max_bytes)}, the most {_a(what)} file may be")
    return data


def read_text(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_BYTES,
              error: type[Exception] = FileError) -> str:
    """The UTF-8 text of the regular file ``path`` (see :func:`read_bytes`)."""
    data = read_bytes(path, what, max_bytes=max_bytes, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _ContentError(f"an integer with {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _ContentError(f"number {text[:24]} is out of range")
    return value


def _parse_constant(name: str) -> float:
    raise _ContentError(f"{name} is not a number JSON allows")


class _ContentError(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object, refused when a key comes twice (json keeps the last silently: a
    fabric with ``alpha_ms`` twice was solved on its second matrix)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise _ContentError(f"key {dup[:40]!r} appears twice in one object")
    return out


def json_depth(doc: Any) -> int:
    """Nesting depth of arrays/objects (1 for ``[1, 2]``), without recursion.

    O(containers + elements of lists that hold containers); lists of scalars are skipped
    in one C-level pass.
    """
    deepest, todo = 0, [(doc, 1)]
    scalars = {int, float, str, bool, type(None)}
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict):
            items = value.values()
        elif isinstance(value, list):
            if set(map(type, value)) <= scalars:
                deepest = max(deepest, depth)
                continue
            items = value
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return deepest
        todo.extend((v, depth + 1) for v in items if isinstance(v, (dict, list)))
    return deepest


def parse_json(text: str, source: str, *, error: type[Exception] = FileError) -> Any:
    """Parse JSON text with the caps of the module text; ``error`` names ``source``."""
    try:
        doc = json.loads(text, parse_int=_parse_int, parse_float=_parse_float,
                         parse_constant=_parse_constant, object_pairs_hook=_unique_keys)
    except _ContentError as exc:
        raise error(f"{source}: invalid JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        raise error(f"{source}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise error(f"{source}: invalid JSON: nested more than {MAX_DEPTH} levels deep") from None
    if json_depth(doc) > MAX_DEPTH:
        raise error(f"{source}: invalid JSON: nested more than {MAX_DEPTH} levels deep")
    return doc


def load_json(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_BYTES,
              error: type[Exception] = FileError) -> Any:
    """:func:`read_text` then :func:`parse_json`."""
    return parse_json(read_text(path, what, max_bytes=max_bytes, error=error), str(path), error=error)


# -- writing ---------------------------------------------------------------------------
def write_target(path: str | os.PathLike[str], error: type[Exception] = FileError
                 ) -> tuple[Path, os.stat_result | None]:
    """The file a write to ``path`` would change (a symlink's final target) and its stat
    (None when new); ``error`` (naming ``path``) for a missing folder, a folder, FIFO or
    device."""
    real = Path(os.path.realpath(path))
    try:
        st = os.stat(path)  # followed as the write would: /dev/stdout on a pipe is a FIFO here,
    except OSError:         # where its real path (/proc/self/fd/pipe:[...]) names nothing
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: is {_kind(st.st_mode)}; only a regular file or a new path is written")
    try:
        st = os.stat(real)
    except FileNotFoundError:
        if not real.parent.is_dir():
            raise error(f"{path}: folder {real.parent} does not exist") from None
        return real, None
    except OSError as exc:
        raise error(f"{path}: cannot write: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{path}: is {_kind(st.st_mode)}; only a regular file or a new path is written")
    return real, st


def names_a_folder(text: str) -> bool:
    """Whether a path ends as only a folder's does (``out/``, ``out/.``, ``out/..``, ``.``):
    ``Path`` drops a trailing ``/`` and ``/.``, so a write would go to ``out`` itself."""
    last = text.rstrip("/" + os.sep).rsplit("/", 1)[-1].rsplit(os.sep, 1)[-1]
    return text.endswith(("/", os.sep)) or last in (".", "..")


def shown(path: str | os.PathLike[str]) -> str:
    """``path`` as printed: characters that are not printable (newline, tab, escape
    sequences, bidirectional controls) as Python escapes, so a file name can neither add a
    line to a command's output nor drive the terminal."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def check_not_input(path: str | os.PathLike[str], inputs: Sequence[tuple[str, Any]],
                    error: type[Exception] = FileError) -> None:
    """Refuse to write ``path`` when it is one of ``inputs`` (``(name, path)`` pairs)."""
    real = os.path.realpath(path)
    for name, other in inputs:
        if other is not None and os.path.realpath(other) == real:
            raise error(f"{path}: is also the {name}; writing it would destroy the input")


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _stale_temps(real: Path) -> None:
    """Remove temporaries of earlier writers of ``real`` whose process is gone."""
    prefix = f".{real.name}."
    try:
        names = os.listdir(real.parent)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        pid = name[len(prefix):-4].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            try:
                os.unlink(real.parent / name)
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _replace(real: Path, data: bytes, mode: int) -> None:
    tmp = real.parent / f".{real.name}.{os.getpid()}-{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_text(path: str | os.PathLike[str], text: str, *, inputs: Sequence[tuple[str, Any]] = (),
               mode: int | None = None, error: type[Exception] = FileError) -> Path:
    """Replace (or create) the file ``path`` with ``text`` atomically; returns the target.

    ``inputs``: ``(name, path)`` of the command's inputs that must not be overwritten.
    ``mode``: permission bits for a new file (an existing file keeps its own).
    """
    check_not_input(path, inputs, error)
    real, st = write_target(path, error)
    keep = stat.S_IMODE(st.st_mode) if st is not None else (mode if mode is not None else _umask_mode())
    _stale_temps(real)
    try:
        _replace(real, text.encode("utf-8"), keep)
    except OSError as exc:
        raise error(f"{path}: cannot write: {exc.strerror or exc}") from None
    return real


def append_line(path: str | os.PathLike[str], line: str, *, error: type[Exception] = FileError,
                torn: Callable[[bytes], bool] | None = None) -> None:
    """Append one whole line (``\\n`` added) to ``path`` with one write under an flock.

    A writer killed inside ``write(2)`` can leave part of its line with no ``\\n``. The
    next append, under the lock, finds that unterminated tail: if ``torn(tail)`` says it is
    a cut-short line, the tail is truncated away before the new line is written; otherwise
    (a file that merely lacks its final newline, or no ``torn`` given) the new line starts
    on a fresh line and the tail is kept.
    """
    real, _st = write_target(path, error)
    try:
        fd = os.open(real, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY, 0o666)
    except OSError as exc:
        raise error(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: is {_kind(st.st_mode)}; only a regular file or a new path is written")
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = line.rstrip("\n").encode("utf-8") + b"\n"
        end = os.lseek(fd, 0, os.SEEK_END)
        if end and os.pread(fd, 1, end - 1) != b"\n":
            start = _line_start(fd, end)
            if torn is not None and end - start <= MAX_TAIL and torn(os.pread(fd, end - start, start)):
                os.ftruncate(fd, start)
            else:
                data = b"\n" + data
        written = os.write(fd, data)
        if written != len(data):
            raise error(f"{path}: cannot write: short write ({written} of {len(data)} bytes)")
        os.fsync(fd)
    except OSError as exc:
        raise error(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _line_start(fd: int, end: int, chunk: int = 1 << 16) -> int:
    """Offset just after the last ``\\n`` before ``end`` (0 if none); reads backwards."""
    pos = end
    while pos > 0:
        lo = max(0, pos - chunk)
        k = os.pread(fd, pos - lo, lo).rfind(b"\n")
        if k >= 0:
            return lo + k + 1
        pos = lo
    return 0


@contextmanager
def locked_update(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_BYTES,
                  error: type[Exception] = FileError) -> Iterator[tuple[str, Callable[[str], None]]]:
    """Read-modify-write of an existing file under an exclusive flock.

    Yields ``(text, write)``; ``write(new_text)`` replaces the file atomically while the
    lock is held. A second editor waits, then reads the file as the first one left it.
    """
    real, st = write_target(path, error)
    if st is None:
        raise error(f"{path}: no such {what} file")
    while True:
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError as exc:
            raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.fstat(fd).st_ino == os.stat(real).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # replaced while we waited: lock the file that is there now
    try:
        text = read_text(real, what, max_bytes=max_bytes, error=error)
        mode = stat.S_IMODE(os.fstat(fd).st_mode)

        def write(new_text: str) -> None:
            _stale_temps(real)
            try:
                _replace(real, new_text.encode("utf-8"), mode)
            except OSError as exc:
                raise error(f"{path}: cannot write: {exc.strerror or exc}") from None

        yield text, write
    finally:
        os.close(fd)
