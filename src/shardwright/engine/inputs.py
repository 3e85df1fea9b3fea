"""What the engine does with a call's inputs, behind one interface chosen once
(:func:`run_inputs`): a plain sequence (:class:`PlainInputs`, fingerprinted by pickling) or
a source (:class:`SourceInputs`, ``shardwright.sources``: fingerprinted by its metadata,
read lazily by workers); the identities every run records; and the inputs of an
incremental run (ranges of positions of the call's inputs)."""

from __future__ import annotations

import abc
import bisect
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from ..errors import CorruptStateError
from ..names import input_name
from ..process import host_identity
from ..protocol.decide import Request
from ..protocol.fingerprint import InputFiles, InputsFingerprint, value_types
from ..protocol.identity import IdentityTable, UnitColumns, units_fingerprint
from ..protocol.int_blocks import int64_values
from ..protocol.jsonio import read_state
from ..protocol.layout import source_state_key, units_key
from ..protocol.manifest import Manifest, read_manifest
from ..protocol.recorded import subtract, write_selection, write_units
from ..sources import Source
from ..storage import Storage
from .edited import check_input_files, source_file_changed

log = logging.getLogger("shardwright")


def run_inputs(inputs: Sequence) -> RunInputs:
    """The call's inputs as the one object the engine asks about them: the one place their
    kind is looked at."""
    return SourceInputs(inputs) if isinstance(inputs, Source) else PlainInputs(inputs)


class RunInputs(abc.ABC):
    """What the engine does with a call's inputs, whatever their kind (as the reader's
    ``Resumable``; pyarrow's InMemoryDataset / FileSystemDataset): ``values`` is the sequence
    itself, which shards are cut from."""

    def __init__(self, values: Sequence):
        self.values = values

    def __len__(self) -> int:
        return len(self.values)

    def __reduce__(self) -> tuple:
        return (type(self), (self.values,))  # what was computed of them stays with the driver

    @abc.abstractmethod
    def fingerprint(self) -> InputsFingerprint:
        """What identifies the whole sequence (a run's ``inputs``)."""

    def prefix_fingerprint(self) -> Callable[[int], InputsFingerprint]:
        """The fingerprint of the first n inputs (an incremental run finds the dataset's own)."""
        return lambda n: type(self)(self.values[:n]).fingerprint()

    @abc.abstractmethod
    def identities(self) -> IdentityTable:
        """The unit table every run records (protocol.identity)."""

    def input_files(self) -> dict | None:
        """Size and mtime of inputs that are file paths, checked when a run resumes."""
        return None

    def check_before_writing(self) -> None:
        """What can be refused before the output is opened (nothing is written yet)."""

    def load_state(self, storage: Storage) -> bool:
        """Take the state an earlier attempt of this run kept (True if taken)."""
        return False

    def save_state(self, storage: Storage) -> None:
        """Keep what a later attempt can load."""

    def check_unchanged(self, storage: Storage) -> None:
        """Before ``decide``: name an input that changed since the interrupted run started."""

    def check_files(self, storage: Storage, manifest: Manifest, url: str) -> None:
        """On a resume: refuse inputs whose files changed since the run started."""

    def shard(
        self, manifest: Manifest, lo: int, hi: int, shared: SharedInputs | None = None
    ) -> tuple[Sequence, Sequence | None]:
        """(values, run-wide ids or None) of a shard's positions ``lo..hi`` of this run (by
        reference when ``shared`` holds the values for forked workers)."""
        values = self.values
        if (
            shared is not None
            and shared.values is values
            and manifest.input_ranges is None
            and manifest.input_ids is None
        ):
            return InheritedSlice(shared.token, lo, hi), None
        if manifest.input_ranges is not None:
            ids = RangeIds(manifest.input_ranges)[lo:hi]
            return self._joined([values[a:b] for a, b in ids.ranges]), ids
        if manifest.input_ids is not None:
            ids_list = manifest.input_ids[lo:hi]
            return [values[i] for i in ids_list], ids_list
        return self._slice(lo, hi), None

    @abc.abstractmethod
    def _joined(self, parts: list[Sequence]) -> Sequence: ...

    @abc.abstractmethod
    def _slice(self, lo: int, hi: int) -> Sequence: ...

    def shared_for(self, start_method: str) -> contextlib.AbstractContextManager[SharedInputs | None]:
        """The values registered for the workers about to be forked (:func:`shared_inputs`)."""
        return contextlib.nullcontext()

    def display_name(self, index: int) -> str:
        """Input ``index`` in the user's terms (shardwright.names: a file's path, a source
        row's file and row, else a bounded repr); ``?`` outside the inputs."""
        return input_name(self.values, index) if 0 <= index < len(self.values) else "?"


class PlainInputs(RunInputs):
    """A plain sequence: fingerprinted by pickling its values, which tasks carry (or forked
    workers inherit)."""

    def __init__(self, values: Sequence):
        super().__init__(values)
        self._types: frozenset[type] | None = None
        self._typed = False
        self._fingerprint: InputsFingerprint | None = None
        self._identities: IdentityTable | None = None
        self._ints: np.ndarray | None = None  # the values as int64, while fingerprint and identities need them

    def types(self) -> frozenset[type] | None:
        """The values' types, looked at once (protocol.fingerprint.value_types) for every
        function over them."""
        if not self._typed:
            self._types, self._typed = value_types(self.values), True
            self._ints = int64_values(self.values, self._types)
        return self._types

    def fingerprint(self) -> InputsFingerprint:
        if self._fingerprint is None:
            self._fingerprint = InputsFingerprint.of(self.values, types=self.types(), ints=self._ints)
            if self._identities is not None:
                self._ints = None
        return self._fingerprint

    def identities(self) -> IdentityTable:
        if self._identities is None:
            self._identities = IdentityTable.of_values(self.values, types=self.types(), ints=self._ints)
            if self._fingerprint is not None:
                self._ints = None
        return self._identities

    def input_files(self) -> dict | None:
        files = InputFiles.of(self.values, types=self.types())
        # the host: another node may see the same inputs as node-local copies with other mtimes
        return {**files.to_json(), "host": host_identity()} if files is not None else None

    def check_before_writing(self) -> None:
        self.fingerprint()  # pickles every value: an input that cannot be pickled is refused now

    def check_files(self, storage: Storage, manifest: Manifest, url: str) -> None:
        ids: Sequence[int] | None = None
        if manifest.input_ranges is not None:
            ids = RangeIds(manifest.input_ranges)
        elif manifest.input_ids is not None:
            ids = manifest.input_ids
        check_input_files(storage, manifest, self.values, url, ids)  # engine.edited: only over committed outputs

    def _joined(self, parts: list[Sequence]) -> Sequence:
        return [v for part in parts for v in part]

    def _slice(self, lo: int, hi: int) -> Sequence:
        if type(self.values) is range:  # a range's slice is a range: nothing to copy or pickle
            return self.values[lo:hi]
        return list(self.values[lo:hi])

    def shared_for(self, start_method: str) -> contextlib.AbstractContextManager[SharedInputs | None]:
        return shared_inputs(self.values, start_method)


class SourceInputs(RunInputs):
    """A source (``shardwright.sources``): fingerprinted by its units' metadata, read lazily
    by the workers (a shard's values are a lazy slice), with a state a JSONL source keeps."""

    values: Source

    def fingerprint(self) -> InputsFingerprint:
        return units_fingerprint(self._units(), len(self.values))

    def identities(self) -> IdentityTable:
        return IdentityTable.of_columns(self._units())

    def _units(self) -> UnitColumns:
        """The source's units (read once per source object: fingerprint and identities share them)."""
        return UnitColumns(*self.values.unit_columns())

    def load_state(self, storage: Storage) -> bool:
        name = self.values.state_name()
        if name is None:
            return False
        try:
            data = read_state(storage, source_state_key(name), "source line index")
        except FileNotFoundError:
            return False
        except CorruptStateError as exc:  # a cache: rebuilt by one pass over the files
            log.warning("%s; it is rebuilt", exc)
            return False
        return self.values.load_state(data)

    def save_state(self, storage: Storage) -> None:
        name = self.values.state_name()
        if name is not None and not storage.exists(source_state_key(name)):
            storage.write_bytes(source_state_key(name), self.values.dump_state())

    def check_unchanged(self, storage: Storage) -> None:
        manifest = read_manifest(storage)
        if manifest is None:
            return
        try:
            data = read_state(storage, units_key(manifest.generation), "input identities")
        except FileNotFoundError:
            return
        recorded = IdentityTable.from_bytes(data, f"{storage.url}/{units_key(manifest.generation)}")
        if not recorded.versions.any():
            return  # the run was over a plain sequence (versions 0): its fingerprint says what differs
        was = dict(zip(recorded.keys.tolist(), recorded.versions.tolist()))
        now = self.identities()
        rows = now.rows.tolist() if now.rows is not None else [1] * len(now.keys)
        for unit, (key, version) in enumerate(zip(now.keys.tolist(), now.versions.tolist())):
            if key in was and was[key] != version:
                name = now.names[unit] if now.names else f"unit {unit}"
                ids = RangeIds(manifest.input_ranges) if manifest.input_ranges is not None else manifest.input_ids
                raise source_file_changed(storage, manifest, name, sum(rows[:unit]), rows[unit], ids)

    def _joined(self, parts: list[Sequence]) -> Sequence:
        return Concat(parts)

    def _slice(self, lo: int, hi: int) -> Sequence:
        return self.values[lo:hi]


# --- identities: recorded by every run ----------------------------------------------------------


def record_identities(
    storage: Storage, manifest: Manifest, inputs: RunInputs, created: bool, table: IdentityTable | None = None
) -> None:
    """The unit table of this run's generation (protocol.identity): written by the node that
    created the run, and by any later attempt that finds it missing (the same bytes).
    ``table``: ``inputs.identities()`` when the caller has it (an incremental request's)."""
    if not created and storage.exists(units_key(manifest.generation)):
        return  # a resume: written when the run was created
    write_units(
        storage, manifest.generation, table if table is not None else inputs.identities(), only_if_missing=False
    )


def backfill_identities(storage: Storage, backfill: tuple, request: Request) -> None:
    """Record the identities of a dataset's one unrecorded run (whose inputs are the first
    ``count`` of this call's): the call's unit table under its generation, and the positions
    it put in the dataset (all but its failed inputs). True of the dataset whatever becomes of
    the incremental run, so written before it starts."""
    generation, count, failed = backfill
    table = request.identities
    if table is None:
        return
    selected = subtract([[0, count]] if count else [], [pair[0] for pair in failed])
    partial = [list(pair) for pair in failed if pair[1] > 0]
    write_units(storage, generation, table, only_if_missing=False)
    write_selection(storage, generation, count, selected, partial)


# --- the inputs of an incremental run ---------------------------------------------------------


class RangeIds(Sequence):
    """The positions ``ranges`` (sorted [a, b) pairs) name, as one sequence of ints."""

    def __init__(self, ranges: Sequence[Sequence[int]]):
        self.ranges = [(int(a), int(b)) for a, b in ranges]
        self.starts = [0]
        for a, b in self.ranges:
            self.starts.append(self.starts[-1] + b - a)

    def __len__(self) -> int:
        return self.starts[-1]

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> RangeIds: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            lo, hi, _ = i.indices(len(self))
            return RangeIds(self.sub_ranges(lo, hi))
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        k = bisect.bisect_right(self.starts, i) - 1
        return self.ranges[k][0] + i - self.starts[k]

    def sub_ranges(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The ranges of the positions from the lo-th to the hi-th."""
        out = []
        k = max(0, bisect.bisect_right(self.starts, lo) - 1)
        while k < len(self.ranges) and self.starts[k] < hi:
            a = self.ranges[k][0] + max(0, lo - self.starts[k])
            b = self.ranges[k][0] + min(hi, self.starts[k + 1]) - self.starts[k]
            if b > a:
                out.append((a, b))
            k += 1
        return out

    def __iter__(self) -> Iterator[int]:
        for a, b in self.ranges:
            yield from range(a, b)


class Concat(Sequence):
    """Slices of the inputs one after the other, without copying them (lazy for a source)."""

    def __init__(self, parts: list[Sequence]):
        self.parts = parts
        self.starts = [0]
        for part in parts:
            self.starts.append(self.starts[-1] + len(part))

    def __len__(self) -> int:
        return self.starts[-1]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        k = bisect.bisect_right(self.starts, i) - 1
        return self.parts[k][i - self.starts[k]]


def shard_skips(manifest: Manifest, ids: Sequence | None, lo: int, hi: int) -> list | None:
    """Outputs already in the dataset of each input of a shard's positions ``lo..hi`` (a
    retry's input_skips, an incremental run's range_skips), or None when there are none."""
    if manifest.input_skips:
        return manifest.input_skips[lo:hi]
    if manifest.range_skips and ids is not None:
        skips = {p: k for p, k in manifest.range_skips}
        return [skips.get(i, 0) for i in ids]
    return None


# --- a plain list's values, passed to forked workers by reference ------------------------------

_SHARED: dict[int, list] = {}  # token -> a run's inputs, while its pool of forked workers runs
_TOKENS = itertools.count(1)


@dataclass(frozen=True)
class SharedInputs:
    """A list of inputs registered for the workers a pool forks (see :func:`shared_inputs`)."""

    token: int
    values: list


class InheritedSlice(Sequence):
    """Positions ``lo..hi`` of a list registered with :func:`shared_inputs`, sent as three
    ints: a forked worker inherited the registry and unpickles it as the list's slice. Issue
    19: pickling each shard's values through the task queue cost main and the workers 0.5 ms
    per shard of 25k ints, 4 ms per shard of 25k file paths."""

    __slots__ = ("token", "lo", "hi")

    def __init__(self, token: int, lo: int, hi: int):
        self.token, self.lo, self.hi = token, lo, hi

    def __reduce__(self) -> tuple:
        return (_inherited, (self.token, self.lo, self.hi))

    def __len__(self) -> int:
        return self.hi - self.lo

    @overload
    def __getitem__(self, i: int) -> Any: ...
    @overload
    def __getitem__(self, i: slice) -> list: ...
    def __getitem__(self, i: Any) -> Any:
        return _inherited(self.token, self.lo, self.hi)[i]


def _inherited(token: int, lo: int, hi: int) -> list:
    values = _SHARED.get(token)
    if values is None:  # only a process forked while the run's pool was starting has them
        raise RuntimeError(
            f"the inputs {lo}..{hi} of a task were sent by reference to a process that did not fork from its run"
        )
    return values[lo:hi]


@contextlib.contextmanager
def shared_inputs(inputs: Sequence, start_method: str) -> Iterator[SharedInputs | None]:
    """Register a plain list of inputs for the workers about to be forked (None, and nothing
    registered, for any other inputs or start method: their tasks carry the values). The
    workers see the list as it was when they were forked, which is the list the tasks are
    cut from: optimize() holds the caller until it returns."""
    if start_method != "fork" or type(inputs) is not list:
        yield None
        return
    token = next(_TOKENS)
    _SHARED[token] = inputs
    try:
        yield SharedInputs(token, inputs)
    finally:
        del _SHARED[token]
