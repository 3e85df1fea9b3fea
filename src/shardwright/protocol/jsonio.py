"""Compact JSON for protocol files, and strict readers that name the damaged file and the fix."""

from __future__ import annotations

import json

from ..errors import CorruptStateError
from ..storage import Storage
from .hints import START_OVER, naming_output

MAX_STATE_BYTES = 1 << 30  # manifest, run.json, input selections and tables, a source's line index
MAX_RECORD_FILE_BYTES = 64 << 20  # one commit round's records of one shard
MAX_LEASE_BYTES = 1 << 20  # a lease or claim holder: a few hundred bytes


def too_large(storage: Storage, key: str, what: str, limit: int, fix: str | None = None) -> CorruptStateError:
    """The one line for a state file over its bound: ``fix`` is the least drastic safe way out
    for that file (by default, abandoning the run, named with the output's own path)."""
    return CorruptStateError(
        f"{what} {storage.url}/{key} holds more than {limit:,} bytes, more than shardwright ever writes "
        f"there: it was damaged, edited by hand or put there by someone else; it was not read. "
        + (fix if fix is not None else naming_output(START_OVER, storage.url))
    )


def read_state(storage: Storage, key: str, what: str, limit: int = MAX_STATE_BYTES, fix: str | None = None) -> bytes:
    """The bytes of a state file, refused before they are read into memory when there are more
    than ``limit`` (shardwright never writes that much there: the file was damaged, edited or
    planted; ``fix`` says what to do, see :func:`too_large`). FileNotFoundError when it is missing."""
    data = storage.read_at_most(key, limit)
    if data is None:
        raise too_large(storage, key, what, limit, fix)
    return data


def read_versioned_state(
    storage: Storage, key: str, what: str, limit: int = MAX_LEASE_BYTES, fix: str | None = None
) -> tuple[bytes, str] | None:
    """``storage.read_versioned`` for the compare-and-swap path (leases, the format claim),
    bounded like :func:`read_state`: None when missing, CorruptStateError past ``limit``."""
    got = storage.read_versioned_at_most(key, limit)
    if got is None:
        return None
    data, version = got
    if data is None:
        raise too_large(storage, key, what, limit, fix)
    return data, version


def dumps(data: dict) -> bytes:
    # compact: with indent, json falls back to its pure-Python encoder (10x slower per record)
    return json.dumps(data, separators=(",", ":")).encode()


def loads_object(data: bytes, what: str, storage: Storage, key: str) -> dict:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # (nested deeper than json goes)
        raise CorruptStateError(
            f"{what} {storage.url}/{key} is not valid JSON ({exc}); it was damaged or edited by hand. "
            f"Restore it, or: {naming_output(START_OVER, storage.url)}"
        ) from None
    if not isinstance(value, dict):
        raise CorruptStateError(
            f"{what} {storage.url}/{key} is not a JSON object; " + naming_output(START_OVER, storage.url)
        )
    return value


def json_kind(value: object) -> str:
    """What a JSON value is, for a message: ``a string``, ``a whole number``, ``true or false``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    for kind, words in _KIND_WORDS:
        if isinstance(value, kind):
            return words
    return type(value).__name__


_KIND_WORDS: tuple[tuple[type, str], ...] = (
    (int, "a whole number"),
    (float, "a number with a fraction"),
    (str, "a string"),
    (list, "a list"),
    (dict, "an object"),
)
_WANTED_WORDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string", list: "a list"}


def has_kind(value: object, kind: type | tuple) -> bool:
    """Strictly: ``True`` is not a whole number (bool is an int to isinstance), and ``(int,
    float)`` (a number) is neither true nor false."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, kinds)


def field_problem(record: dict, name: str, kind: type | tuple) -> str | None:
    """Why ``record[name]`` is not of ``kind``, for a message (None: it is): ``has no 'x'``,
    ``has 'protocol' '7', a string where a whole number is required``."""
    if name not in record:
        return f"has no {name!r}"
    value = record[name]
    if has_kind(value, kind):
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    wanted = "a number" if set(kinds) == {int, float} else _WANTED_WORDS.get(kinds[0], "an object")
    return f"has {name!r} {value!r:.40}, {json_kind(value)} where {wanted} is required"


def require_field(record: dict, name: str, kind: type | tuple, what: str, where: str):
    problem = field_problem(record, name, kind)
    if problem is not None:
        raise CorruptStateError(f"{what} {where} {problem}; it was damaged or edited by hand. " + START_OVER)
    return record[name]
