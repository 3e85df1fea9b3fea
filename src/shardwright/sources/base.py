"""What every source is: a lazy, sliceable, picklable sequence of inputs made of *units*
(files, or a whole Hugging Face dataset), each with an identity (name, version) and a row
count. Only metadata lives in the driver; rows are read where they are needed (a worker
reading its shard), a block at a time.

The engine uses three things of a source and nothing else:

* ``len()``, indexing and slicing (``source[a:b]`` is a lazy view of the same class,
  pickled as its own metadata, never as rows);
* :meth:`Source.units`: per unit overlapping this view ``(name, version, first row,
  rows)``: the source's identity (its fingerprint and, row by row, what incremental runs
  compare), never a pickle of the rows;
* the optional run-state hooks :meth:`Source.state_name`, :meth:`Source.load_state` and
  :meth:`Source.dump_state` (a JSONL line index built once and kept with the run).
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from ..errors import InputsError

__all__ = ["BadRow", "Source", "UnitIdentity"]


@dataclass(frozen=True)
class UnitIdentity:
    """One unit of a source as far as this view covers it."""

    name: str  # URL or absolute path (or "hf:<fingerprint>")
    version: str  # etag / generation / size-mtime_ns / the dataset's fingerprint
    first: int  # the first of its rows this view covers
    rows: int  # how many of its rows this view covers


@dataclass(frozen=True)
class BadRow:
    """An input that could not be read (a JSONL line that is not UTF-8 JSON, a parquet row
    group that does not decode). The worker fails this input with :meth:`error` (on_error
    and retries apply) instead of calling fn; a ``blank`` one (a blank JSONL line) is no
    input at all: fn is not called and nothing fails."""

    where: str  # "file:line"
    problem: str
    blank: bool = False
    fix: str = "fix or remove that line"

    def error(self, *, skipping: bool = False) -> ValueError:
        """``skipping``: the run has on_error='skip' already, so the message does not advise it
        (trust round 11 row 40)."""
        advice = "" if skipping else " (or pass on_error='skip')"
        return ValueError(f"{self.where}: {self.problem}; {self.fix}{advice}")


class Source(Sequence):
    """Base of every source; subclasses give the unit table and how to read a block."""

    kind = "source"

    def __init__(self) -> None:
        self._start = 0
        self._stop: int | None = None  # None: to the end of the source
        self._cache: tuple[int, int, list] | None = None  # (unit, first row, rows) last read

    # -- what subclasses provide ---------------------------------------------------------

    def _unit_rows(self) -> Sequence[int]:
        """Rows of every unit of the whole source, in order."""
        raise NotImplementedError

    def _unit_identity(self, unit: int) -> tuple[str, str]:
        """(name, version) of a unit."""
        raise NotImplementedError

    def _read_block(self, unit: int, row: int) -> tuple[int, list]:
        """(first row, rows) of a block of ``unit`` holding ``row``: a row group, a run of
        lines; bounded so a worker holds one block at a time."""
        raise NotImplementedError

    # -- the optional run-state hooks (a JSONL line index) ---------------------------------

    def state_name(self) -> str | None:
        """A name for state worth keeping with the run, or None (the default: nothing)."""
        return None

    def load_state(self, data: bytes) -> bool:
        """Use state a run kept (True), or refuse it as not matching (False)."""
        return False

    def dump_state(self) -> bytes:
        return b""

    # -- the sequence ---------------------------------------------------------------------

    def _offsets(self) -> list[int]:
        offsets = self.__dict__.get("_offsets_cache")
        if offsets is None:
            offsets = [0]
            for rows in self._unit_rows():
                offsets.append(offsets[-1] + rows)
            self.__dict__["_offsets_cache"] = offsets
        return offsets

    def _bounds(self) -> tuple[int, int]:
        total = self._offsets()[-1]
        stop = total if self._stop is None else min(self._stop, total)
        return self._start, max(self._start, stop)

    def __len__(self) -> int:
        start, stop = self._bounds()
        return stop - start

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Source: ...
    def __getitem__(self, index: int | slice) -> Any:
        start, stop = self._bounds()
        if isinstance(index, slice):
            a, b, step = index.indices(stop - start)
            if step != 1:
                raise InputsError(f"a source can be sliced with step 1 only, got step {step}")
            return self._view(start + a, start + max(a, b))
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError(f"source indices must be int or slice, not {type(index).__name__}")
        if index < 0:
            index += stop - start
        if not 0 <= index < stop - start:
            raise IndexError(f"source index {index} out of range ({stop - start} inputs)")
        return self._row(start + index)

    def _row(self, position: int) -> Any:
        offsets = self._offsets()
        unit = bisect.bisect_right(offsets, position) - 1
        row = position - offsets[unit]
        cached = self._cache
        if cached is None or cached[0] != unit or not cached[1] <= row < cached[1] + len(cached[2]):
            first, rows = self._read_block(unit, row)
            cached = self._cache = (unit, first, rows)
        return cached[2][row - cached[1]]

    def __iter__(self) -> Iterator[Any]:
        start, stop = self._bounds()
        for position in range(start, stop):
            yield self._row(position)

    def _view(self, start: int, stop: int) -> Source:
        view = copy.copy(self)
        vars(view).update(_start=start, _stop=stop, _cache=None)  # the copy's own bounds
        vars(view).pop("_columns_cache", None)
        return view

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_cache"] = None  # rows are never pickled
        state.pop("_columns_cache", None)  # rebuilt where needed (never in a worker)
        return state

    # -- identity -----------------------------------------------------------------------

    def units(self) -> Iterator[UnitIdentity]:
        """Each unit this view covers, with the rows it covers (see the module docstring)."""
        start, stop = self._bounds()
        offsets = self._offsets()
        unit = max(0, bisect.bisect_right(offsets, start) - 1)
        while unit < len(offsets) - 1 and offsets[unit] < stop:
            first = max(start, offsets[unit])
            last = min(stop, offsets[unit + 1])
            if last > first or offsets[unit + 1] == offsets[unit]:
                name, version = self._unit_identity(unit)
                yield UnitIdentity(name, version, first - offsets[unit], last - first)
            unit += 1

    def unit_columns(self) -> tuple[list[str], list[str], list[int], list[int]]:
        """:meth:`units` as four columns (names, versions, first rows, rows), computed once
        per source object: the fingerprint and the identities of a run both need them."""
        cached = self.__dict__.get("_columns_cache")
        if cached is None:
            names, versions, firsts, rows = [], [], [], []
            for u in self.units():
                names.append(u.name)
                versions.append(u.version)
                firsts.append(u.first)
                rows.append(u.rows)
            cached = self.__dict__["_columns_cache"] = (names, versions, firsts, rows)
        return cached

    def describe(self) -> str:
        return f"{self.kind} source of {len(self):,} inputs"

    def __repr__(self) -> str:
        return f"<shardwright {self.describe()}>"
