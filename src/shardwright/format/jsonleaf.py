"""litdata 0.2.76's ``json`` leaf: a list or dict stored as one leaf in a compact binary form.

litdata's writer turns a list inside a dict sample into such a leaf; shardwright's writer keeps
lists as pytree containers (readable by every litdata version) and writes ``json`` only for a
:class:`JsonLeaf` it is given. The bytes: one tag byte, then

====  ===========  ============================================================================
0     JSON         ``u32 n`` + n bytes of UTF-8 JSON
1     str list     ``u32 count``, then per string ``u32 n`` + UTF-8
2/3   i64/f64 list ``u32 count`` + little-endian int64/float64 values
4     bool list    ``u32 count`` + one byte each
5     dict         ``u32 count``, then per entry a key (``u32 n`` + UTF-8) and a tagged value
6     records      ``u32 rows, u32 keys``, the keys, then per row per key a typed cell
                   (0x10 None, 0x11 str, 0x12 i64, 0x13 f64, 0x14 bool)
7-11  scalars      str (``u32 n`` + UTF-8), i64, f64, bool (one byte), None (nothing)
====  ===========  ============================================================================

A payload whose first byte is above 0x20 is plain JSON text (what older writers stored).
Integers are little-endian; an empty list is an empty str list.
"""

from __future__ import annotations

import json
import struct
from typing import Any

__all__ = ["JsonLeaf", "dumps", "loads"]

_U32, _I64, _F64 = struct.Struct("<I"), struct.Struct("<q"), struct.Struct("<d")
_TAG_COUNT = struct.Struct("<BI")
(JSON, STRS, I64S, F64S, BOOLS, DICT, RECS, STR, I64, F64, BOOL, NONE) = range(12)
_CELL_NONE, _CELL_STR, _CELL_I64, _CELL_F64, _CELL_BOOL = 0x10, 0x11, 0x12, 0x13, 0x14
_I64_RANGE = range(-(2**63), 2**63)
_MAX_DEPTH = 64


class JsonLeaf:
    """Marks a list or dict to be stored as one ``json`` leaf instead of a pytree container."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonLeaf) and other.value == self.value

    def __repr__(self) -> str:
        return f"JsonLeaf({self.value!r})"


def _text(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _U32.pack(len(raw)) + raw


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value in _I64_RANGE


def _json(value: Any) -> bytes:
    payload = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return bytes([JSON]) + _U32.pack(len(payload)) + payload


def _records(rows: list[dict]) -> bytes | None:
    keys = list(rows[0])
    if not keys or not all(isinstance(key, str) for key in keys):
        return None
    parts = [_TAG_COUNT.pack(RECS, len(rows)), _U32.pack(len(keys)), *(_text(key) for key in keys)]
    for row in rows:
        if set(row) != set(keys):
            return None
        for key in keys:
            cell = row[key]
            if cell is None:
                parts.append(bytes([_CELL_NONE]))
            elif isinstance(cell, bool):
                parts.append(bytes([_CELL_BOOL, int(cell)]))
            elif isinstance(cell, str):
                parts.append(bytes([_CELL_STR]) + _text(cell))
            elif _is_int(cell):
                parts.append(bytes([_CELL_I64]) + _I64.pack(cell))
            elif isinstance(cell, float):
                parts.append(bytes([_CELL_F64]) + _F64.pack(cell))
            else:
                return None
    return b"".join(parts)


def dumps(value: Any) -> bytes:
    """The ``json`` leaf bytes of ``value`` (the same bytes litdata's writer produces)."""
    if value is None:
        return bytes([NONE])
    if isinstance(value, bool):
        return bytes([BOOL, int(value)])
    if isinstance(value, str):
        return bytes([STR]) + _text(value)
    if _is_int(value):
        return bytes([I64]) + _I64.pack(value)
    if isinstance(value, float):
        return bytes([F64]) + _F64.pack(value)
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            return _json(value)
        return b"".join([_TAG_COUNT.pack(DICT, len(value)), *(_text(k) + dumps(v) for k, v in value.items())])
    if not isinstance(value, list):
        return _json(value)
    if not value:
        return _TAG_COUNT.pack(STRS, 0)
    if all(isinstance(item, str) for item in value):
        return _TAG_COUNT.pack(STRS, len(value)) + b"".join(_text(item) for item in value)
    if all(isinstance(item, bool) for item in value):
        return _TAG_COUNT.pack(BOOLS, len(value)) + bytes(int(item) for item in value)
    if all(_is_int(item) for item in value):
        return _TAG_COUNT.pack(I64S, len(value)) + struct.pack(f"<{len(value)}q", *value)
    if all(isinstance(item, float) for item in value):
        return _TAG_COUNT.pack(F64S, len(value)) + struct.pack(f"<{len(value)}d", *value)
    if all(isinstance(item, dict) for item in value):
        records = _records(value)
        if records is not None:
            return records
    return _json(value)


class _Reader:
    """Bounds-checked cursor over a json leaf: a damaged leaf raises ValueError, never reads past it."""

    def __init__(self, raw: bytes) -> None:
        self.raw, self.pos = raw, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.raw):
            raise ValueError("a json leaf is truncated")
        start = self.pos
        self.pos += n
        return self.raw[start : self.pos]

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def text(self) -> str:
        return self.take(self.u32()).decode("utf-8")

    def count(self, width: int) -> int:
        n = self.u32()
        if n * width > len(self.raw) - self.pos:
            raise ValueError(f"a json leaf announces {n} values but is shorter")
        return n


def _value(r: _Reader, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise ValueError(f"a json leaf nests more than {_MAX_DEPTH} deep")
    tag = r.take(1)[0]
    if tag == JSON:
        return json.loads(r.take(r.u32()))
    if tag == STRS:
        return [r.text() for _ in range(r.count(4))]
    if tag in (I64S, F64S):
        n = r.count(8)
        return list(struct.unpack(f"<{n}{'q' if tag == I64S else 'd'}", r.take(8 * n)))
    if tag == BOOLS:
        return [b != 0 for b in r.take(r.count(1))]
    if tag == STR:
        return r.text()
    if tag == I64:
        return _I64.unpack(r.take(8))[0]
    if tag == F64:
        return _F64.unpack(r.take(8))[0]
    if tag == BOOL:
        return r.take(1)[0] != 0
    if tag == NONE:
        return None
    if tag == DICT:
        return {r.text(): _value(r, depth + 1) for _ in range(r.count(5))}
    if tag == RECS:
        rows, keys = r.count(1), r.u32()
        names = [r.text() for _ in range(keys)]
        return [{name: _cell(r) for name in names} for _ in range(rows)]
    raise ValueError(f"a json leaf has unknown tag {tag}")


def _cell(r: _Reader) -> Any:
    kind = r.take(1)[0]
    if kind == _CELL_NONE:
        return None
    if kind == _CELL_STR:
        return r.text()
    if kind == _CELL_I64:
        return _I64.unpack(r.take(8))[0]
    if kind == _CELL_F64:
        return _F64.unpack(r.take(8))[0]
    if kind == _CELL_BOOL:
        return r.take(1)[0] != 0
    raise ValueError(f"a json leaf has unknown record cell tag {kind}")


def loads(raw: bytes | memoryview) -> Any:
    """The value of a ``json`` leaf (litdata's binary form, or plain JSON text)."""
    data = bytes(raw)
    if not data or data[0] > 0x20:
        return json.loads(data)
    reader = _Reader(data)
    return _value(reader, 0)
