"""Compact JSON for protocol files, and strict readers that name the damaged file and the fix."""

from __future__ import annotations

import json

from ..errors import CorruptStateError
from ..storage import Storage


def dumps(data: dict) -> bytes:
    # compact: with indent, json falls back to its pure-Python encoder (10x slower per record)
    return json.dumps(data, separators=(",", ":")).encode()


def loads_object(data: bytes, what: str, storage: Storage, key: str) -> dict:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptStateError(
            f"{what} {storage.url}/{key} is not valid JSON ({exc}); it was damaged or edited by hand. "
            "Restore it, or rerun with mode='overwrite' to start over"
        ) from None
    if not isinstance(value, dict):
        raise CorruptStateError(f"{what} {storage.url}/{key} is not a JSON object; rerun with mode='overwrite'")
    return value


def require_field(record: dict, name: str, kind: type | tuple, what: str, where: str):
    value = record.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise CorruptStateError(
            f"{what} {where} has a missing or invalid '{name}' ({value!r}); it was damaged or edited by hand. "
            "Delete the output's .shardwright/ folder and rerun with mode='overwrite' to start over"
        )
    return value
