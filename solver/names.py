"""Rules for names that come from files: hosts, addresses, users, interfaces, labels.

Names are data, never code or options: every name that reaches a command line is
quoted there, and is refused where it is loaded when it

- is empty or longer than its cap (253 characters for host names and addresses, the
  DNS limit; 63 for region / zone / network-group labels; 32 for user names),
- starts with ``-`` (it would read as an option to ssh or another program),
- (host and node names, addresses) holds ``@``, which ssh reads as ``user@host``,
- (host, node and user names, addresses, interfaces) holds a character outside ASCII:
  a look-alike (Cyrillic ``а`` for Latin ``a``) would show as one host and reach another;
  an international domain name goes in its ASCII form (``xn--...``),
- (labels) holds ``,``, which separates the names of a ``--regions`` list,
- holds whitespace, or a control or unprintable character.

Each check returns the problem as text (None when the value is fine), so callers put
the file, entry and field in front of it.
"""

from __future__ import annotations

import re
from typing import Any

MAX_HOST_CHARS = 253
MAX_LABEL_CHARS = 63
MAX_USER_CHARS = 32
MAX_PATH_CHARS = 4096
#: A network interface name: Linux's IFNAMSIZ (15 characters), no leading ``-``.
INTERFACE_NAME = re.compile(r"[A-Za-z0-9_.:@][A-Za-z0-9_.:@-]{0,14}\Z")


def _chars(value: str) -> str | None:
    for ch in value:
        if ch.isspace():
            return f"no spaces or other whitespace allowed in {value[:80]!r}"
        if not ch.isprintable():
            return f"control or unprintable character {ch!r} in {value[:80]!r}"
    return None


def name_problem(value: Any, kind: str = "host name", max_chars: int = MAX_HOST_CHARS) -> str | None:
    """Why ``value`` is not a valid host name / address / user name, or None."""
    if not isinstance(value, str):
        return f"expected a {kind} (text), got {type(value).__name__}"
    if not value:
        return f"expected a {kind}, got an empty string"
    if len(value) > max_chars:
        return f"a {kind} has at most {max_chars} characters, got {len(value)}"
    if value.startswith("-"):
        return f"a {kind} may not start with '-' (it would read as an option), got {value[:80]!r}"
    if "@" in value and kind != "user name":  # ssh would take what precedes it as the login
        return f"a {kind} may not hold '@' (ssh would read what precedes it as the login user), got {value[:80]!r}"
    if not value.isascii():
        bad = next(ch for ch in value if not ch.isascii())
        return (f"a {kind} must be ASCII (an international domain name in its xn-- form), "
                f"got U+{ord(bad):04X} in {ascii(value[:80])}")
    return _chars(value)


def label_problem(value: Any) -> str | None:
    """Why ``value`` is not a valid region / zone / network-group label (None and "" clear)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        return f"expected text, got {type(value).__name__}"
    if len(value) > MAX_LABEL_CHARS:
        return f"at most {MAX_LABEL_CHARS} characters, got {len(value)}"
    if value.startswith("-"):
        return f"may not start with '-', got {value[:80]!r}"
    if "," in value:  # --regions takes a comma-separated list: such a label could never be chosen
        return f"may not hold ',' (--regions lists are comma-separated), got {value[:80]!r}"
    return _chars(value)


def path_problem(value: Any, kind: str = "path") -> str | None:
    """Why ``value`` is not a usable file path (a python, an identity file), or None."""
    if not isinstance(value, str) or not value:
        return f"expected a {kind}, got {value!r}"
    if len(value) > MAX_PATH_CHARS:
        return f"a {kind} has at most {MAX_PATH_CHARS} characters, got {len(value)}"
    if value.startswith("-"):
        return f"a {kind} may not start with '-', got {value[:80]!r}"
    for ch in value:
        if not ch.isprintable() or ch in "\n\r\t":
            return f"control or unprintable character {ch!r} in {value[:80]!r}"
    return None
