"""Chunk files: litdata's byte layout of a chunk, compression, and our chunk names."""

from __future__ import annotations

import operator
import struct
from itertools import accumulate

import numpy as np

from ..errors import CorruptStateError, SampleFormatError
from .inflate import inflate
from .layouts import DecodedItem, RowChunk
from .limits import decoded_limit
from .packed import PackedItems, packed_header

_U32_MAX = 0xFFFFFFFF
_U32 = struct.Struct("<I")
_SPAN = struct.Struct("<II")  # an item's start and end offsets


# --- chunks -----------------------------------------------------------------------------------


def build_chunk(items: list[bytes] | PackedItems) -> bytes:
    """``u32 N | u32 offsets[N+1] | items`` with absolute offsets."""
    if type(items) is PackedItems:  # the same bytes, joined from its blocks (format/packed.py)
        return b"".join([chunk_header(items), *items.blocks])
    return b"".join([chunk_header(items), *items])


def chunk_header(items: list[bytes] | PackedItems) -> bytes:
    """``u32 N | u32 offsets[N+1]``: the chunk is this followed by the items."""
    n = len(items)
    if type(items) is PackedItems:
        _check_offsets(n, 4 + 4 * (n + 1) + items.nbytes)
        return packed_header(items)
    offsets = list(accumulate(map(len, items), initial=4 + 4 * (n + 1)))  # C-speed: chunks of 1M small items
    _check_offsets(n, offsets[-1])
    return struct.pack(f"<{n + 2}I", n, *offsets)


def _check_offsets(n: int, size: int) -> None:
    if size > _U32_MAX:
        raise SampleFormatError(
            f"a chunk of {n} items would be {size} bytes; litdata's chunk offsets are uint32, so a "
            "chunk must stay under 4 GiB. Use a smaller chunk_bytes/chunk_size."
        )


def chunk_num_items(chunk: bytes | memoryview | RowChunk) -> int:
    if isinstance(chunk, RowChunk):
        return len(chunk)
    if len(chunk) < 8:
        raise CorruptStateError(f"chunk is {len(chunk)} bytes, too short for a chunk header")
    return _U32.unpack_from(chunk, 0)[0]


def chunk_item(chunk: bytes | memoryview | RowChunk, j: int) -> memoryview | DecodedItem:
    """Zero-copy view of item ``j`` (a DecodedItem for a RowChunk); raises IndexError/CorruptStateError."""
    if isinstance(chunk, RowChunk):
        if not 0 <= j < len(chunk):
            raise IndexError(f"item {j} of a chunk of {len(chunk)} items")
        return DecodedItem(chunk.rows[j])
    size = len(chunk)  # chunk_num_items's checks, inline: this runs once per item read
    if size < 8:
        raise CorruptStateError(f"chunk is {size} bytes, too short for a chunk header")
    n = _U32.unpack_from(chunk, 0)[0]
    if not 0 <= j < n:
        raise IndexError(f"item {j} of a chunk of {n} items")
    start, end = _SPAN.unpack_from(chunk, 4 + 4 * j)
    if not start <= end <= size:
        raise CorruptStateError(f"item {j} spans bytes {start}:{end} of a {size}-byte chunk")
    return memoryview(chunk)[start:end]


def chunk_spans(chunk: bytes | memoryview | RowChunk) -> tuple[memoryview, tuple[int, ...]] | None:
    """The chunk as a memoryview and its ``N + 1`` item offsets, checked once for the whole chunk
    (in order, inside it: what :func:`chunk_item` checks of each item) so that a reader of many
    of its items slices item ``j`` as ``view[offsets[j]:offsets[j + 1]]`` with no check each.
    None for a RowChunk (its items are values: use chunk_item). Raises CorruptStateError."""
    if isinstance(chunk, RowChunk):
        return None
    view = chunk if isinstance(chunk, memoryview) else memoryview(chunk)
    return view, chunk_offsets(view, len(view))


def chunk_offsets(head: bytes | memoryview, size: int) -> tuple[int, ...]:
    """The ``N + 1`` item offsets of a chunk of ``size`` bytes beginning with ``head`` (at least
    its count and offset table), checked: in order, and inside the chunk. Raises CorruptStateError."""
    if size < 8 or len(head) < 8:
        raise CorruptStateError(f"chunk is {size} bytes, too short for a chunk header")
    n = _U32.unpack_from(head, 0)[0]
    if 4 + 4 * (n + 1) > min(size, len(head)):
        raise CorruptStateError(f"chunk is {size} bytes, too short for the offsets of its {n} items")
    offsets = struct.unpack_from(f"<{n + 1}I", head, 4)
    if n > 64:  # one vectorised pass (chunks of 100k small items); a short loop is cheaper below
        table = np.frombuffer(head, dtype="<u4", count=n + 1, offset=4)
        ordered = bool((table[1:] >= table[:-1]).all())
    else:
        ordered = all(map(operator.le, offsets, offsets[1:]))
    if not ordered or offsets[-1] > size:
        j = next((j for j in range(n) if not offsets[j] <= offsets[j + 1] <= size), n)
        raise CorruptStateError(f"item {j} spans bytes {offsets[j]}:{offsets[min(j + 1, n)]} of a {size}-byte chunk")
    return offsets


# --- compression ------------------------------------------------------------------------------


def _zstd_level(compression: str) -> int:
    # "zstd" is level 4, as litdata's "zstd"; "zstd:N" picks level N (only the writer cares).
    name, _, level = compression.partition(":")
    if name != "zstd" or (level and not level.isdigit()):
        raise ValueError(f"compression {compression!r} is not supported: use None or 'zstd' (or 'zstd:LEVEL')")
    return int(level) if level else 4


def compress(data: bytes, compression: str | None) -> bytes:
    """Whole-file compression of a chunk."""
    if compression is None:
        return data
    import zstandard

    # One-shot compress writes the content size into the frame header: python-zstd's
    # decompress (what litdata 0.2.58 uses) refuses frames without it.
    return zstandard.ZstdCompressor(level=_zstd_level(compression), write_content_size=True).compress(data)


def decompress(
    data: bytes | memoryview, compression: str | None, bound: int | None = None, stated: str = "index.json says"
) -> bytes:
    """Whole-file decompression of a chunk, never past ``bound`` bytes (what the index says the
    chunk holds: ``stated`` says so) nor past :func:`~shardwright.format.limits.max_decoded_bytes`.
    Raises CorruptStateError before allocating more."""
    if compression is None:
        return bytes(data)
    _zstd_level(compression)
    limit, why = decoded_limit(bound, stated)
    return inflate(data, "the zstd chunk", limit, why)
