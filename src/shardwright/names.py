"""Inputs named in the user's terms, for status, progress and messages: a ``FileRef`` by its
path, a row of a source by its file and row, anything else by a bounded repr. A name never
carries credentials (``https://user:key@host/...`` loses ``user:key``) and never raises.

Used by every layer that names an input (the engine's failures and status, the service's job
pages), so it imports nothing but ``errors`` and ``secrets``: a ``FileRef`` or a source is
recognised through the modules already imported (an object of a class never imported cannot
be one).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from .errors import short_repr
from .secrets import redact, url_credentials

__all__ = ["MAX_NAME", "display_name", "input_name", "printable", "row_name"]

MAX_NAME = 200  # characters of one input's name (a long path keeps its end: the file name)


def _bounded(text: str, limit: int) -> str:
    """At most ``limit`` characters; a path or URL keeps its tail, where the file name is."""
    if len(text) <= limit:
        return text
    return "..." + text[-(limit - 3) :]


# Control characters (C0, DEL, C1) and the invisible/bidirectional format characters: a file
# name or an input may carry them, and printed raw in `shardwright status`, a log or the
# dashboard they would move the cursor, clear the screen, recolour or reorder the text.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def printable(text: str) -> str:
    """``text`` with every control or invisible format character shown as an escape (``\\x1b``)."""
    return _UNPRINTABLE.sub(
        lambda m: repr(m.group(0))[1:-1] if ord(m.group(0)) < 0x100 else f"\\u{ord(m.group(0)):04x}", text
    )


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def _clean(text: str) -> str:
    """``text`` without the ``user:password@`` part of any URL in it (a repr holds several)."""
    try:
        if "://" not in text or "@" not in text:
            return text
        return _URL.sub(lambda m: redact(m.group(0), url_credentials(m.group(0))), text)
    except Exception:  # a name must never fail what it names
        return text


def _file_ref_class() -> type | None:
    module = sys.modules.get("shardwright.sources.files")
    return getattr(module, "FileRef", None) if module is not None else None


def display_name(obj: object, limit: int = MAX_NAME) -> str:
    """How a person would name ``obj``: a ``FileRef``'s path, a path's text, a URL without
    credentials, otherwise a bounded repr (credentials removed)."""
    try:
        ref = _file_ref_class()
        if ref is not None and isinstance(obj, ref):
            return _bounded(printable(_clean(str(obj.path))), limit)  # type: ignore[attr-defined]
        if isinstance(obj, os.PathLike):
            text = os.fspath(obj)
            return _bounded(printable(_clean(text)) if not isinstance(text, bytes) else repr(obj), limit)
        if isinstance(obj, str) and ("/" in obj or "://" in obj) and "\n" not in obj:
            return _bounded(printable(_clean(obj)), limit)
        return _clean(short_repr(obj, limit))
    except Exception:
        return f"<{type(obj).__name__}>"


def row_name(source: Any, position: int, limit: int = MAX_NAME) -> str | None:
    """``data/part-3.jsonl row 17``: the file and row (0-based, within that file) of input
    ``position`` of a source (``shardwright.sources``), just its path when the file is one
    input (a listing of files); None when ``source`` is not a source or has no such row."""
    units = getattr(source, "units", None)
    if not callable(units) or not 0 <= position < len(source):
        return None
    try:
        unit = next(iter(source[position : position + 1].units()), None)
    except Exception:
        return None
    if unit is None:
        return None
    name = printable(_clean(str(unit.name)))
    whole = getattr(unit, "rows", 1) == 1 and unit.first == 0 and _rows_of(source, unit.name) == 1
    text = name if whole else f"{name} row {unit.first}"
    return _bounded(text, limit)


def _rows_of(source: Any, name: str) -> int | None:
    """Rows of the unit ``name`` in the whole source (a file of one row is named by its path)."""
    try:
        columns = source.unit_columns()
        return columns[3][columns[0].index(name)]
    except Exception:
        return None


def input_name(inputs: Any, position: int, limit: int = MAX_NAME) -> str:
    """The name of input ``position`` of a call's inputs: its file and row for a source, else
    :func:`display_name` of the value; ``input N`` when it cannot be read."""
    named = row_name(inputs, position, limit)
    if named is not None:
        return named
    try:
        value = inputs[position]
    except Exception:
        return f"input {position:,}"
    return display_name(value, limit)
