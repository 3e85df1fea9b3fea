"""Resume receipts (issue 35 §3): what a loader state proves about the samples read so far.

A receipt names the dataset (its digest), the epoch, and the samples consumed in it: a count
and an order-independent hash. Both are computed from the loader's position and the epoch's
deterministic plan (order.py, plan.py), not tracked per item: the position already says how
many items each stream read of which plan, so the ids follow, at the cost of listing them
once per ``state_dict()`` (numpy, no item read). The samples a position covers are those
outside its ``base`` (read before the last resume on another layout) plus the first
``consumed[s]`` of each stream's plan (padding repeats included: they are read twice).

The hash is the sum, modulo 2**64, of a 64-bit mix (splitmix64) of each sample id: the same
in any order, and a sample read twice changes it (a XOR would cancel). Every sample of an
epoch read exactly once is then: count == N and hash == the hash of 0..N-1.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .order import EpochSequence, Segment, iter_segment
from .plan import StreamPlan, stream_plans
from .state import ResumePoint, ResumeStateError

__all__ = [
    "EpochReport",
    "Receipt",
    "check_digest",
    "epoch_report",
    "receipt_of",
    "report_of",
    "state_receipt",
    "sum_hash",
]

_MASK = (1 << 64) - 1
_RUN = 1 << 20  # ids hashed at a time for 0..N-1


def _mix(ids: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser of each id (uint64 arithmetic wraps, as the algorithm wants)."""
    z = ids.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def sum_hash(ids: np.ndarray) -> int:
    return int(np.sum(_mix(ids), dtype=np.uint64)) if len(ids) else 0


def _range_hash(n: int) -> int:
    total = 0
    for start in range(0, n, _RUN):
        total = (total + sum_hash(np.arange(start, min(n, start + _RUN), dtype=np.int64))) & _MASK
    return total


@dataclass(frozen=True)
class Receipt:
    """Samples of one epoch consumed by some streams: ``count`` and ``hash`` (see the module)."""

    count: int
    hash: int

    def __add__(self, other: Receipt) -> Receipt:
        return Receipt(self.count + other.count, (self.hash + other.hash) & _MASK)

    def to_json(self) -> dict:
        return {"count": self.count, "hash": f"{self.hash:016x}"}

    @classmethod
    def from_json(cls, data: Any) -> Receipt:
        return cls(int(data["count"]), int(data["hash"], 16))


def _segment_ids(seq: EpochSequence, segment: Segment) -> Iterator[np.ndarray]:
    for _groups, ids in iter_segment(seq, segment):
        yield ids


def _first(plan: StreamPlan, count: int) -> Iterator[Segment]:
    """The segments of ``plan``'s first ``count`` items (repeats included)."""
    for (a, b, lo, hi), _repeat in plan:
        if count <= 0:
            return
        take = min(count, hi - lo)
        yield (a, b, lo, lo + take)
        count -= take


def _hash_segments(seq: EpochSequence, segments: Iterator[Segment] | list[Segment]) -> Receipt:
    count, total = 0, 0
    for segment in segments:
        for ids in _segment_ids(seq, segment):
            count += len(ids)
            total = (total + sum_hash(ids)) & _MASK
    return Receipt(count, total)


def receipt_of(seq: EpochSequence, point: ResumePoint, streams: range | None = None) -> Receipt:
    """The samples ``point`` says were consumed, by ``streams`` (None: every stream, and the
    samples read before the point's base was cut)."""
    base = None if point.base is None else list(point.base)
    plans = stream_plans(seq.total, base, point.layout)
    chosen = range(len(plans)) if streams is None else streams
    mine = Receipt(0, 0)
    for s in chosen:
        if s >= len(plans):  # a rank the point's layout did not have (a resume on more ranks)
            continue
        mine = mine + _hash_segments(seq, _first(plans[s], point.consumed[s]))
    if streams is None and base is not None:  # read before the resume that cut this base
        mine = mine + _before_base(seq, base)
    return mine


def _before_base(seq: EpochSequence, base: list[Segment]) -> Receipt:
    """The samples outside ``base``: read before the resume that cut it."""
    left = _hash_segments(seq, base)
    return Receipt(seq.total - left.count, (_range_hash(seq.total) - left.hash) & _MASK)


def check_digest(state: dict, digest: str | None) -> None:
    """Refuse a state saved on another version of the dataset (both digests named)."""
    saved = (state.get("receipt") or {}).get("digest") if isinstance(state.get("receipt"), dict) else None
    if saved is not None and not isinstance(saved, str):
        raise ResumeStateError(
            f"the state's receipt digest is a {type(saved).__name__}, not a dataset digest: the state is damaged; "
            "start the epoch afresh without load_state_dict"
        )
    if saved is not None and digest is not None and saved != digest:
        raise ResumeStateError(
            f"the state was saved reading dataset {saved[:100]}, and this loader reads dataset {digest}: another "
            "version of the dataset (rewritten or appended to). Resume with the dataset the state was saved on, "
            "or start the epoch afresh without load_state_dict"
        )


@dataclass(frozen=True)
class EpochReport:
    """Whether an epoch read every sample exactly once (:meth:`StreamingDataLoader.epoch_report`)."""

    epoch: int
    samples: int  # N: the epoch's samples
    seen: int  # samples read (a sample read twice counts twice)
    exactly_once: bool
    ranks: int  # receipts gathered (1 without torch.distributed)
    digest: str | None

    def __str__(self) -> str:
        verdict = "every sample exactly once" if self.exactly_once else "NOT every sample exactly once"
        return f"epoch {self.epoch}: {self.seen:,} of {self.samples:,} samples read, {verdict} ({self.ranks} rank(s))"


def epoch_report(seq: EpochSequence, point: ResumePoint, rank: int, digest: str | None) -> EpochReport:
    """This rank's receipt, summed with every other rank's when torch.distributed is
    initialised (all_gather_object: a collective, every rank must call it), else the whole
    position's (one process knows every stream's count)."""
    k = point.layout.num_workers
    gathered: list[Any] | None = None
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            own = receipt_of(seq, point, range(rank * k, rank * k + k)).to_json()
            if rank == 0 and point.base is not None:  # rank 0 also carries what was read before the base
                before = receipt_of(seq, point)
                everyone = receipt_of(seq, point, range(len(point.consumed)))
                own = (
                    Receipt.from_json(own)
                    + Receipt(before.count - everyone.count, (before.hash - everyone.hash) & _MASK)
                ).to_json()
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, own)
    except ImportError:
        pass
    if gathered is None:
        total, ranks = receipt_of(seq, point), 1
    else:
        total, ranks = Receipt(0, 0), len(gathered)
        for one in gathered:
            total = total + Receipt.from_json(one)
    exact = total.count == seq.total and total.hash == _range_hash(seq.total)
    return EpochReport(point.epoch, seq.total, total.count, exact, ranks, digest)


def state_receipt(view: Any, position: dict) -> dict:
    """The receipt a loader state carries: the dataset digest, and for one StreamingDataset
    the epoch, its sample count, the samples consumed by every rank together and by each rank
    of the position's layout (the same on every rank: ranks go in lockstep, so every rank's
    state stays the same and saving rank 0's is enough)."""
    out: dict = {"digest": getattr(view, "digest", None)}
    sequence = getattr(view, "epoch_sequence", None)
    if sequence is None or not isinstance(position, dict) or "single" not in position:
        return out  # a CombinedStreamingDataset: its datasets' digests are in its identity
    point = ResumePoint.from_json(position["single"], view.plan_size)
    seq = sequence(point.epoch)
    k = point.layout.num_workers
    ranks = [receipt_of(seq, point, range(r * k, r * k + k)) for r in range(point.layout.world_size)]
    consumed = sum(ranks, Receipt(0, 0))
    if point.base is not None:  # and what was read before the resume that cut the base
        consumed = consumed + _before_base(seq, list(point.base))
    out.update(epoch=point.epoch, samples=seq.total, consumed=consumed.to_json(), ranks=[r.to_json() for r in ranks])
    return out


def check_receipt(state: dict, view: Any, position: Any) -> None:
    """Refuse a state whose receipt disagrees with its position: the receipt is what
    state_dict() derived from the position when it saved it, so a mismatch means one of them
    was edited or damaged since (a consumed count lowered by hand would read samples twice).
    A state without a receipt's counts (a combined dataset's, an older version's) passes."""
    saved = state.get("receipt")
    if saved is None:
        return
    if not isinstance(saved, dict):
        raise ResumeStateError(f"the state's receipt is a {type(saved).__name__}, not a dict: the state is damaged")
    counted = {k: saved[k] for k in ("epoch", "samples", "consumed", "ranks") if k in saved}
    if not counted:
        return
    now = state_receipt(view, position)
    expected = {k: now.get(k) for k in counted}
    if counted != expected:
        differ = ", ".join(
            f"{k} {counted[k]!r:.80} (the position gives {expected[k]!r:.80})"
            for k in counted
            if counted[k] != expected[k]
        )
        raise ResumeStateError(
            f"the state's receipt does not match its position: {differ}; the state was edited or damaged "
            "after it was saved. Resume from an intact state, or start the epoch afresh without load_state_dict"
        )


def report_of(view: Any, position: dict) -> EpochReport:
    """:func:`epoch_report` of a loader's position (one StreamingDataset only)."""
    sequence = getattr(view, "epoch_sequence", None)
    if sequence is None or "single" not in position:
        raise TypeError("epoch_report() reads a StreamingDataset's loader; a CombinedStreamingDataset has none yet")
    point = ResumePoint.from_json(position["single"], view.plan_size)
    return epoch_report(sequence(point.epoch), point, view.rank, getattr(view, "digest", None))
