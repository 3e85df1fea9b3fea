"""ParallelStreamingDataset: several datasets zipped sample by sample (litdata's name), resumable.

The epoch is a sequence of ``L`` tuples. Tuple ``t`` holds, from each dataset ``d`` of ``N_d``
items, the item at position ``g % N_d`` of that dataset's order in cycle ``g // N_d``, where
``g`` counts tuples since the first epoch (``resume=True``: an epoch goes on where the last one
stopped) or since this epoch's start (``resume=False``: every epoch the same tuples). A cycle's
order is the dataset's own epoch order (its shuffle, seed and window) for epoch number = the
cycle; without ``length`` there is no cycling: ``L`` is the shortest dataset and epoch ``e``
reads each dataset's epoch-``e`` order.

The tuple positions ``0 .. L-1`` are then split among ranks and workers, saved and resumed
exactly like a single dataset's items (see :mod:`.resume`): on the same layout, or cut anew on
another. ``transform``'s random generators are seeded by (seed, epoch, position), so a resumed
or re-split epoch draws the same numbers for the same tuple.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import ArgumentTypeError, ResumeStateError, UsageError
from .members import (
    MemberStates,
    MemberZip,
    Tagged,
    ZipStart,
    check_members,
    forward,
    member_lens,
    prepared,
    restore_members,
    rngs_for,
)
from .members import share as member_share
from .order import EpochSequence, iter_segment
from .partition import rank_range
from .positional import PositionalResumable
from .torch_bases import IterableBase as _IterableBase
from .torch_bases import OverDatasets
from .torch_bases import worker_info as _worker_info

__all__ = ["ParallelStreamingDataset"]

_BLOCK = 1024  # tuple positions read per step


def _tuples_given(members: list, counts: list[int], cycles: list[int]) -> int:
    """Tuples a worker had given: the items of a member that never cycled, or of one whose
    length is known, all its cycles counted."""
    for d, n in enumerate(counts):
        if cycles[d] == 0:
            return n
    for d, member in enumerate(members):
        size = member_lens([member])[0]
        if size:
            return cycles[d] * size[0] + counts[d]
    return counts[0]  # every member cycled and none has a length: the count starts again


class ParallelStreamingDataset(MemberStates, OverDatasets, PositionalResumable, _IterableBase):
    """Several :class:`StreamingDataset` objects read in parallel: each sample is a tuple of
    one sample of each (litdata's ``ParallelStreamingDataset``).

    Args:
        datasets: the datasets (at least one): StreamingDatasets, or, as litdata takes them,
            iterable datasets (litdata's protocol) and plain iterables (a range, a list),
            iterated as they are (see :mod:`.members`).
        length: None: one pass, as long as the shortest dataset; an int: that many tuples per
            epoch, shorter datasets cycling (each cycle in a new order when they shuffle).
        force_override_state_dict: litdata's option; refused (a state always matches here).
        transform: ``transform(samples)`` or ``transform(samples, rngs)`` where ``rngs`` is
            ``{"random": random.Random, "numpy": numpy Generator, "torch": torch.Generator}``
            seeded by (seed, epoch, tuple position): applied in the reading process.
        seed: the seed of transform's generators.
        resume: with ``length``: True goes on in each epoch where the last stopped, False
            reads the same tuples every epoch.
        reset_rngs: True seeds the generators by position only (the same numbers every epoch).

    Raises:
        ArgumentTypeError (a TypeError): an element cannot be iterated, or a flag is not a bool.
        UsageError (a ValueError): no datasets, ``length`` not None or an int >= 1 (an infinite
            epoch cannot be split into resumable shares: pass the number of samples to read),
            a transform of other than 1 or 2 arguments, or force_override_state_dict=True.
    """

    def __init__(
        self,
        datasets: list[Any],
        length: int | float | None = None,
        force_override_state_dict: bool = False,
        transform: Callable[..., Any] | None = None,
        seed: int = 42,
        resume: bool = True,
        reset_rngs: bool = False,
    ):
        datasets = list(datasets)
        if not datasets:
            raise UsageError("ParallelStreamingDataset needs at least one dataset")
        ours = check_members(datasets, "ParallelStreamingDataset")
        if length == float("inf"):
            raise UsageError(
                "length=float('inf') is refused: an endless epoch cannot be split into resumable shares; pass the "
                "number of samples to read (an int), and iterate the loader again for more"
            )
        if length is not None and (type(length) is not int or length < 1):
            raise UsageError(f"length must be None or an int >= 1, got {length!r:.60}")
        for name, flag in (("force_override_state_dict", force_override_state_dict), ("resume", resume),
                           ("reset_rngs", reset_rngs)):  # fmt: skip
            if type(flag) is not bool:
                raise ArgumentTypeError(f"{name} must be True or False, got {flag!r:.60}")
        if force_override_state_dict:
            raise UsageError(
                "force_override_state_dict=True is refused: a state applies only to the datasets and options it was "
                "saved with; resume with those"
            )
        if type(seed) is not int or seed < 0:
            raise UsageError(f"seed must be a non-negative int, got {seed!r:.60}")
        nargs = None
        if transform is not None:
            nargs = sum(
                p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)
                for p in inspect.signature(transform).parameters.values()
            )
            if nargs not in (1, 2):
                raise UsageError(
                    f"transform function must take 1 or 2 arguments: (samples) or (samples, rngs); it takes {nargs}"
                )
        self.datasets = prepared(datasets)
        # members other than StreamingDatasets: read as iterables, resumed by their own state
        self._members = not ours
        self.own_epoch = None if ours else 0
        self._member_iter: MemberZip | None = None
        # (items_read skips, items given by each worker, cycles by worker) of a loaded state
        self._member_resume: tuple[dict[int, int], dict[int, list[int]], dict[int, list[int]]] | None = None
        self.saves_members = not ours  # StreamingDataLoader saves it in litdata's loader format
        self._tag = False  # under a StreamingDataLoader: samples carry their worker's counts
        self.length, self.transform, self.seed = length, transform, seed
        self.resume, self.reset_rngs = resume, reset_rngs
        self._nargs = nargs

    # --- the sequence of tuples ------------------------------------------------------------

    @property
    def plan_size(self) -> int:
        """Tuples in an epoch."""
        sizes = [d.plan_size for d in self.datasets]
        if self.length is None or min(sizes) == 0:
            return min(sizes)
        return self.length

    def _cycle_base(self, epoch: int) -> int:
        return epoch * self.plan_size if self.length is not None and self.resume else 0

    def _ids(self, d: int, epoch: int, lo: int, hi: int) -> list[int]:
        """Items of dataset ``d`` for tuple positions ``[lo, hi)`` of ``epoch``."""
        ds = self.datasets[d]
        n = ds.plan_size
        groups = [end - start for _k, start, end in ds.regions]
        if sum(groups) != n:  # token blocks: the dataset is one group, ordered whole
            groups = [n]
        out: list[int] = []
        if self.length is None:
            pieces = [(epoch, lo, hi)]
        else:
            g, end, pieces = self._cycle_base(epoch) + lo, self._cycle_base(epoch) + hi, []
            while g < end:
                cycle, p = divmod(g, n)
                take = min(end - g, n - p)
                pieces.append((cycle, p, p + take))
                g += take
        for order_epoch, a, b in pieces:
            seq = EpochSequence(groups, ds.order_spec, order_epoch)
            for _groups, ids in iter_segment(seq, (0, n, a, b)):
                out.extend(ids.tolist())
        return out

    def _rngs(self, epoch: int, position: int) -> dict:
        return rngs_for((self.seed, position) if self.reset_rngs else (self.seed, epoch, position))

    def _read(self, epoch: int, lo: int, hi: int) -> Iterator[Any]:
        for start in range(lo, hi, _BLOCK):
            end = min(hi, start + _BLOCK)
            columns = [self._ids(d, epoch, start, end) for d in range(len(self.datasets))]
            for k, ids in enumerate(zip(*columns)):
                samples = tuple(ds[i] for ds, i in zip(self.datasets, ids))
                if self.transform is None:
                    yield samples
                elif self._nargs == 1:
                    yield self.transform(samples)
                else:
                    yield self.transform(samples, self._rngs(epoch, start + k))

    # --- iteration -------------------------------------------------------------------------

    def __len__(self) -> int:
        """This rank's tuples in an epoch."""
        if self._members:
            if self.length is not None:
                return self.length
            sizes, missing = member_lens(self.datasets)
            if missing is not None:
                raise TypeError(f"dataset {missing} of this ParallelStreamingDataset has no len()")
            return min(sizes)
        start, end = rank_range(self.plan_size, self.layout(1), self.datasets[0].rank)
        return end - start

    def __iter__(self) -> Iterator[Any]:
        info = _worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if self._members:
            return self._iter_members(worker, workers)
        if info is None:
            self.set_epoch(self.epoch)  # refreshes rank / world size in this process
        epoch = self.epoch
        rank = self.datasets[0].rank  # as of the set_epoch above (workers: as the main process saw it)
        runs = self.stream_runs(epoch, workers, worker, rank, info is None)
        return (sample for lo, hi in runs for sample in self._read(epoch, lo, hi))

    def _iter_members(self, worker: int, workers: int) -> Iterator[Any]:
        epoch, seed = self.epoch, self.seed
        base = epoch * self.length if self.length is not None and self.resume else 0

        def rng_key(position: int) -> tuple:
            # the worker too: a member that does not split among workers gives each the same items
            return (seed, worker, base + position) if self.reset_rngs else (seed, epoch, worker, base + position)

        members = [member_share(d, worker, workers) for d in self.datasets]
        resume, self._member_resume = self._member_resume, None  # applied once: the next iteration starts afresh
        start = None
        if resume is not None:
            skips, by_worker, cycles_by_worker = resume
            counts = by_worker.get(worker)
            if counts is not None:
                cycles = cycles_by_worker.get(worker, [0] * len(members))
                start = ZipStart({i: counts[i] for i in skips}, counts, cycles, _tuples_given(members, counts, cycles))
            elif not by_worker:
                start = ZipStart(skips, [0] * len(members), [0] * len(members), 0)
        zipped = MemberZip(members, self.length, self.transform, self._nargs, rng_key, start)
        self._member_iter = zipped
        if self._tag:
            return (Tagged(x, worker, list(zipped.yielded), list(zipped.cycles)) for x in zipped)
        return zipped

    def load_state_dict(self, state: dict) -> None:
        """Hand each member its part of a :meth:`state_dict` (litdata's dataset-level protocol)."""
        self._require_members("resumed with StreamingDataLoader.load_state_dict()")
        skips, by_worker = restore_members(self.datasets, state)
        cycles = state.get("num_cycles") if isinstance(state, dict) else None
        by_worker_cycles = {int(w): list(c) for w, c in cycles.items()} if isinstance(cycles, dict) else {}
        self._member_resume = (skips, by_worker, by_worker_cycles)

    def _no_loader_state(self) -> None:
        if self._members:
            raise ResumeStateError(
                "epoch_report() and shardwright's compact state cover a ParallelStreamingDataset of StreamingDatasets "
                "only; a zip of other members is saved by StreamingDataLoader.state_dict() in litdata's format"
            )

    def epoch_start(self, epoch: int, num_workers: int) -> Any:
        if self._members:
            forward(self.datasets, "set_num_workers", num_workers)
            return None
        return super().epoch_start(epoch, num_workers)

    def position_after(self, epoch: int, start: Any, batches: int) -> dict:
        self._no_loader_state()
        return super().position_after(epoch, start, batches)

    def fresh_position(self, epoch: int, num_workers: int) -> dict:
        self._no_loader_state()
        return super().fresh_position(epoch, num_workers)

    def check_position(self, position: object) -> int:
        self._no_loader_state()
        return super().check_position(position)

    def clear_resume(self) -> None:
        if not self._members:
            super().clear_resume()

    # --- Resumable: StreamingDataLoader's save and resume (the rest in PositionalResumable) ---

    def identity(self) -> dict:
        if self._members:
            return {"parallel_members": [type(d).__name__ for d in self.datasets], "length": self.length}
        return {"parallel": [d.identity() for d in self.datasets], "length": self.length, "resume": self.resume}

    def loader_view(self, shuffle: bool | None = None, drop_last: bool | None = None) -> ParallelStreamingDataset:
        if self._members:
            return self._member_view(shuffle, drop_last)
        if shuffle is None and drop_last is None:
            return self
        view = copy.copy(self)
        view.datasets = [d.loader_view(shuffle=shuffle, drop_last=drop_last) for d in self.datasets]
        return view

    def configure_loader(self, batch_size: int, drop_last: bool) -> None:
        self._loader_drop_last = drop_last
        if self._members:
            self._tag = True
            forward(self.datasets, "set_batch_size", batch_size)
            forward(self.datasets, "set_drop_last", drop_last)
            return
        for d in self.datasets:
            d.configure_loader(batch_size, drop_last)
