"""Reading a rank map given by the operator: one reader for score, launch, export, validate.

Accepted: ``rank_map=(...)`` (solve's text output; one at the start of a line is taken
before one elsewhere, and two different ones are refused), a JSON list of
ranks, solve's ``--json`` document, or plain ``"0,1,2,..."``; each either inline or in a
file. A ``--json`` document that selected a subset of the fabric's devices
(``selection.rows``) applies to those rows: :func:`solution_for` narrows the fabric.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from geoconsole.errors import InputError

_RANK_MAP_TEXT = re.compile(r"rank_map=\(([^)]*)\)")
_RANK_MAP_LINE = re.compile(r"^[ \t]*rank_map=\(([^)]*)\)", re.MULTILINE)
_INLINE = re.compile(r"[\d,\s]+")
_LISTLIKE = re.compile(r"[\w,\s.+-]+")
#: Largest rank map accepted (a fabric this large would not fit in memory anyway).
MAX_RANKS = 1_000_000


def rank_map_text(value: str) -> tuple[str, str]:
    """``(text, source)`` of a rank map value: the value itself, or the file it names."""
    if not value.strip():  # Path("") is ".": "is a directory" named a path never given
        raise InputError("--rank-map: empty; give rank_map=(...), '0,1,..' or a file")
    # inline: digits and commas, a rank_map=(...), a JSON list, or something list-like that
    # is not a file (-1,0,1 / 0,1.5): the parser names what is wrong with it
    listlike = "," in value and _LISTLIKE.fullmatch(value) and not Path(value).exists()
    if _INLINE.fullmatch(value) or "rank_map=" in value or value.lstrip().startswith("[") or listlike:
        return value, "rank map"
    from solver.files import read_text

    return read_text(Path(value), "rank map"), value


def _ranks(items: list[Any], source: str) -> list[int]:
    if len(items) > MAX_RANKS:
        raise InputError(f"{source}: {len(items)} ranks; at most {MAX_RANKS}")
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in items):
        raise InputError(f"{source}: rank_map: expected whole numbers")
    return items


def parse_rank_map(text: str, source: str) -> tuple[list[int], Any]:
    """``(ranks, document or None)`` from any accepted form (InputError naming ``source``)."""
    text = text.strip()
    # solve prints its rank_map=(...) at the start of a line: those come first
    at_line_start = _RANK_MAP_LINE.search(text)
    found = at_line_start or _RANK_MAP_TEXT.search(text)
    expected = f"{source}: expected rank_map=(...), a JSON list of ranks, or solve --json output"
    # every rank_map=(...) of the lines taken (one that starts a line may have another after it)
    lines = [x for x in text.splitlines() if _RANK_MAP_LINE.match(x)] if at_line_start else [text]
    maps = {" ".join(m.group(1).replace(",", " ").split()) for x in lines for m in _RANK_MAP_TEXT.finditer(x)}
    if len(maps) > 1:  # which one was meant? (solve prints one)
        raise InputError(f"{source}: holds {len(maps)} different rank_map=(...); keep the one to use")
    if found:
        parts = found.group(1).replace(",", " ").split()
        if not all(p.isascii() and p.isdigit() and len(p) <= 9 for p in parts):
            raise InputError(expected)
        return _ranks([int(p) for p in parts], source), None
    if text.startswith(("[", "{")):
        from solver.files import parse_json

        doc = parse_json(text, source)
        ranks = doc.get("rank_map") if isinstance(doc, dict) else doc
        if not isinstance(ranks, list):
            raise InputError(expected)
        return _ranks(ranks, f"{source}: rank_map" if isinstance(doc, dict) else source), doc
    parts = text.replace(",", " ").split()
    if not parts or not all(p.isascii() and p.isdigit() and len(p) <= 9 for p in parts):
        raise InputError(expected)
    return _ranks([int(p) for p in parts], source), None


def selected_rows(doc: Any, source: str, n_fabric: int, n_ranks: int) -> list[int] | None:
    """The ``selection.rows`` of a solve --json document, validated, or None."""
    if not isinstance(doc, dict) or doc.get("selection") is None:
        return None
    selection = doc["selection"]
    rows = selection.get("rows") if isinstance(selection, dict) else None
    where = f"{source}: selection.rows"
    if not isinstance(rows, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in rows):
        raise InputError(f"{where}: expected a list of row numbers")
    if len(rows) != n_ranks:
        raise InputError(f"{where}: {len(rows)} rows for {n_ranks} ranks")
    bad = [r for r in rows if not 0 <= r < n_fabric]
    if bad:
        raise InputError(f"{where}: row {bad[0]} is outside the fabric's {n_fabric} devices")
    if len(set(rows)) != len(rows):
        seen: set[int] = set()
        twice = next(r for r in rows if r in seen or seen.add(r))
        raise InputError(f"{where}: row {twice} appears twice")
    return rows


def solution_for(value: str, fabric):
    """``(fabric, ranks)``: the rank map ``value`` names, on the rows it applies to."""
    fabric, ranks, _doc = solution_with_document(value, fabric)
    return fabric, ranks


def solution_with_document(value: str, fabric):
    """``(fabric, ranks, document or None)``: :func:`solution_for` and the solve --json
    document the rank map came in, if any (read once)."""
    text, source = rank_map_text(value)
    ranks, doc = parse_rank_map(text, source)
    if len(ranks) != fabric.n:
        rows = selected_rows(doc, source, fabric.n, len(ranks))
        if rows is not None:
            fabric = fabric.subset(rows)
    if len(ranks) != fabric.n:
        raise InputError(f"{source}: {len(ranks)} ranks for {fabric.n} devices in the fabric")
    other = _other_devices(doc, fabric)
    if other is not None:
        raise InputError(f"{source}: solved on other devices than this fabric's ({other}); "
                         "solve again on this fabric")
    return fabric, ranks, doc


def solved_shape(doc: Any, source: str = "rank map") -> tuple[int, int] | None:
    """``(D_PP, D_DP)`` of the workload a solve --json document was solved for, or None
    (no document, or one without a ``workload``). A ``workload`` that is there but
    holds no whole D_PP and D_DP of at least 1 is an InputError naming the field: scored
    under a guessed shape, its ranks would mean other stage groups."""
    if not isinstance(doc, dict) or "workload" not in doc:
        return None
    w = doc["workload"]
    if not isinstance(w, dict):
        raise InputError(f"{source}: workload: expected an object with d_pp and d_dp")
    for key in ("d_pp", "d_dp"):
        x = w.get(key)
        if not (isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_RANKS):
            raise InputError(f"{source}: workload.{key}: expected a whole number of at least 1, got {str(x)[:40]}")
    return w["d_pp"], w["d_dp"]


def shape_for(doc: Any, source: str, pp: int | None, dp: int | None, *,
              flags: bool = True) -> tuple[int | None, int | None]:
    """``(pp, dp)`` to score or run a rank map with: the shape its solve --json document
    was solved for when neither flag is given; the flags when they agree with it (or
    there is no document). A rank's stage and replica follow from the shape, so a map
    solved for one shape means other stage groups under another: InputError, naming the
    ``--pp``/``--dp`` flags or (``flags=False``: the console) the shape asked for."""
    shape = solved_shape(doc, source)
    if shape is None:
        return pp, dp
    if pp is None and dp is None:
        return shape
    if (pp or shape[0], dp or shape[1]) != shape:
        if flags:
            given = " ".join(f"{flag} {v}" for flag, v in (("--pp", pp), ("--dp", dp)) if v is not None)
            hint = "leave out --pp and --dp to use the solved one"
        else:
            given, hint = f"D_PP {pp} x D_DP {dp}", "solve for that shape to compare with it"
        raise InputError(f"{given}: the rank map of {source} was solved for D_PP {shape[0]} x D_DP {shape[1]}; "
                         f"its ranks mean other stage groups under another shape ({hint})")
    return pp, dp


def _other_devices(doc: Any, fabric) -> str | None:
    """Where a solve --json document's stage groups name other devices than ``fabric``'s
    rows (a document from another fabric), or None. Documents without stage groups
    (other JSON) are not checked."""
    score = doc.get("score") if isinstance(doc, dict) else None
    groups = score.get("stage_groups") if isinstance(score, dict) else None
    if not isinstance(groups, list):
        return None
    for g in groups:
        rows, names = (g.get("devices"), g.get("names")) if isinstance(g, dict) else (None, None)
        if not isinstance(rows, list) or not isinstance(names, list) or len(rows) != len(names):
            continue
        for row, name in zip(rows, names):
            if isinstance(row, int) and 0 <= row < fabric.n and fabric.device_name(row) != name:
                return f"row {row} is {fabric.device_name(row)!r} here, {str(name)[:80]!r} there"
    return None


def read_rank_map_file(path: str, n: int, shape: tuple[int, int] | None = None) -> list[int]:
    """The rank map in the file ``path`` (any accepted form), a permutation of ``0..n-1``;
    with ``shape`` (D_PP, D_DP), a solve --json document solved for another shape is
    refused, as ``score`` refuses it (:func:`shape_for`)."""
    from solver.files import read_text, shown

    ranks, doc = parse_rank_map(read_text(Path(path), "rank map"), str(path))
    if shape is not None:
        shape_for(doc, shown(path), *shape, flags=False)
    if sorted(ranks) != list(range(n)):
        raise InputError(f"{path}: rank_map: must be a permutation of 0..{n - 1} ({len(ranks)} entries)")
    return ranks
