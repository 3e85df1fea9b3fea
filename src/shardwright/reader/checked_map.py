"""Checking a local chunk file's checksum over a mapping of it, before any of its items is read.

A chunk read item by item (:mod:`.itemfile`) is checked before any of its items is used:
its file is opened and mapped, the mapping hashed in one call, and only then handed to the
reader, the same descriptor and mapping, so what was checked is what is read: the items are
copied out of the mapping the hash read (its pages mapped and cache-hot, no second read of
the file through the kernel; issue 36).

On the reader's own thread. A thread checking the next chunk ahead was tried (issue 36) and
removed: on a quiet 2-core machine, with a core idle for it, a loop summing 400 x 256 KiB arrays
checked ahead took 1.17-1.21x the unchecked wall time and 1.35-1.39x its cpu, against 1.14x both
checked inline (`bench_readsum.py`, alternated, 2 x 5 pairs): the hand-offs between the threads
and the items then copied from the other core's cache cost more than the overlap saved; under
load (no core idle) it was worse still. Hashing and copying in L2-sized pieces was measured too
and costs more (benchmarks/README.md, 2026-12-06).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable

from ..format import check_checksum
from .checks import CHUNK_FIX

__all__ = ["CheckedChunk", "OpenChunk", "open_checked"]

OpenChunk = Callable[[], tuple[int, int]]  # opens a chunk file: (descriptor, size), the caller closes it
# (descriptor, size, the file mapped whole: None when it is empty), the checksum checked; the caller closes both
CheckedChunk = tuple[int, int, "mmap.mmap | None"]


def open_checked(open_chunk: OpenChunk, checksum: str, name: str) -> CheckedChunk:
    """(descriptor, size, mapping) of a chunk file whose checksum matched. The caller owns the
    descriptor and the mapping. Raises what the check raises (ChecksumMismatch...) with
    nothing left open."""
    fd, size = open_chunk()
    mapped = None
    try:
        # One call hashes it all (hashing block by block was slower).
        mapped = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
        check_checksum(b"" if mapped is None else mapped, checksum, name, CHUNK_FIX)
    except BaseException:
        if mapped is not None:
            mapped.close()
        os.close(fd)
        raise
    return fd, size, mapped
