"""Resume receipts (issue 35 §3): what a loader state proves about the samples read so far.

A receipt names the dataset (its digest), the epoch, and the samples consumed in it: a count
and an order-independent hash (receipt_sums.py). Both are computed from the loader's position
and the epoch's deterministic plan (order.py, plan.py), not tracked per item: the position
already says how many items each stream read of which plan, so the ids follow (no item read,
nothing done per batch). The samples a position covers are those outside its ``base`` (read
before the last resume on another layout) plus the first ``consumed[s]`` of each stream's
plan (padding repeats included: they are read twice). Every sample of an epoch read exactly
once is then: count == N and hash == the hash of 0..N-1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .order import EpochSequence
from .plan import stream_plans
from .receipt_sums import NONE, Receipt, ReceiptLedger, range_hash, sum_hash
from .state import ResumePoint, ResumeStateError

__all__ = [
    "EpochReport",
    "Receipt",
    "ReceiptLedger",
    "check_digest",
    "epoch_report",
    "receipt_of",
    "report_of",
    "state_receipt",
    "sum_hash",
]


def receipt_of(
    seq: EpochSequence, point: ResumePoint, streams: range | None = None, ledger: ReceiptLedger | None = None
) -> Receipt:
    """The samples ``point`` says were consumed, by ``streams`` (None: every stream, and the
    samples read before the point's base was cut). ``ledger``: a loader's, to add only what
    was read since its last receipt."""
    ledger = ledger if ledger is not None else ReceiptLedger()
    plans = stream_plans(seq.total, None if point.base is None else list(point.base), point.layout)
    chosen = range(len(plans)) if streams is None else streams
    mine = NONE
    for s in chosen:
        if s >= len(plans):  # a rank the point's layout did not have (a resume on more ranks)
            continue
        mine = mine + ledger.stream(seq, point, plans[s], s)
    if streams is None and point.base is not None:  # read before the resume that cut this base
        mine = mine + ledger.before_base(seq, point.base)
    return mine


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


def epoch_report(
    seq: EpochSequence, point: ResumePoint, rank: int, digest: str | None, ledger: ReceiptLedger | None = None
) -> EpochReport:
    """This rank's receipt, summed with every other rank's when torch.distributed is
    initialised (all_gather_object: a collective, every rank must call it), else the whole
    position's (one process knows every stream's count)."""
    ledger = ledger if ledger is not None else ReceiptLedger()
    k = point.layout.num_workers
    gathered: list[Any] | None = None
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            own = receipt_of(seq, point, range(rank * k, rank * k + k), ledger)
            if rank == 0 and point.base is not None:  # rank 0 also carries what was read before the base
                own = own + ledger.before_base(seq, point.base)
            own_json = own.to_json()
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, own_json)
    except ImportError:
        pass
    if gathered is None:
        total, ranks = receipt_of(seq, point, None, ledger), 1
    else:
        total, ranks = Receipt(0, 0), len(gathered)
        for one in gathered:
            total = total + Receipt.from_json(one)
    exact = total.count == seq.total and total.hash == range_hash(seq.total)
    return EpochReport(point.epoch, seq.total, total.count, exact, ranks, digest)


def state_receipt(view: Any, position: dict, ledger: ReceiptLedger | None = None) -> dict:
    """The receipt a loader state carries: the dataset digest, and for one StreamingDataset
    the epoch, its sample count, the samples consumed by every rank together and by each rank
    of the position's layout (the same on every rank: ranks go in lockstep, so every rank's
    state stays the same and saving rank 0's is enough). ``ledger``: the loader's (see
    receipt_sums.py), so that a checkpoint hashes only what was read since the last one."""
    out: dict = {"digest": getattr(view, "digest", None)}
    sequence = getattr(view, "epoch_sequence", None)
    if sequence is None or not isinstance(position, dict) or "single" not in position:
        return out  # a CombinedStreamingDataset: its datasets' digests are in its identity
    ledger = ledger if ledger is not None else ReceiptLedger()
    point = ResumePoint.from_json(position["single"], view.plan_size)
    seq = ledger.sequence(view, point.epoch)
    k = point.layout.num_workers
    ranks = [receipt_of(seq, point, range(r * k, r * k + k), ledger) for r in range(point.layout.world_size)]
    consumed = sum(ranks, NONE)
    if point.base is not None:  # and what was read before the resume that cut the base
        consumed = consumed + ledger.before_base(seq, point.base)
    out.update(epoch=point.epoch, samples=seq.total, consumed=consumed.to_json(), ranks=[r.to_json() for r in ranks])
    return out


def check_receipt(state: dict, view: Any, position: Any, ledger: ReceiptLedger | None = None) -> None:
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
    now = state_receipt(view, position, ledger)
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


def report_of(view: Any, position: dict, ledger: ReceiptLedger | None = None) -> EpochReport:
    """:func:`epoch_report` of a loader's position (one StreamingDataset only)."""
    if getattr(view, "epoch_sequence", None) is None or "single" not in position:
        raise TypeError("epoch_report() reads a StreamingDataset's loader; a CombinedStreamingDataset has none yet")
    ledger = ledger if ledger is not None else ReceiptLedger()
    point = ResumePoint.from_json(position["single"], view.plan_size)
    return epoch_report(ledger.sequence(view, point.epoch), point, view.rank, getattr(view, "digest", None), ledger)
