"""Recorded inputs: the files in which every run records the identities of its inputs
(:mod:`.identity`), and reading them back.

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

import json
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import CorruptStateError
from ..storage import Storage
from .hints import START_OVER
from .identity import IdentityTable
from .jsonio import read_state
from .layout import INPUTS_PREFIX, selection_key, units_key
from .manifest import Manifest

__all__ = [
    "Recorded",
    "read_recorded",
    "read_selection",
    "selected_positions",
    "skipped_by_selection",
    "subtract",
    "to_ranges",
    "write_selection",
    "write_units",
]


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
    raw = read_state(storage, key, "input selection")
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
    except (ValueError, KeyError, TypeError, RecursionError):
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
        table = IdentityTable.from_bytes(read_state(storage, u_key, "input identities"), f"{storage.url}/{u_key}")
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
