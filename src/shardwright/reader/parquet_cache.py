"""Remote parquet files read through the reader's chunk cache (:mod:`.cache`).

A parquet folder on a store (``s3://``, ``gs://``, ``az://``, litdata's ``local:``) is read as
litdata reads it: each file is downloaded whole into the cache the first time a row group of
it is wanted, and every later read of it (this process's next row group, another worker,
another epoch, another reader of the same cache) opens the cached copy. The cache's bound,
eviction, sharing between processes and ownership checks apply unchanged; a file stays
pinned (not evicted) while this process has it open.

What is checked: a downloaded file's size against the size ``index.json`` lists (a
different size is fetched once more, then :class:`~shardwright.errors.CorruptStateError`);
with ``check_checksums``, every page against the CRC its writer stored, a cached copy that
fails being deleted and fetched once more before the error is the store's file's. The cache
directory is named by the location, the index and each file's listed version (its ETag or
generation), so a file rewritten in the store is never answered from an old copy.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from typing import Any

from ..errors import CorruptStateError
from ..format import ChunkEntry
from ..sources.parquet import check_row_group
from .cache import ChunkCache, Pin, cache_name, default_cache_root

__all__ = ["CachedParquetFiles"]

_OPEN_FILES = 2  # cached files kept open (pinned) per process: the one being read and the next


class CachedParquetFiles:
    """Row groups of remote parquet files, read from whole-file copies in the chunk cache.

    ``storage``: the folder's store (the files' keys are ``names``, relative to it);
    ``versions``: each file's listed version, part of the cache directory's name."""

    def __init__(
        self,
        storage: Any,
        names: list[str],
        sizes: list[int],
        versions: list[str],
        index_bytes: bytes,
        columns: list[str] | None,
        cache_dir: Any,
        max_cache_bytes: int,
        verify: bool,
    ):
        self.url = storage.url.rstrip("/")
        self.entries = [ChunkEntry(filename=n, chunk_size=0, chunk_bytes=s) for n, s in zip(names, sizes)]
        listed = hashlib.sha256("\0".join(versions).encode()).hexdigest().encode()
        self.cache = ChunkCache(
            root=default_cache_root(cache_dir),
            name=cache_name(self.url, storage, index_bytes + b"\0" + listed),
            url=self.url,
            storage=storage,
            max_bytes=max_cache_bytes,
            check_checksums=False,  # litdata's parquet index has no checksums: sizes and page CRCs are checked here
            sizes_known=True,
        )
        self.cache.check_existing()
        self.columns, self.verify = columns, verify
        self._open: OrderedDict[int, tuple[Pin, Any]] = OrderedDict()
        self._pid = os.getpid()

    def _files(self) -> OrderedDict[int, tuple[Pin, Any]]:
        if self._pid != os.getpid():  # a forked worker: its own descriptors and pins
            self._open, self._pid = OrderedDict(), os.getpid()
        return self._open

    def _pin(self, unit: int) -> Pin:
        """File ``unit``'s cached copy, downloaded first if missing; a copy of another size than
        listed is fetched once more, then CorruptStateError."""
        entry = self.entries[unit]
        for _attempt in range(2):
            pin = self.cache.open(entry)
            assert pin is not None  # None only for a prefetch whose still_wanted says no
            if pin.size == entry.chunk_bytes:
                return pin
            got = pin.size
            self.cache.discard(pin)
        raise CorruptStateError(
            f"{self.url}/{entry.filename} downloads as {got:,} bytes but the index lists {entry.chunk_bytes:,}: "
            "the file changed in the store; delete index.json (or the cache_dir's) to index the folder again"
        )

    def _parquet_file(self, unit: int) -> Any:
        import pyarrow.parquet as pq

        files = self._files()
        held = files.get(unit)
        if held is not None:
            files.move_to_end(unit)
            return held[1]
        pin = self._pin(unit)
        try:
            opened = pq.ParquetFile(os.fdopen(os.dup(pin.fd), "rb"), page_checksum_verification=self.verify)
        except BaseException:
            self.cache.discard(pin)  # a copy whose footer does not parse: not kept for the next reader
            raise
        files[unit] = (pin, opened)
        while len(files) > _OPEN_FILES:
            self._close(*files.popitem(last=False)[1])
        return opened

    @staticmethod
    def _close(pin: Pin, opened: Any) -> None:
        try:
            opened.close()
        finally:
            pin.close()  # unpinned: the cache may evict it now

    def read_row_group(self, unit: int, group: int) -> list[dict]:
        """Row group ``group`` of file ``unit`` as dicts; a cached copy that does not decode (or,
        with ``verify``, fails a page CRC) is deleted and fetched once more before the error."""
        for attempt in range(2):
            opened = self._parquet_file(unit)
            check_row_group(opened, group, f"{self.url}/{self.entries[unit].filename}", self.columns, as_dicts=True)
            try:
                return opened.read_row_group(group, columns=self.columns).to_pylist()
            except Exception:  # pyarrow's OSError/ArrowInvalid for a damaged page
                pin, _ = self._files().pop(unit)
                opened.close()
                self.cache.discard(pin)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        files = self._files()
        while files:
            self._close(*files.popitem()[1])

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_open"] = OrderedDict()
        state["_pid"] = None
        return state
