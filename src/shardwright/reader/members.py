"""Members of a CombinedStreamingDataset / ParallelStreamingDataset that are not (all)
StreamingDatasets: iterable datasets following litdata's dataset protocol (``set_epoch``,
``set_shuffle``, ``set_drop_last``, ``set_batch_size``, ``set_num_workers``, ``state_dict``,
``load_state_dict``, each optional) and plain sized iterables (a ``range``, a list).

Such a member is read by iterating it. Its order, shuffle and resume are its own (the setters
are forwarded to it where it has them, as litdata does); only a plain sequence (a ``range``,
list or tuple) is split among DataLoader workers here, by stride, so that each of its items
is read once per epoch and not once per worker. The exact, layout-independent resume of
StreamingDatasets needs every member to be one: with any other member the mix and the zip
are resumed through the members' own ``state_dict`` (litdata's dataset-level protocol), and a
mix also through StreamingDataLoader, in litdata's loader format (on the same worker count).
"""

from __future__ import annotations

import copy
import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, UsageError
from .dataset import StreamingDataset, as_iterable

__all__ = [
    "MemberMix",
    "MemberStates",
    "MemberZip",
    "check_members",
    "forward",
    "member_lens",
    "member_states",
    "restore_members",
    "share",
    "skipped",
    "Tagged",
    "TaggedBatch",
    "collate_tagged",
    "ZipStart",
]


def check_members(datasets: list, owner: str) -> bool:
    """True if every dataset is a StreamingDataset (the exact-resume path); otherwise check
    that each one can be iterated, refusing what cannot, in one line naming the fix."""
    for i, d in enumerate(datasets):
        if isinstance(d, StreamingDataset):
            continue
        if isinstance(d, (str, bytes, dict)) or not callable(getattr(d, "__iter__", None)):
            raise ArgumentTypeError(
                f"{owner} reads StreamingDatasets, iterable datasets or sized iterables (a range, a list); element "
                f"{i} is a {type(d).__name__}, which is not one: pass a list of its items or an IterableDataset"
            )
    return all(isinstance(d, StreamingDataset) for d in datasets)


def prepared(datasets: list) -> list:
    """The members as read: ours as iterable views, the others as given."""
    return [as_iterable(d) if isinstance(d, StreamingDataset) else d for d in datasets]


def forward(datasets: list, name: str, *args: Any) -> None:
    """Call ``name(*args)`` on every member that has it (litdata's protocol: all optional)."""
    for d in datasets:
        method = getattr(d, name, None)
        if callable(method):
            method(*args)


def member_len(d: Any) -> int | None:
    try:
        return len(d)
    except TypeError:  # an iterable without a length
        return None


def member_lens(datasets: list, sizes_of_ours: bool = False) -> tuple[list[int], int | None]:
    """The members' lengths and the index of the first without ``len()`` (None: all have one).
    ``sizes_of_ours``: a StreamingDataset's whole size, not this rank's share."""
    sizes = []
    for i, d in enumerate(datasets):
        n = d.plan_size if sizes_of_ours and isinstance(d, StreamingDataset) else member_len(d)
        if n is None:
            return [], i
        sizes.append(n)
    return sizes, None


def share(d: Any, stream: int, streams: int) -> Any:
    """What worker ``stream`` of ``streams`` reads of member ``d``: a stride of a plain
    sequence, the member itself otherwise (it splits among workers itself, or not at all)."""
    if streams > 1 and isinstance(d, Sequence) and not isinstance(d, (str, bytes)):
        return d[stream::streams]
    return d


def member_states(datasets: list, counts: list[int] | None, num_workers: int, batch_size: int) -> dict:
    """litdata's dataset-level state: ``{"i": member.state_dict(...)}`` for members that have
    one; ``{"i": {"items_read": n}}`` for the others (a range, a list: skipped on resume)."""
    if counts is None:
        return {}
    out = {}
    for i, d in enumerate(datasets):
        method = getattr(d, "state_dict", None)
        if callable(method):
            out[str(i)] = method(num_workers=num_workers, batch_size=batch_size, num_samples_yielded=counts[i])
        else:
            out[str(i)] = {"items_read": counts[i]}
    return out


class MemberStates:
    """litdata's dataset-level ``state_dict`` of a mix or zip (CombinedStreamingDataset,
    ParallelStreamingDataset) of members other than StreamingDatasets; one of StreamingDatasets
    is saved and resumed by the loader instead (exact on any layout)."""

    datasets: list
    _members: bool
    _member_iter: Any

    def _require_members(self, how: str) -> None:
        if not self._members:
            raise UsageError(f"a {type(self).__name__} of StreamingDatasets is {how}")

    def _member_view(self, shuffle: bool | None, drop_last: bool | None) -> Any:
        """The loader's view of a mix or zip of other members: litdata's protocol hands the
        loader's options to each member that takes them; a copy sharing the members (the
        loader's one tags its samples, this object stays plain)."""
        if shuffle is not None:
            forward(self.datasets, "set_shuffle", shuffle)
        if drop_last is not None:
            forward(self.datasets, "set_drop_last", drop_last)
        return copy.copy(self)

    def state_dict(
        self, num_workers: int = 0, batch_size: int = 1, num_samples_yielded: list[int] | None = None
    ) -> dict:
        """Each member's own ``state_dict`` (``{}`` before the first iteration)."""
        self._require_members(
            "saved with StreamingDataLoader.state_dict() (exact, on any num_workers): iterate it with a "
            "StreamingDataLoader"
        )
        counts = num_samples_yielded
        if counts is None and self._member_iter is not None:
            counts = self._member_iter.yielded
        return member_states(self.datasets, counts, num_workers, batch_size)


def restore_members(datasets: list, state: dict) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Hand each member its part of ``state`` (``{"dataset": {"i": ...}}`` or ``{"i": ...}``).
    Returns the items to skip of members without ``load_state_dict``, and the items each
    member had given in each reading process (litdata's ``num_samples_yielded``, by worker),
    from which a mix replays its draws and such members skip what they gave."""
    parts = state.get("dataset", state) if isinstance(state, dict) else None
    if not isinstance(parts, dict):
        raise ArgumentTypeError(f"load_state_dict takes a dict of member states, got {type(state).__name__}")
    skips: dict[int, int] = {}
    for i, d in enumerate(datasets):
        part = parts.get(str(i))
        method = getattr(d, "load_state_dict", None)
        if part is None:
            continue
        if callable(method):
            method(part)
        elif isinstance(part, dict) and type(part.get("items_read")) is int and part["items_read"] >= 0:
            skips[i] = part["items_read"]
        else:
            raise ArgumentTypeError(f"member {i} has no load_state_dict and its state is not {{'items_read': n}}")
    yielded = state.get("num_samples_yielded") if isinstance(state, dict) else None
    by_worker: dict[int, list[int]] = {}
    for worker, counts in yielded.items() if isinstance(yielded, dict) else ():
        if not (isinstance(counts, list) and len(counts) == len(datasets) and all(type(c) is int for c in counts)):
            raise ArgumentTypeError(f"num_samples_yielded[{worker!r}] must be {len(datasets)} ints, one per dataset")
        by_worker[int(worker)] = counts
    if not by_worker and len(skips) == len(datasets):
        # no litdata counts: a state every part of which is ours (items_read) gives them
        by_worker[0] = [skips[i] for i in range(len(datasets))]
    return skips, by_worker


@dataclass
class Tagged:
    """A sample with where its reading process stands (for StreamingDataLoader's state)."""

    sample: Any
    worker: int
    counts: list[int]
    cycles: list[int] | None = None  # a zip's: how often each member was iterated again


@dataclass
class TaggedBatch:
    """A collated batch with where the process that made it stands after it."""

    value: Any
    worker: int
    counts: list[int]
    cycles: list[int] | None = None


def collate_tagged(collate: Any, samples: list) -> Any:
    """``collate`` of the samples, keeping the last sample's standing (picklable for workers)."""
    if samples and isinstance(samples[0], Tagged):
        last = samples[-1]
        return TaggedBatch(collate([s.sample for s in samples]), last.worker, last.counts, last.cycles)
    return collate(samples)


def skipped(member: Any, n: int) -> Any:
    """``member`` without its first ``n`` items (a slice of a sequence; else consumed)."""
    if n <= 0:
        return member
    if isinstance(member, Sequence) and not isinstance(member, (str, bytes)):
        return member[n:]
    it = iter(member)
    for _ in range(n):
        next(it, None)
    return it


class MemberMix:
    """An iterator mixing members by weight as litdata draws them, so that a switched mix
    interleaves as before: each step a weighted choice of ``random.Random(seed)`` among the
    members not exhausted (their weights renormalised as members run out); no draw when one
    member is left. ``stop_at_first``: the stream ends with the first exhausted member.
    ``per_stream``: a drawn member gives ``repeats[member]`` items in a row, then draws are
    repeated until another member comes up (when several are left)."""

    def __init__(
        self,
        members: list,
        weights: list[float],
        seed: int,
        stop_at_first: bool,
        repeats: list[int] | None,
        replay: list[int] | None = None,
    ):
        self._iterators = [iter(d) for d in members]
        total = sum(weights)
        self._weights = [w / total for w in weights]
        self._active = [True] * len(members)
        self._rng = random.Random(seed)  # not for secrets: litdata's draw sequence for this seed
        self._stop_at_first, self._repeats = stop_at_first, repeats
        self._current, self._left = -1, 0
        self.yielded = [0] * len(members)  # items taken from each member so far
        if replay is not None:
            self._replay(replay)
            self.yielded = list(replay)

    def _replay(self, counts: list[int]) -> None:
        """Make the draws a run that gave ``counts`` items of each member made (litdata
        replays them too): a draw of a member past its count is where it ran out."""
        seen = [0] * len(counts)
        while sum(seen) < sum(counts):
            left = [i for i, on in enumerate(self._active) if on]
            if not left:
                return
            d = left[0] if len(left) == 1 and not self._stop_at_first else self._pick()
            if seen[d] >= counts[d]:
                if self._stop_at_first:
                    return
                self._drop(d)
                continue
            seen[d] += 1

    def _drop(self, d: int) -> None:
        self._active[d] = False
        total = sum(w for i, w in enumerate(self._weights) if self._active[i])
        if total > 0:
            self._weights = [w / total for w in self._weights]

    def __iter__(self) -> MemberMix:
        return self

    def _choose(self) -> int:
        active = [i for i, on in enumerate(self._active) if on]
        weights = [self._weights[i] for i in active]
        if sum(weights) <= 0:  # only zero-weight members left: they still hold items of the epoch
            weights = [1.0] * len(active)
        return self._rng.choices(active, weights=weights, k=1)[0]

    def _pick(self) -> int:
        if self._repeats is None:
            return self._choose()
        if self._current < 0 or not self._active[self._current]:
            self._current, self._left = self._choose(), 0
            self._left = self._repeats[self._current]
        elif self._left <= 0:
            if sum(self._active) > 1:
                last = self._current
                while self._current == last:
                    self._current = self._choose()
            self._left = self._repeats[self._current]
        self._left -= 1
        return self._current

    def __next__(self) -> Any:
        while True:
            left = [i for i, on in enumerate(self._active) if on]
            if not left:
                raise StopIteration
            d = left[0] if len(left) == 1 and not self._stop_at_first else self._pick()
            try:
                item = next(self._iterators[d])
            except StopIteration:
                if self._stop_at_first:
                    self._active = [False] * len(self._active)
                    raise
                self._drop(d)
                continue
            self.yielded[d] += 1
            return item


@dataclass(frozen=True)
class ZipStart:
    """Where a resumed zip starts: items to skip of members without load_state_dict, the
    items taken of each member in its current cycle, its cycles, and the tuples given."""

    skips: dict[int, int]
    yielded: list[int]
    cycles: list[int]
    position: int


class MemberZip:
    """An iterator of tuples, one item of each member; ``length`` None ends with the first
    exhausted member, an int cycles the shorter ones (re-iterated) up to ``length`` tuples.
    ``rng_key(position)`` seeds the generators of a 2-argument ``transform``."""

    def __init__(
        self,
        members: list,
        length: int | None,
        transform: Any,
        nargs: int | None,
        rng_key: Any,
        start: ZipStart | None = None,
    ):
        self._members = members
        skips = start.skips if start is not None else {}
        # a resumed cycle skips what was read of it; the next cycles read the whole member
        self._iterators = [iter(skipped(d, skips.get(i, 0))) for i, d in enumerate(members)]
        self._length, self._transform, self._nargs, self._rng_key = length, transform, nargs, rng_key
        self.position = start.position if start is not None else 0
        # items taken from each member in its current cycle, and its cycles so far
        self.yielded = list(start.yielded) if start is not None else [0] * len(members)
        self.cycles = list(start.cycles) if start is not None else [0] * len(members)

    def __iter__(self) -> MemberZip:
        return self

    def _next_of(self, d: int) -> Any:
        try:
            return next(self._iterators[d])
        except StopIteration:
            if self._length is None or self.yielded[d] == 0:  # an empty member cannot cycle
                raise
        self._iterators[d] = iter(self._members[d])
        self.cycles[d] += 1
        self.yielded[d] = 0
        return next(self._iterators[d])

    def __next__(self) -> Any:
        if self._length is not None and self.position >= self._length:
            raise StopIteration
        samples = tuple([self._next_of(d) for d in range(len(self._members))])  # a list: StopIteration ends
        for d in range(len(self._members)):
            self.yielded[d] += 1
        key = self._rng_key(self.position)
        self.position += 1
        if self._transform is None:
            return samples
        if self._nargs == 1:
            return self._transform(samples)
        return self._transform(samples, rngs_for(key))


def rngs_for(key: tuple) -> dict:
    """``{"random", "numpy", "torch"}`` generators seeded by ``key`` (reproducible augmentation)."""
    import torch

    seed = int(hashlib.sha256(str(key).encode()).hexdigest(), 16) % (2**32 - 1)
    return {
        "random": random.Random(seed),  # not for secrets: reproducible augmentation
        "numpy": np.random.default_rng(seed),
        "torch": torch.Generator().manual_seed(seed),
    }
