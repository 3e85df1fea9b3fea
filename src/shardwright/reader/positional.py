"""What datasets whose epoch is a plain sequence of positions ``0 .. plan_size-1`` share for
:class:`~shardwright.reader.loader.StreamingDataLoader` (see :class:`.resume.Resumable`): the
positions are split among ranks and workers, saved and resumed exactly like a single
StreamingDataset's items (on the same layout, or the rest cut anew on another).
``ParallelStreamingDataset`` and ``StreamingRawDataset`` use it."""

from __future__ import annotations

from typing import Any

from .partition import Layout
from .plan import StreamPlan, drop_front
from .resume import EpochStart, epoch_start, fresh_point, parse_single, single_position
from .state import ResumePoint, plan_for_stream

__all__ = ["PositionalResumable", "plan_positions"]


def plan_positions(plan: StreamPlan) -> list[tuple[int, int]]:
    """The position runs ``[lo, hi)`` of a stream's plan (positions are in order: S[a:b] is a .. b)."""
    return [(a + lo, a + hi) for (a, _b, lo, hi), _repeat in plan if lo < hi]


class PositionalResumable:
    """Resumable methods over ``plan_size``, ``epoch``, ``set_epoch`` and ``layout`` (given by
    the subclass); ``_resume`` holds a resume point for the next iteration."""

    _resume: ResumePoint | None = None
    _loader_drop_last: bool = False

    plan_size: Any  # int (a property in subclasses)
    epoch: Any

    def set_epoch(self, epoch: int) -> None:  # pragma: no cover - subclasses define it
        raise NotImplementedError

    def layout(self, num_workers: int) -> Layout:  # pragma: no cover - subclasses define it
        raise NotImplementedError

    def _resume_for(self, epoch: int) -> ResumePoint | None:
        resume = self._resume
        return resume if resume is not None and resume.epoch == epoch else None

    def stream_runs(self, epoch: int, workers: int, worker: int, rank: int, main: bool) -> list[tuple[int, int]]:
        """The positions ``rank``'s worker ``worker`` (of ``workers``) reads in ``epoch``;
        ``main``: this is the main process (an applied resume is then forgotten)."""
        plans, stream, skip = plan_for_stream(
            self.plan_size, self._resume_for(epoch), self.layout(workers), rank, worker
        )
        if main:
            self._resume = None  # applied: the next iteration of this object starts afresh
        return plan_positions(drop_front(plans[stream], skip))

    def configure_loader(self, batch_size: int, drop_last: bool) -> None:
        self._loader_drop_last = drop_last

    def epoch_start(self, epoch: int, num_workers: int) -> EpochStart:
        return epoch_start(self.plan_size, self._resume_for(epoch), self.layout(num_workers))

    def position_after(self, epoch: int, start: EpochStart, batches: int) -> dict:
        return single_position(self.plan_size, epoch, start, self._loader_drop_last, batches)

    def fresh_position(self, epoch: int, num_workers: int) -> dict:
        return {"single": fresh_point(epoch, self.layout(num_workers))}

    def check_position(self, position: object) -> int:
        return parse_single(position, self.plan_size).epoch

    def apply_position(self, position: dict) -> None:
        point = parse_single(position, self.plan_size)
        self._resume = point
        self.set_epoch(point.epoch)

    def clear_resume(self) -> None:
        self._resume = None
