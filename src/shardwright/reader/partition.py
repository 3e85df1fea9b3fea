"""Who reads what: pure functions that cut an epoch's sequence among ranks and their
DataLoader workers, and count what a loader has consumed.

A *stream* is one (rank, worker) share; streams are numbered rank-major. Each rank gets one
contiguous range of the sequence (so it touches about chunks / world_size chunks), cut into
contiguous runs of whole batches per worker (so a worker reads its own chunks, and only the
rank's last batch can be partial).

Equal batch counts: with ``drop_last`` every rank gets ``total // world_size`` items (at most
``world_size - 1`` items of the epoch are left out); with ``pad`` every rank gets
``ceil(total / world_size)`` items, the short ones repeating items from the start of the
sequence. Either way all ranks have the same item count and the same worker split, so the
same number of batches: DDP never waits on a rank that ran out. With neither, ranks differ
by at most one item (and so possibly by one batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError

__all__ = [
    "Layout",
    "batches_taken",
    "next_worker",
    "rank_range",
    "stream_ranges",
    "worker_batch_counts",
    "worker_ranges",
]


MAX_WORLD_SIZE = 1 << 20  # ranks
MAX_WORKERS = 1 << 12  # DataLoader workers per rank
MAX_BATCH = 1 << 31  # items per batch


@dataclass(frozen=True)
class Layout:
    """How many readers share an epoch.

    Attributes:
        world_size: number of ranks (>= 1).
        num_workers: DataLoader workers per rank (0 is read as 1: the main process).
        batch_size: items per batch (1 when the loader's batch size is not known).
        drop_last: leave out the last ``total % world_size`` items so ranks are equal.
        pad: repeat items from the start so ranks are equal (instead of dropping).
    """

    world_size: int = 1
    num_workers: int = 1
    batch_size: int = 1
    drop_last: bool = False
    pad: bool = False

    def __post_init__(self) -> None:
        for name, most in (("world_size", MAX_WORLD_SIZE), ("num_workers", MAX_WORKERS), ("batch_size", MAX_BATCH)):
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= most:
                raise UsageError(f"{name} must be an int from 1 to {most:,}, got {value!r:.40}")
        for name in ("drop_last", "pad"):
            value = getattr(self, name)
            if type(value) is not bool:  # a state's "false" is a str, and truthy: never read as a flag
                raise UsageError(f"{name} must be True or False, got {value!r:.40} ({type(value).__name__})")
        if self.drop_last and self.pad:
            raise UsageError("drop_last and pad cannot both be set: pad=True keeps every item (and repeats a few)")

    @property
    def streams(self) -> int:
        return self.world_size * self.num_workers


def rank_range(total: int, layout: Layout, rank: int) -> tuple[int, int]:
    """Rank ``rank``'s positions ``[start, end)``; with ``pad``, ``end`` may pass ``total``
    (position p >= total stands for p - total)."""
    w = layout.world_size
    if not 0 <= rank < w:
        raise ValueError(f"rank {rank} is outside world_size {w}")
    if layout.drop_last:
        per = total // w
        return rank * per, (rank + 1) * per
    if layout.pad:
        per = -(-total // w) if total else 0
        return rank * per, (rank + 1) * per
    return rank * total // w, (rank + 1) * total // w


def worker_batch_counts(items: int, layout: Layout) -> list[int]:
    """Batches of each worker of a rank holding ``items`` items (contiguous runs of batches)."""
    k = layout.num_workers
    batches = -(-items // layout.batch_size)
    return [(i + 1) * batches // k - i * batches // k for i in range(k)]


def worker_ranges(start: int, end: int, layout: Layout) -> list[tuple[int, int]]:
    """A rank's ``[start, end)`` cut into one contiguous run of whole batches per worker."""
    bs, out, first = layout.batch_size, [], 0
    for count in worker_batch_counts(end - start, layout):
        lo = min(start + first * bs, end)
        first += count
        out.append((lo, min(start + first * bs, end)))
    return out


def stream_ranges(total: int, layout: Layout) -> list[tuple[int, int]]:
    """Every stream's positions, rank-major: stream ``rank * num_workers + worker``."""
    out = []
    for rank in range(layout.world_size):
        out.extend(worker_ranges(*rank_range(total, layout, rank), layout))
    return out


def batches_taken(counts: list[int], batches: int) -> list[int]:
    """Batches taken from each worker after a DataLoader yielded ``batches`` batches.

    torch's DataLoader (in order) asks its workers in turn, starting at worker 0 every epoch,
    and skips a worker once it is exhausted: round r holds one batch of each worker that has
    more than r batches.
    """
    if batches < 0 or batches > sum(counts):
        raise ValueError(f"{batches} batches taken, but the workers hold {sum(counts)}")
    taken = [0] * len(counts)
    left, done = batches, 0  # done: full rounds so far
    for level in sorted(set(counts)):
        if level <= done:
            continue
        active = [i for i, c in enumerate(counts) if c > done]
        full = min(level - done, left // len(active))
        for i in active:
            taken[i] += full
        left -= full * len(active)
        done += full
        if done < level:  # a partial round: the first ``left`` active workers
            for i in active[:left]:
                taken[i] += 1
            return taken
    return taken


def next_worker(counts: list[int], batches: int) -> int:
    """The worker whose batch comes next after ``batches`` batches (0 when all are done).

    A resumed loader starts asking at worker 0, so a resume on the same layout rotates the
    streams by this much: the batches then come in exactly the order of an uninterrupted run.
    """
    taken = batches_taken(counts, batches)
    active = [i for i, (t, c) in enumerate(zip(taken, counts)) if t < c]
    if not active:
        return 0
    low = min(taken[i] for i in active)
    return next(i for i in active if taken[i] == low)
