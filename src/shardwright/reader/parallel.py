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
import hashlib
import inspect
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, UsageError
from .dataset import StreamingDataset, as_iterable
from .order import EpochSequence, iter_segment
from .partition import rank_range
from .positional import PositionalResumable
from .torch_bases import IterableBase as _IterableBase
from .torch_bases import OverDatasets
from .torch_bases import worker_info as _worker_info

__all__ = ["ParallelStreamingDataset"]

_BLOCK = 1024  # tuple positions read per step


class ParallelStreamingDataset(OverDatasets, PositionalResumable, _IterableBase):
    """Several :class:`StreamingDataset` objects read in parallel: each sample is a tuple of
    one sample of each (litdata's ``ParallelStreamingDataset``).

    Args:
        datasets: the datasets (at least one).
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
        ArgumentTypeError (a TypeError): an element is not a StreamingDataset, or a flag is not a bool.
        UsageError (a ValueError): no datasets, ``length`` not None or an int >= 1 (an infinite
            epoch cannot be split into resumable shares: pass the number of samples to read),
            a transform of other than 1 or 2 arguments, or force_override_state_dict=True.
    """

    def __init__(
        self,
        datasets: list[StreamingDataset],
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
        for d in datasets:
            if not isinstance(d, StreamingDataset):
                raise ArgumentTypeError(
                    f"ParallelStreamingDataset zips StreamingDataset objects, got {type(d).__name__}"
                )
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
                raise UsageError(f"transform must take 1 argument (samples) or 2 (samples, rngs), it takes {nargs}")
        self.datasets = [as_iterable(d) for d in datasets]
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
        import torch

        key = (self.seed, position) if self.reset_rngs else (self.seed, epoch, position)
        seed = int(hashlib.sha256(str(key).encode()).hexdigest(), 16) % (2**32 - 1)
        return {
            "random": random.Random(seed),  # not for secrets: reproducible augmentation
            "numpy": np.random.default_rng(seed),
            "torch": torch.Generator().manual_seed(seed),
        }

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
        start, end = rank_range(self.plan_size, self.layout(1), self.datasets[0].rank)
        return end - start

    def __iter__(self) -> Iterator[Any]:
        info = _worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if info is None:
            self.set_epoch(self.epoch)  # refreshes rank / world size in this process
        epoch = self.epoch
        rank = self.datasets[0].rank  # as of the set_epoch above (workers: as the main process saw it)
        runs = self.stream_runs(epoch, workers, worker, rank, info is None)
        return (sample for lo, hi in runs for sample in self._read(epoch, lo, hi))

    # --- Resumable: StreamingDataLoader's save and resume (the rest in PositionalResumable) ---

    def identity(self) -> dict:
        return {"parallel": [d.identity() for d in self.datasets], "length": self.length, "resume": self.resume}

    def loader_view(self, shuffle: bool | None = None, drop_last: bool | None = None) -> ParallelStreamingDataset:
        if shuffle is None and drop_last is None:
            return self
        view = copy.copy(self)
        view.datasets = [d.loader_view(shuffle=shuffle, drop_last=drop_last) for d in self.datasets]
        return view

    def configure_loader(self, batch_size: int, drop_last: bool) -> None:
        self._loader_drop_last = drop_last
        for d in self.datasets:
            d.configure_loader(batch_size, drop_last)
