"""The dataset digest: one hash that says whether two datasets hold the same items.

A Merkle root (RFC 6962's shape: leaves and inner nodes hashed with different prefixes, an odd
node carried up unchanged) over one leaf per chunk, in index order, plus a first leaf for the
decoding config. A chunk's leaf is its item count and the checksum of its bytes as stored
(format.checksum), never its file name: chunk names carry a run's fencing epoch, so two runs
that wrote the same bytes under other names still have the same digest. It is written into
index.json as an extra top-level ``"digest"`` key (litdata's readers ignore it), recomputed
by ``shardwright verify`` and exposed as ``StreamingDataset(...).digest``.

Like the checksums it is built from, it detects accidental change (a chunk damaged, swapped,
dropped, another run's bytes); it is not a signature. A dataset with a chunk that has no
checksum (litdata's, or written before checksums) has no digest.

A Merkle root rather than one hash over the list, so that :func:`differing_chunks` can
say which chunks two datasets disagree on (``shardwright diff``) from their indexes alone.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

# (entries and configs are format.index's ChunkEntry and IndexConfig, which imports this module)
ChunkEntry = Any
IndexConfig = Any

__all__ = [
    "DIGEST_KEY",
    "chunk_leaf",
    "config_leaf",
    "dataset_digest",
    "differing_chunks",
    "merkle_root",
    "parse_digest",
]

DIGEST_KEY = "digest"
#: the scheme's name, part of every digest, so that a later scheme can never be confused with it
DIGEST_SCHEME = "sw1-sha256"
_DIGEST_RE = re.compile(r"^sw1-sha256:[0-9a-f]{64}$")
# config fields that say how items decode; chunk_bytes/chunk_size are how they were cut, and
# the chunk leaves already pin every chunk's item count and bytes
_DECODING = ("compression", "compression_level", "data_format", "data_spec", "item_loader")


def chunk_leaf(entry: ChunkEntry) -> bytes | None:
    """The leaf of one chunk, None when the chunk carries no checksum."""
    if entry.checksum is None:
        return None
    return _leaf(f"chunk {entry.chunk_size} {entry.checksum}".encode())


def config_leaf(config: IndexConfig) -> bytes:
    decoding = {key: config.to_json()[key] for key in _DECODING}
    return _leaf(b"config " + json.dumps(decoding, sort_keys=True).encode())


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """The root of ``leaves`` (already leaf-hashed); an odd node is carried up unchanged."""
    level = list(leaves) or [_leaf(b"")]
    while len(level) > 1:
        pairs = [hashlib.sha256(b"\x01" + a + b).digest() for a, b in zip(level[0::2], level[1::2])]
        level = pairs + ([level[-1]] if len(level) % 2 else [])
    return level[0]


def dataset_digest(chunks: Sequence[ChunkEntry], config: IndexConfig) -> str | None:
    """``"sw1-sha256:<hex>"`` of a dataset's index, None when a chunk has no checksum."""
    leaves = [chunk_leaf(entry) for entry in chunks]
    if any(leaf is None for leaf in leaves):
        return None
    root = merkle_root([config_leaf(config), *(leaf for leaf in leaves if leaf is not None)])
    return f"{DIGEST_SCHEME}:{root.hex()}"


def parse_digest(document: object) -> str | None:
    """The digest an index.json document records, None when it records none. ValueError when
    the value is not one (bounded: the pattern admits exactly one shape)."""
    if not isinstance(document, dict) or DIGEST_KEY not in document:
        return None
    value = document[DIGEST_KEY]
    if value is None:  # written as null (a tool copying the key): none recorded, as when it is absent
        return None
    if not isinstance(value, str) or not _DIGEST_RE.match(value):
        raise ValueError(f"its {DIGEST_KEY!r} is not a {DIGEST_SCHEME} digest: {value!r:.80}")
    return value


def differing_chunks(a: Sequence[ChunkEntry], b: Sequence[ChunkEntry]) -> list[tuple[int, int, int]]:
    """Where two datasets' items differ, as ``(first item, end item, chunk position in a)``
    ranges of ``a``'s items, comparing chunk leaves in order. Chunks are compared while both
    cut the items at the same places; from the first place they cut differently (or lack a
    checksum), everything after is reported as one range."""
    out: list[tuple[int, int, int]] = []
    start = 0
    for position, (x, y) in enumerate(zip(a, b)):
        end = start + x.chunk_size
        same_cut = x.chunk_size == y.chunk_size and x.checksum is not None and y.checksum is not None
        if not same_cut:
            total = max(sum(e.chunk_size for e in a), sum(e.chunk_size for e in b))
            return [*out, (start, total, position)]
        if x.checksum != y.checksum:
            out.append((start, end, position))
        start = end
    if len(a) != len(b):
        total = max(sum(e.chunk_size for e in a), sum(e.chunk_size for e in b))
        out.append((start, total, min(len(a), len(b))))
    return out


def _leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()
