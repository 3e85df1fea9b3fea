"""``shardwright diff A B``: are two published datasets the same, and if not, where do they differ?

Decided from the two index.json files alone (nothing else is read): the same dataset digest
(format.digest) means the same items in the same order, decoded the same way; otherwise the
chunk leaves say which chunks, as ranges of item indices of A, differ. Chunk names do not
matter: two runs that wrote the same bytes under other names are the same dataset.
It proves what the indexes claim; ``shardwright verify`` proves the chunks match them.
"""

from __future__ import annotations

import dataclasses
import os

from ..errors import CorruptStateError
from ..format import ChunkEntry, IndexConfig, dataset_digest, differing_chunks, index_digest
from ..protocol.index import index_source, parse_dataset_index
from ..storage.options import check_storage_option_names
from .verify import open_dataset_storage, read_published_index

__all__ = ["DatasetDiff", "diff"]

_MAX_RANGES = 20  # ranges printed; the JSON form has them all


@dataclasses.dataclass(frozen=True)
class DatasetDiff:
    """What :func:`diff` found.

    Attributes:
        a, b: the two locations (no secrets). digest_a, digest_b: their digests (recorded,
            else computed from checksummed chunk entries; None when a chunk has no checksum).
        items_a, items_b: their item counts. same: True when both digests exist and agree.
        ranges: ``(first item, end item, chunk position in a)`` where their items differ.
        comparable: False when a chunk has no checksum (then only counts and config are known).
    """

    a: str
    b: str
    digest_a: str | None
    digest_b: str | None
    items_a: int
    items_b: int
    same: bool
    comparable: bool
    ranges: tuple[tuple[int, int, int], ...]

    def summary(self) -> list[str]:
        if self.same:
            return [f"same: {self.a} and {self.b} hold the same {self.items_a:,} items (digest {self.digest_a})"]
        if not self.comparable:
            return [
                f"unknown: {self.a} or {self.b} has chunks without checksums (a litdata or older dataset), so "
                f"their bytes cannot be compared from the indexes ({self.items_a:,} vs {self.items_b:,} items)"
            ]
        lines = [f"different: {self.a} ({self.items_a:,} items) and {self.b} ({self.items_b:,} items)"]
        for first, end, chunk in self.ranges[:_MAX_RANGES]:
            lines.append(f"  items {first:,}..{end - 1:,} differ (from chunk {chunk} of {self.a})")
        if len(self.ranges) > _MAX_RANGES:
            lines.append(f"  ... and {len(self.ranges) - _MAX_RANGES:,} more ranges (--json lists them all)")
        if not self.ranges:
            lines.append("  the items agree chunk by chunk: the decoding config differs")
        return lines

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "ranges": [list(r) for r in self.ranges]}


def diff(
    a: str | os.PathLike,
    b: str | os.PathLike,
    *,
    storage_options: dict | None = None,
    other_storage_options: dict | None = None,
) -> DatasetDiff:
    """Compare two published datasets by their indexes (see the module docstring).

    ``other_storage_options`` are B's, when they differ from A's (default: the same).

    Raises:
        DatasetNotFoundError / IncompleteDatasetError: one of them is not a published dataset.
        CorruptStateError: an index.json is damaged.
    """
    options_b = storage_options if other_storage_options is None else other_storage_options
    (chunks_a, config_a, digest_a, url_a) = _side(os.fspath(a), storage_options)
    (chunks_b, config_b, digest_b, url_b) = _side(os.fspath(b), options_b)
    comparable = digest_a is not None and digest_b is not None
    ranges = tuple(differing_chunks(chunks_a, chunks_b)) if comparable else ()
    return DatasetDiff(
        url_a,
        url_b,
        digest_a,
        digest_b,
        sum(e.chunk_size for e in chunks_a),
        sum(e.chunk_size for e in chunks_b),
        comparable and digest_a == digest_b,
        comparable,
        ranges,
    )


def _side(url: str, storage_options: dict | None) -> tuple[list[ChunkEntry], IndexConfig, str | None, str]:
    if storage_options is not None:
        check_storage_option_names(storage_options, url)
    storage = open_dataset_storage(url, storage_options)
    data = read_published_index(storage)
    name = index_source(storage.url)
    chunks, config, _ = parse_dataset_index(data, name)
    recorded = index_digest(data, name)
    computed = dataset_digest(chunks, config)
    if recorded is not None and computed is not None and computed != recorded:
        # the recorded digest alone said "same" for an index whose entries were reordered or
        # edited by hand (a dataset the reader refuses): compare what the entries give (round 7)
        raise CorruptStateError(
            f"{name}: its chunk entries do not give the digest it records ({recorded}): an entry was edited, "
            "added, dropped or reordered; restore index.json or rerun optimize with mode='overwrite' "
            "(`shardwright verify` says more)"
        )
    return chunks, config, computed if computed is not None else recorded, storage.url
