"""Input identities: what a run's inputs were, compactly, so that ``mode="incremental"``
knows which inputs a dataset already holds, and a resume names the file that changed.

Identity of one input
=====================
* A plain value: its *canonical fingerprint* (8 bytes of xxh3 over its canonical pickle;
  a str or bytes over its type and value; an int: splitmix64 of its value), version 0.
* A row of a source (``shardwright.sources``): the *unit* it comes from (a file, or a
  Hugging Face dataset) by name and version (etag, generation, size+mtime_ns, the dataset
  fingerprint), and its row number in that unit. A ``FileRef`` is a unit with one row.

The unit table (``.shardwright/inputs/{gen:08d}.units``)
=========================================================
Written when a run is created (by the node that created the manifest; any node that
resumes and misses it writes the same bytes again, since a resume has the same inputs): the
identity of every input of the *call* (all of its inputs, not only those this run
processes), as parallel arrays of 8-byte numbers: key hash, version hash, and for sources
the first row and row count of each unit. So a plain input costs 16 bytes, a source 32
bytes per file (not per row): 10M plain inputs are 160 MB, 10M rows in 100 files 3 KB.

The selection (``.shardwright/inputs/{gen:08d}.json``)
=======================================================
Written by the publisher right before index.json (step 4; the same bytes again after a
crash): which positions of the call's inputs the run put into the dataset, as ranges: all
of them (mode None or append), the retried ids (a retry), the new ones (incremental), minus
the inputs that failed and were skipped (so a later incremental run retries them), and
``partial``: those of them whose first outputs are in the dataset (a generator that failed
midway) with how many, which the retry skips.

The dataset's recorded inputs are the (units, selection) pairs of every generation up to
the last finished run's (``run.json``); generations above it belong to an unfinished or
abandoned run and are ignored (a new run of that generation writes both files again).
Readers of index.json never read these files; a dataset whose every chunk generation has a
selection is *recorded*, and only a recorded dataset can be updated incrementally (or one
made by a single run whose inputs are a prefix of the new ones: see ``decide``).
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import xxhash

from ..errors import CorruptStateError
from ..storage import Storage
from .fingerprint import InputsFingerprint, StablePickler, canonical, value_types
from .hints import START_OVER
from .layout import INPUTS_PREFIX, selection_key, units_key
from .manifest import Manifest

__all__ = [
    "IdentityTable",
    "UnitColumns",
    "UnitLike",
    "IncrementalPlan",
    "plan_incremental",
    "read_recorded",
    "selected_positions",
    "units_fingerprint",
    "write_selection",
    "write_units",
]

_MAGIC = b"SWUNITS1"
_MULT = np.uint64(0x9E3779B97F4A7C15)
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
    """splitmix64 of int64 values (as uint64): the identity of a plain int, vectorised."""
    with np.errstate(over="ignore"):
        z = values.astype(np.int64, copy=False).view(np.uint64) + _INT_SEED  # a new array: the rest in place
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
        return z


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


def values_hashes(inputs: Sequence, *, types: frozenset[type] | None = None) -> np.ndarray:
    """value_hash of every input, a block at a time (ints vectorised, str through xxh3).
    ``types``: :func:`~.fingerprint.value_types` of ``inputs``, if the caller has it."""
    if type(inputs) is range and len(inputs) and _within_int64(inputs):
        # range(N), the commonest input: its values without a Python int each
        return _mix_ints(np.arange(inputs.start, inputs.stop, inputs.step, dtype=np.int64))
    if types is None:
        types = value_types(inputs)
    if types == {int}:  # a list of ints: one conversion (a value past int64 goes block by block)
        try:
            return _mix_ints(np.fromiter(inputs, dtype=np.int64, count=len(inputs)))
        except OverflowError:
            pass
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
        if kinds == {str}:
            digest, seed = xxhash.xxh3_64_intdigest, _STR_SEED
            out[start : start + len(values)] = [digest(v.encode("utf-8", "surrogatepass"), seed) for v in values]
            continue
        pickled = _Pickled()
        out[start : start + len(values)] = [
            value_hash(v) if type(v) in (int, str, bytes) else pickled.hash(v) for v in values
        ]
    return out


def _within_int64(values: range) -> bool:
    low, high = -(2**63), 2**63 - 1
    return low <= values[0] <= high and low <= values[-1] <= high


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
    def of_values(cls, inputs: Sequence, *, types: frozenset[type] | None = None) -> IdentityTable:
        keys = values_hashes(inputs, types=types)
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


# --- storage --------------------------------------------------------------------------------


def write_units(storage: Storage, generation: int, table: IdentityTable, *, only_if_missing: bool) -> None:
    key = units_key(generation)
    if only_if_missing and storage.exists(key):
        return
    storage.write_parts(key, table.to_parts())


def subtract(ranges: list[list[int]], ids: Iterable[int]) -> list[list[int]]:
    """``ranges`` (sorted, disjoint [a, b)) without the positions ``ids``."""
    cuts = sorted(set(ids))
    out: list[list[int]] = []
    k = 0
    for a, b in ranges:
        while k < len(cuts) and cuts[k] < a:
            k += 1
        while k < len(cuts) and cuts[k] < b:
            if cuts[k] > a:
                out.append([a, cuts[k]])
            a = cuts[k] + 1
            k += 1
        if a < b:
            out.append([a, b])
    return out


def to_ranges(ids: Iterable[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for i in ids:
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return out


def selected_positions(manifest: Manifest, failed: Iterable[int]) -> list[list[int]]:
    """The positions of the call's inputs a run put into the dataset: the ones it ran (all,
    a retry's ids, an incremental run's ranges) minus those that failed and were skipped."""
    return subtract(_ran(manifest), failed)


def _ran(manifest: Manifest) -> list[list[int]]:
    """The ranges of positions of the call's inputs a run ran, in order."""
    if manifest.input_ranges is not None:
        return [list(r) for r in manifest.input_ranges]
    if manifest.input_ids is not None:
        return to_ranges(sorted(manifest.input_ids))
    return [[0, manifest.num_inputs]] if manifest.num_inputs else []


def write_selection(
    storage: Storage, generation: int, count: int, selected: list[list[int]], partial: list[list[int]] | None = None
) -> None:
    """Step 4's companion, written right before index.json: what this generation added, and
    ``partial``: [position, outputs committed] of the failed inputs whose first outputs are
    in the dataset (a generator that failed midway), so an incremental retry skips those."""
    record = {"generation": generation, "count": count, "selected": selected, "partial": partial or []}
    data = json.dumps(record, separators=(",", ":"))
    storage.write_bytes(selection_key(generation), data.encode())


@dataclass
class Recorded:
    """What a dataset's recorded inputs are (see the module docstring)."""

    generations: list[int]
    tables: list[IdentityTable]
    selections: list[list[list[int]]]
    partials: list[list[list[int]]] | None = None  # per generation: [position, outputs committed]


def read_selection(storage: Storage, generation: int) -> tuple[list[list[int]], list[list[int]]]:
    """(selected ranges, partial pairs) of one generation's selection. Raises
    FileNotFoundError when it has none, CorruptStateError when it is not what write_selection
    writes."""
    key = selection_key(generation)
    raw = storage.read_bytes(key)
    try:
        selection = json.loads(raw)
        ranges = selection["selected"]
        partial = selection.get("partial", [])
        ok = isinstance(ranges, list) and all(
            isinstance(r, list) and len(r) == 2 and all(type(x) is int and x >= 0 for x in r) and r[0] < r[1]
            for r in ranges
        )
        ok = (
            ok
            and isinstance(partial, list)
            and all(isinstance(r, list) and len(r) == 2 and all(type(x) is int and x >= 0 for x in r) for r in partial)
        )
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise CorruptStateError(f"input selection {storage.url}/{key} is damaged or was edited by hand; {START_OVER}")
    return ranges, partial


def read_recorded(storage: Storage, up_to: int) -> Recorded:
    """Every generation <= ``up_to`` with both a unit table and a selection."""
    present = set(storage.list(INPUTS_PREFIX))
    recorded = Recorded([], [], [])
    names = {key[len(INPUTS_PREFIX) :].split(".", 1)[0] for key in present}
    for generation in sorted(int(n) for n in names if n.isdigit() and len(n) <= 12 and int(n) <= up_to):
        s_key, u_key = selection_key(generation), units_key(generation)
        if s_key not in present or u_key not in present:
            continue
        ranges, partial = read_selection(storage, generation)
        table = IdentityTable.from_bytes(storage.read_bytes(u_key), f"{storage.url}/{u_key}")
        if ranges and ranges[-1][1] > table.count:
            raise CorruptStateError(
                f"input selection {storage.url}/{s_key} names inputs its unit table lacks; {START_OVER}"
            )
        recorded.generations.append(generation)
        recorded.tables.append(table)
        recorded.selections.append(ranges)
        if partial:
            recorded.partials = recorded.partials or [[] for _ in recorded.generations[:-1]]
            recorded.partials.append(partial)
        elif recorded.partials is not None:
            recorded.partials.append([])
    return recorded


def skipped_by_selection(manifest: Manifest, selected: list[list[int]], partial: list[list[int]]) -> list[list[int]]:
    """[position, outputs committed] of the inputs a published run failed and skipped, from its
    selection (what publish.published_failures falls back on): the inputs it ran (selected_positions)
    that the selection leaves out, with the outputs ``partial`` says they committed."""
    committed = {position: outputs for position, outputs in partial}
    failed: list[list[int]] = []
    k = 0
    for a, b in _ran(manifest):  # both ascending; the loop steps over selected ranges whole
        position = a
        while position < b:
            while k < len(selected) and selected[k][1] <= position:
                k += 1
            if k < len(selected) and selected[k][0] <= position:
                position = selected[k][1]
                continue
            gap_end = min(b, selected[k][0]) if k < len(selected) else b
            failed.extend([p, committed.get(p, 0)] for p in range(position, gap_end))
            position = gap_end
    return failed


# --- the incremental plan --------------------------------------------------------------------


@dataclass(frozen=True)
class IncrementalPlan:
    new: list[list[int]]  # ranges of positions of the call's inputs to process
    present: int  # inputs already in the dataset (skipped)
    changed: list[int]  # units of the new table whose content changed since they were added
    removed: int  # recorded inputs (units) no longer among the inputs (kept in the dataset)
    skips: tuple[tuple[int, int], ...] = ()  # (new position, outputs already in the dataset) of retried inputs


def _combined(keys: np.ndarray, versions: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return keys ^ (versions * _MULT + np.uint64(1))


def _selected_units(table: IdentityTable, ranges: list[list[int]]) -> np.ndarray:
    """Indices of the one-row units the ranges select."""
    if not ranges:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges])


def _spans(table: IdentityTable, ranges: list[list[int]]) -> Iterable[tuple[int, int, int]]:
    """(unit, first row, rows) pieces of the selected positions of a source's table."""
    rows = table.rows if table.rows is not None else np.ones(len(table.keys), np.uint64)
    firsts = table.firsts if table.firsts is not None else np.zeros(len(table.keys), np.uint64)
    offsets = np.concatenate([[0], np.cumsum(rows.astype(np.int64))])
    for a, b in ranges:
        unit = int(np.searchsorted(offsets, a, side="right")) - 1
        while a < b and unit < len(rows):
            end = min(b, int(offsets[unit + 1]))
            if end > a:
                yield unit, int(firsts[unit]) + a - int(offsets[unit]), end - a
            a = end
            unit += 1


def plan_incremental(recorded: Recorded, table: IdentityTable) -> IncrementalPlan:
    """Which of the call's inputs (``table``) are not in the dataset yet, counting repeated
    inputs by occurrence, in input order; a retried input whose first outputs are in the
    dataset (it failed midway) carries how many to skip."""
    one_row = table.rows is None and all(t.rows is None for t in recorded.tables)
    plan = _plan_one_row(recorded, table) if one_row else _plan_spans(recorded, table)
    if not recorded.partials or not any(recorded.partials):
        return plan
    return IncrementalPlan(
        plan.new, plan.present, plan.changed, plan.removed, _partial_skips(recorded, table, plan.new)
    )


def _unit_arrays(table: IdentityTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(table.keys)
    rows = table.rows.astype(np.int64) if table.rows is not None else np.ones(n, np.int64)
    firsts = table.firsts.astype(np.int64) if table.firsts is not None else np.zeros(n, np.int64)
    return firsts, rows, np.concatenate([[0], np.cumsum(rows)])


def _partial_skips(recorded: Recorded, table: IdentityTable, new: list[list[int]]) -> tuple[tuple[int, int], ...]:
    """Match each recorded partial input (by unit identity and row) to one new position."""
    firsts, rows, offsets = _unit_arrays(table)
    starts = [a for a, _ in new]
    taken: dict[int, int] = {}
    for old, partial in zip(recorded.tables, recorded.partials or []):
        o_firsts, _o_rows, o_offsets = _unit_arrays(old)
        for position, skip in partial:
            if skip <= 0 or position >= int(o_offsets[-1]):
                continue
            unit = int(np.searchsorted(o_offsets, position, side="right")) - 1
            row = int(o_firsts[unit]) + position - int(o_offsets[unit])
            same = np.flatnonzero((table.keys == old.keys[unit]) & (table.versions == old.versions[unit]))
            for u in same.tolist():
                if not firsts[u] <= row < firsts[u] + rows[u]:
                    continue
                candidate = int(offsets[u]) + row - int(firsts[u])
                k = bisect.bisect_right(starts, candidate) - 1
                if candidate not in taken and k >= 0 and candidate < new[k][1]:
                    taken[candidate] = skip
                    break
    return tuple(sorted(taken.items()))


def _plan_one_row(recorded: Recorded, table: IdentityTable) -> IncrementalPlan:
    picks = [_selected_units(t, s) for t, s in zip(recorded.tables, recorded.selections)]
    old_k = np.concatenate([t.keys[p] for t, p in zip(recorded.tables, picks)] or [np.zeros(0, np.uint64)])
    old_v = np.concatenate([t.versions[p] for t, p in zip(recorded.tables, picks)] or [np.zeros(0, np.uint64)])
    old_c = _combined(old_k, old_v)
    new_c = _combined(table.keys, table.versions)
    n = len(new_c)
    uniq, counts = np.unique(old_c, return_counts=True)
    order = np.argsort(new_c, kind="stable")
    ordered = new_c[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]])) if n else np.zeros(0, np.int64)
    sizes = np.diff(np.concatenate([starts, [n]]))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - np.repeat(starts, sizes)
    where = np.searchsorted(uniq, new_c)
    where_ok = np.minimum(where, max(0, len(uniq) - 1))
    known = (where < len(uniq)) & (uniq[where_ok] == new_c) if len(uniq) else np.zeros(n, bool)
    available = np.where(known, counts[where_ok] if len(uniq) else 0, 0)
    present = rank < available
    fresh = np.flatnonzero(~present)
    changed = fresh[~known[fresh] & np.isin(table.keys[fresh], old_k)]
    removed = int((~np.isin(np.unique(old_k), table.keys)).sum())
    return IncrementalPlan(to_ranges(int(i) for i in fresh), int(present.sum()), [int(i) for i in changed], removed)


def _plan_spans(recorded: Recorded, table: IdentityTable) -> IncrementalPlan:
    old: dict[tuple[int, int], list[tuple[int, int]]] = {}
    old_keys: dict[int, set[int]] = {}  # key -> the versions recorded
    for t, selection in zip(recorded.tables, recorded.selections):
        for unit, first, span_rows in _spans(t, selection):
            k, v = int(t.keys[unit]), int(t.versions[unit])
            old.setdefault((k, v), []).append((first, span_rows))
            old_keys.setdefault(k, set()).add(v)
    new_ranges: list[list[int]] = []
    changed: list[int] = []
    present = 0
    position = 0
    rows = table.rows if table.rows is not None else np.ones(len(table.keys), np.uint64)
    firsts = table.firsts if table.firsts is not None else np.zeros(len(table.keys), np.uint64)
    seen_keys = set()
    for unit in range(len(table.keys)):
        k, v = int(table.keys[unit]), int(table.versions[unit])
        seen_keys.add(k)
        first, count = int(firsts[unit]), int(rows[unit])
        spans = old.get((k, v), [])
        taken: list[tuple[int, int]] = []
        kept = []
        for span in spans:  # each recorded span covers one occurrence: take non-overlapping ones
            s0, s1 = span[0], span[0] + span[1]
            if s1 > first and s0 < first + count and all(s1 <= t0 or s0 >= t1 for t0, t1 in taken):
                taken.append((s0, s1))
            else:
                kept.append(span)
        if spans:
            old[(k, v)] = kept
        covered = sorted((max(s0, first), min(s1, first + count)) for s0, s1 in taken)
        cursor = first
        missing: list[tuple[int, int]] = []
        for s0, s1 in covered:
            if s0 > cursor:
                missing.append((cursor, s0))
            cursor = max(cursor, s1)
        if cursor < first + count:
            missing.append((cursor, first + count))
        present += count - sum(b - a for a, b in missing)
        if missing and not spans and v not in old_keys.get(k, {v}):
            changed.append(unit)
        for a, b in missing:
            lo, hi = position + a - first, position + b - first
            if new_ranges and new_ranges[-1][1] == lo:
                new_ranges[-1][1] = hi
            else:
                new_ranges.append([lo, hi])
        position += count
    removed = sum(1 for k in old_keys if k not in seen_keys)
    return IncrementalPlan(new_ranges, present, changed, removed)
