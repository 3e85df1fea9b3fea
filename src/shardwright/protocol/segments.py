"""Buffer segments of a progress snapshot (issue 35): the writer's outputs waiting for the next
chunk, saved append-only, so that a periodic snapshot of a large buffer writes only the items
added since the previous one and the chunk is never cut to keep snapshots small.

A segment ``.shardwright/progress/{shard:05d}-{epoch}-{xxh3_128 hex}.seg`` holds consecutive
items of one writer's buffer, named by its content's checksum (the same items give the same
name; a file whose bytes do not hash to its name is torn or damaged). It is written durably
BEFORE the snapshot that lists it (name, item count, byte count), so a snapshot never names a
segment a crash could lose; a segment no snapshot lists is never read, and is deleted with
the snapshots (cleanup, protocol step 6), or by its writer once its next snapshot no longer
lists it. A resume reads a snapshot's segments in order, every size bounded before anything
is allocated and every checksum verified: one missing, torn or damaged makes the whole
snapshot ignored (the records stand, and redoing the work past them is always correct),
never read as wrong data. Names carry the writer's claim epoch, like snapshots: a fenced
writer's segments are listed only by its own snapshots, which are ignored.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import xxhash

from ..storage import Storage
from .crash import crash_point
from .layout import segment_key

__all__ = [
    "MAX_BUFFER_BYTES",
    "MAX_SEGMENT_BYTES",
    "SEGMENT_TARGET_BYTES",
    "Segment",
    "cut_segments",
    "load_segment",
    "write_segment",
]

SEGMENT_MAGIC = b"SWSEG01\n"
_COUNT = struct.Struct("<Q")
# A segment is cut at about this many bytes (more only for one larger item): a snapshot after
# a burst of outputs writes a few bounded files, not one of any size.
SEGMENT_TARGET_BYTES = 64 * 1024 * 1024
# The most a segment or a whole buffer may hold (one item may fill a segment alone); a listed
# size above is refused before anything is read. The writer saves no larger buffer (see
# engine.shard_writer.TAIL_LIMIT_BYTES): a resume then redoes that work from the records.
MAX_SEGMENT_BYTES = 1 << 30
MAX_BUFFER_BYTES = 1 << 30
MAX_SEGMENT_ITEMS = 1 << 24


@dataclass(eq=False)
class Segment:
    """Consecutive items of a writer's buffer. ``checksum`` is None until the committer has
    written it (then ``items`` is dropped: the writer's buffer holds them)."""

    count: int
    nbytes: int  # the segment file's size
    items: list[bytes] | None = field(default=None, repr=False)
    checksum: str | None = None


def _file_size(items: list[bytes]) -> int:
    return len(SEGMENT_MAGIC) + _COUNT.size * (1 + len(items)) + sum(map(len, items))


def cut_segments(items: list[bytes]) -> list[Segment]:
    """``items`` (added since the last segment) as new segments of about SEGMENT_TARGET_BYTES."""
    out: list[Segment] = []
    start, size = 0, 0
    for k, item in enumerate(items):
        if k > start and size + len(item) > SEGMENT_TARGET_BYTES:
            out.append(Segment(k - start, _file_size(items[start:k]), items[start:k]))
            start, size = k, 0
        size += len(item)
    if start < len(items):
        out.append(Segment(len(items) - start, _file_size(items[start:]), items[start:]))
    return out


def encode_segment(items: list[bytes]) -> bytes:
    sizes = b"".join(_COUNT.pack(len(item)) for item in items)
    return b"".join([SEGMENT_MAGIC, _COUNT.pack(len(items)), sizes, *items])


def write_segment(storage: Storage, shard: int, epoch: int, segment: Segment) -> None:
    """Write ``segment`` durably (before any snapshot lists it) and name it by its checksum."""
    if segment.checksum is not None:
        return  # written for an earlier snapshot: append-only, never written again
    if segment.items is None:  # pragma: no cover - a segment is made with its items
        raise AssertionError("segment without items")
    data = encode_segment(segment.items)
    checksum = xxhash.xxh3_128_hexdigest(data)
    crash_point("before_segment")
    storage.write_bytes(segment_key(shard, epoch, checksum), data)
    crash_point("after_segment")
    segment.checksum, segment.items = checksum, None


def load_segment(storage: Storage, shard: int, epoch: int, segment: Segment) -> list[bytes]:
    """The items of a listed segment, or ValueError when it is missing, torn, damaged or not
    what the snapshot says (its size is bounded before it is read)."""
    if segment.checksum is None or not 0 < segment.nbytes <= MAX_SEGMENT_BYTES:
        raise ValueError("bad segment")
    try:
        data = storage.read_at_most(segment_key(shard, epoch, segment.checksum), segment.nbytes)
    except FileNotFoundError:
        raise ValueError("segment missing") from None
    if data is None or len(data) != segment.nbytes or xxhash.xxh3_128_hexdigest(data) != segment.checksum:
        raise ValueError("segment torn or damaged")
    start = len(SEGMENT_MAGIC) + _COUNT.size
    if not data.startswith(SEGMENT_MAGIC) or len(data) < start:
        raise ValueError("not a segment")
    (count,) = _COUNT.unpack_from(data, len(SEGMENT_MAGIC))
    if count != segment.count or start + count * _COUNT.size > len(data):
        raise ValueError("segment item count")
    sizes = [_COUNT.unpack_from(data, start + k * _COUNT.size)[0] for k in range(count)]
    offset = start + count * _COUNT.size
    if offset + sum(sizes) != len(data):
        raise ValueError("segment item sizes")
    items = []
    for size in sizes:
        items.append(data[offset : offset + size])
        offset += size
    return items
