"""Random access to a finished dataset (ours or litdata's), in a local directory or on S3.

Local datasets are read in place: uncompressed chunk files are mmapped, compressed ones
decompressed into memory.

Remote datasets (``s3://bucket/prefix``) are read through :func:`shardwright.storage.open_storage`.
Chunk files are fetched on demand into a local cache directory::

    <cache root>/<hash of url, endpoint and index updated_at>/<chunk files>

The cache root is ``cache_dir``, else ``$SHARDWRIGHT_CACHE_DIR``, else
``~/.cache/shardwright``. Because the dataset directory name includes the index's
``updated_at``, a republished dataset never reads stale chunks. The cache is

* **atomic**: a chunk is downloaded to a temp file and renamed into place
  (``Storage.download_to``), so a crash mid-download never leaves a partial chunk;
* **shared**: several processes (DataLoader workers, several jobs on one machine) may use
  one cache. A per-chunk lock file (``filelock``) makes one of them download a chunk while
  the others wait for it;
* **bounded**: after (and before) each download, whole chunk files are evicted, least
  recently used first (by mtime, which readers touch), until the cache root holds at most
  ``max_cache_bytes``. Eviction runs under a cache-wide lock and only ever touches
  directories marked as shardwright caches. A chunk a process is reading holds a shared
  ``flock`` on its file and is never evicted; a chunk evicted between "it is there" and
  "I locked it" is noticed (inode check) and downloaded again. The bound can be exceeded by
  what readers have open at that moment plus the download in flight;
* **validated**: an uncompressed chunk file must have exactly the size index.json gives
  (``chunk_bytes``; litdata < 0.2.60 counted the items only, which is accepted too); a
  compressed one must decompress to that size (the compressed size is not in index.json).
  A bad cached file is deleted and downloaded once more before the error is raised.

During sequential access (iteration, or ``ds[i]`` walking forward), the next chunk is
downloaded by a background thread while the current one is read (``prefetch=True``).

The dataset pickles without any client, lock, thread or mmap: each process (DataLoader
worker, forked or spawned) opens its own on first use.

When torch is importable, :class:`StreamingDataset` is a ``torch.utils.data.Dataset``, so it
works with ``DataLoader(ds, num_workers=N)`` and samplers as any map-style dataset.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import mmap
import operator
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from .errors import (
    CorruptStateError,
    DatasetNotFoundError,
    IncompleteDatasetError,
    OutputIsAFileError,
    StorageError,
    UnsupportedFormatError,
)
from .format import (  # decode_plan: validated at open time
    ChunkEntry,
    IndexConfig,
    decode_plan,
    chunk_item,
    chunk_num_items,
    decode_item,
    decompress,
    parse_index,
    parse_size,
)
from .protocol.layout import INDEX_KEY as INDEX_NAME
from .protocol.layout import STATE_DIR
from .protocol.liveness import pid_alive
from .protocol.records import count_committed_chunks
from .storage import LocalStorage
from .storage.files import TMP_NAME_RE, disk_full_error, is_disk_full, unlink_quiet

try:  # the base class is chosen once, when this module is imported
    from torch.utils.data import Dataset as _DatasetBase
except ImportError:  # torch is optional: a plain object then
    _DatasetBase = object  # type: ignore[assignment,misc]

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX: no in-use protection against eviction
    fcntl = None  # type: ignore[assignment]

__all__ = ["CACHE_DIR_ENV", "DEFAULT_MAX_CACHE_BYTES", "StreamingDataset"]

# litdata 0.2.76 marks chunks whose rows live in an Arrow IPC footer instead of pytree items.
_ARROW_FOOTER_MAGIC = b"LDARW01\0"
_CACHED_CHUNKS = 4  # decoded chunks kept per process

DEFAULT_MAX_CACHE_BYTES = 10 * 1000**3
CACHE_DIR_ENV = "SHARDWRIGHT_CACHE_DIR"
_CACHE_MARKER = ".shardwright-cache.json"  # marks a directory eviction may touch
_CACHE_LOCK = ".shardwright-cache.lock"  # cache-wide eviction lock, in the cache root
_LOCK_SUFFIX = ".lock"
_LOCK_DIR = ".locks"  # per-chunk download locks: not in the chunks' directory, whose mtime we watch
_CACHE_FULL_FIX = "free space, lower max_cache_bytes or pass another cache_dir"
_STALE_TMP_SECONDS = 60.0
_FETCH_ATTEMPTS = 5
_RESCAN_SECONDS = 1.0


class StreamingDataset(_DatasetBase):  # type: ignore[valid-type,misc]
    """A dataset written by shardwright (or litdata) in ``output_dir``: a local directory or
    an ``s3://bucket/prefix`` URL.

    ``len(ds)``, ``ds[i]`` (negative indices too), ``ds[a:b:c]`` (a list) and iteration in
    order. Decoded chunks are kept in a small per-process LRU.

    Remote datasets only: ``storage_options`` (boto3 client arguments such as
    ``endpoint_url``, as for ``optimize``), ``cache_dir`` (the cache root, see the module
    docstring), ``max_cache_bytes`` (an int or a size such as ``"2GB"``; bounds the whole
    cache root) and ``prefetch`` (download the next chunk in the background during
    sequential reads).
    """

    def __init__(
        self,
        output_dir: str | os.PathLike,
        *,
        storage_options: dict | None = None,
        cache_dir: str | os.PathLike | None = None,
        max_cache_bytes: int | str = DEFAULT_MAX_CACHE_BYTES,
        prefetch: bool = True,
    ):
        self.output_dir = os.fspath(output_dir)
        self.storage_options = dict(storage_options or {})
        self.prefetch = bool(prefetch)
        try:
            limit = parse_size(max_cache_bytes)
        except ValueError as exc:
            raise ValueError(f"max_cache_bytes: {exc}") from None
        self._storage = None
        self._cache: _ChunkCache | None = None
        self._remote = self.output_dir.startswith("s3://")
        if "://" in self.output_dir and not self._remote and not self.output_dir.startswith("file://"):
            raise ValueError(
                f"{self.output_dir}: unsupported URL; StreamingDataset reads a local directory or s3://bucket/prefix"
            )
        if self._remote:
            from .storage import open_storage

            self._storage = open_storage(self.output_dir, self.storage_options)
            self.output_dir = self._storage.url  # normalised: s3://bucket/prefix
            self._index_source = f"{self.output_dir}/{INDEX_NAME}"
        else:
            self.output_dir = self.output_dir.removeprefix("file://")
            self._index_source = os.path.join(self.output_dir, INDEX_NAME)
        index_bytes = self._read_index_bytes()
        self._chunks, self._config = parse_index(index_bytes, self._index_source)
        self._check_readable(self._config)
        # starts[k] = global index of chunk k's first item.
        self._starts: list[int] = []
        total = 0
        for entry in self._chunks:
            self._starts.append(total)
            total += entry.chunk_size
        self._length = total
        if self._length and self._config.data_spec is not None:
            # Builds the decode plan now, so an unreadable leaf format fails at open time.
            decode_plan(tuple(self._config.data_format), self._config.data_spec)
        if self._remote:
            root = os.fspath(cache_dir) if cache_dir is not None else (
                os.environ.get(CACHE_DIR_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "shardwright")
            )
            self._cache = _ChunkCache(
                root=os.path.abspath(os.path.expanduser(root)),
                name=_cache_name(self.output_dir, self._storage, index_bytes),
                url=self.output_dir,
                storage=self._storage,
                max_bytes=limit,
            )
        self._proc_state: _ProcState | None = None

    # --- where bytes come from --------------------------------------------------------------

    def _read_index_bytes(self) -> bytes:
        if self._remote:
            return self._read_remote_index()
        if not os.path.exists(self.output_dir):
            raise DatasetNotFoundError(
                f"{self.output_dir} does not exist: there is no dataset there. Check the path, or "
                "run optimize(..., output_dir=...) to create it"
            )
        if not os.path.isdir(self.output_dir):
            raise OutputIsAFileError(f"{self.output_dir} is a file, not a dataset directory; pass the directory optimize() wrote")
        try:
            with open(self._index_source, "rb") as f:
                return f.read()
        except FileNotFoundError:
            pending = count_committed_chunks(LocalStorage(self.output_dir))
            raise IncompleteDatasetError(_incomplete_message(self.output_dir, pending)) from None

    def _read_remote_index(self) -> bytes:
        storage = self._storage
        try:
            return storage.read_bytes(INDEX_NAME)
        except FileNotFoundError:
            pass
        message = _incomplete_message(self.output_dir, count_committed_chunks(storage))
        if not storage.list(""):
            message += f"; nothing at all is stored under {self.output_dir}: check the URL"
        raise IncompleteDatasetError(message) from None

    def _chunk_bytes(self, entry: ChunkEntry) -> bytes | memoryview:
        """A local chunk file's stored bytes (still compressed if the dataset is).

        Raises FileNotFoundError when the file does not exist.
        """
        path = os.path.join(self.output_dir, entry.filename)
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return b""
            # mmap: pages are read on demand and shared between DataLoader workers.
            return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))

    # --- public API ----------------------------------------------------------------------

    @property
    def chunks(self) -> list[ChunkEntry]:
        return list(self._chunks)

    @property
    def config(self) -> IndexConfig:
        return self._config

    @property
    def cache_dir(self) -> str | None:
        """Where this dataset's chunks are cached (remote datasets), else None."""
        return self._cache.directory if self._cache is not None else None

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(self._length))]
        i = operator.index(index)  # TypeError for floats, strings, ...
        if i < 0:
            i += self._length
        if not 0 <= i < self._length:
            raise IndexError(f"index {index} is out of range for a dataset of {self._length} items")
        return self._get(i)

    def __iter__(self) -> Iterator[Any]:
        for i in range(self._length):
            yield self._get(i)

    def __repr__(self) -> str:
        return f"StreamingDataset({self.output_dir!r}, items={self._length}, chunks={len(self._chunks)})"

    # --- internals -----------------------------------------------------------------------

    def _state(self) -> _ProcState:
        # Per process: a forked DataLoader worker must not use its parent's locks, threads,
        # lock file descriptors (their flocks are shared with the parent) or LRU.
        state = self._proc_state
        if state is None or state.pid != os.getpid():
            state = self._proc_state = _ProcState()
        return state

    def _get(self, i: int) -> Any:
        k = bisect.bisect_right(self._starts, i) - 1
        view = self._item_view(k, i - self._starts[k])
        assert self._config.data_spec is not None
        return decode_item(view, self._config.data_format, self._config.data_spec)

    def _item_view(self, k: int, j: int) -> memoryview:
        """Item ``j`` of chunk ``k``. The view is taken under the LRU lock: once it exists,
        another thread dropping the chunk from the LRU cannot unmap the bytes under it."""
        state = self._state()
        with state.lock:
            cached = state.lru.get(k)
            if cached is not None:
                state.lru.move_to_end(k)
                return chunk_item(cached.data, j)
        sequential = k == 0 or (state.last_loaded is not None and k == state.last_loaded + 1)
        state.last_loaded = k
        entry = self._chunks[k]
        if self._cache is not None:
            if self._config.compression is None:  # only uncompressed chunks stay pinned
                with state.lock:  # unpin first, so that the download can evict what we no longer need
                    self._trim(state, incoming=entry.chunk_bytes)
            loaded = self._load_remote(entry)
        else:
            loaded = _Loaded(self._load_chunk(entry))
        with state.lock:
            previous = state.lru.pop(k, None)  # another thread loaded it meanwhile
            if previous is not None:
                previous.release()
            state.lru[k] = loaded
            view = chunk_item(loaded.data, j)
            self._trim(state)
        if self._cache is not None and self.prefetch and sequential and k + 1 < len(self._chunks):
            # Reading forward: fetch the next chunk while this one is read.
            state.prefetch(self._cache, self._chunks[k + 1], k + 1)
        return view

    def _trim(self, state: _ProcState, incoming: int | None = None) -> None:
        """Keep a few decoded chunks; remote: the cache files they pin (plus ``incoming``, a
        chunk about to be loaded) stay within the cache bound, down to a single chunk."""
        lru = state.lru
        room = _CACHED_CHUNKS - (incoming is not None)
        limit = self._cache.max_bytes if self._cache is not None else None
        keep_one = incoming is None  # the chunk just loaded stays, whatever its size
        while len(lru) > room or (
            limit is not None and len(lru) > keep_one
            and sum(x.pinned_bytes for x in lru.values()) + (incoming or 0) > limit
        ):
            _, old = lru.popitem(last=False)
            old.release()

    def _stored_chunk(self, entry: ChunkEntry) -> tuple[bytes | memoryview, bool]:
        """The stored bytes of a local chunk and whether they are compressed."""
        compression = self._config.compression
        try:
            return self._chunk_bytes(entry), compression is not None
        except FileNotFoundError:
            pass
        if compression is not None:
            # litdata (0.2.76) reading a local compressed dataset decompresses each chunk next to
            # it (name without ".zstd", written atomically) and deletes the compressed file.
            plain = entry.filename.replace(f".{compression}", "")
            if plain != entry.filename:
                try:
                    return self._chunk_bytes(dataclasses.replace(entry, filename=plain)), False
                except FileNotFoundError:
                    pass
        raise CorruptStateError(
            f"chunk file {os.path.join(self.output_dir, entry.filename)} named in {self._index_source} is "
            "missing; restore it or rerun optimize with mode='overwrite'"
        )

    def _load_chunk(self, entry: ChunkEntry) -> bytes | memoryview:
        stored, compressed = self._stored_chunk(entry)
        name = os.path.join(self.output_dir, entry.filename)
        return self._decode_stored(stored, compressed, entry, name, exact=False)

    def _decode_stored(self, stored, compressed: bool, entry: ChunkEntry, name: str, *, exact: bool):
        if compressed:
            try:
                data: bytes | memoryview = decompress(stored, self._config.compression)
            except CorruptStateError as exc:
                raise CorruptStateError(
                    f"chunk file {name} is damaged ({exc}); restore it or rerun optimize with mode='overwrite'"
                ) from None
            finally:
                _release(stored)
        else:
            data = stored
        try:
            if exact:
                _check_exact_size(data, entry, name, "decompresses to" if compressed else "is")
            _check_chunk(data, entry, name)
        except Exception:
            _release(data)
            raise
        return data

    def _load_remote(self, entry: ChunkEntry) -> _Loaded:
        """Fetch a chunk into the cache (or find it there) and map/decompress it.

        A cached file that fails validation is deleted and fetched once more: it may have
        been damaged locally. The second failure is the remote object's fault.
        """
        cache = self._cache
        assert cache is not None
        name = f"{self.output_dir}/{entry.filename}"
        compressed = self._config.compression is not None
        for attempt in range(2):
            pin = cache.open(entry)
            try:
                stored = pin.map() if not compressed else pin.read()
            except BaseException:
                pin.close()
                raise
            try:
                data = self._decode_stored(stored, compressed, entry, name, exact=True)
            except CorruptStateError:
                cache.discard(pin)
                if attempt == 0:
                    continue
                raise
            if compressed:
                pin.close()  # the decompressed bytes live in memory: the cached file may go
                return _Loaded(data)
            return _Loaded(data, pin)
        raise AssertionError("unreachable")

    def _check_readable(self, config: IndexConfig) -> None:
        if config.encryption is not None:
            raise UnsupportedFormatError(
                f"{self._index_source}: the dataset is encrypted (litdata encryption), which shardwright does "
                "not read; read it with litdata.StreamingDataset"
            )
        if config.item_loader != "PyTreeLoader":
            raise UnsupportedFormatError(
                f"{self._index_source}: item_loader is {config.item_loader!r}; shardwright reads PyTreeLoader "
                "datasets only. Read it with litdata.StreamingDataset"
            )
        if config.compression is not None and not config.compression.partition(":")[0] == "zstd":
            raise UnsupportedFormatError(
                f"{self._index_source}: compression {config.compression!r} is not supported (only zstd)"
            )

    def __getstate__(self) -> dict:
        # mmaps, locks, threads and clients cannot be pickled (DataLoader with spawn): each
        # process opens its own (S3Storage drops its client when pickled).
        state = self.__dict__.copy()
        state["_proc_state"] = None
        return state

    def __del__(self):
        state = getattr(self, "_proc_state", None)
        if state is not None and state.pid == os.getpid():
            state.close()


# --- per-process state -----------------------------------------------------------------------


class _Loaded:
    """A decoded chunk in the LRU, and (remote, uncompressed) the cache file it pins."""

    __slots__ = ("data", "pin")

    def __init__(self, data, pin: _Pin | None = None):
        self.data = data
        self.pin = pin

    @property
    def pinned_bytes(self) -> int:
        return self.pin.size if self.pin is not None else 0

    def release(self) -> None:
        _release(self.data)
        if self.pin is not None:
            self.pin.close()
            self.pin = None


class _ProcState:
    def __init__(self):
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.lru: OrderedDict[int, _Loaded] = OrderedDict()
        self.last_loaded: int | None = None
        self._prefetch_lock = threading.Lock()
        self._prefetch_wanted: tuple | None = None
        self._prefetch_event = threading.Event()
        self._prefetch_thread: threading.Thread | None = None
        self._closed = False

    def prefetch(self, cache: _ChunkCache, entry: ChunkEntry, k: int) -> None:
        """Ask the background thread to bring chunk ``k`` into the cache (latest request wins)."""
        with self._prefetch_lock:
            self._prefetch_wanted = (cache, entry, k)
            if self._prefetch_thread is None or not self._prefetch_thread.is_alive():
                self._prefetch_thread = threading.Thread(
                    target=self._prefetch_loop, name="shardwright-prefetch", daemon=True
                )
                self._prefetch_thread.start()
        self._prefetch_event.set()

    def _prefetch_loop(self) -> None:
        while not self._closed:
            if not self._prefetch_event.wait(timeout=30):
                with self._prefetch_lock:  # idle: let the thread go (a new one starts on demand)
                    if self._prefetch_wanted is None:
                        self._prefetch_thread = None
                        return
                continue
            self._prefetch_event.clear()
            with self._prefetch_lock:
                wanted, self._prefetch_wanted = self._prefetch_wanted, None
            if wanted is None or self._closed:
                continue
            cache, entry, k = wanted

            def still_wanted() -> bool:
                # Not if the reader got there first (it downloads it itself) or moved on: a
                # late prefetch would only evict chunks that are still useful.
                last = self.last_loaded
                return not self._closed and (last is None or last < k) and self._prefetch_wanted is None

            try:
                pin = cache.open(entry, still_wanted)
                if pin is not None:
                    pin.close()  # just make it local; the reader maps it later
            except Exception:  # the reader will try again and report the error
                pass

    def close(self) -> None:
        self._closed = True
        self._prefetch_event.set()
        with self.lock:
            while self.lru:
                _, old = self.lru.popitem()
                try:
                    old.release()
                except Exception:
                    pass


# --- the local chunk cache of a remote dataset -------------------------------------------------


def _cache_name(url: str, storage, index_bytes: bytes) -> str:
    """Cache directory name: the dataset's location and version."""
    try:
        version = json.loads(index_bytes).get("updated_at")
    except Exception:
        version = None
    if version is None:
        version = hashlib.sha256(index_bytes).hexdigest()
    endpoint = getattr(storage, "endpoint", "")
    digest = hashlib.sha256(f"{url}\0{endpoint}\0{version}".encode()).hexdigest()[:20]
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", url.split("://", 1)[-1])[-40:].strip("-.")
    return f"{tail}-{digest}" if tail else digest


class _Pin:
    """An open, shared-``flock``ed cache file: while it is open, no process evicts the file."""

    def __init__(self, path: str, fd: int, size: int):
        self.path, self.fd, self.size = path, fd, size

    def map(self) -> bytes | memoryview:
        if self.size == 0:
            return b""
        return memoryview(mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ))

    def read(self) -> bytes:
        with os.fdopen(os.dup(self.fd), "rb") as f:
            return f.read()

    def close(self) -> None:
        if self.fd >= 0:
            try:
                os.close(self.fd)  # drops the shared flock (mmaps keep their own reference)
            except OSError:
                pass
            self.fd = -1

    def __del__(self):
        self.close()


def _filelock(path: str):
    import filelock

    # Short polls: a reader waiting for a chunk another thread or process is downloading
    # should get it as soon as it is there.
    return filelock.FileLock(path, poll_interval=0.005)


class _ChunkCache:
    """Chunk files of one remote dataset in ``root/name``; the bound covers all of ``root``."""

    def __init__(self, root: str, name: str, url: str, storage, max_bytes: int):
        self.root, self.name, self.url, self.storage, self.max_bytes = root, name, url, storage, max_bytes
        self.directory = os.path.join(root, name)
        self._ready_pid: int | None = None
        self._estimate: tuple | None = None  # (pid, bytes, monotonic time of the scan, dir mtime)

    def _ensure_dir(self) -> None:
        if self._ready_pid == os.getpid():
            return
        try:
            os.makedirs(os.path.join(self.directory, _LOCK_DIR), exist_ok=True)
            marker = os.path.join(self.directory, _CACHE_MARKER)
            if not os.path.exists(marker):
                tmp = f"{marker}.{os.getpid()}.{threading.get_ident()}.tmp"
                with open(tmp, "w") as f:
                    json.dump({"url": self.url, "created_at": time.time()}, f)
                os.replace(tmp, marker)
        except OSError as exc:
            raise StorageError(
                f"cannot use the chunk cache {self.directory} ({exc.strerror or exc}): pass cache_dir= (or set "
                f"{CACHE_DIR_ENV}) to a writable directory with free space"
            ) from exc
        self._ready_pid = os.getpid()

    def path_of(self, entry: ChunkEntry) -> str:
        return os.path.join(self.directory, *entry.filename.split("/"))

    def lock_path(self, path: str) -> str:
        rel = os.path.relpath(path, self.directory).replace(os.sep, "%")
        return os.path.join(self.directory, _LOCK_DIR, rel + _LOCK_SUFFIX)

    # -- pinning ------------------------------------------------------------------------

    @staticmethod
    def _pin(path: str) -> _Pin | None:
        """Open and share-lock ``path``; None if it is missing or was evicted meanwhile."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_SH)  # waits while an evictor holds it exclusively
            st = os.fstat(fd)
            try:
                now = os.stat(path)
            except FileNotFoundError:
                now = None
            if now is None or st.st_nlink == 0 or (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
                os.close(fd)  # evicted (or replaced) between open and lock
                return None
        except BaseException:
            os.close(fd)
            raise
        try:
            os.utime(fd)  # most recently used: evicted last
        except OSError:
            pass
        return _Pin(path, fd, st.st_size)

    def open(self, entry: ChunkEntry, still_wanted=None) -> _Pin | None:
        """The chunk's cache file, pinned; downloaded first if it is not cached.

        ``still_wanted`` (prefetch): checked before downloading; None is returned if it says no.
        """
        self._ensure_dir()
        path = self.path_of(entry)
        for _attempt in range(_FETCH_ATTEMPTS):
            pin = self._pin(path)
            if pin is not None:
                return pin
            os.makedirs(os.path.dirname(path), exist_ok=True)
            downloaded = False
            with _filelock(self.lock_path(path)):
                pin = self._pin(path)  # another process may have fetched it while we waited
                if pin is None and still_wanted is not None and not still_wanted():
                    return None
                if pin is None:
                    self.evict(self.max_bytes - entry.chunk_bytes)
                    try:
                        self.storage.download_to(entry.filename, path, durable=False)  # checked on use
                    except FileNotFoundError:
                        raise CorruptStateError(
                            f"chunk {self.url}/{entry.filename} named in {self.url}/{INDEX_NAME} is missing; "
                            "restore it or rerun optimize with mode='overwrite'"
                        ) from None
                    except OSError as exc:
                        if is_disk_full(exc):
                            raise disk_full_error(
                                exc, f"caching {self.url}/{entry.filename} in {self.directory}", _CACHE_FULL_FIX
                            ) from exc
                        raise
                    downloaded = True
                    pin = self._pin(path)
                    if pin is not None:
                        self._added(pin.size)
            if pin is not None:
                if downloaded:
                    self.evict(self.max_bytes)
                return pin
        raise StorageError(
            f"chunk {self.url}/{entry.filename} was evicted from the cache {self.directory} {_FETCH_ATTEMPTS} times "
            f"before it could be read: max_cache_bytes ({self.max_bytes:,}) is too small for the readers sharing "
            f"{self.root}; raise it"
        )

    def discard(self, pin: _Pin) -> None:
        """Delete a bad cache file (if it is still the one pinned), then unpin it."""
        try:
            with _filelock(self.lock_path(pin.path)):
                st = os.fstat(pin.fd)
                try:
                    now = os.stat(pin.path)
                    if (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                        os.unlink(pin.path)
                except FileNotFoundError:
                    pass
        finally:
            pin.close()

    # -- eviction -----------------------------------------------------------------------

    def _scan(self) -> tuple[int, list[tuple[float, int, str]]]:
        """(bytes in the cache root, evictable chunk files as (mtime, size, path))."""
        total = 0
        files: list[tuple[float, int, str]] = []
        now = time.time()
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return 0, []
        for sub in names:
            directory = os.path.join(self.root, sub)
            if not os.path.isfile(os.path.join(directory, _CACHE_MARKER)):
                continue  # not ours: never touched
            for dirpath, dirs, filenames in os.walk(directory):
                dirs[:] = [d for d in dirs if d != _LOCK_DIR]
                for fname in filenames:
                    path = os.path.join(dirpath, fname)
                    if fname == _CACHE_MARKER or fname.endswith(_LOCK_SUFFIX):
                        continue
                    try:
                        st = os.stat(path)
                    except FileNotFoundError:
                        continue
                    m = TMP_NAME_RE.match(fname)  # Storage.download_to's temp files
                    if m is not None:  # a download in progress, or left by a killed process
                        if now - st.st_mtime > _STALE_TMP_SECONDS and not pid_alive(int(m.group("pid"))):
                            unlink_quiet(path)
                            continue
                        total += st.st_size
                        continue
                    if fname.endswith(".tmp"):  # a marker being written
                        continue
                    total += st.st_size
                    files.append((st.st_mtime, st.st_size, path))
        return total, files

    # A scan stats every file of the cache root: with many small chunks that costs more than
    # the download. So this process remembers the total of its last scan plus its own
    # downloads, and skips the scan while that stays under the target, the scan is younger
    # than _RESCAN_SECONDS and the dataset directory's mtime (which other processes' downloads
    # and evictions change) is the one seen last. An eviction frees a tenth of the bound more
    # than asked, so that a full cache is not scanned again on every download.

    def _dir_mtime(self) -> int | None:
        try:
            return os.stat(self.directory).st_mtime_ns
        except OSError:
            return None

    def _known_total(self) -> int | None:
        known = self._estimate
        if known is None or known[0] != os.getpid() or time.monotonic() - known[2] > _RESCAN_SECONDS:
            return None
        if self._dir_mtime() != known[3]:
            return None
        return known[1]

    def _added(self, size: int) -> None:
        known = self._estimate
        if known is not None and known[0] == os.getpid():
            self._estimate = (known[0], known[1] + size, known[2], self._dir_mtime())

    def evict(self, target: int) -> None:
        """Delete least recently used, unpinned chunk files until the root holds <= target bytes."""
        target = max(0, target)
        known = self._known_total()
        if known is not None and known <= target:
            return
        try:
            lock = _filelock(os.path.join(self.root, _CACHE_LOCK))
            with lock:
                scanned_at = time.monotonic()
                total, files = self._scan()
                if total > target:
                    low = max(0, target - self.max_bytes // 10)
                    for _mtime, size, path in sorted(files):
                        if _try_evict(path, self.lock_path(path)):
                            total -= size
                            if total <= low:
                                break
                self._estimate = (os.getpid(), total, scanned_at, self._dir_mtime())
        except OSError:
            pass  # eviction is best effort; reading must go on


def _try_evict(path: str, lock_path: str) -> bool:
    """Delete ``path`` unless someone has it pinned (shared flock)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # in use
        st = os.fstat(fd)
        try:
            now = os.stat(path)
        except FileNotFoundError:
            return False
        if (now.st_ino, now.st_dev) != (st.st_ino, st.st_dev):
            return False  # replaced meanwhile: a fresh download
        os.unlink(path)  # while holding the lock: a reader that opened it sees nlink == 0
        unlink_quiet(lock_path)  # filelock copes with a lock file unlinked under it
        return True
    finally:
        os.close(fd)


# --- checks ------------------------------------------------------------------------------------


def _release(buffer: bytes | memoryview) -> None:
    if isinstance(buffer, memoryview):
        base = buffer.obj
        try:
            buffer.release()
            if isinstance(base, mmap.mmap):
                base.close()
        except BufferError:
            # An item view is still alive somewhere: the mmap closes when it is collected.
            pass


def _incomplete_message(where: str, pending: int | str) -> str:
    return (
        f"{where} has no index.json: the optimize run writing it has not finished "
        f"({pending} checkpointed chunks found under {STATE_DIR}/); rerun the same optimize call to finish it"
    )


def _check_exact_size(data: bytes | memoryview, entry: ChunkEntry, name: str, verb: str) -> None:
    """A fetched chunk has exactly the size index.json gives (litdata < 0.2.60 left the
    header of ``4 * (n + 2)`` bytes out of ``chunk_bytes``: accepted too)."""
    size = len(data)
    if size == entry.chunk_bytes or size == entry.chunk_bytes + 4 * (entry.chunk_size + 2):
        return
    raise CorruptStateError(
        f"chunk file {name} {verb} {size} bytes but index.json says {entry.chunk_bytes}: it is truncated "
        "or was replaced; restore it or rerun optimize with mode='overwrite'"
    )


def _check_chunk(data: bytes | memoryview, entry: ChunkEntry, name: str) -> None:
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
