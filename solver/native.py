"""The compiled kernels (solver/tempering.c, matching.c, path.c, redeal.c): built on first use, else numpy.

``kernel()`` returns the loaded ``pt_run`` function, or None when it cannot be had; the
search then steps its chains in numpy (solver.tempering): about 20x slower, and without
the kernel's smoothing term, so its results differ from the kernel's. ``matcher()``
returns the compiled bottleneck matching (``bottleneck_match``) from the same library,
or None; solver.matching then runs its threshold search in Python. Both give the same
bottleneck value; where several matchings reach it they may pick different ones.
``held_karp()`` returns the compiled Held-Karp path (``held_karp``, the same path as the
numpy version), or None; ``swap_scorer()`` the local search's batch scoring
(``swap_scores`` in solver/tempering.c, sharing the ladder's incremental helpers), or None;
``redealer()`` a rebalanced segment's groups and Comm (``redeal_score``, solver/redeal.c,
the same greedy as solver.rebalance's Python), or None.

Build: ``$CC`` (default ``gcc``) ``-O3 -shared -fPIC`` into a per-user cache folder,
``$XDG_CACHE_HOME/geoconsole`` (default ``~/.cache/geoconsole``), as
``kernels-<hash of the sources, the compiler command and the platform>.so``. The
folder is created mode 0700; a library is loaded only from a folder and a file owned by
this user and not writable by group or others (the file is checked on the descriptor
that is loaded, opened without following links), so nobody else can swap the code this
process runs. The
build writes a temporary file and renames it into place, so concurrent first uses
(worker processes) never load a half-written library. ``GEOCONSOLE_NATIVE=0`` turns all of it off
(tempering, matchings, Held-Karp, the batch scoring and the redeals go back to numpy and
Python).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

SOURCES = tuple(Path(__file__).with_name(name) for name in ("tempering.c", "matching.c", "path.c", "redeal.c"))
CFLAGS = ("-O3", "-shared", "-fPIC", "-std=c99", "-lm")
BUILD_TIMEOUT_S = 60

_loaded: dict[str, object] = {}
_LOAD_LOCK = threading.Lock()


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "geoconsole"


def _private(path: Path, is_dir: bool) -> bool:
    st = path.lstat()
    kind_ok = stat.S_ISDIR(st.st_mode) if is_dir else stat.S_ISREG(st.st_mode)
    return kind_ok and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _build(target: Path, cc: list[str]) -> None:
    fd, tmp = tempfile.mkstemp(prefix=".kernels-", suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        subprocess.run([*cc, *CFLAGS[:4], "-o", tmp, *map(str, SOURCES), CFLAGS[4]], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=BUILD_TIMEOUT_S)
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _load():
    if os.environ.get("GEOCONSOLE_NATIVE", "1") == "0":
        return None, "turned off by GEOCONSOLE_NATIVE=0"
    cc = shlex.split(os.environ.get("CC") or "gcc")
    try:
        text = b"".join(source.read_bytes() for source in SOURCES)
        host = " ".join([*cc, *CFLAGS, sys.platform, platform.machine()])
        digest = hashlib.sha256(text + host.encode()).hexdigest()[:16]
        folder = cache_dir()
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(folder, True):
            return None, f"{folder}: not a private folder of this user"
        target = folder / f"kernels-{digest}.so"
        if not os.path.lexists(target):
            _build(target, cc)
        # check the file that is opened, not the name: open it without following a
        # link, check that descriptor, and load through it
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            st = os.fstat(fd)
            if not (stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid()
                    and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
                return None, f"{target}: not a private file of this user"
            by_fd = f"/proc/self/fd/{fd}"
            lib = ctypes.CDLL(by_fd if os.path.exists(by_fd) else str(target))
        finally:
            os.close(fd)
    except subprocess.CalledProcessError as exc:
        last = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
        return None, f"could not build the compiled kernels ({' '.join(cc)}: {last[0] if last else exc})"
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return None, f"could not build or load the compiled kernels ({exc})"
    loaded = {}
    for key, (name, argtypes, restype) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, restype
        loaded[key] = fn
    return loaded, ""


_P, _I, _D, _I64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_double, ctypes.c_int64
#: What the library exports: key -> (C name, argument types, result type).
_SIGNATURES = {
    "fn": ("pt_run", [_I, _I, _I, _P, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I64, _I64, _I, _P, _P,
                      _P, _P, _P, _P], _I),
    "match": ("bottleneck_match", [_I, _P, _P], _D),
    "path": ("held_karp", [_I, _P, _P], _D),
    "scores": ("swap_scores", [_I, _I, _P, _P, _P, _I64, _P, _P, _P, _P], _I),
    "redeal": ("redeal_score", [_I, _P, _P, _P, _I, _I, _I, _P, _P, _P, _I, _I, _P, _P], _D),
}


def _compiled(key: str):
    """The compiled function ``key`` of _SIGNATURES (the library is loaded once per
    process, under a lock: the solver's pool-start thread and the search's own thread may
    both ask first; "why" is stored last, so a reader that sees it finds every key), or
    None."""
    if "why" not in _loaded:
        with _LOAD_LOCK:
            if "why" not in _loaded:
                functions, why = _load()
                _loaded.update(functions or dict.fromkeys(_SIGNATURES))
                _loaded["why"] = why
    return _loaded[key]


def kernel():
    """The compiled ``pt_run`` (loaded once per process), or None."""
    return _compiled("fn")


def matcher():
    """The compiled ``bottleneck_match(n, cost, match)``, or None."""
    return _compiled("match")


def held_karp():
    """The compiled ``held_karp(k, cost, path)``, or None."""
    return _compiled("path")


def swap_scorer():
    """The compiled ``swap_scores`` (solver.localsearch's batch), or None."""
    return _compiled("scores")


def redealer():
    """The compiled ``redeal_score`` (solver.rebalance's segment candidates), or None."""
    return _compiled("redeal")


def disable(why: str) -> None:
    """Do without the kernels in this process (a worker whose parent could not build them)."""
    _loaded.update(dict.fromkeys(_SIGNATURES), why=why)


def why_not() -> str:
    """Why ``kernel()`` is None ('' when it is not)."""
    kernel()
    return str(_loaded["why"])
