"""The incremental plan (``mode="incremental"``): which of a call's inputs (their identities,
:mod:`.identity`) a dataset's recorded inputs (:mod:`.recorded`) do not hold yet. Pure: no storage."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .identity import IdentityTable
from .recorded import Recorded, to_ranges

__all__ = ["IncrementalPlan", "input_kind", "plan_incremental"]

_MULT = np.uint64(0x9E3779B97F4A7C15)


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


def input_kind(tables: list[IdentityTable]) -> str | None:
    """``"values"`` (plain inputs: version 0), ``"rows of a source"``, or None when the tables
    hold neither or both. A value and a source's row never have the same identity, so the same
    data moved from a list to a source (or back) matches nothing."""
    kinds = set()
    for table in tables:
        if len(table.versions):
            plain = table.versions == 0
            if plain.any():
                kinds.add("values")
            if not plain.all():
                kinds.add("rows of a source")
    return kinds.pop() if len(kinds) == 1 else None
