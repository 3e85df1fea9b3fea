"""A published dataset's ``index.json``, read: the one place that names its key and parses
its bytes (format.parse_index), for the protocol, the engine and the reader alike."""

from __future__ import annotations

from typing import NamedTuple

from ..errors import CorruptStateError
from ..format import ChunkEntry, IndexConfig, parse_index
from ..format.limits import DECODED_BYTES_ENV, max_decoded_bytes
from ..storage import Storage
from .layout import INDEX_KEY

__all__ = ["DatasetIndex", "index_source", "parse_dataset_index", "read_index", "read_index_bytes"]


class DatasetIndex(NamedTuple):
    chunks: list[ChunkEntry]
    config: IndexConfig
    data: bytes  # the bytes read: what an index's identity (a hash) or a replaced-index check needs


def index_source(where: str) -> str:
    """How messages name the index of the output at ``where`` (a storage's URL or a path)."""
    return f"{where}/{INDEX_KEY}"


def read_index_bytes(storage: Storage) -> bytes:
    """``index.json``'s bytes; FileNotFoundError when it is not published (the storage's own
    errors otherwise: IsADirectoryError, StorageError). One larger than the decoded-bytes limit
    (format.limits, 1 GiB: some 8 million chunks) is refused before it is read into memory."""
    limit = max_decoded_bytes()
    data = storage.read_at_most(INDEX_KEY, limit)
    if data is None:
        raise CorruptStateError(
            f"{index_source(storage.url)} is larger than {limit:,} bytes, far more than an index of a dataset "
            "needs: it is damaged or hostile, and was not read. If the dataset is trusted, raise the limit "
            f"(shardwright.format.limits.set_limits(max_decoded_bytes=...) or {DECODED_BYTES_ENV})"
        )
    return data


def parse_dataset_index(data: bytes, source: str) -> DatasetIndex:
    """The index in ``data`` (read from ``source``, which messages name). Raises
    CorruptStateError (and RecursionError for a data_spec nested deeper than Python recurses)."""
    chunks, config = parse_index(data, source)
    return DatasetIndex(chunks, config, data)


def read_index(storage: Storage, where: str | None = None) -> DatasetIndex:
    """The published index of ``storage`` (``where``: how messages name the output, default
    its URL). Raises FileNotFoundError when there is none, CorruptStateError when damaged."""
    return parse_dataset_index(read_index_bytes(storage), index_source(storage.url if where is None else where))
