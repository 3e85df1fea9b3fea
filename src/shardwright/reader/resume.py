"""Resume: what a loader saves of where it is in an epoch, and how a dataset goes on from it.

:class:`Resumable` is what :class:`~shardwright.reader.loader.StreamingDataLoader` asks of a
dataset (``StreamingDataset`` and ``CombinedStreamingDataset`` implement it); the loader never
looks inside a dataset. The rest of this module is pure: positions as plain JSON, computed from
plan sizes, layouts and batch counts, and checked (every number bounded) before a dataset
applies one.

A position is ``{"single": ResumePoint json}`` for one dataset, or ``{"combined": [ResumePoint
json per dataset], "generation": g}`` for a mix (see :mod:`.combined` for the generation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .order import Segment
from .partition import MAX_WORKERS, MAX_WORLD_SIZE, Layout, next_worker
from .plan import length, remaining, stream_plans
from .state import MAX_EPOCH, ResumePoint, ResumeStateError, consumed_from_batches, distributed_env

__all__ = [
    "EpochStart", "Resumable", "combined_position", "epoch_start", "fresh_point", "items_left", "parse_combined",
    "parse_single", "single_position", "worker_resume_point",
]  # fmt: skip


@runtime_checkable
class Resumable(Protocol):
    """A dataset a :class:`StreamingDataLoader` can save and resume.

    ``position`` values are JSON (see the module docstring); ``start`` values are whatever
    :meth:`epoch_start` returned, handed back unchanged.
    """

    @property
    def epoch(self) -> int: ...

    def set_epoch(self, epoch: int) -> None: ...

    def loader_view(self, shuffle: bool | None = None, drop_last: bool | None = None) -> Any:
        """The dataset the DataLoader iterates (an iterable view of a map-style dataset);
        ``shuffle``/``drop_last`` not None override the dataset's for that loader only."""
        ...

    def configure_loader(self, batch_size: int, drop_last: bool) -> None:
        """Workers split each rank's share at whole batches of ``batch_size``."""
        ...

    def identity(self) -> dict:
        """What a saved state must match: the dataset(s) and the order options."""
        ...

    def epoch_start(self, epoch: int, num_workers: int) -> Any:
        """Where an iteration of ``epoch`` with ``num_workers`` workers starts (resumed or not)."""
        ...

    def position_after(self, epoch: int, start: Any, batches: int) -> dict:
        """The position once every rank has yielded ``batches`` batches since ``start``."""
        ...

    def fresh_position(self, epoch: int, num_workers: int) -> dict:
        """The position at the start of ``epoch``."""
        ...

    def check_position(self, position: object) -> int:
        """The epoch of ``position``; ResumeStateError if it cannot be applied here."""
        ...

    def apply_position(self, position: dict) -> None:
        """Go on from ``position`` (checked) at the next iteration."""
        ...

    def clear_resume(self) -> None:
        """Forget an applied position (the iteration that used it has planned)."""
        ...


@dataclass(frozen=True)
class EpochStart:
    """The plan one dataset reads in an epoch: from ``base`` (None: the whole epoch) on
    ``layout``, each stream having consumed ``consumed[s]`` items of it already."""

    base: tuple[Segment, ...] | None
    layout: Layout
    consumed: tuple[int, ...]
    rotation: int = 0


def epoch_start(total: int, resume: ResumePoint | None, layout: Layout) -> EpochStart:
    """Where a dataset of ``total`` plan items starts an epoch on ``layout``: fresh, at the
    resume point (same layout), or from the unread rest cut anew (another layout)."""
    if resume is None:
        return EpochStart(None, layout, (0,) * layout.streams)
    if resume.layout == layout:
        return EpochStart(resume.base, layout, tuple(resume.consumed), resume.rotation)
    old = stream_plans(total, None if resume.base is None else list(resume.base), resume.layout)
    return EpochStart(tuple(remaining(old, list(resume.consumed))), layout, (0,) * layout.streams)


def items_left(total: int, start: EpochStart) -> list[int]:
    """Items each stream (all ranks) still had to read when the iteration started."""
    plans = stream_plans(total, None if start.base is None else list(start.base), start.layout)
    return [length([s for s, _ in plan]) - c for plan, c in zip(plans, start.consumed)]


def taken_by_batches(
    left: list[int], layout: Layout, rotation: int, drop_last_batch: bool, batches: int
) -> tuple[list[int], int]:
    """Items each stream (all ranks) consumed once every rank yielded ``batches`` batches, and
    the rotation that makes a resumed loader go on in the same order."""
    k, out, bs = layout.num_workers, list(left), layout.batch_size
    next_rotation = rotation
    for rank in range(layout.world_size):
        streams = [rank * k + (w + rotation) % k for w in range(k)]  # in DataLoader worker order
        items = [left[s] for s in streams]
        for s, t in zip(streams, consumed_from_batches(items, bs, drop_last_batch, batches)):
            out[s] = t
        if rank == 0:
            counts = [n // bs if drop_last_batch else -(-n // bs) for n in items]
            next_rotation = (rotation + next_worker(counts, batches)) % k
    return out, next_rotation


def single_position(total: int, epoch: int, start: EpochStart, drop_last_batch: bool, batches: int) -> dict:
    """The position of one dataset of ``total`` plan items after ``batches`` batches."""
    taken, rotation = taken_by_batches(items_left(total, start), start.layout, start.rotation, drop_last_batch, batches)
    consumed = tuple(c + t for c, t in zip(start.consumed, taken))
    return {"single": ResumePoint(epoch, start.base, start.layout, consumed, rotation).to_json()}


def combined_position(
    totals: list[int],
    epoch: int,
    starts: list[EpochStart],
    generation: int,
    drop_last_batch: bool,
    batches: int,
    stream_mix: Any,
    stream_length: Any,
) -> dict:
    """The position of a mix of datasets after ``batches`` batches. ``stream_mix(stream,
    lengths, steps)`` gives the items each dataset gave ``stream`` in its first ``steps``;
    ``stream_length(stream, lengths)`` how many items the stream yields in all."""
    lefts = [items_left(total, start) for total, start in zip(totals, starts)]
    layout = starts[0].layout
    per_stream_left = [stream_length(s, [left[s] for left in lefts]) for s in range(layout.streams)]
    taken, _rotation = taken_by_batches(per_stream_left, layout, 0, drop_last_batch, batches)
    per_stream = [stream_mix(s, [left[s] for left in lefts], taken[s]) for s in range(layout.streams)]
    points = [
        ResumePoint(
            epoch, start.base, start.layout, tuple(c + per_stream[s][d] for s, c in enumerate(start.consumed))
        ).to_json()
        for d, start in enumerate(starts)
    ]
    return {"combined": points, "generation": generation}


def fresh_point(epoch: int, layout: Layout) -> dict:
    return ResumePoint(epoch, None, layout, (0,) * layout.streams).to_json()


def parse_single(position: object, total: int) -> ResumePoint:
    """The resume point of a one-dataset position. Raises ResumeStateError."""
    if not isinstance(position, dict) or "single" not in position:
        raise ResumeStateError(
            "the state has no 'single' position; pass what StreamingDataLoader.state_dict() returned"
        )
    return ResumePoint.from_json(position["single"], total)


def parse_combined(position: object, totals: list[int]) -> tuple[list[ResumePoint], int]:
    """(one resume point per dataset, generation) of a mix's position. Raises ResumeStateError."""
    if not isinstance(position, dict) or "combined" not in position:
        raise ResumeStateError(
            "the state has no 'combined' position; pass what StreamingDataLoader.state_dict() returned"
        )
    points, generation = position["combined"], position.get("generation")
    if (
        not isinstance(points, list)
        or len(points) != len(totals)
        or type(generation) is not int
        or not 0 <= generation <= MAX_EPOCH
    ):
        raise ResumeStateError("the combined position does not match this CombinedStreamingDataset")
    parsed = [ResumePoint.from_json(p, total) for p, total in zip(points, totals)]
    if len({p.epoch for p in parsed}) != 1:
        raise ResumeStateError("the combined position's datasets are at different epochs")
    return parsed, generation


def worker_resume_point(state: object, identity: dict, layout_for: Any, total: int) -> tuple[int, ResumePoint | None]:
    """(epoch, resume point) of one process's stream, from what ``StreamingDataset.state_dict``
    returned (torchdata's StatefulDataLoader: same layout only). ``identity`` is
    ``{"dataset": fingerprint, "order": [shuffle, seed, window]}``; ``layout_for(num_workers)``
    is the dataset's layout; ``total`` the items of its epoch plan. Raises ResumeStateError."""
    if not isinstance(state, dict) or state.get("dataset") != identity["dataset"]:
        raise ResumeStateError("this state belongs to another dataset; resume with the dataset it was saved from")
    if state.get("order") != identity["order"]:
        raise ResumeStateError("this state was saved with other shuffle / seed / shuffle_window options")
    epoch, stream, streams, yielded = (state.get(k) for k in ("epoch", "stream", "streams", "yielded"))
    if type(epoch) is not int or not 0 <= epoch <= MAX_EPOCH:
        raise ResumeStateError(f"state epoch {epoch!r:.40} is not an int from 0 to {MAX_EPOCH:,}")
    if stream is None:  # saved before any iteration started
        return epoch, None
    if not (
        type(streams) is int
        and type(stream) is int
        and 0 <= stream < streams <= MAX_WORLD_SIZE * MAX_WORKERS
        and type(yielded) is int
        and yielded >= 0
    ):
        raise ResumeStateError("the state's stream position is damaged")
    _rank, world = distributed_env()
    if streams % world:
        raise ResumeStateError(
            f"the state was saved by {streams} readers, which {world} ranks cannot share; "
            "use StreamingDataLoader to resume on another layout"
        )
    layout = layout_for(streams // world)
    consumed = [0] * layout.streams
    consumed[stream] = yielded
    # through the checked parser: a count past the stream's end is refused, not an empty epoch
    point = ResumePoint(epoch, None, layout, tuple(consumed))
    return epoch, ResumePoint.from_json(point.to_json(), total)
