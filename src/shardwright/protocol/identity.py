"""Input identities: what a run's inputs were, compactly, so that ``mode="incremental"``
knows which inputs a dataset already holds, and a resume names the file that changed.

Identity of one input
=====================
* A plain value: its *canonical fingerprint* (8 bytes of xxh3 over its canonical pickle;
  a str or bytes over its type and value; an int: splitmix64 of its value), version 0.
* A row of a source (``shardwright.sources``): the *unit* it comes from (a file, or a
  Hugging Face dataset) by name and version (etag, generation, size+mtime_ns, the dataset
  fingerprint), and its row number in that unit. A ``FileRef`` is a unit with one row.

The records each run writes of them are in :mod:`.recorded`, the incremental plan over them
in :mod:`.incremental`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Protocol

import numpy as np
import xxhash

from ..errors import CorruptStateError
from .fingerprint import InputsFingerprint, StablePickler, canonical, value_types
from .hints import START_OVER
from .int_blocks import int64_values

__all__ = [
    "IdentityTable",
    "UnitColumns",
    "UnitLike",
    "units_fingerprint",
    "value_hash",
    "values_hashes",
]

_MAGIC = b"SWUNITS1"
MAX_UNITS = 2**40


class UnitLike(Protocol):
    """What :meth:`shardwright.sources.Source.units` yields."""

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def first(self) -> int: ...
    @property
    def rows(self) -> int: ...


def _h8(data: bytes) -> int:
    return xxhash.xxh3_64_intdigest(data)  # a unit's name or version


_INT_SEED = np.uint64(0x5157_3A11_D3C0_FFEE)


def _mix_ints(values: np.ndarray) -> np.ndarray:
    """splitmix64 of int64 values (as uint64): the identity of a plain int, vectorised, in
    place in one new array, 64k values at a time (a slice that stays in the cache while its
    eight passes run: three times faster than whole-array passes at 200k inputs)."""
    z = values.astype(np.int64, copy=False).view(np.uint64) + _INT_SEED  # a new array: the rest in place
    scratch = np.empty(min(len(z), _MIX_SLICE), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, len(z), _MIX_SLICE):
            part = z[start : start + _MIX_SLICE]
            t = scratch[: len(part)]
            part ^= np.right_shift(part, np.uint64(30), out=t)
            part *= np.uint64(0xBF58476D1CE4E5B9)
            part ^= np.right_shift(part, np.uint64(27), out=t)
            part *= np.uint64(0x94D049BB133111EB)
            part ^= np.right_shift(part, np.uint64(31), out=t)
    return z


_MIX_SLICE = 65_536


def value_hash(value: object) -> int:
    """The canonical fingerprint of one plain input (equal values, equal hashes, in any process)."""
    kind = type(value)
    if kind is int and -(2**63) <= value < 2**63:  # type: ignore[operator]
        return int(_mix_ints(np.array([value], dtype=np.int64))[0])
    if kind is str:
        return xxhash.xxh3_64_intdigest(value.encode("utf-8", "surrogatepass"), _STR_SEED)  # type: ignore[attr-defined]
    if kind is bytes:
        return xxhash.xxh3_64_intdigest(value, _BYTES_SEED)  # type: ignore[arg-type]
    return _Pickled().hash(value)


_STR_SEED, _BYTES_SEED, _PICKLE_SEED = 1, 2, 3


class _Pickled:
    """Hashes of values' canonical pickles, with one reusable memo-less pickler."""

    def __init__(self) -> None:
        self.pickler = StablePickler()

    def hash(self, value: object) -> int:
        return xxhash.xxh3_64_intdigest(self.pickler.dumps(canonical(value)), _PICKLE_SEED)


def values_hashes(
    inputs: Sequence, *, types: frozenset[type] | None = None, ints: np.ndarray | None = None
) -> np.ndarray:
    """value_hash of every input, a block at a time (ints vectorised, str and bytes through
    xxh3). ``types``: :func:`~.fingerprint.value_types` of ``inputs``, if the caller has it;
    ``ints``: ``int_blocks.int64_values`` of them, if the caller has it."""
    if types is None:
        types = value_types(inputs)
    if ints is None:  # range(N), the commonest input, or a list of ints: one conversion
        ints = int64_values(inputs, types)  # (None: a value past int64 goes block by block)
    if ints is not None and len(ints) == len(inputs):
        return _mix_ints(ints)
    # one kind throughout: every block has it; else each block's own (the hashes are the same
    # whichever path a value takes, the paths differ only in speed)
    known = types if types is not None and len(types) == 1 else None
    out = np.empty(len(inputs), dtype=np.uint64)
    block = 65_536
    for start in range(0, len(inputs), block):
        values = inputs[start : start + block]
        kinds = known if known is not None else set(map(type, values))
        if kinds == {int}:
            try:
                out[start : start + len(values)] = _mix_ints(np.array(values, dtype=np.int64))
                continue
            except OverflowError:
                pass
        if kinds == {str}:  # C-level iteration: encode, then hash
            encoded = map(str.encode, values, repeat("utf-8"), repeat("surrogatepass"))
            out[start : start + len(values)] = np.fromiter(
                map(xxhash.xxh3_64_intdigest, encoded, repeat(_STR_SEED)), np.uint64, len(values)
            )
            continue
        if kinds == {bytes}:
            out[start : start + len(values)] = np.fromiter(
                map(xxhash.xxh3_64_intdigest, values, repeat(_BYTES_SEED)), np.uint64, len(values)
            )
            continue
        pickled = _Pickled()
        out[start : start + len(values)] = [
            value_hash(v) if type(v) in (int, str, bytes) else pickled.hash(v) for v in values
        ]
    return out


@dataclass
class IdentityTable:
    """Identities of a call's inputs: one entry per unit (a plain input is a unit of one row)."""

    keys: np.ndarray  # uint64 hash of the name (plain input: of the value)
    versions: np.ndarray  # uint64 hash of the version (plain input: 0)
    firsts: np.ndarray | None = None  # sources: first row of the unit covered; None: all 0
    rows: np.ndarray | None = None  # sources: rows of the unit covered; None: all 1
    names: list[str] | None = None  # in memory only (sources): for messages

    @property
    def count(self) -> int:
        """Inputs covered (rows)."""
        return int(self.rows.sum()) if self.rows is not None else len(self.keys)

    @classmethod
    def of_values(
        cls, inputs: Sequence, *, types: frozenset[type] | None = None, ints: np.ndarray | None = None
    ) -> IdentityTable:
        keys = values_hashes(inputs, types=types, ints=ints)
        return cls(keys, np.zeros(len(keys), dtype=np.uint64))

    @classmethod
    def of_units(cls, units: Iterable[UnitLike]) -> IdentityTable:
        return cls.of_columns(UnitColumns.of(units))

    @classmethod
    def of_columns(cls, columns: UnitColumns) -> IdentityTable:
        """A source's table; units of one row each (a listing of files) are stored as plain
        entries (16 bytes each), the others with their first row and row count."""
        digest = xxhash.xxh3_64_intdigest
        u64 = np.uint64
        keys = np.fromiter((digest(n.encode("utf-8", "surrogatepass")) for n in columns.names), u64, len(columns.names))
        versions = np.fromiter(
            (digest(v.encode("utf-8", "surrogatepass")) | 1 for v in columns.versions), u64, len(columns.versions)
        )  # | 1: never 0, the version of a plain value
        firsts, rows = np.array(columns.firsts, dtype=u64), np.array(columns.rows, dtype=u64)
        if len(rows) and not firsts.any() and bool((rows == 1).all()):
            return cls(keys, versions, names=columns.names)
        return cls(keys, versions, firsts, rows, columns.names)

    def to_parts(self) -> list:
        """The table's file as parts, its columns as they are in memory where they already
        are little-endian uint64 (no copy: 2M inputs are 32 MB, which three copies made
        0.2 s of the call's start, issue 19). ``b"".join`` of them is :meth:`to_bytes`."""
        sources = self.rows is not None
        head = _MAGIC + np.array([len(self.keys), int(sources)], dtype="<u8").tobytes()
        columns = [self.keys, self.versions]
        if self.rows is not None:
            columns += [self.firsts if self.firsts is not None else np.zeros(len(self.keys), np.uint64), self.rows]
        return [head, *(np.ascontiguousarray(c, dtype="<u8").data for c in columns)]

    def to_bytes(self) -> bytes:
        return b"".join(self.to_parts())

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> IdentityTable:
        bad = CorruptStateError(f"input identities {where} are damaged or were edited by hand; {START_OVER}")
        if len(data) < 24 or data[:8] != _MAGIC:
            raise bad
        n, sources = (int(x) for x in np.frombuffer(data, "<u8", 2, 8))
        width = 4 if sources else 2
        if sources not in (0, 1) or n > MAX_UNITS or len(data) != 24 + 8 * width * n:
            raise bad
        arrays = [np.frombuffer(data, "<u8", n, 24 + 8 * n * k).astype(np.uint64) for k in range(width)]
        if sources:
            return cls(arrays[0], arrays[1], arrays[2], arrays[3])
        return cls(arrays[0], arrays[1])


@dataclass(frozen=True)
class UnitColumns:
    """A source's units as columns (cheaper than one object per file of a large listing)."""

    names: list[str]
    versions: list[str]
    firsts: list[int]
    rows: list[int]

    @classmethod
    def of(cls, units: Iterable[UnitLike]) -> UnitColumns:
        columns = cls([], [], [], [])
        for u in units:
            columns.names.append(u.name)
            columns.versions.append(u.version)
            columns.firsts.append(u.first)
            columns.rows.append(u.rows)
        return columns


def units_fingerprint(units: Sequence[UnitLike] | UnitColumns, count: int) -> InputsFingerprint:
    """The fingerprint of a source from its units' metadata (never its rows): one hash per
    block of rows over the identities of the units it overlaps, with a block size that
    keeps the blocks at most 4,096 (10M rows: 2,442 rows per block)."""
    columns = units if isinstance(units, UnitColumns) else UnitColumns.of(units)
    names, versions, firsts, rows = columns.names, columns.versions, columns.firsts, columns.rows
    block = max(256, -(-count // 4096))
    hashes = []
    unit, offset = 0, 0  # offset: global row of unit's first covered row
    for start in range(0, count, block):
        stop = min(start + block, count)
        digest = hashlib.blake2b(digest_size=8)
        while unit < len(rows) and offset + rows[unit] <= start:
            offset += rows[unit]
            unit += 1
        k, at = unit, offset
        while k < len(rows) and at < stop:
            digest.update(f"{names[k]}\0{versions[k]}\0{firsts[k]}\0{rows[k]}\0{max(0, start - at)}\n".encode())
            at += rows[k]
            k += 1
        hashes.append(digest.hexdigest())
    return InputsFingerprint(count=count, block_size=block, block_hashes="".join(hashes))
