"""Compact JSON for protocol files, and strict readers that name the damaged file and the fix."""

from __future__ import annotations

import json

from ..errors import CorruptStateError
from ..storage import Storage
from .hints import START_OVER

MAX_STATE_BYTES = 1 << 30  # manifest, run.json, input selections and tables, a source's line index
MAX_RECORD_FILE_BYTES = 64 << 20  # one commit round's records of one shard
MAX_LEASE_BYTES = 1 << 20  # a lease or claim holder: a few hundred bytes


def read_state(storage: Storage, key: str, what: str, limit: int = MAX_STATE_BYTES) -> bytes:
    """The bytes of a state file, refused before they are read into memory when there are more
    than ``limit`` (shardwright never writes that much there: the file was damaged, edited or
    planted). FileNotFoundError when it is missing."""
    data = storage.read_at_most(key, limit)
    if data is None:
        raise CorruptStateError(
            f"{what} {storage.url}/{key} holds more than {limit:,} bytes, more than shardwright ever writes "
            f"there: it was damaged, edited by hand or put there by someone else; it was not read. {START_OVER}"
        )
    return data


def read_versioned_state(
    storage: Storage, key: str, what: str, limit: int = MAX_LEASE_BYTES
) -> tuple[bytes, str] | None:
    """``storage.read_versioned`` for the compare-and-swap path (leases, the format claim),
    bounded like :func:`read_state`: None when missing, CorruptStateError past ``limit``."""
    got = storage.read_versioned_at_most(key, limit)
    if got is None:
        return None
    data, version = got
    if data is None:
        raise CorruptStateError(
            f"{what} {storage.url}/{key} holds more than {limit:,} bytes, more than shardwright ever writes "
            f"there: it was damaged, edited by hand or put there by someone else; it was not read. {START_OVER}"
        )
    return data, version


def dumps(data: dict) -> bytes:
    # compact: with indent, json falls back to its pure-Python encoder (10x slower per record)
    return json.dumps(data, separators=(",", ":")).encode()


def loads_object(data: bytes, what: str, storage: Storage, key: str) -> dict:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptStateError(
            f"{what} {storage.url}/{key} is not valid JSON ({exc}); it was damaged or edited by hand. "
            f"Restore it, or: {START_OVER}"
        ) from None
    if not isinstance(value, dict):
        raise CorruptStateError(f"{what} {storage.url}/{key} is not a JSON object; " + START_OVER)
    return value


def require_field(record: dict, name: str, kind: type | tuple, what: str, where: str):
    value = record.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CorruptStateError(
            f"{what} {where} has a missing or invalid '{name}' ({value!r}); it was damaged or edited by hand. "
            + START_OVER
        )
    return value
