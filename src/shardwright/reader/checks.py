"""Checks of what is read from disk: chunk files against their index entry, and the
messages for a dataset whose optimize run has not finished."""

from __future__ import annotations

import json
import mmap
import os

from ..errors import CorruptStateError, UnsupportedFormatError
from ..format import ChunkEntry, chunk_num_items

__all__ = [
    "STATE_DIR", "check_chunk", "check_exact_size", "count_checkpointed_chunks", "count_remote_chunks",
    "incomplete_message", "release_buffer",
]  # fmt: skip

STATE_DIR = ".shardwright"
# litdata 0.2.76 marks chunks whose rows live in an Arrow IPC footer instead of pytree items.
_ARROW_FOOTER_MAGIC = b"LDARW01\0"

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


def incomplete_message(where: str, pending: int | str) -> str:
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


def check_chunk(data: bytes | memoryview, entry: ChunkEntry, name: str) -> None:
    """The chunk file agrees with its index entry; a clear error otherwise."""
    fix = "restore it or rerun optimize with mode='overwrite'"
    if len(data) < entry.chunk_bytes:
        raise CorruptStateError(
            f"chunk file {name} is {len(data)} bytes but index.json says {entry.chunk_bytes}: it is "
            f"truncated or was replaced; {fix}"
        )
    try:
        n = chunk_num_items(data)
    except CorruptStateError as exc:
        raise CorruptStateError(f"chunk file {name}: {exc}; {fix}") from None
    if n != entry.chunk_size:
        raise CorruptStateError(f"chunk file {name} holds {n} items but index.json says {entry.chunk_size}; {fix}")
    header = 4 + 4 * (n + 1)
    if len(data) < header:
        raise CorruptStateError(f"chunk file {name} is too short for the offsets of its {n} items; {fix}")
    first = int.from_bytes(data[4:8], "little")
    last = int.from_bytes(data[header - 4 : header], "little")
    if n and first == last == header and bytes(data[-len(_ARROW_FOOTER_MAGIC) :]) == _ARROW_FOOTER_MAGIC:
        raise UnsupportedFormatError(
            f"chunk file {name} stores its rows in litdata's Arrow footer (litdata 0.2.76 does this for "
            "dicts of plain values when pyarrow is installed); shardwright does not read that layout. "
            "Read it with litdata.StreamingDataset"
        )
    if first != header or not first <= last <= len(data):
        raise CorruptStateError(f"chunk file {name} has an invalid offset table; {fix}")


def _chunks_in_record_file(data: bytes) -> int:
    """Chunks committed by one record file: ``{"records": [...]}`` (a commit round) or a
    single record; a torn or unreadable file commits nothing."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return 0
    if not isinstance(document, dict):
        return 0
    records = document.get("records")
    if isinstance(records, list):
        return sum(1 for r in records if isinstance(r, dict) and r.get("chunk") is not None)
    return 0 if document.get("chunk", True) is None else 1


def count_checkpointed_chunks(output_dir: str) -> int:
    """Chunks committed by the record files under .shardwright/shards/."""
    shards = os.path.join(output_dir, STATE_DIR, "shards")
    count = 0
    for root, _dirs, files in os.walk(shards):
        for name in files:
            if name.endswith(".json"):
                try:
                    with open(os.path.join(root, name), "rb") as f:
                        count += _chunks_in_record_file(f.read())
                except OSError:
                    pass
    return count


_MAX_RECORD_FILES_READ = 2000


def count_remote_chunks(storage, keys: list[str]) -> int | str:
    """Like count_checkpointed_chunks, for a Storage (parallel GETs; an error message should
    not take long: beyond _MAX_RECORD_FILES_READ files, a lower bound)."""
    if len(keys) > _MAX_RECORD_FILES_READ:
        return f"at least {len(keys)}"
    from concurrent.futures import ThreadPoolExecutor

    def count(key: str) -> int:
        try:
            return _chunks_in_record_file(storage.read_bytes(key))
        except FileNotFoundError:
            return 0

    with ThreadPoolExecutor(max_workers=16) as pool:
        return sum(pool.map(count, keys))
