"""Where a dataset's bytes come from: its index.json, and its chunk files, local (mmapped in
place) or remote (through the cache), validated, decompressed and kept in a per-process LRU."""

from __future__ import annotations

import dataclasses
import errno
import functools
import mmap
import os
import stat
import sys

from ..errors import (
    CorruptStateError,
    DatasetNotFoundError,
    IncompleteDatasetError,
    OutputIsAFileError,
    UnsupportedFormatError,
)
from ..format import (
    ChunkEntry,
    DecodedItem,
    check_checksum,
    chunk_item,
)
from ..format.digest import dataset_digest
from ..format.index import index_digest
from ..protocol.index import index_source, parse_dataset_index, read_index_bytes
from ..protocol.layout import INDEX_KEY
from ..protocol.records import count_committed_chunks
from ..storage import LocalStorage, open_storage, parse_location
from .cache import ChunkCache, cache_name, default_cache_root
from .checked_map import open_checked
from .checks import (
    CHUNK_FIX,
    check_exact_size,
    check_stored_size,
    decompress_chunk,
    incomplete_message,
    release_buffer,
    unpack_checked,
)
from .itemfile import ITEM_READ_BYTES, ItemFile
from .metrics import chunk_loaded
from .prefetch import Loaded, ProcState

__all__ = ["ChunkSource"]

MIN_CACHED_CHUNKS = 4  # decoded chunks kept per process (more when a shuffle window needs them)


class ChunkSource:
    """The chunks of one dataset, for one process at a time (pickles without clients, locks,
    threads or mmaps: each process opens its own on first use).

    Args:
        output_dir: a local directory, ``file://`` URL or a URL of any registered storage backend
            (``s3://bucket/prefix``, ...).
        storage_options: the backend's options (remote only; boto3 client arguments for s3://,
            the SDKs' names for gs:// and az://: docs/clouds.md).
        cache_dir: the cache root (remote only).
        max_cache_bytes: the bound of the cache root, in bytes.
        prefetch_depth: chunks downloaded ahead (remote only; 0 disables).
        keep_chunks: decoded chunks kept per process.

    Raises:
        DatasetNotFoundError, OutputIsAFileError: no dataset at ``output_dir``.
        OutputDirError: ``output_dir`` is not a location any backend reads.
        IncompleteDatasetError: the optimize run writing it has not finished.
        CorruptStateError: index.json is damaged or names chunks that cannot be ours.
        StorageError: the cache directory is unsafe or unusable.
    """

    def __init__(
        self,
        output_dir: str,
        storage_options: dict,
        cache_dir,
        max_cache_bytes: int,
        prefetch_depth: int,
        keep_chunks: int = MIN_CACHED_CHUNKS,
        check_checksums: bool = True,
    ):
        self.output_dir = output_dir
        self.check_checksums = check_checksums
        self.prefetch_depth = prefetch_depth
        self.keep_chunks = max(MIN_CACHED_CHUNKS, keep_chunks)
        self._storage = None
        self.cache: ChunkCache | None = None
        location = parse_location(output_dir)  # OutputDirError (a ValueError) for what no backend reads
        self.remote = not location.is_local
        if self.remote:
            self._storage = open_storage(location.url, storage_options)
            self.output_dir = self._storage.url  # normalised: s3://bucket/prefix, gs://..., az://...
            self.index_source = index_source(self.output_dir)
        else:
            # "~/x" names the directory optimize(..., "~/x") wrote (it expands "~" too)
            self.output_dir = os.path.expanduser(location.path)
            self.index_source = os.path.join(self.output_dir, INDEX_KEY)
        self.index_bytes = self._read_index_bytes()
        try:
            self.chunks, self.config, _ = parse_dataset_index(self.index_bytes, self.index_source)
        except RecursionError:  # a data_spec nested deeper than Python recurses
            raise CorruptStateError(
                f"index.json at {self.index_source} nests its data_spec absurdly deep; {CHUNK_FIX}"
            ) from None
        self._check_digest()
        self.largest_chunk = max((entry.chunk_bytes for entry in self.chunks), default=0)
        for entry in self.chunks:
            if "\0" in entry.filename:
                raise CorruptStateError(
                    f"index.json at {self.index_source} names a chunk with a NUL byte in it; {CHUNK_FIX}"
                )
        if self.config.encryption is not None:
            raise UnsupportedFormatError(
                f"{self.index_source}: the dataset is encrypted (litdata encryption), which shardwright does "
                "not read; read it with litdata.StreamingDataset"
            )
        if self.config.compression is not None and not self.config.compression.partition(":")[0] == "zstd":
            raise UnsupportedFormatError(
                f"{self.index_source}: compression {self.config.compression!r} is not supported (only zstd)"
            )
        if self.remote:
            self.cache = ChunkCache(
                root=default_cache_root(cache_dir),
                name=cache_name(self.output_dir, self._storage, self.index_bytes),
                url=self.output_dir,
                storage=self._storage,
                max_bytes=max_cache_bytes,
                check_checksums=check_checksums,
                sizes_known=self.config.compression is None,
            )
            self.cache.check_existing()
        self._proc_state: ProcState | None = None

    @property
    def storage(self):
        """The Storage of a remote dataset (None for a local one)."""
        return self._storage

    # --- the index -------------------------------------------------------------------------

    def _read_index_bytes(self) -> bytes:
        if self.remote:
            return self._read_remote_index()
        if not os.path.exists(self.output_dir):
            raise DatasetNotFoundError(
                f"{self.output_dir} does not exist: there is no dataset there. Check the path, or "
                "run optimize(..., output_dir=...) to create it"
            )
        if not os.path.isdir(self.output_dir):
            raise OutputIsAFileError(
                f"{self.output_dir} is a file, not a dataset directory; pass the directory optimize() wrote"
            )
        try:
            return read_index_bytes(LocalStorage(self.output_dir))  # bounded: format.limits
        except FileNotFoundError:
            pending = count_committed_chunks(LocalStorage(self.output_dir))
            raise IncompleteDatasetError(incomplete_message(self.output_dir, pending)) from None

    def _read_remote_index(self) -> bytes:
        storage = self._storage
        assert storage is not None
        try:
            return read_index_bytes(storage)
        except FileNotFoundError:
            pass
        message = incomplete_message(self.output_dir, count_committed_chunks(storage))
        if not storage.list(""):
            message += f"; nothing at all is stored under {self.output_dir}: check the URL"
        raise IncompleteDatasetError(message) from None

    def _replaced(self) -> bool:
        """Whether index.json now differs from the one this reader opened (an overwrite)."""
        try:
            return self._read_index_bytes() != self.index_bytes
        except Exception:  # gone or unreadable: not what it was either
            return True

    def _check_digest(self) -> None:
        """Refuse an index whose chunk entries do not give the digest it records, as verify
        does: an entry copied under another name (its items read twice), dropped or reordered
        by hand was read silently (trust round 6). 0.12 s per 100,000 chunks, once per open."""
        recorded = self.digest
        if recorded is None:
            return
        computed = dataset_digest(self.chunks, self.config)
        if computed is not None and computed != recorded:
            raise CorruptStateError(
                f"index.json at {self.index_source}: its chunk entries do not give the digest it records "
                f"({recorded}): an entry was edited, added, dropped or reordered; {CHUNK_FIX}"
            )

    @functools.cached_property
    def digest(self) -> str | None:
        """The dataset digest index.json records (format.digest); None for a dataset written
        before digests."""
        return index_digest(self.index_bytes, self.index_source)

    # --- per process -----------------------------------------------------------------------

    def state(self) -> ProcState:
        # Per process: a forked DataLoader worker must not use its parent's locks, threads,
        # lock file descriptors (their flocks are shared with the parent) or LRU.
        state = self._proc_state
        if state is None or state.pid != os.getpid():
            state = self._proc_state = ProcState()
        return state

    def prefetch(self, upcoming: list[int]) -> None:
        """Download these chunks (in this order, the first ``prefetch_depth``) ahead of use."""
        if self.cache is not None and self.prefetch_depth > 0 and upcoming:
            self.state().prefetch(self.cache, [(k, self.chunks[k]) for k in upcoming], self.prefetch_depth)

    def chunk(self, k: int, *, sequential_hint: bool = True):
        """Chunk ``k``'s decoded bytes (bytes or a memoryview), from the LRU or loaded.

        Hold the returned object only as long as it is in use; item views taken from it stay
        valid after it leaves the LRU (an mmap closes when its last view goes).
        """
        state = self.state()
        with state.lock:
            cached = state.lru.get(k)
            if cached is not None:
                state.lru.move_to_end(k)
                return cached.data
        sequential = k == 0 or (state.last_loaded is not None and k == state.last_loaded + 1)
        state.last_loaded = k
        entry = self.chunks[k]
        try:
            if self.cache is not None:
                if self._whole_file_compression is None:  # only uncompressed chunks stay pinned
                    with state.lock:  # unpin first, so that the download can evict what we no longer need
                        self._trim(state, incoming=entry.chunk_bytes)
                loaded = self._load_remote(entry)
            else:
                loaded = Loaded(self._load_local(entry))
        except (CorruptStateError, FileNotFoundError):
            if self._replaced():
                raise self._replaced_error(entry) from None
            raise
        with state.lock:
            previous = state.lru.pop(k, None)  # another thread loaded it meanwhile
            if previous is not None:
                previous.release()
            state.lru[k] = loaded
            data = loaded.data
            self._trim(state)
        chunk_loaded(len(data))
        if sequential_hint and sequential and k + 1 < len(self.chunks):
            self.prefetch([k + 1])  # reading forward: fetch the next chunk while this one is read
        return data

    def release(self, k: int) -> None:
        """Drop chunk ``k`` from this process's LRU now: a reader reading in order has passed
        it. Its map closes (unless an item view still holds it) and, remote, its cached file
        is unpinned; another thread that still wants it loads it again."""
        state = self.state()
        with state.lock:
            loaded = state.lru.pop(k, None)
            if loaded is not None:
                loaded.release()

    def item_view(self, k: int, j: int, *, sequential_hint: bool = True) -> memoryview | DecodedItem:
        """Item ``j`` of chunk ``k``, taken under the LRU lock: once it exists, another thread
        dropping the chunk from the LRU cannot unmap the bytes under it."""
        state = self.state()
        with state.lock:
            return chunk_item(self.chunk(k, sequential_hint=sequential_hint), j)

    def _trim(self, state: ProcState, incoming: int | None = None) -> None:
        """Keep a few decoded chunks; remote: the cache files they pin (plus ``incoming``, a
        chunk about to be loaded, plus room for prefetched chunks) stay within the cache bound,
        down to a single chunk."""
        lru = state.lru
        room = self.keep_chunks - (incoming is not None)
        limit = None
        if self.cache is not None:
            # Room is kept for the chunks the prefetcher brings in: pinned + prefetched stay in the bound.
            limit = max(0, self.cache.max_bytes - self.prefetch_depth * self.largest_chunk)
        keep_one = incoming is None  # the chunk just loaded stays, whatever its size
        while len(lru) > room or (
            limit is not None
            and len(lru) > keep_one
            and sum(x.pinned_bytes for x in lru.values()) + (incoming or 0) > limit
        ):
            _, old = lru.popitem(last=False)
            old.release()

    # --- loading ---------------------------------------------------------------------------

    def _open_chunk(self, entry: ChunkEntry, path: str) -> tuple[int, int]:
        """(descriptor, size) of a local chunk file, opened read-only: the caller closes it.

        Raises FileNotFoundError when the file does not exist, CorruptStateError when it is a
        symbolic link (or under one) or not a regular file: a dataset's chunks are regular
        files inside it.
        """
        try:
            # O_NONBLOCK: a FIFO put in a chunk's place is refused below instead of blocking the open
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise CorruptStateError(
                    f"chunk file {path} is a symbolic link; a dataset's chunks are regular files inside it. {CHUNK_FIX}"
                ) from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise CorruptStateError(f"chunk file {path} is not a regular file; {CHUNK_FIX}")
            if "/" in entry.filename and os.path.realpath(os.path.dirname(path)) != os.path.join(
                os.path.realpath(self.output_dir), os.path.dirname(entry.filename)
            ):
                raise CorruptStateError(f"chunk file {path} is reached through a symbolic link; {CHUNK_FIX}")
            if self.config.compression is None:  # stored as indexed: its size is known
                check_stored_size(st.st_size, entry, path)
        except BaseException:
            os.close(fd)
            raise
        return fd, st.st_size

    def _chunk_bytes(self, entry: ChunkEntry) -> bytes | memoryview:
        """A local chunk file's stored bytes (still compressed if the dataset is); raises
        as :meth:`_open_chunk`."""
        fd, size = self._open_chunk(entry, os.path.join(self.output_dir, entry.filename))
        try:  # the bare descriptor, no file object: this runs once per chunk read
            if size == 0:
                return b""
            # mmap: pages are read on demand and shared between DataLoader workers.
            return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
        finally:
            os.close(fd)

    def _reads_item_by_item(self, entry: ChunkEntry) -> bool:
        """Whether a chunk can be read one item at a time (see :meth:`item_file`)."""
        return not (
            self.cache is not None
            or self.config.compression is not None
            or self.config.compression_level is not None
            or not entry.chunk_size
            or entry.chunk_bytes < ITEM_READ_BYTES * entry.chunk_size
        )

    def _to_check(self, entry: ChunkEntry) -> str | None:
        """The checksum this process has still to check for a local chunk (None: nothing to check)."""
        if self.check_checksums and entry.checksum and entry.filename not in self.state().verified:
            return entry.checksum
        return None

    def item_file(self, k: int) -> ItemFile | None:
        """Chunk ``k`` opened to be read one item at a time (reader.itemfile says why), or
        None when its bytes must be loaded whole: remote, compressed, in another layout or
        of small items. A checksum this process has not checked yet is checked first, over
        a mapping of the descriptor the items are then copied from (reader.checked_map)."""
        entry = self.chunks[k]
        if not self._reads_item_by_item(entry):
            return None
        path = os.path.join(self.output_dir, entry.filename)
        try:
            checksum = self._to_check(entry)
            if checksum is None:
                fd, size = self._open_chunk(entry, path)
            else:
                fd, size, mapped = open_checked(lambda: self._open_chunk(entry, path), checksum, path)
                self.state().verified.add(entry.filename)
                return ItemFile.open(fd, size, entry, path, mapped)
            return ItemFile.open(fd, size, entry, path)
        except (CorruptStateError, FileNotFoundError) as exc:
            if self._replaced():
                raise self._replaced_error(entry) from None
            if isinstance(exc, FileNotFoundError):
                raise self._missing_error(entry) from None
            raise

    def _missing_error(self, entry: ChunkEntry) -> CorruptStateError:
        return CorruptStateError(
            f"chunk file {os.path.join(self.output_dir, entry.filename)} named in {self.index_source} is missing; {CHUNK_FIX}"
        )

    def _replaced_error(self, entry: ChunkEntry) -> CorruptStateError:
        return CorruptStateError(
            f"the dataset at {self.output_dir} was replaced since it was opened (its index.json changed, "
            f"chunk {entry.filename} is gone or different): reopen it (a new StreamingDataset)"
        )

    @property
    def _whole_file_compression(self) -> str | None:
        """The codec chunk files are wrapped in as a whole (not litdata's in-file zstd frames)."""
        return self.config.compression if self.config.compression_level is None else None

    def _stored_chunk(self, entry: ChunkEntry) -> tuple[bytes | memoryview, bool]:
        """The stored bytes of a local chunk and whether they are compressed."""
        compression = self._whole_file_compression
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
        raise self._missing_error(entry)

    def _load_local(self, entry: ChunkEntry) -> bytes | memoryview:
        stored, compressed = self._stored_chunk(entry)
        name = os.path.join(self.output_dir, entry.filename)
        as_indexed = compressed == (self._whole_file_compression is not None)  # not litdata's decompressed copy
        verified = self.state().verified
        if self.check_checksums and as_indexed and entry.checksum and entry.filename not in verified:
            # Once per chunk per process, on its first load (never per item): the bytes
            # crossed a trust boundary (a disk, a copy) since they were written.
            try:
                check_checksum(stored, entry.checksum, name, CHUNK_FIX)
            except CorruptStateError:
                release_buffer(stored)
                raise
            verified.add(entry.filename)
        return self._decode_stored(stored, compressed, entry, name, exact=False)

    def _decode_stored(self, stored, compressed: bool, entry: ChunkEntry, name: str, *, exact: bool):
        if compressed:
            assert self.config.compression is not None
            try:
                data: bytes | memoryview = decompress_chunk(stored, entry, self.config.compression, name)
            finally:
                release_buffer(stored)
        else:
            data = stored
        try:
            if exact:
                check_exact_size(data, entry, name, "decompresses to" if compressed else "is")
            unpacked = unpack_checked(data, entry, name, self.config.compression_level)
        except Exception:
            release_buffer(data)
            raise
        if unpacked is not data:
            release_buffer(data)  # litdata's framed/sample zstd or Arrow rows: the unpacked copy is kept
        return unpacked

    def _load_remote(self, entry: ChunkEntry) -> Loaded:
        """Fetch a chunk into the cache (or find it there) and map/decompress it.

        A cached file that fails validation is deleted and fetched once more: it may have
        been damaged locally. The second failure is the remote object's fault.
        """
        cache = self.cache
        assert cache is not None
        name = f"{self.output_dir}/{entry.filename}"
        compressed = self._whole_file_compression is not None
        for attempt in range(2):
            pin = cache.open(entry)
            assert pin is not None  # None only when a prefetch's still_wanted says no
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
                return Loaded(data)
            return Loaded(data, pin)
        raise AssertionError("unreachable")

    def __getstate__(self) -> dict:
        # mmaps, locks, threads and clients cannot be pickled (DataLoader with spawn): each
        # process opens its own (S3Storage drops its client when pickled).
        state = self.__dict__.copy()
        state["_proc_state"] = None
        return state

    def close(self) -> None:
        state = self._proc_state
        if state is not None and state.pid == os.getpid():
            state.close()

    def __del__(self):
        if sys.is_finalizing():
            # At exit, a daemon prefetch thread may be frozen holding the prefetcher's lock:
            # closing would wait for it forever (a reader process hung at exit in CI). The OS
            # takes back the maps, descriptors and threads anyway.
            return
        try:
            self.close()
        except Exception:
            pass
