"""A local chunk file read one item at a time, each item into a buffer of its own.

Why not the mapped chunk: copying an item out of an mmap first maps the page cache into the
process, one page fault per few pages. On this 2-core VM that was 1,277 faults and about
4 ms per 100 MB of 256 KiB arrays after the benchmark's memory touch, as much as the copy
itself; ``os.preadv`` into the item's own buffer copies from the page cache once, with no
faults (the plain ``read()`` floor does the same), and the array leaves are then views of
that buffer (``item_decoder(owned=True)``), so each item owns its memory and pins nothing.

One positional read per item is a system call, so this is only for chunks of large items
(:data:`ITEM_READ_BYTES` on average); chunks of small items stay mapped (one mapping, no
per-item call). The file is opened with the checks every chunk gets (no links, a regular
file) and its offset table is checked once, as a mapped chunk's is. An item that the file
no longer holds (truncated while read) is an error naming the chunk, never a short item.

A chunk whose checksum was checked in this process (reader.checked_map) is the exception: its
hash read it through a mapping, which faulted its pages in, so its items are copied out of
that mapping (one memcpy from pages already mapped and, reading in order, still in the CPU's
cache) instead of read again through the kernel. Issue 36, 400 x 256 KiB arrays each summed,
cpu time over unchecked reads: +15-17 % hashing then ``preadv``, +9 % copying out of the
hashed mapping. The file's size is checked before each such copy, so a chunk truncated while
read is the same error as above rather than a SIGBUS (a truncation between that check and the
copy, a few microseconds, is not caught: the same window every mapped chunk has).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
from collections.abc import Iterator

import numpy as np

from ..errors import CorruptStateError
from ..format import FRAMED_MAGIC, ChunkEntry, chunk_offsets
from .checks import CHUNK_FIX, check_chunk

__all__ = ["ITEM_READ_BYTES", "ItemFile", "keep_freed_item_memory"]

ITEM_READ_BYTES = 64 << 10  # chunks whose items average this much are read item by item

# glibc's mallopt parameters, and what a DataLoader worker sets them to (keep_freed_item_memory)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
WORKER_MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its sliding threshold (64-bit)
WORKER_TRIM_THRESHOLD = 512 << 20  # freed heap a worker keeps for its next batch
_tuned_pid = [0]


def keep_freed_item_memory() -> None:
    """Once per DataLoader worker process: keep the memory of freed item buffers for the next
    ones, instead of giving it back to the system after every batch.

    A worker holds a whole batch of items before its collate function runs (256 items of
    256 KiB: 64 MiB), then frees them together. glibc gives the top of its heap back when
    more than its trim threshold is free (by default at most 64 MiB, and each buffer of
    128 KiB or more is first a separate mapping), so every batch faulted its pages in again:
    64 faults per 256 KiB item, half of a worker's time (issue 19: 2,000 x 256 KiB arrays
    through a 2-worker loader, 7,000 items/s against litdata's 9,900; 14,000-15,000 with
    this). Only in the loader's own worker processes, never in the user's main process. A no-op
    off Linux, and where the C library ignores it (musl)."""
    if _tuned_pid[0] == os.getpid():
        return
    _tuned_pid[0] = os.getpid()
    if not sys.platform.startswith("linux"):  # glibc's; ctypes.CDLL(None) is not even allowed on Windows
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mallopt(_M_MMAP_THRESHOLD, WORKER_MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, WORKER_TRIM_THRESHOLD)


class ItemFile:
    """An open chunk file and its checked item offsets; ``read(j)`` is item ``j``'s bytes,
    ``read_run(a, b)`` those of items ``a`` to ``b - 1``, one after another."""

    fd = -1  # closed (also what __del__ sees when __init__ never ran)
    mapped: mmap.mmap | None = None
    whole: np.ndarray | None = None  # the mapping as bytes: items are copied out of it

    def __init__(self, fd: int, offsets: tuple[int, ...], name: str, mapped: mmap.mmap | None = None):
        self.offsets = offsets
        self.name = name
        self.fd = fd
        if mapped is not None:
            self.mapped = mapped
            self.whole = np.frombuffer(mapped, dtype=np.uint8)

    def __del__(self) -> None:
        # An abandoned iteration closes it too. Not weakref.finalize: this runs once per
        # chunk, and a finalizer cost as much as opening the file (2-3 us).
        self.close()

    @classmethod
    def open(cls, fd: int, size: int, entry: ChunkEntry, name: str, mapped: mmap.mmap | None = None) -> ItemFile | None:
        """Take ``fd`` (closed on error) for chunk ``entry`` of ``size`` bytes; None (fd
        closed) when its items are not plain spans of the file (litdata's framed zstd, or
        Arrow rows behind empty items): the caller reads it whole. ``mapped``: the whole
        file mapped, its checksum checked (taken too: closed with the file); its items are
        copied out of it."""
        try:
            file = cls._open(fd, size, entry, name, mapped)
        except BaseException:
            if mapped is not None:
                mapped.close()
            raise
        if file is None and mapped is not None:
            mapped.close()
        return file

    @classmethod
    def _open(cls, fd: int, size: int, entry: ChunkEntry, name: str, mapped: mmap.mmap | None) -> ItemFile | None:
        try:
            # never more than the file holds: the index's chunk_size is not trusted yet
            head = os.pread(fd, min(4 + 4 * (entry.chunk_size + 1), size), 0)
            if head[:8] == FRAMED_MAGIC:  # litdata's framed zstd: not spans of the file
                os.close(fd)
                return None
            check_chunk(head, entry, name, head_of=size)  # the checks (and words) of a loaded chunk
            try:
                offsets = chunk_offsets(head, size)  # and every item inside the file, in order
            except CorruptStateError as exc:
                raise CorruptStateError(f"chunk file {name}: {exc}; {CHUNK_FIX}") from None
            if offsets[0] == offsets[-1]:  # no bytes in any item: maybe Arrow rows in a footer
                os.close(fd)
                return None
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise
        return cls(fd, offsets, name, mapped)

    def read(self, j: int) -> np.ndarray:
        """Item ``j``'s bytes in a new writable 1-D uint8 array (what ``item_decoder(owned=True)`` takes)."""
        start, end = self.offsets[j], self.offsets[j + 1]
        if self.whole is not None:
            return self._copy(self.whole, j, start, end)
        buf = np.empty(end - start, dtype=np.uint8)
        if os.preadv(self.fd, [buf], start) != end - start:  # type: ignore[list-item]  # an ndarray is a buffer
            raise self._truncated(j)
        return buf

    def read_run(self, first: int, stop: int) -> Iterator[np.ndarray]:
        """Items ``first`` to ``stop - 1``, each as :meth:`read` gives it: the reader's hot
        loop, with the lookups of ``read`` hoisted out of it (a tenth of the Python time per
        256 KiB item)."""
        offsets, fd, empty, preadv, uint8 = self.offsets, self.fd, np.empty, os.preadv, np.uint8
        whole = self.whole
        if whole is not None:
            for j in range(first, stop):
                yield self._copy(whole, j, offsets[j], offsets[j + 1])
            return
        for j in range(first, stop):
            start = offsets[j]
            size = offsets[j + 1] - start
            buf = empty(size, dtype=uint8)
            if preadv(fd, [buf], start) != size:  # type: ignore[list-item]
                raise self._truncated(j)
            yield buf

    def _copy(self, whole: np.ndarray, j: int, start: int, end: int) -> np.ndarray:
        """Item ``j`` copied out of the mapping, once the file is known to still hold it (a
        mapped page past the end of a truncated file is SIGBUS, not an error)."""
        if os.fstat(self.fd).st_size < end:
            raise self._truncated(j)
        return whole[start:end].copy()

    def _truncated(self, j: int) -> CorruptStateError:
        return CorruptStateError(
            f"chunk file {self.name} ends inside item {j}: it was truncated or replaced; {CHUNK_FIX}"
        )

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        mapped, self.mapped, self.whole = self.mapped, None, None  # the view first: then the map closes
        if mapped is not None:
            try:
                mapped.close()
            except BufferError:  # a read_run left unfinished still holds a view: unmapped when it is collected
                pass
        if fd >= 0:
            os.close(fd)
