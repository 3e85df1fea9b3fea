"""Checks of what is read from disk: chunk files against their index entry, and the
messages for a dataset whose optimize run has not finished."""

from __future__ import annotations

import mmap

from ..errors import CorruptStateError
from ..format import ChunkEntry, RowChunk, chunk_num_items, decompress, unpack_chunk
from ..protocol.layout import STATE_DIR

__all__ = [
    "CHUNK_FIX",
    "check_chunk",
    "check_exact_size",
    "check_stored_size",
    "decompress_chunk",
    "incomplete_message",
    "release_buffer",
    "unpack_checked",
]

_MAX_CHUNK = 1 << 32  # litdata's offsets are uint32: no chunk decompresses to more
CHUNK_FIX = "restore it or rerun optimize with mode='overwrite'"  # what to do about a damaged chunk file


def release_buffer(buffer: bytes | memoryview) -> None:
    if isinstance(buffer, memoryview):
        base = buffer.obj
        try:
            buffer.release()
            if isinstance(base, mmap.mmap):
                base.close()
        except BufferError:
            # An item view is still alive somewhere: the mmap closes when it is collected.
            pass


def incomplete_message(where: str, pending: int | str, damage: str | None = None) -> str:
    if damage is not None:  # a rerun cannot finish it: name the damaged file and the fix at once
        return f"{where} has no index.json, and the optimize run writing it cannot be finished: {damage}"
    return (
        f"{where} has no index.json: the optimize run writing it has not finished "
        f"({pending} checkpointed chunks found under {STATE_DIR}/); rerun the same optimize call to finish it"
    )


def check_exact_size(data: bytes | memoryview, entry: ChunkEntry, name: str, verb: str) -> None:
    """A fetched chunk has exactly the size index.json gives (litdata < 0.2.60 left the
    header of ``4 * (n + 2)`` bytes out of ``chunk_bytes``: accepted too)."""
    size = len(data)
    if size == entry.chunk_bytes or size == entry.chunk_bytes + 4 * (entry.chunk_size + 2):
        return
    raise CorruptStateError(
        f"chunk file {name} {verb} {size} bytes but index.json says {entry.chunk_bytes}: it is truncated "
        "or was replaced; restore it or rerun optimize with mode='overwrite'"
    )


def check_stored_size(size: int, entry: ChunkEntry, name: str) -> None:
    """An uncompressed chunk file has the size its index entry gives, checked from the file's
    size before its bytes are hashed or read: a chunk grown or cut short was blamed on its
    checksum ("bit rot, a bad copy"), after hashing all of it (4 GiB under a 148-byte entry)."""
    if size == entry.chunk_bytes or size == entry.chunk_bytes + 4 * (entry.chunk_size + 2):
        return
    verb = "truncated" if size < entry.chunk_bytes else "longer than the index says"
    raise CorruptStateError(
        f"chunk file {name} is {size:,} bytes but index.json says {entry.chunk_bytes:,}: {verb}; {CHUNK_FIX}"
    )


def check_chunk(
    data: bytes | memoryview | RowChunk,
    entry: ChunkEntry,
    name: str,
    *,
    stored_size: int | None = None,
    head_of: int | None = None,
) -> None:
    """The chunk file agrees with its index entry; a clear error otherwise. ``stored_size``: the
    size of the file's bytes when ``data`` was unpacked from another layout (format.layouts).
    ``head_of``: ``data`` is only the first bytes (count and offset table) of a chunk of this
    many bytes, read from its file (reader.itemfile)."""
    fix = CHUNK_FIX
    length = head_of if head_of is not None else len(data)
    size = stored_size if stored_size is not None else length
    if size < entry.chunk_bytes:
        raise CorruptStateError(
            f"chunk file {name} is {size} bytes but index.json says {entry.chunk_bytes}: it is "
            f"truncated or was replaced; {fix}"
        )
    if isinstance(data, RowChunk):
        if len(data) != entry.chunk_size:
            raise CorruptStateError(
                f"chunk file {name} holds {len(data)} rows but index.json says {entry.chunk_size}; {fix}"
            )
        return
    try:
        n = chunk_num_items(data)
    except CorruptStateError as exc:
        raise CorruptStateError(f"chunk file {name}: {exc}; {fix}") from None
    if n != entry.chunk_size:
        raise CorruptStateError(f"chunk file {name} holds {n} items but index.json says {entry.chunk_size}; {fix}")
    header = 4 + 4 * (n + 1)
    if len(data) < header or length < header:
        raise CorruptStateError(f"chunk file {name} is too short for the offsets of its {n} items; {fix}")
    first = int.from_bytes(data[4:8], "little")
    last = int.from_bytes(data[header - 4 : header], "little")
    if first != header or not first <= last <= length:
        raise CorruptStateError(f"chunk file {name} has an invalid offset table; {fix}")


def decompress_chunk(stored: bytes | memoryview, entry: ChunkEntry, compression: str, name: str) -> bytes:
    """A whole-file compressed chunk decompressed, never past the size index.json gives it (nor
    its header-less litdata < 0.2.60 form): a zstd bomb is refused before it is allocated."""
    bound = min(entry.chunk_bytes + 4 * (entry.chunk_size + 2), _MAX_CHUNK)
    try:
        return decompress(stored, compression, bound, f"what index.json says chunk {entry.filename} holds")
    except CorruptStateError as exc:
        raise CorruptStateError(f"chunk file {name} is damaged ({exc}); {CHUNK_FIX}") from None


def unpack_checked(
    data: bytes | memoryview, entry: ChunkEntry, name: str, compression_level: str | None
) -> bytes | memoryview | RowChunk:
    """litdata 0.2.76's other chunk layouts (framed zstd, per-item zstd, Arrow rows) as the classic
    one, checked against the index entry: what every reader and verify parse."""
    try:
        unpacked = unpack_chunk(data, compression_level)
    except CorruptStateError as exc:
        raise CorruptStateError(f"chunk file {name}: {exc}; {CHUNK_FIX}") from None
    check_chunk(unpacked, entry, name, stored_size=len(data))
    return unpacked
