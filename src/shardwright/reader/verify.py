"""``shardwright verify``: is a published dataset intact?

What it proves, per chunk named in index.json: the file is present, is a regular file, has the
size the index implies, its bytes have the checksum the index records (datasets written by
this version), and its structure agrees with the index (item count, offset table; compressed
chunks are decompressed to check that, within the bounds every reader keeps, and litdata's
framed and per-item zstd and Arrow rows are unpacked by the reader's own code). A dataset
without checksums (litdata's, or written before checksums existed) is checked by sizes and
structure only, and the report says so: a chunk whose bytes changed but whose sizes and
offsets still look right (a flipped bit inside an item, two chunks of equal shape swapped) is
then not found.

It reads every chunk once (in parallel for object stores) and never writes.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor

from ..errors import (
    CorruptStateError,
    DatasetNotFoundError,
    IncompleteDatasetError,
    UnsupportedFormatError,
)
from ..format import (
    ChunkEntry,
    IndexConfig,
    can_check,
    check_checksum,
    dataset_digest,
    index_digest,
)
from ..protocol.index import index_source, parse_dataset_index, read_index_bytes
from ..protocol.layout import INDEX_KEY, STATE_DIR, content_named_checksum
from ..protocol.manifest import read_manifest
from ..protocol.records import committed_chunks_and_damage
from ..secrets import redacting
from ..storage import Storage, open_dataset_storage
from ..storage.options import check_storage_option_names
from .checks import check_exact_size, decompress_chunk, incomplete_message, unpack_checked

__all__ = ["DamagedChunk", "VerifyReport", "read_published_index", "verify"]

_FIX = "restore it from a good copy, or rerun optimize with mode='overwrite'"
_PARALLEL_READS = 4  # object stores: a few chunks in flight (each is held in memory while checked)


@dataclasses.dataclass(frozen=True)
class DamagedChunk:
    """One damaged part of a dataset: a chunk file (or ``index.json``) and what is wrong with it."""

    filename: str
    problem: str

    def __str__(self) -> str:
        return f"{self.filename}: {self.problem}"


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found.

    Attributes:
        output_dir: the dataset's location (no secrets).
        chunks: chunks named in index.json.
        items: items the index says the dataset holds.
        checked_checksums: chunks whose checksum was compared; the others (litdata's, older
            datasets) were checked by sizes and structure only.
        damaged: every damaged chunk (or the index), each named with its problem.
        digest: the dataset digest index.json records (format.digest), recomputed from the
            chunk entries and compared; None for a dataset written before digests.
    """

    output_dir: str
    chunks: int
    items: int
    checked_checksums: int
    damaged: tuple[DamagedChunk, ...]
    digest: str | None = None

    @property
    def ok(self) -> bool:
        return not self.damaged

    @property
    def checksums(self) -> str:
        """ "all", "none" or "some": how many chunks carried a checksum this version checks."""
        if self.checked_checksums == self.chunks:
            return "all"
        return "none" if self.checked_checksums == 0 else "some"

    def summary(self) -> str:
        if self.checksums == "all":
            how = "sizes, structure and checksums"
        elif self.checksums == "none":
            how = "sizes and structure only: the index records no checksums (a litdata or older dataset)"
        else:
            how = f"sizes and structure; checksums for {self.checked_checksums:,} of them"
        state = "intact" if self.ok else f"DAMAGED: {len(self.damaged):,} problem(s)"
        digest = f"digest {self.digest}" if self.digest is not None else "no digest (written before digests)"
        return f"{self.output_dir}: {state} ({self.chunks:,} chunks, {self.items:,} items; checked {how}; {digest})"

    def to_json(self) -> dict:
        return {
            "output_dir": self.output_dir,
            "ok": self.ok,
            "chunks": self.chunks,
            "items": self.items,
            "checksums": self.checksums,
            "checked_checksums": self.checked_checksums,
            "damaged": [dataclasses.asdict(d) for d in self.damaged],
            "digest": self.digest,
        }


@redacting
def verify(output_dir: str | os.PathLike, *, storage_options: dict | None = None) -> VerifyReport:
    """Check a published dataset: its index.json, and every chunk's presence, size, checksum
    and structure (see the module docstring for what is and is not proven).

    Returns:
        A :class:`VerifyReport`: ``.ok``, and ``.damaged`` naming each damaged chunk.

    Raises:
        DatasetNotFoundError: nothing at ``output_dir``.
        IncompleteDatasetError: no index.json: the run writing it has not finished.
        UsageError: a bad argument (fsspec-style storage_options).
        StorageError: the storage cannot be read (credentials, network).
    """
    if storage_options is not None:
        check_storage_option_names(storage_options, os.fspath(output_dir))
    return _verify(os.fspath(output_dir), storage_options)


def _verify(output_dir: str, storage_options: dict | None) -> VerifyReport:
    storage = open_dataset_storage(output_dir, storage_options)
    index_name = index_source(storage.url)
    data = read_published_index(storage)
    try:
        chunks, config, _ = parse_dataset_index(data, index_name)
    except (CorruptStateError, UnsupportedFormatError) as exc:
        return VerifyReport(storage.url, 0, 0, 0, (DamagedChunk(INDEX_KEY, str(exc)),))
    except RecursionError:
        return VerifyReport(storage.url, 0, 0, 0, (DamagedChunk(INDEX_KEY, "its data_spec is nested absurdly deep"),))
    damaged: list[DamagedChunk] = []  # (a chunk named twice is refused by parse_index, as by every reader)
    digest = _check_digest(data, index_name, chunks, config, damaged)
    workers = 1 if storage.local_path(INDEX_KEY) is not None else _PARALLEL_READS
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for problem in pool.map(lambda e: _check_one(storage, config, e), chunks):
            if problem is not None:
                damaged.append(problem)
    checked = sum(1 for e in chunks if can_check(e.checksum))
    items = sum(e.chunk_size for e in chunks)
    return VerifyReport(storage.url, len(chunks), items, checked, tuple(damaged), digest)


def _check_digest(
    data: bytes, index_name: str, chunks: list[ChunkEntry], config: IndexConfig, damaged: list[DamagedChunk]
) -> str | None:
    """The digest index.json records, after comparing it with its chunk entries' (a mismatch
    is damage to the index: an entry edited, dropped or reordered)."""
    try:
        recorded = index_digest(data, index_name)
    except CorruptStateError as exc:
        damaged.append(DamagedChunk(INDEX_KEY, str(exc)))
        return None
    if recorded is not None and dataset_digest(chunks, config) != recorded:
        damaged.append(
            DamagedChunk(INDEX_KEY, f"its chunk entries do not give the digest it records ({recorded}); {_FIX}")
        )
    return recorded


def read_published_index(storage: Storage) -> bytes:
    """index.json's bytes. Raises DatasetNotFoundError or IncompleteDatasetError (nothing, or a run
    still writing, there)."""
    try:
        return read_index_bytes(storage)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise CorruptStateError(f"{storage.url}/{INDEX_KEY} is a directory, not a dataset index") from None
    path = storage.local_path(INDEX_KEY)
    if path is not None and not os.path.isdir(os.path.dirname(path)):
        raise DatasetNotFoundError(f"{storage.url} does not exist: there is no dataset there; check the path")
    pending, damage = committed_chunks_and_damage(storage, sealed=_records_sealed(storage))
    if not pending and not storage.list(""):
        raise DatasetNotFoundError(f"there is no dataset at {storage.url}: nothing is stored there; check the path")
    if not pending and not storage.list(STATE_DIR + "/"):
        # `shardwright diff A /etc` said /etc's "optimize run has not finished": a folder with
        # neither an index nor a run's state is no dataset at all (trust round 7)
        raise DatasetNotFoundError(
            f"there is no dataset at {storage.url}: it holds neither index.json nor a run's state; check the path"
        )
    raise IncompleteDatasetError(incomplete_message(storage.url, pending, damage))


def _records_sealed(storage: Storage) -> bool:
    """Whether the unfinished run's manifest says every record carries its checksum; False
    when the manifest is missing or unreadable (the run's rerun names that itself)."""
    try:
        manifest = read_manifest(storage)
    except (CorruptStateError, FileNotFoundError):
        return False
    return manifest is not None and manifest.records_sealed


def _check_one(storage: Storage, config: IndexConfig, entry: ChunkEntry) -> DamagedChunk | None:
    name = f"{storage.url}/{entry.filename}"
    path = storage.local_path(entry.filename)
    if path is not None and os.path.islink(path):
        return DamagedChunk(entry.filename, "is a symbolic link; a dataset's chunks are regular files inside it")
    try:
        stored = storage.read_at_most(entry.filename, _stored_bound(entry, config))
        if stored is None:  # a 4 GiB file under a 148-byte entry was read whole before comparing
            stored_size = storage.size(entry.filename)
            return DamagedChunk(
                entry.filename,
                f"is {stored_size:,} bytes but index.json says {entry.chunk_bytes:,}: longer than the index says; {_FIX}",
            )
    except CorruptStateError as exc:  # not a regular file (a FIFO put there blocked verify for ever)
        return DamagedChunk(entry.filename, str(exc))
    except FileNotFoundError:
        plain = entry.filename.replace(f".{config.compression}", "") if config.compression else entry.filename
        if plain != entry.filename and storage.exists(plain):
            # litdata decompressed it in place (local datasets it read): the stored form is gone
            data = storage.read_at_most(plain, entry.chunk_bytes)
            if data is None:
                return DamagedChunk(plain, f"holds more than the {entry.chunk_bytes:,} bytes index.json says; {_FIX}")
            return _check_structure(data, entry, f"{storage.url}/{plain}", config, compressed=False)
        return DamagedChunk(entry.filename, f"is missing (named in index.json); {_FIX}")
    except IsADirectoryError:
        return DamagedChunk(entry.filename, "is a directory, not a chunk file")
    named = content_named_checksum(entry.filename)
    recorded = (entry.checksum or "").partition(":")[2]
    if named is not None and len(named) == len(recorded) and named != recorded:
        # protocol 6: a chunk's name is its checksum, so the same name always means the same bytes
        return DamagedChunk(
            entry.filename,
            f"its name says checksum {named} but index.json records {recorded}: "
            f"the file was renamed or the entry edited by hand; {_FIX}",
        )
    if entry.checksum is not None and can_check(entry.checksum):
        try:
            check_checksum(stored, entry.checksum, name, _FIX)
        except CorruptStateError as exc:
            size = _size_problem(stored, entry, config)
            return DamagedChunk(entry.filename, size or _after_name(str(exc), name))
    return _check_structure(stored, entry, name, config, compressed=_whole_file(config))


def _stored_bound(entry: ChunkEntry, config: IndexConfig) -> int:
    """The most bytes a chunk file can hold under its index entry: chunk_bytes, or for a file
    compressed whole, zstd's worst case over it (incompressible data grows by a little)."""
    if not _whole_file(config):
        return entry.chunk_bytes
    return entry.chunk_bytes + entry.chunk_bytes // 128 + (1 << 17)


def _whole_file(config: IndexConfig) -> bool:
    """Whether chunk files are compressed as a whole (not litdata's zstd frames inside them)."""
    return config.compression is not None and config.compression_level is None


def _size_problem(stored: bytes, entry: ChunkEntry, config: IndexConfig) -> str | None:
    """A size mismatch, said plainly (truncated / longer), when the size tells it."""
    if not _whole_file(config) and len(stored) != entry.chunk_bytes:
        try:
            check_exact_size(stored, entry, entry.filename, "is")
        except CorruptStateError:
            verb = "truncated" if len(stored) < entry.chunk_bytes else "longer than the index says"
            return f"is {len(stored):,} bytes but index.json says {entry.chunk_bytes:,}: {verb}; {_FIX}"
    return None


def _check_structure(
    stored: bytes, entry: ChunkEntry, name: str, config: IndexConfig, *, compressed: bool
) -> DamagedChunk | None:
    """What a reader does on loading the chunk (the same calls): bounded decompression, the size
    the index gives, the layout unpacked (litdata's zstd frames, Arrow rows) and checked."""
    try:
        if compressed:
            assert config.compression is not None
            data = decompress_chunk(stored, entry, config.compression, name)
        else:
            data = stored
        check_exact_size(data, entry, name, "decompresses to" if compressed else "is")
        unpack_checked(data, entry, name, config.compression_level)
    except UnsupportedFormatError:
        return None  # litdata's Arrow rows without pyarrow here: its sizes matched; the reader needs pyarrow
    except CorruptStateError as exc:
        return DamagedChunk(entry.filename, _after_name(str(exc), name))
    return None


def _after_name(message: str, name: str) -> str:
    """A reader message about ``chunk file NAME ...`` without the name (the report names it)."""
    for prefix in (f"chunk file {name} ", f"chunk file {name}: "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message
