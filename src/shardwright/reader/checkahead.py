"""Checking local chunk files' checksums one chunk ahead of the reader, on a thread of its own.

A chunk read item by item (:mod:`.itemfile`) is checked before any of its items is used:
its file is opened and mapped, the mapping hashed in one call, and only then handed to the
reader, the same descriptor and mapping, so what was checked is what is read: the items are
copied out of the mapping the hash read (its pages mapped and cache-hot, no second read of
the file through the kernel; issue 36). Reading in order, the reader asks for the
next chunk's check as it enters a chunk (:meth:`CheckAhead.ahead`), and the hash runs while
this chunk's items are used: xxhash and the reads free the GIL, so with a core to spare the
check leaves the reader's critical path (issue 36: +12 % on a loop summing 256 KiB arrays
when checked inline, on the reader's thread).

Only with a core to spare (:func:`spare_core`): without one the thread buys no wall time and
costs cpu time (issue 36, 400 x 256 KiB arrays each summed, at load average 4-11 on 2 cores:
+22-29 % cpu over unchecked reads checked ahead, +14-16 % checked inline): the hand-offs between
two threads (about six context switches a chunk), and the reader's copies then come from
another core's cache instead of its own. So the check runs inline when the machine's load
leaves no core idle, decided again at most once a second.

A check that fails is raised where the reader takes the chunk (:meth:`CheckAhead.take`), never
in the background; a chunk never taken (the iteration stopped) has its descriptor and mapping closed by
:meth:`CheckAhead.close`.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ..format import check_checksum
from .checks import CHUNK_FIX

__all__ = ["CheckAhead", "CheckedChunk", "OpenChunk", "spare_core"]

OpenChunk = Callable[[], tuple[int, int]]  # opens a chunk file: (descriptor, size), the caller closes it
# (descriptor, size, the file mapped whole: None when it is empty), the checksum checked; the caller closes both
CheckedChunk = tuple[int, int, "mmap.mmap | None"]


def _open_checked(open_chunk: OpenChunk, checksum: str, name: str) -> CheckedChunk:
    fd, size = open_chunk()
    mapped = None
    try:
        # One call hashes it all, the GIL free throughout, so the reader runs meanwhile (hashing
        # block by block took the GIL back after every block and waited behind the reader).
        mapped = mmap.mmap(fd, size, access=mmap.ACCESS_READ) if size else None
        check_checksum(b"" if mapped is None else mapped, checksum, name, CHUNK_FIX)
    except BaseException:
        if mapped is not None:
            mapped.close()
        os.close(fd)
        raise
    return fd, size, mapped


def spare_core() -> bool:
    """Whether this process has a core no one is using: at least two it may run on, and a
    1-minute load average (which counts this reader) leaving one of them idle."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    if cpus < 2:
        return False
    try:
        return os.getloadavg()[0] < cpus - 0.5
    except (OSError, AttributeError):  # no load average to read (Windows): assume the core is there, as before
        return True


class CheckAhead:
    """One process's checks of local chunk files, at most one running ahead of the reader."""

    POLICY_SECONDS = 1.0  # how long a spare_core() answer is used before it is asked again

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._spare = (False, -float("inf"))  # (spare_core()'s last answer, when it was given)
        self.ahead_checked = 0  # checks started ahead of use (for tests and benchmarks)

    def _worth_it(self) -> bool:
        spare, asked = self._spare
        now = time.monotonic()
        if now - asked >= self.POLICY_SECONDS:
            spare = spare_core()
            self._spare = (spare, now)
        return spare

    def ahead(self, key: str, open_chunk: OpenChunk, checksum: str, name: str) -> None:
        """Start checking chunk ``key`` (its file opened by ``open_chunk``) in the background,
        when a core is there to run it (else :meth:`take` checks it inline)."""
        if not self._worth_it():
            return
        with self._lock:
            if key in self._pending:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shardwright-check")
            self._pending[key] = self._pool.submit(_open_checked, open_chunk, checksum, name)
            self.ahead_checked += 1

    def take(self, key: str, open_chunk: OpenChunk, checksum: str, name: str) -> CheckedChunk:
        """(descriptor, size, mapping) of chunk ``key``'s file, its checksum checked: the
        background check's result when one was started (waited for), else checked now. The
        caller owns the descriptor and the mapping. Raises what the check raises
        (ChecksumMismatch, FileNotFoundError...)."""
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
        fd, _, mapped = future.result()
        if mapped is not None:
            mapped.close()
        os.close(fd)
