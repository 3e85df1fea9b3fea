"""Parquet files read in place: ``StreamingDataset(folder, item_loader=ParquetLoader())``.

litdata's way (0.2.x): a folder of ``*.parquet`` files is a dataset whose ``index.json``
(``config.item_loader == "ParquetLoader"``) lists one chunk per file, ``chunk_size`` its
rows and ``chunk_bytes`` its size; :func:`index_parquet_dataset` writes it, and a reader
builds it on first use when the folder has none. Items are the rows, as dicts.

Here the reader's chunks are the files' **row groups** (the unit parquet reads), so
everything the reader does over chunks applies to them unchanged: the chunk-window shuffle
mixes the rows of a few row groups, ranks and workers take contiguous shares, resume
(exact and elastic) counts rows, and a worker holds only the row groups of its window,
decoded once to dicts (:class:`~shardwright.format.RowChunk`). Files are read through
:func:`shardwright.sources.parquet` (local files directly, any store through ranged reads);
the size each file had when the index was built is checked when a reader opens it, so a
file rewritten since is an error naming it rather than rows silently shifted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
from collections import OrderedDict
from typing import Any

from ..errors import CorruptStateError, InputsError, UsageError
from ..format import ChunkEntry, DecodedItem, RowChunk, flatten_sample
from ..protocol.index import parse_dataset_index, read_index_bytes
from ..protocol.layout import INDEX_KEY
from ..sources import ParquetSource, parquet
from ..sources.hub import hf_folder
from ..storage import open_storage, parse_location
from ..storage.files import open_regular
from .cache import DEFAULT_MAX_CACHE_BYTES, default_cache_root
from .parquet_cache import CachedParquetFiles
from .source import ChunkSource

__all__ = [
    "PARQUET_LOADER",
    "ParquetChunkSource",
    "ParquetLoader",
    "as_parquet_loader",
    "index_hf_dataset",
    "index_parquet_dataset",
    "parquet_source",
]

PARQUET_LOADER = "ParquetLoader"


class ParquetLoader:
    """Read a folder of parquet files in place, one item per row (a dict of its columns).

    litdata's arguments: ``columns`` (read these columns only); ``pre_load_chunk`` and
    ``low_memory`` are accepted and change nothing (row groups are always read one at a
    time, as litdata's low-memory mode does).
    """

    def __init__(self, pre_load_chunk: bool = False, low_memory: bool = True, columns: list[str] | None = None):
        if columns is not None and (
            isinstance(columns, str) or not columns or not all(isinstance(c, str) for c in columns)
        ):
            raise UsageError(f"ParquetLoader(columns=...) must be a non-empty list of column names, got {columns!r}")
        self.pre_load_chunk = pre_load_chunk
        self.low_memory = low_memory
        self.columns = list(columns) if columns is not None else None

    def __repr__(self) -> str:
        return f"ParquetLoader(columns={self.columns!r})"


def as_parquet_loader(item_loader: Any) -> ParquetLoader | None:
    """Ours, or litdata's ParquetLoader as ours (same columns); None for anything else."""
    if isinstance(item_loader, ParquetLoader):
        return item_loader
    if type(item_loader).__name__ == PARQUET_LOADER:
        return ParquetLoader(columns=getattr(item_loader, "_columns", None))
    return None


# --- the index (litdata's layout) ------------------------------------------------------------


def _spec(location: str) -> str:
    """What sources.parquet lists for a dataset: a folder's top-level ``*.parquet`` files (as
    litdata lists them), or the glob / file given (litdata: an input_dir ending in .parquet)."""
    if location.endswith(".parquet"):
        return location
    return location.rstrip("/") + "/*.parquet"


def _build_index(source: ParquetSource) -> dict:
    chunks = []
    formats = source.arrow_types(0) if source.files else []
    for item in source.files:
        chunks.append({"chunk_bytes": item.info.size, "chunk_size": 0, "dim": None, "filename": item.info.key})
    for entry, groups in zip(chunks, source.row_group_rows):
        entry["chunk_size"] = sum(groups)
    config = {
        "chunk_bytes": None,
        "chunk_size": None,
        "compression": None,
        "data_format": formats or [],
        "data_spec": None,
        "encryption": None,
        "item_loader": PARQUET_LOADER,
        "types": None,
    }
    return {"chunks": chunks, "config": config, "updated_at": str(time.time())}


def _listed_files(index: dict, source: str) -> tuple[list[str], list[int]]:
    """The (file names, sizes) a ParquetLoader index.json lists, or CorruptStateError: a name
    must be a plain relative path inside the folder (never ``..``, absolute, or a URL: the
    index must not point the reader at files elsewhere), a size an int >= 0."""
    chunks = index.get("chunks")
    if not isinstance(chunks, list):
        raise CorruptStateError(f"{source}: 'chunks' is not a list; delete index.json to index the folder again")
    names, sizes = [], []
    for entry in chunks:
        name = entry.get("filename") if isinstance(entry, dict) else None
        size = entry.get("chunk_bytes") if isinstance(entry, dict) else None
        bad = not isinstance(name, str) or "\\" in name or "://" in name
        if bad or any(p in ("", ".", "..") for p in str(name).split("/")) or type(size) is not int or size < 0:
            raise CorruptStateError(
                f"{source} lists {str(entry)[:120]!r}, not a parquet file inside its folder (a relative name and "
                "its size in bytes); delete index.json to index the folder again"
            )
        names.append(str(name))
        sizes.append(size)
    return names, sizes


def _read_index(location: str, cache_dir: Any, storage_options: dict, folder: bool = True) -> dict | None:
    """The index.json ``cache_dir`` or (``folder``) the folder holds for it, or None."""
    places = []
    if cache_dir is not None:
        places.append(os.fspath(cache_dir))
    parsed = parse_location(location)
    if parsed.is_local and folder:
        places.append(os.path.expanduser(parsed.path))
    for place in places:
        # through the local backend, as every other index is read: bounded by the decoded-bytes
        # limit, and never through a link (an index.json replaced by a link to another folder's
        # index made this folder's files read under the other's names and sizes)
        try:
            return json.loads(read_index_bytes(open_storage(place)))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            continue
    if not parsed.is_local:
        try:
            return json.loads(read_index_bytes(open_storage(parsed.url, storage_options)))
        except FileNotFoundError:
            return None
    return None


def index_parquet_dataset(
    pq_dir_url: str,
    cache_dir: str | None = None,
    storage_options: dict | None = None,
    num_workers: int = 4,
) -> None:
    """Write litdata's ``index.json`` for a folder of parquet files: into ``cache_dir`` when
    given, else into the folder itself (local or any store). ``num_workers`` is accepted for
    litdata's signature (footers are read one after another).

    Raises:
        InputsError: no ``*.parquet`` file there, or one that is not readable parquet.
    """
    del num_workers
    location = os.fspath(pq_dir_url)
    source = parquet(_spec(location), storage_options=storage_options)
    data = json.dumps(_build_index(source), sort_keys=True).encode()
    parsed = parse_location(location)
    if cache_dir is not None:
        os.makedirs(os.fspath(cache_dir), exist_ok=True)
        with open(os.path.join(os.fspath(cache_dir), INDEX_KEY), "wb") as f:
            f.write(data)
    elif parsed.is_local:
        with open(os.path.join(os.path.expanduser(parsed.path), INDEX_KEY), "wb") as f:
            f.write(data)
    else:
        open_storage(parsed.url, storage_options or {}).write_bytes(INDEX_KEY, data)


def index_hf_dataset(dataset_url: str, cache_dir: str | None = None, storage_options: dict | None = None) -> str:
    """litdata's ``index_hf_dataset``: fetch ``hf://datasets/org/name[/folder]``'s parquet
    files (Hugging Face's cache, see :mod:`shardwright.sources.hub`), write their
    ``index.json`` into ``cache_dir`` (default: ``hf-index/<hash of the URL>`` under the
    reader's cache root) and return that directory; ``StreamingDataset(dataset_url,
    cache_dir=it)`` reads the index from there.

    Raises:
        UsageError: not an ``hf://datasets/...`` URL, or huggingface_hub is not installed.
    """
    if not isinstance(dataset_url, str) or not dataset_url.startswith("hf://"):
        raise UsageError(f"index_hf_dataset: {dataset_url!r} is not an hf://datasets/org/name URL")
    if cache_dir is None:
        digest = hashlib.sha256(dataset_url.encode()).hexdigest()[:16]
        cache_dir = os.path.join(default_cache_root(None), "hf-index", digest)
    folder = hf_folder(dataset_url, dict(storage_options or {}))
    source = parquet(f"{folder}/**/*.parquet")
    os.makedirs(cache_dir, exist_ok=True)
    with open(os.path.join(cache_dir, INDEX_KEY), "wb") as f:
        f.write(json.dumps(_build_index(source), sort_keys=True).encode())
    return cache_dir


# --- the chunk source ------------------------------------------------------------------------


class ParquetChunkSource(ChunkSource):
    """A :class:`ChunkSource` whose chunks are the row groups of parquet files (their rows,
    decoded: a RowChunk). Pickles without open files; each process opens its own."""

    def __init__(
        self,
        location: str,
        loader: ParquetLoader,
        storage_options: dict,
        cache_dir: Any,
        keep_chunks: int,
        check_checksums: bool,
        max_cache_bytes: int = DEFAULT_MAX_CACHE_BYTES,
    ):
        # Not ChunkSource.__init__: there are no chunk files, no cache of them and no
        # prefetcher; the attributes the reader reads are set here.
        hf = location.startswith("hf://")
        hf_files = "**/*.parquet"  # a local snapshot, read recursively (datasets keep files under data/...)
        if hf:
            if location.endswith(".parquet"):  # litdata's hf://datasets/org/name/folder/train-*.parquet
                location, hf_files = location.rsplit("/", 1)
            location = hf_folder(location, storage_options)
            storage_options = {}
        self.check_checksums = check_checksums
        self.prefetch_depth = 0
        self.keep_chunks = keep_chunks
        self._storage = None
        self.cache = None
        parsed = parse_location(location)
        self.remote = not parsed.is_local
        self.output_dir = parsed.url if self.remote else os.path.expanduser(parsed.path)
        self.index_source = f"{self.output_dir.rstrip('/')}/{INDEX_KEY}"
        index = _read_index(location, cache_dir, storage_options, folder=not hf)
        base = parsed.url if self.remote else self.output_dir
        if location.endswith(".parquet"):
            base = os.path.dirname(base) if not self.remote else base.rsplit("/", 1)[0]
        try:
            if index is not None and index.get("config", {}).get("item_loader") == PARQUET_LOADER:
                names, sizes = _listed_files(index, self.index_source)
                self.files = parquet([f"{base.rstrip('/')}/{name}" for name in names], loader.columns, storage_options)
            else:  # built on first use, as litdata does; written where index_parquet_dataset writes it
                spec = f"{location}/{hf_files}" if hf else _spec(location)
                self.files = parquet(spec, loader.columns, storage_options)
                index = _build_index(self.files)
                names = [entry["filename"] for entry in index["chunks"]]
                sizes = [entry["chunk_bytes"] for entry in index["chunks"]]
                self._keep_index(index, parsed.is_local and not hf, cache_dir)
        except InputsError as exc:
            raise InputsError(f"StreamingDataset(item_loader=ParquetLoader()): {exc}") from None
        for item, size in zip(self.files.files, sizes):
            if check_checksums and item.info.size != size:
                raise CorruptStateError(
                    f"{item.name} is {item.info.size:,} bytes but {self.index_source} was built when it was "
                    f"{size:,}: the file changed; delete index.json to index the folder again"
                )
        self.chunks = [
            # chunk_bytes: the file's size, so a resume state names the files as they were
            ChunkEntry(filename=f"{name}#{g}", chunk_size=rows, chunk_bytes=size)
            for name, size, groups in zip(names, sizes, self.files.row_group_rows)
            for g, rows in enumerate(groups)
        ]
        self._where = [(u, g) for u, groups in enumerate(self.files.row_group_rows) for g in range(len(groups))]
        # One leaf: rows come out as DecodedItem values, which every item decoder passes through.
        spec = flatten_sample(0)[1]
        self.index_bytes = json.dumps(index, sort_keys=True).encode()
        # item_loader: the rows are ordinary items to the reader
        config = {**index["config"], "data_format": ["int"], "data_spec": spec, "item_loader": "PyTreeLoader"}
        config_json = {"chunks": [], "config": config}
        self.config = parse_dataset_index(json.dumps(config_json).encode(), self.index_source).config
        self.largest_chunk = max((entry.chunk_bytes for entry in self.chunks), default=0)
        self._cached: CachedParquetFiles | None = None
        if self.remote:  # whole files through the chunk cache, as litdata reads a remote folder
            self._cached = CachedParquetFiles(
                open_storage(base, storage_options).input_view(),
                names,
                sizes,
                [str(item.info.version) for item in self.files.files],
                self.index_bytes,
                loader.columns,
                cache_dir,
                max_cache_bytes,
                check_checksums,
            )
            self.cache = self._cached.cache
        self._proc_state = None
        self._rows: OrderedDict[int, RowChunk] = OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def _keep_index(self, index: dict, local: bool, cache_dir: Any) -> None:
        data = json.dumps(index, sort_keys=True).encode()
        place = None
        if cache_dir is not None:
            os.makedirs(os.fspath(cache_dir), exist_ok=True)
            place = os.path.join(os.fspath(cache_dir), INDEX_KEY)
        elif local:
            place = os.path.join(self.output_dir, INDEX_KEY)
        if place is None:
            return  # a remote folder with no cache_dir: the index lives in memory (reading writes nothing there)
        try:
            with open(place + ".tmp", "wb") as f:
                f.write(data)
            os.replace(place + ".tmp", place)
        except OSError:  # a read-only folder: the index lives in memory
            pass

    def _held(self) -> OrderedDict[int, RowChunk]:
        if self._pid != os.getpid():  # a forked worker: its own rows
            self._rows, self._lock, self._pid = OrderedDict(), threading.Lock(), os.getpid()
        return self._rows

    def chunk(self, k: int, *, sequential_hint: bool = True) -> RowChunk:
        held = self._held()
        with self._lock:
            rows = held.get(k)
            if rows is not None:
                held.move_to_end(k)
                return rows
        unit, group = self._where[k]
        try:
            if self._cached is not None:
                rows = RowChunk(self._cached.read_row_group(unit, group))
            else:
                rows = RowChunk(self.files.read_row_group(unit, group, verify=self.check_checksums))
        except CorruptStateError:  # refused before decoding (sources.parquet.check_row_group): it says why
            raise
        except Exception as exc:  # pyarrow's OSError/ArrowInvalid for a damaged page
            raise CorruptStateError(
                f"{self.files.files[unit].name} row group {group} cannot be read ({type(exc).__name__}: "
                f"{str(exc)[:200]}); replace the file"
            ) from None
        with self._lock:
            held[k] = rows
            while len(held) > self.keep_chunks:
                held.popitem(last=False)
        return rows

    def release(self, k: int) -> None:
        with self._lock:
            self._held().pop(k, None)

    def item_view(self, k: int, j: int, *, sequential_hint: bool = True) -> DecodedItem:
        return DecodedItem(self.chunk(k).rows[j])

    def item_file(self, k: int) -> None:
        return None

    def prefetch(self, upcoming: list[int]) -> None:
        return None

    def _replaced(self) -> bool:
        return False

    def close(self) -> None:
        self._rows = OrderedDict()
        if self._cached is not None:
            self._cached.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_rows"] = OrderedDict()
        state["_lock"] = None
        state["_pid"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def __del__(self):
        pass


_PARQUET_INDEX = re.compile(rb'"item_loader":\s*"ParquetLoader"')
_INDEX_TAIL = 1 << 16  # the config comes last in index.json (sorted keys): read only the tail


def _indexed_as_parquet(location: str) -> bool:
    """Whether a local folder's index.json is a parquet index (index_parquet_dataset's)."""
    parsed = parse_location(location)
    if not parsed.is_local:
        return False
    try:  # never blocking on a FIFO put there: the index read that follows names it
        with open_regular(os.path.join(os.path.expanduser(parsed.path), INDEX_KEY), follow_links=False) as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - _INDEX_TAIL))
            return _PARQUET_INDEX.search(f.read()) is not None
    except (OSError, CorruptStateError):
        return False


def parquet_source(opts: Any, keep_chunks: int) -> ParquetChunkSource | None:
    """The chunk source of a StreamingDataset opened with ``item_loader=ParquetLoader()``
    (``opts``: its ReaderOptions), else None (an ordinary dataset)."""
    loader = opts.item_loader
    if loader is None and (opts.location.startswith("hf://") or _indexed_as_parquet(opts.location)):
        loader = ParquetLoader()  # as litdata for hf://; a folder index_parquet_dataset indexed
    if not isinstance(loader, ParquetLoader):
        if opts.location.startswith("hf://"):
            raise UsageError(
                f"Invalid item_loader for hf://datasets: {opts.location} is read with ParquetLoader; "
                "drop item_loader or pass item_loader=ParquetLoader()"
            )
        return None
    return ParquetChunkSource(
        opts.location,
        loader,
        opts.storage_options,
        opts.cache_dir,
        keep_chunks,
        opts.check_checksums,
        opts.cache_limit,
    )
