"""Random access to a finished dataset (ours or litdata's) in a local directory.

The bytes of ``index.json`` and of each chunk file come from two small methods,
``_read_index_bytes()`` and ``_chunk_bytes(entry)``: a storage-backed reader (S3, ...) only
has to replace those two.

When torch is importable, :class:`StreamingDataset` is a ``torch.utils.data.Dataset``, so it
works with ``DataLoader(ds, num_workers=N)`` and samplers as any map-style dataset.
"""

from __future__ import annotations

import bisect
import dataclasses
import mmap
import operator
import os
from collections import OrderedDict
from typing import Any, Iterator

from .errors import CorruptStateError, IncompleteDatasetError, UnsupportedFormatError
from .format import (  # _decode_plan: validated at open time
    ChunkEntry,
    _decode_plan,
    IndexConfig,
    chunk_item,
    chunk_num_items,
    decode_item,
    decompress,
    parse_index,
)

try:  # the base class is chosen once, when this module is imported
    from torch.utils.data import Dataset as _DatasetBase
except ImportError:  # torch is optional: a plain object then
    _DatasetBase = object  # type: ignore[assignment,misc]

__all__ = ["StreamingDataset"]

INDEX_NAME = "index.json"
STATE_DIR = ".shardwright"
# litdata 0.2.76 marks chunks whose rows live in an Arrow IPC footer instead of pytree items.
_ARROW_FOOTER_MAGIC = b"LDARW01\0"
_CACHED_CHUNKS = 4


class StreamingDataset(_DatasetBase):  # type: ignore[valid-type,misc]
    """A dataset written by shardwright (or litdata) in ``output_dir``.

    ``len(ds)``, ``ds[i]`` (negative indices too), ``ds[a:b:c]`` (a list) and iteration in
    order. Decoded chunks are kept in a small LRU (local uncompressed files are mmapped).
    """

    def __init__(self, output_dir: str | os.PathLike, *, storage_options: dict | None = None):
        self.output_dir = os.fspath(output_dir)
        self.storage_options = dict(storage_options or {})
        if "://" in self.output_dir and not self.output_dir.startswith("file://"):
            raise ValueError(
                f"{self.output_dir}: remote outputs are not readable by this StreamingDataset yet; "
                "copy the dataset to a local directory"
            )
        self.output_dir = self.output_dir.removeprefix("file://")
        self._index_source = os.path.join(self.output_dir, INDEX_NAME)
        self._chunks, self._config = parse_index(self._read_index_bytes(), self._index_source)
        self._check_readable(self._config)
        # starts[k] = global index of chunk k's first item.
        self._starts: list[int] = []
        total = 0
        for entry in self._chunks:
            self._starts.append(total)
            total += entry.chunk_size
        self._length = total
        self._cache: OrderedDict[int, Any] = OrderedDict()
        if self._length and self._config.data_spec is not None:
            # Builds the decode plan now, so an unreadable leaf format fails at open time.
            _decode_plan(tuple(self._config.data_format), self._config.data_spec)

    # --- where bytes come from (swap these two for a storage object) ---------------------

    def _read_index_bytes(self) -> bytes:
        if not os.path.exists(self.output_dir):
            raise FileNotFoundError(
                f"{self.output_dir} does not exist: there is no dataset there. Check the path, or "
                "run optimize(..., output_dir=...) to create it"
            )
        if not os.path.isdir(self.output_dir):
            raise NotADirectoryError(f"{self.output_dir} is a file, not a dataset directory")
        try:
            with open(self._index_source, "rb") as f:
                return f.read()
        except FileNotFoundError:
            pending = _count_checkpointed_chunks(self.output_dir)
            raise IncompleteDatasetError(
                f"{self.output_dir} has no index.json: the optimize run writing it has not finished "
                f"({pending} checkpointed chunks found under {STATE_DIR}/); rerun the same optimize "
                "call to finish it"
            ) from None

    def _chunk_bytes(self, entry: ChunkEntry) -> bytes | memoryview:
        """The chunk file's stored bytes (still compressed if the dataset is).

        Raises FileNotFoundError when the file does not exist (a storage-backed version must too).
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

    def _get(self, i: int) -> Any:
        k = bisect.bisect_right(self._starts, i) - 1
        chunk = self._chunk(k)
        assert self._config.data_spec is not None
        return decode_item(chunk_item(chunk, i - self._starts[k]), self._config.data_format, self._config.data_spec)

    def _chunk(self, k: int) -> bytes | memoryview:
        cached = self._cache.get(k)
        if cached is not None:
            self._cache.move_to_end(k)
            return cached
        entry = self._chunks[k]
        data = self._load_chunk(entry)
        self._cache[k] = data
        while len(self._cache) > _CACHED_CHUNKS:
            _, old = self._cache.popitem(last=False)
            _release(old)
        return data

    def _stored_chunk(self, entry: ChunkEntry) -> tuple[bytes | memoryview, bool]:
        """The stored bytes of a chunk and whether they are compressed."""
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
            _check_chunk(data, entry, name)
        except Exception:
            _release(data)
            raise
        return data

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
        # mmaps cannot be pickled (DataLoader with spawn): each worker maps its own.
        state = self.__dict__.copy()
        state["_cache"] = OrderedDict()
        return state


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


def _count_checkpointed_chunks(output_dir: str) -> int:
    """Commit records under .shardwright/shards/ (one per checkpointed chunk)."""
    shards = os.path.join(output_dir, STATE_DIR, "shards")
    count = 0
    for _root, _dirs, files in os.walk(shards):
        count += sum(1 for name in files if name.endswith(".json"))
    return count
