"""Checking local chunk files' checksums one chunk ahead of the reader, on a thread of its own.

A chunk read item by item (:mod:`.itemfile`) is checked before any of its items is used:
its file is opened, hashed through a small reused buffer
(:func:`~shardwright.format.check_file_checksum`) and only then handed to the reader, the same
descriptor, so what was checked is what is read. Reading in order, the reader asks for the
next chunk's check as it enters a chunk (:meth:`CheckAhead.ahead`), and the hash runs while
this chunk's items are used: xxhash and the reads free the GIL, so with a core to spare the
check leaves the reader's critical path (issue 36: +12 % on a loop summing 256 KiB arrays
when checked inline, on the reader's thread). Without a core to spare it costs what an inline
check costs, never more than one chunk's hash at a time.

A check that fails is raised where the reader takes the chunk (:meth:`CheckAhead.take`), never
in the background; a chunk never taken (the iteration stopped) has its descriptor closed by
:meth:`CheckAhead.close`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ..format import check_file_checksum
from .checks import CHUNK_FIX

__all__ = ["CheckAhead", "OpenChunk"]

OpenChunk = Callable[[], tuple[int, int]]  # opens a chunk file: (descriptor, size), the caller closes it


def _open_checked(open_chunk: OpenChunk, checksum: str, name: str) -> tuple[int, int]:
    fd, size = open_chunk()
    try:
        check_file_checksum(fd, size, checksum, name, CHUNK_FIX)
    except BaseException:
        os.close(fd)
        raise
    return fd, size


class CheckAhead:
    """One process's checks of local chunk files, at most one running ahead of the reader."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.ahead_checked = 0  # checks started ahead of use (for tests and benchmarks)

    def ahead(self, key: str, open_chunk: OpenChunk, checksum: str, name: str) -> None:
        """Start checking chunk ``key`` (its file opened by ``open_chunk``) in the background."""
        with self._lock:
            if key in self._pending:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shardwright-check")
            self._pending[key] = self._pool.submit(_open_checked, open_chunk, checksum, name)
            self.ahead_checked += 1

    def take(self, key: str, open_chunk: OpenChunk, checksum: str, name: str) -> tuple[int, int]:
        """(descriptor, size) of chunk ``key``'s file, its checksum checked: the background
        check's result when one was started (waited for), else checked now. The caller owns
        the descriptor. Raises what the check raises (ChecksumMismatch, FileNotFoundError...)."""
        with self._lock:
            future = self._pending.pop(key, None)
        if future is None:
            return _open_checked(open_chunk, checksum, name)
        return future.result()

    def close(self) -> None:
        with self._lock:
            pending, self._pending = list(self._pending.values()), {}
            pool, self._pool = self._pool, None
        for future in pending:
            future.add_done_callback(_close_unused)  # runs at once when it is done already
        if pool is not None:
            pool.shutdown(wait=False)


def _close_unused(future: Future) -> None:
    if not future.cancelled() and future.exception() is None:
        os.close(future.result()[0])
