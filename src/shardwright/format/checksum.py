"""Chunk checksums: a hash of every chunk file's bytes as stored (compressed where the dataset
is compressed), computed by the writer from the bytes it is about to write (no second pass)
and stored in index.json's chunk entries as an extra ``"checksum"`` field, which litdata's
readers ignore.

The format is ``"<algorithm>:<hex digest>"``. The algorithm is xxHash's XXH3 with a 128-bit
digest: XXH3 was the fastest candidate measured on this project's machine
(benchmarks/bench_checksum.py, GB/s over 64 MB, best of 5; two runs: xxh3_128 15.5 / 25.7,
xxh3_64 12.8 / 25.9, crc32c 12.3 / 18.2, xxh64 6.6 / 10.0, zlib.crc32 1.7 / 2.1, blake2b
0.9 / 0.95), and its 128-bit form costs nothing more. ``xxh3_64`` digests (the first datasets
with checksums) are still checked.

It detects accidental damage (bit rot, truncation, a chunk copied over another); it is not
a signature: whoever can write the dataset can also rewrite its index.
"""

from __future__ import annotations

import re
from typing import Any  # any buffer: bytes, memoryview, mmap

import xxhash

from ..errors import CorruptStateError

__all__ = [
    "CHECKSUM_ALGORITHM",
    "ChecksumMismatch",
    "chunk_checksum",
    "check_checksum",
    "parse_checksum",
    "parts_checksum",
]

CHECKSUM_ALGORITHM = "xxh3_128"
_ALGORITHMS = {"xxh3_128": xxhash.xxh3_128_hexdigest, "xxh3_64": xxhash.xxh3_64_hexdigest}
_CHECKSUM_RE = re.compile(r"^([a-z0-9_]{1,16}):([0-9a-f]{1,128})$")


class ChecksumMismatch(CorruptStateError):
    """A chunk's bytes do not have the checksum index.json records for it."""


def chunk_checksum(data: Any) -> str:
    """The checksum to record for a chunk whose stored bytes are ``data``."""
    return f"{CHECKSUM_ALGORITHM}:{_ALGORITHMS[CHECKSUM_ALGORITHM](data)}"


def parts_checksum(parts: list[Any]) -> str:
    """:func:`chunk_checksum` of the concatenation of ``parts``, without making it."""
    hasher = xxhash.xxh3_128()
    for part in parts:
        hasher.update(part)
    return f"{CHECKSUM_ALGORITHM}:{hasher.hexdigest()}"


def parse_checksum(value: object) -> str | None:
    """A recorded checksum as read from index.json: None when absent; ValueError when it is not
    ``"<algorithm>:<hex>"`` (bounded, so a hand-made index cannot smuggle in anything else)."""
    if value is None:
        return None
    if not isinstance(value, str) or not _CHECKSUM_RE.match(value):
        raise ValueError(f"checksum {value!r:.80} is not '<algorithm>:<hex digest>'")
    algorithm = value.partition(":")[0]
    if algorithm not in _ALGORITHMS:
        # never read as "no checksum": a check that silently stops checking proves nothing
        raise ValueError(_unknown_algorithm(algorithm))
    return value


def _unknown_algorithm(algorithm: str) -> str:
    return (
        f"checksum algorithm {algorithm!r} is not one this version of shardwright checks "
        f"({', '.join(_ALGORITHMS)}): upgrade shardwright, or read with a version that knows it"
    )


def can_check(checksum: str | None) -> bool:
    """Whether ``checksum`` is one to check (parse_checksum refuses the algorithms this version lacks)."""
    return checksum is not None and checksum.partition(":")[0] in _ALGORITHMS


def check_checksum(data: Any, checksum: str | None, name: str, fix: str) -> None:
    """Raise :class:`ChecksumMismatch` naming the chunk ``name`` and ``fix`` when ``data`` does not
    have ``checksum``; nothing to check when it is None. An algorithm this version lacks is an
    error naming it (parse_checksum refuses it first), never a check skipped."""
    if checksum is None:
        return
    algorithm, _, expected = checksum.partition(":")
    if algorithm not in _ALGORITHMS:
        raise CorruptStateError(f"chunk file {name}: {_unknown_algorithm(algorithm)}")
    actual = _ALGORITHMS[algorithm](data)
    if actual != expected:
        raise _mismatch(name, algorithm, actual, expected, fix)


def _mismatch(name: str, algorithm: str, actual: str, expected: str, fix: str) -> ChecksumMismatch:
    return ChecksumMismatch(
        f"chunk file {name} is damaged: its bytes have {algorithm} checksum {actual}, index.json records "
        f"{expected} (bit rot, a bad copy, or a chunk replaced by hand); {fix}"
    )
