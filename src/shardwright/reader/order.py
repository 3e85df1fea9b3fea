"""The order of one epoch: pure functions of (group sizes, order options, epoch).

A *group* is what one chunk file provides: its items (or, for token datasets, the blocks that
start in it). Shuffling has two levels, chosen from :data:`SHUFFLES` by name:

1. the chunk order: groups are permuted (``"chunk_window"``) or kept (``"none"``). Their
   items laid end to end in that order form the epoch's *sequence* S;
2. inside one stream (a DataLoader worker's share, see partition.py) the items of a window of
   ``window`` consecutive chunks are shuffled together, so neighbours rarely come from one
   chunk, while a worker never needs more than ``window`` chunks at a time and loads each of
   its chunks once. Windows are cut per stream, so a stream that holds 5 chunk pieces with
   ``window=4`` mixes 3 + 2 pieces rather than 4 + 1: the end of an epoch mixes too.

A stream is a list of :data:`Segment` values: ``(a, b, lo, hi)`` = positions ``lo..hi`` of the
window-shuffled S[a:b]. The windows of a segment depend only on (seed, epoch, a, b), so a
segment cut in pieces (to resume on another number of ranks or workers) yields exactly the
items of the whole, in the same order.

Randomness: numpy's PCG64 seeded by ``SeedSequence([seed, epoch, ...])``: the same on every
machine and numpy version that keeps PCG64 (numpy guarantees that stream).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError

__all__ = [
    "OrderSpec",
    "Segment",
    "SHUFFLES",
    "EpochSequence",
    "iter_segment",
    "mixes_items",
    "segment_ids",
    "segment_windows",
    "window_ids",
]

Segment = tuple[int, int, int, int]


@dataclass(frozen=True)
class OrderSpec:
    """How an epoch is ordered.

    Attributes:
        shuffle: a name in :data:`SHUFFLES` (``"none"`` or ``"chunk_window"``).
        seed: a non-negative int; the same seed and epoch give the same order everywhere.
        window: how many chunks are mixed together inside a stream (>= 1).
    """

    shuffle: str
    seed: int
    window: int

    def __post_init__(self) -> None:
        if self.shuffle not in SHUFFLES:
            raise UsageError(f"shuffle algorithm {self.shuffle!r} is unknown; use one of {sorted(SHUFFLES)}")
        if type(self.seed) is not int or self.seed < 0:
            raise UsageError(f"seed must be a non-negative int, got {self.seed!r}")
        if type(self.window) is not int or self.window < 1:
            raise UsageError(f"shuffle_window must be an int >= 1 (chunks mixed together), got {self.window!r}")


def _rng(seed: int, epoch: int, *key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, epoch, *key])))


def _keep_chunks(num_groups: int, spec: OrderSpec, epoch: int) -> np.ndarray:
    return np.arange(num_groups, dtype=np.int64)


def _permute_chunks(num_groups: int, spec: OrderSpec, epoch: int) -> np.ndarray:
    return _rng(spec.seed, epoch, 0).permutation(num_groups).astype(np.int64)


def _no_mixing(items: np.ndarray, spec: OrderSpec, epoch: int, key: tuple[int, ...]) -> np.ndarray:
    return items


def _mix_window(items: np.ndarray, spec: OrderSpec, epoch: int, key: tuple[int, ...]) -> np.ndarray:
    return _rng(spec.seed, epoch, 1, *key).permutation(items)


# name -> (chunk order, item order inside a window). Like mosaicml-streaming's shuffle
# registry: a new algorithm is a new entry, and the name is part of the resume state.
SHUFFLES: dict[str, tuple[Callable, Callable]] = {
    "none": (_keep_chunks, _no_mixing),
    "chunk_window": (_permute_chunks, _mix_window),
}


def mixes_items(spec: OrderSpec) -> bool:
    """Whether items of a window are mixed: if not, a stream reads each chunk's items in one
    run and never comes back to a chunk it has left (within a segment)."""
    return SHUFFLES[spec.shuffle][1] is not _no_mixing


class EpochSequence:
    """S: the groups of one epoch laid end to end in their epoch order.

    Args:
        group_sizes: items per group, in index order.
        spec: the order options.
        epoch: the epoch number (>= 0).
    """

    def __init__(self, group_sizes: Sequence[int], spec: OrderSpec, epoch: int):
        self.spec, self.epoch = spec, epoch
        sizes = np.asarray(group_sizes, dtype=np.int64)
        self.group_starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(sizes) else sizes
        self.order = SHUFFLES[spec.shuffle][0](len(sizes), spec, epoch)
        ordered_sizes = sizes[self.order]
        self.cum = np.concatenate([[0], np.cumsum(ordered_sizes)]).astype(np.int64)
        self.total = int(self.cum[-1])

    def pieces(self, a: int, b: int) -> list[tuple[int, int, int]]:
        """S[a:b] as runs ``(group, first item, length)``, each inside one group."""
        if not 0 <= a <= b <= self.total:
            raise ValueError(f"range {a}:{b} is outside the epoch's {self.total} items")
        out = []
        i = int(np.searchsorted(self.cum, a, side="right")) - 1
        last = int(np.searchsorted(self.cum, b, side="left"))  # the groups S[a:b] reaches: i .. last
        order = self.order[i : last + 1].tolist()  # plain ints: this loop runs once per group
        cum = self.cum[i : last + 2].tolist()
        starts = self.group_starts
        pos = a
        for k, group in enumerate(order):
            if pos >= b:
                break
            offset = pos - cum[k]
            length = min(b, cum[k + 1]) - pos
            if length > 0:
                out.append((group, int(starts[group]) + offset, length))
            pos += max(length, 0)
        return out


def segment_windows(seq: EpochSequence, a: int, b: int) -> list[list[tuple[int, int, int]]]:
    """The pieces of S[a:b] grouped into windows: ceil(pieces / window) windows of nearly
    equal piece counts, so that no window (the last included) is left with a lone chunk."""
    pieces = seq.pieces(a, b)
    if not pieces:
        return []
    count = -(-len(pieces) // seq.spec.window)
    return [pieces[w * len(pieces) // count : (w + 1) * len(pieces) // count] for w in range(count)]


def iter_segment(seq: EpochSequence, segment: Segment) -> Iterator[tuple[list[int], np.ndarray]]:
    """``segment`` window by window: (the window's groups, its item ids cut at lo/hi)."""
    a, b, lo, hi = segment
    if lo >= hi:
        return
    pos = 0
    for w, window in enumerate(segment_windows(seq, a, b)):
        size = sum(length for _g, _s, length in window)
        if pos + size <= lo:
            pos += size
            continue
        if pos >= hi:
            return
        items = window_ids(seq, a, b, w, window)
        yield [g for g, _s, _n in window], items[max(lo - pos, 0) : hi - pos]
        pos += size


def window_ids(seq: EpochSequence, a: int, b: int, w: int, window: list[tuple[int, int, int]]) -> np.ndarray:
    """The item ids of window ``w`` (its pieces, from :func:`segment_windows`) of the
    segments over S[a:b], in their read order (mixed when the order mixes items)."""
    items = np.concatenate([np.arange(start, start + length, dtype=np.int64) for _g, start, length in window])
    return SHUFFLES[seq.spec.shuffle][1](items, seq.spec, seq.epoch, (a, b, w))


def segment_ids(seq: EpochSequence, segment: Segment, most: int) -> Iterator[np.ndarray]:
    """The item ids of ``segment`` in arrays of at most ``most`` ids: what the windows of
    :func:`iter_segment` hold, laid end to end, when the order does not mix items (a window
    of unmixed items is its pieces in order, so the windows' bounds change nothing). For a
    reader that does not need to know the windows' chunks ahead (a local dataset: nothing
    to prefetch), this skips building them: fewer, longer runs per call."""
    if mixes_items(seq.spec):
        raise ValueError(f"segment_ids is for orders that keep items in place, not {seq.spec.shuffle!r}")
    a, b, lo, hi = segment
    hi = min(hi, b - a)
    if lo >= hi:
        return
    batch: list[np.ndarray] = []
    count = 0
    for _group, start, length in seq.pieces(a + lo, a + hi):
        while length:
            take = min(length, most - count)
            batch.append(np.arange(start, start + take, dtype=np.int64))
            count, start, length = count + take, start + take, length - take
            if count == most:
                yield np.concatenate(batch) if len(batch) > 1 else batch[0]
                batch, count = [], 0
    if batch:
        yield np.concatenate(batch) if len(batch) > 1 else batch[0]
