"""Per-process reading state: the LRU of decoded chunks and the prefetcher of a remote
dataset's cache.

The prefetcher is told the next chunks a reader will need, in order (from the epoch plan
when iterating, or "the next chunk" during sequential ``ds[i]`` access), and downloads up to
``depth`` of them ahead with at most ``concurrency`` downloads at once. A request replaces
the previous one; a chunk that left the wanted list before its download started is skipped,
so a late prefetch never evicts chunks that are still useful. Prefetched files are not
pinned: the cache bound holds for them like for any other file.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

from ..format import ChunkEntry
from .cache import ChunkCache, Pin
from .checks import release_buffer

__all__ = ["Loaded", "Prefetcher", "ProcState"]


class Loaded:
    """A decoded chunk in the LRU, and (remote, uncompressed) the cache file it pins."""

    __slots__ = ("data", "pin")

    def __init__(self, data, pin: Pin | None = None):
        self.data = data
        self.pin = pin

    @property
    def pinned_bytes(self) -> int:
        return self.pin.size if self.pin is not None else 0

    def release(self) -> None:
        release_buffer(self.data)
        if self.pin is not None:
            self.pin.close()
            self.pin = None


class Prefetcher:
    """Background downloads of the chunks a reader will need next."""

    def __init__(self, cache: ChunkCache, depth: int, concurrency: int):
        self.cache, self.depth, self.concurrency = cache, depth, max(1, concurrency)
        self._lock = threading.Condition()
        self._wanted: list[tuple[int, ChunkEntry]] = []
        self._busy: set[int] = set()
        self._done: set[int] = set()
        self._threads: list[threading.Thread] = []
        self._closed = False
        self.downloads = 0  # chunks this prefetcher brought in (for tests and benchmarks)

    def want(self, upcoming: list[tuple[int, ChunkEntry]]) -> None:
        """The chunks needed next, in order; only the first ``depth`` are fetched."""
        with self._lock:
            self._wanted = list(upcoming[: self.depth])
            keys = {k for k, _ in self._wanted}
            self._done &= keys
            if any(k not in self._done and k not in self._busy for k in keys):
                self._threads = [t for t in self._threads if t.is_alive()]
                while len(self._threads) < min(self.concurrency, len(keys)):
                    thread = threading.Thread(target=self._loop, name="shardwright-prefetch", daemon=True)
                    self._threads.append(thread)
                    thread.start()
                self._lock.notify_all()

    def _next(self) -> tuple[int, ChunkEntry] | None:
        for k, entry in self._wanted:
            if k not in self._done and k not in self._busy:
                return k, entry
        return None

    def _loop(self) -> None:
        while True:
            with self._lock:
                job = self._next()
                while job is None and not self._closed:
                    if not self._lock.wait(timeout=30):
                        if self._next() is None:  # idle: let the thread go (a new one starts on demand)
                            self._threads = [t for t in self._threads if t is not threading.current_thread()]
                            return
                    job = self._next()
                if self._closed or job is None:
                    return
                k = job[0]
                self._busy.add(k)

            def still_wanted(k: int = k) -> bool:
                with self._lock:
                    return not self._closed and any(key == k for key, _ in self._wanted)

            try:
                pin = self.cache.open(job[1], still_wanted)
                if pin is not None:
                    pin.close()  # just make it local; the reader maps it later
                    with self._lock:
                        self.downloads += 1
            except Exception:  # the reader will try again and report the error
                pass
            finally:
                with self._lock:
                    self._busy.discard(k)
                    self._done.add(k)

    def close(self) -> None:
        # Bounded: close runs from __del__, and a download thread holds the lock only briefly
        # (never across a download); if it cannot be had, the threads see _closed on their own.
        if not self._lock.acquire(timeout=5):
            self._closed = True
            return
        try:
            self._closed = True
            self._wanted = []
            self._lock.notify_all()
        finally:
            self._lock.release()


class ProcState:
    """What one process (a DataLoader worker, forked or spawned) holds for a dataset."""

    def __init__(self):
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.lru: OrderedDict[int, Loaded] = OrderedDict()
        self.last_loaded: int | None = None
        self.prefetcher: Prefetcher | None = None
        self.verified: set[str] = set()  # local chunks whose checksum this process has checked

    def prefetch(self, cache: ChunkCache, upcoming: list[tuple[int, ChunkEntry]], depth: int) -> None:
        if depth <= 0:
            return
        if self.prefetcher is None:
            self.prefetcher = Prefetcher(cache, depth, concurrency=min(depth, 4))
        self.prefetcher.want(upcoming)

    def close(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.close()
        with self.lock:
            while self.lru:
                _, old = self.lru.popitem()
                try:
                    old.release()
                except Exception:
                    pass
