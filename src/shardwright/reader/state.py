"""Resume points and the JSON state a loader saves: what was read of which epoch, on which
layout, and how to go on from there on the same or another layout.

A state is small: the epoch, the order options, the layout, the base the epoch started
from (``null`` unless it was itself resumed on another layout) and the items each stream has
consumed — one int per (rank, worker). It names the dataset it belongs to (item and chunk
counts and a digest of the chunk list), so a state is never applied to another dataset.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from ..errors import ResumeStateError  # moved to errors.py; importable from here for one release
from .order import OrderSpec, Segment
from .partition import Layout, batches_taken
from .plan import StreamPlan, length, remaining, stream_plans

__all__ = [
    "STATE_VERSION", "ResumePoint", "ResumeStateError", "consumed_from_batches", "distributed_env", "fingerprint",
    "order_json", "plan_for_stream",
]  # fmt: skip

STATE_VERSION = 1
_MAX_STREAMS = 1 << 20  # bounds what a state read back may ask us to allocate
_MAX_SEGMENTS = 1 << 22
MAX_EPOCH = 1 << 40  # a million epochs a second for 12 days: more is a damaged or hostile state


@dataclass(frozen=True)
class ResumePoint:
    """Where an epoch resumes: ``consumed[s]`` items of stream ``s`` of ``layout`` were read
    from the epoch's plan, which started from ``base`` (None: the whole epoch)."""

    epoch: int
    base: tuple[Segment, ...] | None
    layout: Layout
    consumed: tuple[int, ...]
    rotation: int = 0  # DataLoader worker w of a rank reads its stream (w + rotation) % num_workers

    def to_json(self) -> dict:
        lay = self.layout
        return {
            "epoch": self.epoch,
            "base": None if self.base is None else [list(s) for s in self.base],
            "layout": {
                "world_size": lay.world_size,
                "num_workers": lay.num_workers,
                "batch_size": lay.batch_size,
                "drop_last": lay.drop_last,
                "pad": lay.pad,
            },
            "consumed": list(self.consumed),
            "rotation": self.rotation,
        }

    @classmethod
    def from_json(cls, data: dict, total: int) -> ResumePoint:
        """Raises ResumeStateError naming the bad field; every number is bounded."""
        try:
            epoch = data["epoch"]
            raw_layout = data["layout"]
            layout = Layout(
                **{k: raw_layout[k] for k in ("world_size", "num_workers", "batch_size", "drop_last", "pad")}
            )
            consumed = tuple(data["consumed"])
            base = data["base"]
            rotation = data.get("rotation", 0)
        except (KeyError, TypeError, ValueError) as exc:
            raise ResumeStateError(f"loader state is damaged ({exc!r}); pass a state saved by state_dict()") from None
        if type(epoch) is not int or not 0 <= epoch <= MAX_EPOCH:
            raise ResumeStateError(f"loader state epoch {epoch!r:.40} is not an int from 0 to {MAX_EPOCH:,}")
        if type(rotation) is not int or not 0 <= rotation < layout.num_workers:
            raise ResumeStateError(f"loader state rotation {rotation!r} is not a worker number")
        if layout.streams > _MAX_STREAMS or len(consumed) != layout.streams:
            raise ResumeStateError(f"loader state lists {len(consumed)} streams for {layout.streams}")
        if base is not None:
            if not isinstance(base, list) or len(base) > _MAX_SEGMENTS:
                raise ResumeStateError("loader state base is not a list of segments")
            segs = []
            for seg in base:
                if (
                    not isinstance(seg, list)
                    or len(seg) != 4
                    or not all(type(v) is int for v in seg)
                    or not 0 <= seg[0] <= seg[1] <= total
                    or not 0 <= seg[2] <= seg[3] <= seg[1] - seg[0]
                ):
                    raise ResumeStateError(f"loader state base segment {seg!r:.60} is not valid for {total} items")
                segs.append(tuple(seg))
            _check_disjoint(segs, total)
            base = tuple(segs)
        plans = stream_plans(total, None if base is None else list(base), layout)
        for c, plan in zip(consumed, plans):
            if type(c) is not int or not 0 <= c <= length([s for s, _ in plan]):
                raise ResumeStateError(f"loader state consumed count {c!r} is not valid for a stream of this epoch")
        return cls(epoch, base, layout, consumed, rotation)


def _check_disjoint(segments: list, total: int) -> None:
    """A base is what was left of an epoch: every item in it at most once. Segments of one
    range ``S[a:b]`` hold disjoint positions, and ranges of different segments do not
    overlap (that is how plans cut an epoch), so an edited base cannot read items twice."""
    held = sum(hi - lo for _a, _b, lo, hi in segments)
    if held > total:
        raise ResumeStateError(
            f"loader state base holds {held} items, more than the dataset's {total} (its segments overlap); "
            "pass a state saved by state_dict()"
        )
    by_range: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for a, b, lo, hi in segments:
        if lo < hi:
            by_range.setdefault((a, b), []).append((lo, hi))
    ranges = sorted(by_range)
    for (a1, b1), (a2, b2) in zip(ranges, ranges[1:]):
        if a2 < b1:
            raise ResumeStateError(
                f"loader state base segments over items {a1}:{b1} and {a2}:{b2} overlap (items would be read "
                "twice); pass a state saved by state_dict()"
            )
    for (a, b), spans in by_range.items():
        spans.sort()
        for (lo1, hi1), (lo2, hi2) in zip(spans, spans[1:]):
            if lo2 < hi1:
                raise ResumeStateError(
                    f"loader state base segments [{a}, {b}, {lo1}, {hi1}] and [{a}, {b}, {lo2}, {hi2}] overlap "
                    "(items would be read twice); pass a state saved by state_dict()"
                )


def fingerprint(num_items: int, chunks: list) -> dict:
    """What identifies a dataset in a state: item and chunk counts and a digest of the chunks."""
    # one update of the joined lines (the digest of their concatenation, as one per line was)
    digest = hashlib.sha256("".join([f"{e.filename}\0{e.chunk_size}\0{e.chunk_bytes}\n" for e in chunks]).encode())
    return {"items": num_items, "chunks": len(chunks), "digest": digest.hexdigest()[:16]}


def order_json(spec: OrderSpec) -> dict:
    return {"shuffle": spec.shuffle, "seed": spec.seed, "window": spec.window}


def plan_for_stream(
    total: int, resume: ResumePoint | None, layout: Layout, rank: int, worker: int
) -> tuple[list[StreamPlan], int, int]:
    """All streams' plans of ``layout``, the stream DataLoader worker ``worker`` of ``rank``
    reads, and how many items it skips.

    Same layout as the resume point: the plan is the one that was being read, each stream
    jumps over what it consumed, and workers take the streams rotated so that batches come in
    the uninterrupted order. Another layout: the unread rest is cut anew among the streams
    (elastic resume), nothing skipped.
    """
    k = layout.num_workers
    if resume is None:
        return stream_plans(total, None, layout), rank * k + worker, 0
    base = None if resume.base is None else list(resume.base)
    if resume.layout == layout:
        stream = rank * k + (worker + resume.rotation) % k
        return stream_plans(total, base, layout), stream, resume.consumed[stream]
    old = stream_plans(total, base, resume.layout)
    return stream_plans(total, remaining(old, list(resume.consumed)), layout), rank * k + worker, 0


def consumed_from_batches(items: list[int], batch_size: int, drop_last_batch: bool, batches: int) -> list[int]:
    """Items each worker of a rank had consumed when the loader had yielded ``batches``."""
    counts = [n // batch_size if drop_last_batch else -(-n // batch_size) for n in items]
    taken = batches_taken(counts, batches)
    return [min(t * batch_size, n) for t, n in zip(taken, items)]


def distributed_env() -> tuple[int, int]:
    """(rank, world_size): from torch.distributed when it is initialised, else the RANK and
    WORLD_SIZE environment variables (as torchrun sets them), else (0, 1).

    Raises:
        ValueError: RANK / WORLD_SIZE are set but not usable.
    """
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:
        pass
    raw_rank, raw_world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if raw_world is None:
        return 0, 1
    try:
        world, rank = int(raw_world), int(raw_rank or 0)
    except ValueError:
        raise ValueError(
            f"RANK={raw_rank!r} / WORLD_SIZE={raw_world!r} are not integers; fix the environment"
        ) from None
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"RANK={rank} is not within WORLD_SIZE={world}; fix the environment")
    return rank, world
