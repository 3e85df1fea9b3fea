"""StreamingDataLoader: a torch DataLoader that knows where it is in an epoch, so training can
resume exactly there — in another process, with other num_workers or another world size."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from torch.utils.data import DataLoader

from ..errors import require_bool
from .collate import litdata_collate
from .combined import CombinedStreamingDataset
from .dataset import StreamingDataset, as_iterable
from .partition import next_worker
from .plan import length, remaining, stream_plans
from .state import (
    STATE_VERSION,
    ResumePoint,
    ResumeStateError,
    consumed_from_batches,
    distributed_env,
)

__all__ = ["StreamingDataLoader", "worker_resume"]


class StreamingDataLoader(DataLoader):
    """A ``torch.utils.data.DataLoader`` over a :class:`StreamingDataset` (or a
    :class:`CombinedStreamingDataset`) with exact mid-epoch resume.

    Each ``iter(loader)`` is one epoch: the first uses the dataset's epoch (see
    ``set_epoch``), each later one the next epoch. :meth:`state_dict` says where the loader
    is; a new loader given it through :meth:`load_state_dict` goes on with the items nobody
    has read yet — jumping there, not replaying — also with other ``num_workers``, another
    world size or another ``batch_size`` (the rest of the epoch is then cut anew).

    Args:
        dataset: a StreamingDataset (map-style ones are iterated the streaming way here) or a
            CombinedStreamingDataset.
        batch_size: items per batch; workers split a rank's share at whole batches, so only a
            rank's last batch can be partial.
        num_workers: DataLoader worker processes per rank.
        shuffle: None keeps the dataset's; True/False overrides it for this loader (litdata's
            meaning: the dataset's chunk-aware shuffle, with its seed), the dataset object itself
            is left as it is.
        drop_last: None keeps the dataset's; True/False overrides the dataset's drop_last for
            this loader (ranks equal) and also drops each worker's partial last batch, so
            only whole batches are read, as with litdata.
        collate_fn: default :func:`litdata_collate` (graphs batched with PyG, the rest with
            torch's default_collate), as litdata's loader.
        **kwargs: any other DataLoader argument (pin_memory, persistent_workers,
            multiprocessing_context, prefetch_factor, ...); ``sampler`` and ``batch_sampler``
            are refused: the dataset orders itself.

    Raises:
        TypeError: dataset is not a StreamingDataset / CombinedStreamingDataset.
        ValueError: sampler or batch_sampler was given.
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int = 1,
        num_workers: int = 0,
        *,
        shuffle: bool | None = None,
        drop_last: bool | None = None,
        collate_fn: Any = None,
        **kwargs: Any,
    ):
        if not isinstance(dataset, (StreamingDataset, CombinedStreamingDataset)):
            raise TypeError(
                f"StreamingDataLoader reads a StreamingDataset or CombinedStreamingDataset, got "
                f"{type(dataset).__name__}; use torch.utils.data.DataLoader for other datasets"
            )
        for refused in ("sampler", "batch_sampler"):
            if kwargs.get(refused) is not None:
                raise ValueError(
                    f"StreamingDataLoader does not take {refused}=: pass shuffle=True (and seed=) to "
                    "the StreamingDataset or the loader, which shuffle chunk-aware and per epoch"
                )
            kwargs.pop(refused, None)
        shuffle = require_bool("shuffle", shuffle, optional=True)  # None: keep the dataset's
        drop_last = require_bool("drop_last", drop_last, optional=True)
        if type(batch_size) is not int or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        view: Any
        if isinstance(dataset, StreamingDataset):
            view = as_iterable(dataset)
            if shuffle is not None or drop_last is not None:
                if view is dataset:
                    view = as_iterable(copy.copy(dataset))  # the override is this loader's, not the dataset's
                if shuffle is not None:
                    view.shuffle = shuffle
                    view.order_spec = dataclasses.replace(
                        view.order_spec, shuffle="chunk_window" if shuffle else "none"
                    )
                if drop_last is not None:
                    view.drop_last = drop_last
                    view.pad = view.pad and not drop_last
        else:
            view = dataset
            if shuffle is not None:
                raise ValueError(
                    "shuffle= overrides a StreamingDataset's; give it to each dataset of a CombinedStreamingDataset"
                )
        drop_last = bool(drop_last)
        view._batch_size = batch_size
        view._loader_drop_last = drop_last
        kwargs["collate_fn"] = collate_fn if collate_fn is not None else litdata_collate
        self._view = view
        self._started = False
        self._finished = False
        self._batches = 0
        self._pending: dict | None = None  # a position to resume from at the next iteration
        self._epoch_start: Any = None  # where the running iteration started (see _start_of)
        super().__init__(view, batch_size=batch_size, num_workers=num_workers, drop_last=drop_last, **kwargs)

    @property
    def current_epoch(self) -> int:
        """The epoch the loader is in (or will start with its next iteration)."""
        if self._pending is not None:
            key = "combined" if isinstance(self._view, CombinedStreamingDataset) else "single"
            point = self._pending[key][0] if key == "combined" else self._pending[key]
            return point["epoch"]
        if self._started and self._finished:
            return self._view.epoch + 1
        return self._view.epoch

    def __iter__(self):
        view = self._view
        if self._pending is not None:
            _apply(view, self._pending)
            self._pending = None
            old = getattr(self, "_iterator", None)
            if old is not None:  # persistent workers hold copies of the dataset from before the resume
                old._shutdown_workers()
                self._iterator = None
        elif self._started:
            view.set_epoch(view.epoch + 1)
        view.set_epoch(view.epoch)  # also refreshes rank / world size in this process
        self._started, self._finished, self._batches = True, False, 0
        self._epoch_start = _start_of(view, view.epoch, self.num_workers)
        iterator = super().__iter__()
        _clear(view)  # workers have their copies; this process's iterator already planned
        for batch in iterator:
            self._batches += 1
            yield batch
        self._finished = True

    def _position(self) -> dict:
        view = self._view
        if not self._started and self._pending is not None:
            return self._pending
        if not self._started or self._finished:
            epoch = view.epoch + (1 if self._finished else 0)
            return _fresh(view, epoch, self.num_workers)
        return _position_of(view, view.epoch, self._epoch_start, self._batches)

    def state_dict(self) -> dict:
        """Where this loader is: a small JSON-serialisable dict for :meth:`load_state_dict`.

        In DDP every rank's state is the same (ranks yield batches in lockstep); saving rank
        0's is enough.
        """
        return {"shardwright_loader": STATE_VERSION, "dataset": self._view.identity(), "position": self._position()}

    def load_state_dict(self, state: dict) -> None:
        """Go on from ``state`` (from :meth:`state_dict`) at the next ``iter(loader)``.

        Raises:
            ResumeStateError: the state is damaged, or belongs to another dataset or to other
                order options (shuffle, seed, window, mixing weights).
        """
        if not isinstance(state, dict) or state.get("shardwright_loader") != STATE_VERSION:
            raise ResumeStateError(
                "not a StreamingDataLoader state (no 'shardwright_loader': 1); pass what "
                "StreamingDataLoader.state_dict() returned"
            )
        mine = self._view.identity()
        if state.get("dataset") != mine:
            raise ResumeStateError(
                f"the state belongs to another dataset or other order options: {state.get('dataset')!r:.300} "
                f"vs this loader's {mine!r:.300}; resume with the same dataset, shuffle, seed and weights"
            )
        position = state.get("position")
        _validate(self._view, position)
        self._pending = position
        self._started = False


# --- positions: {"single": ResumePoint json} or {"combined": [...], "generation": g} ----------


def _single_start(ds: StreamingDataset, epoch: int, num_workers: int) -> tuple:
    """(base, layout, consumed per stream, rotation) of the plan ``ds`` reads in this epoch."""
    layout = ds.layout(num_workers)
    resume = ds._resume_for(epoch)
    if resume is None:
        return None, layout, [0] * layout.streams, 0
    if resume.layout == layout:
        return resume.base, layout, list(resume.consumed), resume.rotation
    old = stream_plans(ds._plan_total(), None if resume.base is None else list(resume.base), resume.layout)
    return tuple(remaining(old, list(resume.consumed))), layout, [0] * layout.streams, 0


def _left(ds: StreamingDataset, start: tuple) -> list[int]:
    """Items each stream (all ranks) still had to read when the iteration started."""
    base, layout, consumed, _rotation = start
    plans = stream_plans(ds._plan_total(), None if base is None else list(base), layout)
    return [length([s for s, _ in plan]) - c for plan, c in zip(plans, consumed)]


def _taken(left: list[int], layout, rotation: int, drop_last_batch: bool, batches: int) -> tuple[list[int], int]:
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


def _start_of(view, epoch: int, num_workers: int) -> tuple:
    if isinstance(view, CombinedStreamingDataset):
        return [_single_start(d, epoch, num_workers) for d in view.datasets], view.generation(epoch)
    return _single_start(view, epoch, num_workers)


def _position_of(view, epoch: int, start, batches: int) -> dict:
    drop = view._loader_drop_last
    if not isinstance(view, CombinedStreamingDataset):
        base, layout, consumed, rotation = start
        taken, rotation = _taken(_left(view, start), layout, rotation, drop, batches)
        point = ResumePoint(epoch, base, layout, tuple(c + t for c, t in zip(consumed, taken)), rotation)
        return {"single": point.to_json()}
    starts, generation = start
    lefts = [_left(d, s) for d, s in zip(view.datasets, starts)]
    layout = starts[0][1]
    taken, _rotation = _taken([sum(col) for col in zip(*lefts)], layout, 0, drop, batches)
    per_stream = [
        view.stream_mix(epoch, s, generation, [left[s] for left in lefts], taken[s]) for s in range(layout.streams)
    ]
    points = []
    for d, (base, lay, consumed, _rot) in enumerate(starts):
        points.append(
            ResumePoint(epoch, base, lay, tuple(c + per_stream[s][d] for s, c in enumerate(consumed))).to_json()
        )
    return {"combined": points, "generation": generation}


def _fresh(view, epoch: int, num_workers: int) -> dict:
    datasets = view.datasets if isinstance(view, CombinedStreamingDataset) else [view]
    points = []
    for d in datasets:
        layout = d.layout(num_workers)
        points.append(ResumePoint(epoch, None, layout, (0,) * layout.streams).to_json())
    if isinstance(view, CombinedStreamingDataset):
        return {"combined": points, "generation": 0}
    return {"single": points[0]}


def _validate(view, position: Any) -> None:
    combined = isinstance(view, CombinedStreamingDataset)
    key = "combined" if combined else "single"
    if not isinstance(position, dict) or key not in position:
        raise ResumeStateError(
            f"the state has no {key!r} position; pass what StreamingDataLoader.state_dict() returned"
        )
    if combined:
        points, generation = position[key], position.get("generation")
        if (
            not isinstance(points, list)
            or len(points) != len(view.datasets)
            or type(generation) is not int
            or generation < 0
        ):
            raise ResumeStateError("the combined position does not match this CombinedStreamingDataset")
        parsed = [ResumePoint.from_json(p, d._plan_total()) for p, d in zip(points, view.datasets)]
        if len({p.epoch for p in parsed}) != 1:
            raise ResumeStateError("the combined position's datasets are at different epochs")
    else:
        ResumePoint.from_json(position[key], view._plan_total())


def _apply(view, position: dict) -> None:
    if isinstance(view, CombinedStreamingDataset):
        points = [ResumePoint.from_json(p, d._plan_total()) for p, d in zip(position["combined"], view.datasets)]
        for d, point in zip(view.datasets, points):
            d._resume = point
        view._mix_resume = (points[0].epoch, position["generation"] + 1)
        view.set_epoch(points[0].epoch)
    else:
        point = ResumePoint.from_json(position["single"], view._plan_total())
        view._resume = point
        view.set_epoch(point.epoch)


def _clear(view) -> None:
    for d in view.datasets if isinstance(view, CombinedStreamingDataset) else [view]:
        d._resume = None
    if isinstance(view, CombinedStreamingDataset):
        view._mix_resume = None


def worker_resume(dataset: StreamingDataset, state: dict) -> None:
    """StreamingDataset.load_state_dict: resume this process's stream (same layout)."""
    if not isinstance(state, dict) or state.get("dataset") != dataset._fingerprint:
        raise ResumeStateError("this state belongs to another dataset; resume with the dataset it was saved from")
    if state.get("order") != [dataset.order_spec.shuffle, dataset.seed, dataset.order_spec.window]:
        raise ResumeStateError("this state was saved with other shuffle / seed / shuffle_window options")
    epoch, stream, streams, yielded = (state.get(k) for k in ("epoch", "stream", "streams", "yielded"))
    if type(epoch) is not int or epoch < 0:
        raise ResumeStateError(f"state epoch {epoch!r} is not a non-negative int")
    dataset.set_epoch(epoch)
    if stream is None:  # saved before any iteration started
        return
    if not (
        type(streams) is int and type(stream) is int and 0 <= stream < streams and type(yielded) is int and yielded >= 0
    ):
        raise ResumeStateError("the state's stream position is damaged")
    _rank, world = distributed_env()
    if streams % world:
        raise ResumeStateError(
            f"the state was saved by {streams} readers, which {world} ranks cannot share; "
            "use StreamingDataLoader to resume on another layout"
        )
    layout = dataset.layout(streams // world)
    consumed = [0] * layout.streams
    consumed[stream] = yielded
    dataset._resume = ResumePoint(epoch, None, layout, tuple(consumed))
