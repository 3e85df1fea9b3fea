"""Chunk files: litdata's byte layout of a chunk, compression, and our chunk names."""

from __future__ import annotations

import struct
from itertools import accumulate

from ..errors import CorruptStateError, SampleFormatError
from .layouts import DecodedItem, RowChunk

_U32_MAX = 0xFFFFFFFF
_U32 = struct.Struct("<I")
_SPAN = struct.Struct("<II")  # an item's start and end offsets


# --- chunks -----------------------------------------------------------------------------------


def build_chunk(items: list[bytes]) -> bytes:
    """``u32 N | u32 offsets[N+1] | items`` with absolute offsets."""
    return b"".join([chunk_header(items), *items])


def chunk_header(items: list[bytes]) -> bytes:
    """``u32 N | u32 offsets[N+1]``: the chunk is this followed by the items."""
    n = len(items)
    offsets = list(accumulate(map(len, items), initial=4 + 4 * (n + 1)))  # C-speed: chunks of 1M small items
    if offsets[-1] > _U32_MAX:
        raise SampleFormatError(
            f"a chunk of {n} items would be {offsets[-1]} bytes; litdata's chunk offsets are uint32, so a "
            "chunk must stay under 4 GiB. Use a smaller chunk_bytes/chunk_size."
        )
    return struct.pack(f"<{n + 2}I", n, *offsets)


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


def decompress(data: bytes | memoryview, compression: str | None) -> bytes:
    if compression is None:
        return bytes(data)
    _zstd_level(compression)
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    try:
        return dctx.decompress(data)
    except zstandard.ZstdError:
        # Frames written in streaming mode carry no content size: read them as a stream.
        try:
            return dctx.stream_reader(bytes(data), read_across_frames=True).read()
        except zstandard.ZstdError as exc:
            raise CorruptStateError(f"zstd data cannot be decompressed: {exc}") from None
