"""StreamingRawDataset: raw files (images, audio, anything) under a local folder or a bucket
prefix, read in place (litdata's name), with shardwright's cache, shuffle and exact resume.

The files are listed once, when the dataset is made (sorted by path; ``setup(files)`` may
group or filter them into items). ``ds[i]`` reads item ``i``: a local file in place, a remote
one from the store, through the shared chunk cache when ``cache_files=True`` (atomic, shared
by processes, bounded by ``max_cache_size``). A :class:`StreamingDataLoader` iterates an epoch
as positions ``0 .. len-1`` (shuffled per epoch with ``shuffle=True``), split among ranks and
workers and resumed exactly (see :mod:`.positional`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import operator
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, UsageError
from ..format import ChunkEntry
from ..storage import open_storage
from .cache import DEFAULT_MAX_CACHE_BYTES, ChunkCache, cache_name, default_cache_root
from .partition import Layout, rank_range
from .positional import PositionalResumable
from .state import distributed_env
from .torch_bases import DatasetBase as _DatasetBase
from .torch_bases import IterableBase as _IterableBase
from .torch_bases import worker_info as _worker_info

__all__ = ["FileMetadata", "StreamingRawDataset"]

log = logging.getLogger("shardwright")

_ITEM_TYPES = ("bytes", "path")
_LITDATA_INDEX = "index.json.zstd"  # litdata's listing of the folder, which it may write into it


@dataclass(frozen=True)
class FileMetadata:
    """One listed file (litdata's name): ``path`` (local path or URL) and ``size`` in bytes."""

    path: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileMetadata:
        return cls(path=data["path"], size=data["size"])


class StreamingRawDataset(PositionalResumable, _DatasetBase):
    """Raw files under ``input_dir`` as a dataset: item ``i`` is the bytes of file ``i`` (or
    its local path with ``item_type="path"``), or a list of them when ``setup`` groups files.

    Args:
        input_dir: a local folder or a store prefix (``s3://bucket/prefix``, ``gs://``, ``az://``).
        cache_dir: root of the chunk cache for remote files (default as StreamingDataset's).
        indexer: litdata's file indexer; refused (override ``setup(files)`` to select files).
        storage_options: options for the store (as StreamingDataset's).
        cache_files: remote files are kept in the cache (True) or read anew each time (False).
        recompute_index: accepted: the listing is always taken when the dataset is made.
        transform: applied to each item (bytes / list of bytes, or paths), where it is read.
        item_type: "bytes" or "path" ("path" of a remote file needs cache_files=True).
        max_concurrent_downloads, max_prefetch, prefetch_cache_size, hedge_delay,
            download_timeout, range_parallel_threshold, range_chunk_size: litdata's download
            tuning; accepted, no effect (items are read when asked, one file per request).
        shuffle, seed: shuffle the items per epoch (seeded), when iterated by a StreamingDataLoader.
        max_cache_size: the cache's bound in bytes (default 10 GB).

    Raises:
        UsageError (a ValueError): an item_type other than "bytes"/"path", "path" of remote
            files without cache_files, an indexer, or input_dir is not a folder.
        ArgumentTypeError (a TypeError): a flag is not a bool, or setup() returned no list.
    """

    def __init__(
        self,
        input_dir: str,
        cache_dir: str | None = None,
        indexer: Any = None,
        storage_options: dict | None = None,
        cache_files: bool = False,
        recompute_index: bool = False,
        transform: Callable[[Any], Any] | None = None,
        max_concurrent_downloads: int | None = None,
        max_prefetch: int = 16,
        prefetch_cache_size: int | None = None,
        item_type: str = "bytes",
        hedge_delay: float = 0.0,
        download_timeout: float = 120.0,
        range_parallel_threshold: int = 0,
        range_chunk_size: int = 0,
        *,
        shuffle: bool = False,
        seed: int = 42,
        max_cache_size: int = DEFAULT_MAX_CACHE_BYTES,
    ):
        for name, flag in (("cache_files", cache_files), ("recompute_index", recompute_index), ("shuffle", shuffle)):
            if type(flag) is not bool:
                raise ArgumentTypeError(f"{name} must be True or False, got {flag!r:.60}")
        if item_type not in _ITEM_TYPES:
            raise UsageError(f"item_type must be 'bytes' or 'path', got {item_type!r:.60}")
        if indexer is not None:
            raise UsageError(
                "indexer= is refused: every file under input_dir is listed; override setup(files) in a subclass "
                "to filter or group them"
            )
        if type(seed) is not int or seed < 0:
            raise UsageError(f"seed must be a non-negative int, got {seed!r:.60}")
        self.input_dir = os.fspath(input_dir)
        self.remote = "://" in self.input_dir and not self.input_dir.startswith("file://")
        if item_type == "path" and self.remote and not cache_files:
            raise UsageError("item_type='path' of remote files needs cache_files=True (the path is the cached copy)")
        if not self.remote and not os.path.isdir(self.input_dir.removeprefix("file://")):
            raise UsageError(f"input_dir {self.input_dir!r} is not a folder; pass the folder that holds the files")
        self.cache_files, self.item_type, self.transform = cache_files, item_type, transform
        # litdata's look-ahead settings, kept readable as litdata's attributes (no effect here)
        self.max_prefetch = max_prefetch
        self.prefetch_cache_size = prefetch_cache_size if prefetch_cache_size is not None else 2 * max_prefetch
        self.shuffle, self.seed, self.storage_options = shuffle, seed, storage_options or {}
        self._storage = open_storage(self.input_dir, self.storage_options) if self.remote else None
        self.files: list[FileMetadata] = self._list()
        if not self.files:
            # as litdata: an empty folder or prefix is a mistake (a typo in the path), not an empty epoch
            raise UsageError(f"No files found in {self.input_dir!r}: pass the folder or prefix that holds the files")
        items = self.setup(self.files)
        if not isinstance(items, list):
            raise ArgumentTypeError(
                "The setup method must return a list of FileMetadata or of lists of FileMetadata, "
                f"got {type(items).__name__}"
            )
        self.items: list = items
        listing = hashlib.sha256("".join(f"{f.path}\0{f.size}\n" for f in self.files).encode()).hexdigest()[:16]
        self._digest = listing
        self._cache: ChunkCache | None = None
        if self.remote and cache_files:
            index = json.dumps({"updated_at": listing}).encode()  # a changed listing gets a cache of its own
            self._cache = ChunkCache(
                root=default_cache_root(cache_dir),
                name=cache_name(self.input_dir, self._storage, index),
                url=self.input_dir,
                storage=self._storage,
                max_bytes=max_cache_size,
                check_checksums=False,
                sizes_known=True,
            )
        self._epoch = 0
        self._epoch_shared = _shared_int()  # persistent DataLoader workers see set_epoch too
        self._rank, self._world = distributed_env()
        self._batch_size = 1

    def _list(self) -> list[FileMetadata]:
        if self._storage is not None:
            base = self.input_dir.rstrip("/")
            listed = sorted(self._storage.list_info(), key=lambda o: o.key)
            return [FileMetadata(f"{base}/{o.key}", o.size) for o in listed if o.key != _LITDATA_INDEX]
        root = os.path.abspath(self.input_dir.removeprefix("file://"))
        out, skipped = [], []
        for folder, dirs, names in os.walk(root):
            dirs.sort()
            for name in sorted(names):
                if folder == root and name == _LITDATA_INDEX:
                    continue
                path = os.path.join(folder, name)
                st = _inside(root, path)
                if st is None:
                    skipped.append(path)
                    continue
                out.append(FileMetadata(path, st.st_size))
        if skipped:
            log.warning(
                "StreamingRawDataset skips %d entr%s of %s that are not regular files (a FIFO, a socket, a device, a "
                "dangling link), which a read could block on: %s",
                len(skipped),
                "y" if len(skipped) == 1 else "ies",
                root,
                ", ".join(skipped[:5]) + (", ..." if len(skipped) > 5 else ""),
            )
        return sorted(out, key=lambda f: f.path)

    def setup(self, files: list[FileMetadata]) -> list:
        """The items, from every listed file (override to filter or group: a list of files,
        or of lists of files)."""
        return files

    def __len__(self) -> int:
        return len(self.items)

    def _read(self, f: FileMetadata) -> Any:
        if self._storage is None:
            if self.item_type == "path":
                return f.path
            root = os.path.abspath(self.input_dir.removeprefix("file://"))
            if _inside(root, f.path) is None:  # checked again: the file may have been swapped since
                raise UsageError(f"{f.path} is no longer a regular file of {root}; list the folder again")
            real = os.path.realpath(f.path)
            fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise UsageError(f"{f.path} is no longer a regular file of {root}; list the folder again")
                return fh.read()
        key = f.path[len(self.input_dir.rstrip("/")) + 1 :]
        if self._cache is None:
            return self._storage.read_bytes(key)
        pin = self._cache.open(ChunkEntry(filename=key, chunk_size=1, chunk_bytes=f.size))
        if pin is None:  # pragma: no cover - open retries until it holds the file
            raise UsageError(f"{f.path} could not be cached")
        try:
            return pin.path if self.item_type == "path" else pin.read()
        finally:
            pin.close()

    def __getitem__(self, index: int) -> Any:
        i = operator.index(index)  # TypeError for floats, strings, ...
        if not -len(self.items) <= i < len(self.items):
            raise IndexError(f"Index {index} out of range for a dataset of {len(self.items)} items")
        item = self.items[i]
        files = item if isinstance(item, list) else [item]
        for f in files:
            # setup() may return anything; say what it should have returned, not an AttributeError
            if not isinstance(f, FileMetadata):
                raise ArgumentTypeError(
                    f"Dataset items must be of type FileMetadata or a list of FileMetadata (from setup()), "
                    f"got {type(f).__name__}"
                )
        data = [self._read(f) for f in files] if isinstance(item, list) else self._read(item)
        return self.transform(data) if self.transform is not None else data

    def __getitems__(self, indices: list[int]) -> list[Any]:
        """Several items at once (torch's DataLoader asks a batch this way, as litdata's)."""
        if not isinstance(indices, list):
            raise ArgumentTypeError(f"__getitems__ takes a list of indices, got {type(indices).__name__}")
        return [self[i] for i in indices]

    # --- epochs: what StreamingDataLoader uses (the rest in PositionalResumable) -----------

    @property
    def plan_size(self) -> int:
        return len(self.items)

    @property
    def epoch(self) -> int:
        shared = self._epoch_shared
        return int(shared.value) if shared is not None else self._epoch

    def set_epoch(self, epoch: int) -> None:
        if type(epoch) is not int or epoch < 0:
            raise UsageError(f"epoch must be a non-negative int, got {epoch!r:.60}")
        self._epoch = epoch
        if self._epoch_shared is not None:
            self._epoch_shared.value = epoch
        if _worker_info() is None:
            self._rank, self._world = distributed_env()

    def layout(self, num_workers: int) -> Layout:
        return Layout(self._world, max(1, num_workers), self._batch_size, self._world > 1, False)

    def order(self, epoch: int) -> np.ndarray:
        """Item index of each position of ``epoch``."""
        n = len(self.items)
        return np.random.default_rng([self.seed, epoch]).permutation(n) if self.shuffle else np.arange(n)

    def identity(self) -> dict:
        return {"raw": {"items": len(self.items), "files": self._digest}, "order": [self.shuffle, self.seed]}

    def loader_view(self, shuffle: bool | None = None, drop_last: bool | None = None) -> _RawIterable:
        if drop_last is not None:
            raise UsageError("drop_last= is not taken for a StreamingRawDataset: ranks split its files evenly")
        view = _RawIterable.__new__(_RawIterable)
        view.__dict__.update(self.__dict__)  # not copy.copy: it would drop the shared epoch (__getstate__)
        if shuffle is not None:
            view.shuffle = shuffle
        return view

    def configure_loader(self, batch_size: int, drop_last: bool) -> None:
        self._batch_size = batch_size
        self._loader_drop_last = drop_last

    def iterate(self) -> Iterator[Any]:
        """This rank's and worker's items of the epoch (planned now: a resume applied to this
        object is used by this call, not by a later one)."""
        info = _worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is None:
            self.set_epoch(self.epoch)
        epoch = self.epoch
        order = self.order(epoch)
        runs = self.stream_runs(epoch, workers, worker, self._rank, info is None)
        return (self[int(order[p])] for lo, hi in runs for p in range(lo, hi))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.input_dir!r}, items={len(self.items)})"

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        shared = state.get("_epoch_shared")
        if shared is not None and multiprocessing.context.get_spawning_popen() is None:
            # shared memory travels only to processes being started (DataLoader workers);
            # an ordinary pickle carries the epoch number
            state["_epoch_shared"], state["_epoch"] = None, int(shared.value)
        return state


def _inside(root: str, path: str) -> os.stat_result | None:
    """The stat of ``path``, a regular file of the folder ``root``; None for anything else that
    is skipped (a FIFO, socket or device, which a read would block on or stream forever, or a
    dangling link). A link to a file out of the folder is refused: the folder is what the user
    named, and a dataset someone else prepared must not read the reader's other files."""
    try:
        st = os.stat(path)  # follows a link: what a read would open
    except OSError:
        return None
    if os.path.islink(path):
        real, top = os.path.realpath(path), os.path.realpath(root)
        if os.path.commonpath([real, top]) != top:
            raise UsageError(
                f"{path} is a symbolic link out of {root} (to {real}): StreamingRawDataset reads only the files inside "
                "its folder; remove the link, or copy the file in"
            )
    return st if stat.S_ISREG(st.st_mode) else None


def _shared_int():
    try:
        return multiprocessing.RawValue("q", 0)
    except (OSError, ImportError):  # no shared memory here: workers see the epoch of their start
        return None


class _RawIterable(StreamingRawDataset, _IterableBase):
    """What a DataLoader iterates: the epoch's positions of this rank and worker."""

    def __iter__(self) -> Iterator[Any]:
        return self.iterate()

    def __len__(self) -> int:
        start, end = rank_range(len(self.items), self.layout(1), self._rank)
        return end - start
