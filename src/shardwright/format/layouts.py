"""The chunk layouts litdata 0.2.76 writes besides the classic one, read (and the zstd ones written).

Classic: ``u32 N | u32 offsets[N+1] | items`` (see ``format.chunk``). The others:

- **framed zstd** (``compression="zstd"``, ``compression_level="batch"``, litdata's default for
  zstd), a ``.bin`` file::

      b"LDFZ01\\0\\0" | u16 version (1) | u16 flags (0) | u32 N | u32 frame_rows K | u32 n_frames
      u32 offsets[N+1]                 item offsets in the *uncompressed* item bytes, from 0
      n_frames x (u32 first_item, u32 n_items, u64 file_offset, u32 compressed_len, u32 raw_len)
      the zstd frames, each holding the item bytes of K consecutive items

- **sample zstd** (``compression_level="sample"``): the classic layout whose items are each
  one zstd frame.
- **Arrow footer** (when pyarrow is installed and every sample is a dict of plain values): the
  classic header with every offset equal (no item bytes), then an Arrow IPC file of the rows
  (record batches of 256), ``u32 ipc_len`` and ``b"LDARW01\\0"``. Rows are read back as the
  dicts they were; pyarrow is needed to read them.

``unpack_chunk`` turns any of them into the classic layout (or a :class:`RowChunk` of rows).
Every size read is bounded by the file and by the sizes the frames announce.
"""

from __future__ import annotations

import struct
from typing import Any

from ..errors import CorruptStateError
from .inflate import inflate
from .limits import decoded_limit, refuse_decoded
from .optional import require

__all__ = [
    "ARROW_FOOTER_MAGIC",
    "FRAMED_MAGIC",
    "DecodedItem",
    "RowChunk",
    "pack_framed",
    "pack_sample",
    "unpack_chunk",
]

FRAMED_MAGIC = b"LDFZ01\0\0"
ARROW_FOOTER_MAGIC = b"LDARW01\0"
_PREFIX = struct.Struct("<8sHHIII")
_FRAME = struct.Struct("<IIQII")
_LEVELS = ("chunk", "batch", "sample")
_MAX_CHUNK = 1 << 32  # litdata's offsets are uint32: no chunk inflates past 4 GiB


class RowChunk:
    """A chunk whose rows are already values (litdata's Arrow footer): ``len()`` and ``rows``."""

    __slots__ = ("rows",)

    def __init__(self, rows: list[Any]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)


class DecodedItem:
    """An item of a :class:`RowChunk`: its value needs no decoding."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def check_level(level: Any) -> str:
    """litdata's ``compression_level``: None/"" read as "chunk" (whole-file compression)."""
    if level is None or level == "":
        return "chunk"
    if level not in _LEVELS:
        raise ValueError(f"compression_level {level!r} is not one of litdata's: 'chunk', 'batch', 'sample'")
    return str(level)


def _zstd_level(compression: str | None) -> int:
    _, _, level = (compression or "zstd").partition(":")
    return int(level) if level.isdigit() else 4


def _compress(data: bytes, compression: str | None) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=_zstd_level(compression), write_content_size=True).compress(data)


def _inflate(data: bytes | memoryview, size: int, what: str) -> bytes:
    raw = inflate(data, what, size, "what its header announces")
    if len(raw) != size:
        raise CorruptStateError(f"{what} inflates to {len(raw)} bytes, not the {size} its header announces")
    return raw


def _classic(items: list[bytes]) -> bytes:
    n = len(items)
    offsets = [4 + 4 * (n + 1)]
    for item in items:
        offsets.append(offsets[-1] + len(item))
    return struct.pack(f"<{n + 2}I", n, *offsets) + b"".join(items)


def _classic_parts(chunk: bytes | memoryview) -> tuple[int, tuple[int, ...]]:
    n = struct.unpack_from("<I", chunk, 0)[0]
    if 4 + 4 * (n + 1) > len(chunk):
        raise CorruptStateError(f"a chunk announcing {n} items is too short for their offsets")
    return n, struct.unpack_from(f"<{n + 1}I", chunk, 4)


# --- writing ----------------------------------------------------------------------------------


def pack_framed(classic: bytes, compression: str | None, frame_rows: int = 256) -> bytes:
    """litdata's framed-zstd layout of a classic chunk (``compression_level="batch"``)."""
    n, offsets = _classic_parts(classic)
    if n == 0:
        raise ValueError("a framed zstd chunk needs at least one item")
    k = max(1, int(frame_rows))
    logical = [offset - offsets[0] for offset in offsets]
    n_frames = (n + k - 1) // k
    cursor = _PREFIX.size + 4 * (n + 1) + _FRAME.size * n_frames
    table, bodies = [], []
    for frame in range(n_frames):
        first, end = frame * k, min(n, frame * k + k)
        raw = classic[offsets[first] : offsets[end]]
        body = _compress(raw, compression)
        table.append(_FRAME.pack(first, end - first, cursor, len(body), len(raw)))
        bodies.append(body)
        cursor += len(body)
    prefix = _PREFIX.pack(FRAMED_MAGIC, 1, 0, n, k, n_frames) + struct.pack(f"<{n + 1}I", *logical)
    return prefix + b"".join(table) + b"".join(bodies)


def pack_sample(classic: bytes, compression: str | None) -> bytes:
    """The classic layout with each item one zstd frame (``compression_level="sample"``)."""
    n, offsets = _classic_parts(classic)
    return _classic([_compress(classic[offsets[j] : offsets[j + 1]], compression) for j in range(n)])


# --- reading ----------------------------------------------------------------------------------


def _unframe(data: bytes | memoryview) -> bytes:
    if len(data) < _PREFIX.size:
        raise CorruptStateError("a framed zstd chunk is shorter than its header")
    _, version, _flags, n, k, n_frames = _PREFIX.unpack_from(data, 0)
    if version != 1:
        raise CorruptStateError(f"framed zstd chunk version {version} is not 1, the one litdata 0.2.76 writes")
    table_at = _PREFIX.size + 4 * (n + 1)
    if n == 0 or k == 0 or n_frames != (n + k - 1) // k or table_at + _FRAME.size * n_frames > len(data):
        raise CorruptStateError(f"a framed zstd chunk has an invalid header ({n} items, {n_frames} frames of {k})")
    offsets = struct.unpack_from(f"<{n + 1}I", data, _PREFIX.size)
    if offsets[0] != 0 or any(a > b for a, b in zip(offsets, offsets[1:])):
        raise CorruptStateError("a framed zstd chunk has an invalid offset table")
    limit, why = decoded_limit()  # the frame table is the file's word, not the index's
    if offsets[-1] > limit:  # the frames' sizes add up to this (checked per frame below)
        raise refuse_decoded(
            f"a framed zstd chunk of {n} items (its offsets announce {offsets[-1]:,} bytes)", limit, why
        )
    parts = []
    for frame in range(n_frames):
        first, count, at, size, raw_len = _FRAME.unpack_from(data, table_at + frame * _FRAME.size)
        if first != frame * k or count != min(k, n - first) or at + size > len(data):
            raise CorruptStateError(f"frame {frame} of a framed zstd chunk is out of place")
        if raw_len != offsets[first + count] - offsets[first]:
            raise CorruptStateError(f"frame {frame} of a framed zstd chunk disagrees with the offsets")
        parts.append(_inflate(memoryview(data)[at : at + size], raw_len, f"frame {frame} of a framed zstd chunk"))
    body = b"".join(parts)
    header = 4 + 4 * (n + 1)
    return struct.pack(f"<{n + 2}I", n, *(header + offset for offset in offsets)) + body


def _inflate_items(data: bytes | memoryview) -> bytes:
    n, offsets = _classic_parts(data)
    # every item's frame inflates within what is left of one bound for the whole chunk
    header = 4 + 4 * (n + 1)
    limit, why = decoded_limit()  # index.json states no size for them
    limit = min(limit, _MAX_CHUNK - header)  # and the classic chunk they become has uint32 offsets
    items, total = [], 0
    view = memoryview(data)
    for j in range(n):
        if not offsets[j] <= offsets[j + 1] <= len(view):
            raise CorruptStateError(f"item {j} of a sample-zstd chunk spans bytes {offsets[j]}:{offsets[j + 1]}")
        raw = inflate(view[offsets[j] : offsets[j + 1]], f"item {j} of a sample-zstd chunk", limit - total, why)
        total += len(raw)
        items.append(raw)
    return _classic(items)


def _arrow_rows(data: bytes | memoryview, n: int) -> RowChunk:
    (ipc_len,) = struct.unpack_from("<I", data, len(data) - 12)
    start = len(data) - 12 - ipc_len
    if ipc_len == 0 or start < 4 + 4 * (n + 1):
        raise CorruptStateError("a chunk's Arrow footer has an invalid length")
    pa = require("pyarrow", "pyarrow", "litdata chunks that store their rows in an Arrow footer")
    import pyarrow.ipc

    ipc = pa.py_buffer(bytes(memoryview(data)[start : start + ipc_len]))
    limit, why = decoded_limit()
    try:
        if bytes(ipc[:6]) == b"ARROW1":
            file = pyarrow.ipc.open_file(ipc)
            batches: Any = (file.get_batch(i) for i in range(file.num_record_batches))
        else:
            batches = pyarrow.ipc.open_stream(ipc)
        # rows and sizes are checked batch by batch before any is turned into Python values:
        # a few hundred bytes of IPC can announce millions of rows (1.5 KB -> 1 GB of dicts)
        kept, rows_seen, nbytes = [], 0, 0
        for batch in batches:
            rows_seen += batch.num_rows
            if rows_seen > n:
                raise CorruptStateError(f"a chunk's Arrow footer holds more than the {n} rows its header says")
            nbytes += batch.nbytes
            if nbytes > limit:
                raise refuse_decoded("a chunk's Arrow footer", limit, why)
            kept.append(batch)
        if rows_seen != n:
            raise CorruptStateError(f"a chunk's Arrow footer holds {rows_seen} rows but its header {n}")
        rows = [row for batch in kept for row in batch.to_pylist()]
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptStateError(f"a chunk's Arrow footer cannot be read: {exc}") from None
    return RowChunk(rows)


def unpack_chunk(data: bytes | memoryview, compression_level: str | None = None) -> Any:
    """The classic layout of a stored chunk (after any whole-file decompression), or a RowChunk."""
    if bytes(data[:8]) == FRAMED_MAGIC:
        return _unframe(data)
    if len(data) < 8:
        return data
    if check_level(compression_level) == "sample":
        return _inflate_items(data)
    n = struct.unpack_from("<I", data, 0)[0]
    header = 4 + 4 * (n + 1)
    if n and len(data) >= header + 12 and bytes(data[-8:]) == ARROW_FOOTER_MAGIC:
        first, last = struct.unpack_from("<I", data, 4)[0], struct.unpack_from("<I", data, header - 4)[0]
        if first == last == header:
            return _arrow_rows(data, n)
    return data
