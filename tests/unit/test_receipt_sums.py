"""Receipts computed the cheap way (receipt_sums.py: incremental per loader, whole windows
hashed without drawing their shuffle, one numpy pass a call) equal receipts computed from
every id read, in any order of checkpoints, shuffled or not, fresh or resumed on another
layout, with padding repeats."""

from __future__ import annotations

import random

import numpy as np
import pytest

from shardwright.reader.order import EpochSequence, OrderSpec, iter_segment
from shardwright.reader.partition import Layout
from shardwright.reader.plan import remaining, stream_plans
from shardwright.reader.receipt_sums import Receipt, ReceiptLedger, range_hash, sum_hash
from shardwright.reader.receipts import receipt_of
from shardwright.reader.state import ResumePoint

SIZES = [7, 3, 12, 1, 9, 9, 4, 15, 2, 8, 11, 5]  # items per chunk, uneven on purpose


def ids_read(seq: EpochSequence, point: ResumePoint, streams: range | None = None) -> list[int]:
    """Every id ``point`` says was read, listed by walking the plans item by item (the
    reader's own path: order.iter_segment), and the ids outside the base."""
    plans = stream_plans(seq.total, None if point.base is None else list(point.base), point.layout)
    out: list[int] = []
    for s in range(len(plans)) if streams is None else streams:
        walked: list[int] = []
        for segment, _repeat in plans[s]:
            for _groups, ids in iter_segment(seq, segment):
                walked += [int(i) for i in ids]
        out += walked[: point.consumed[s]]
    if streams is None and point.base is not None:
        inside = [int(i) for segment in point.base for _g, ids in iter_segment(seq, segment) for i in ids]
        out += sorted(set(range(seq.total)) - set(inside))
    return out


def expected(ids: list[int]) -> Receipt:
    return Receipt(len(ids), sum_hash(np.array(ids, dtype=np.int64)))


def plan_lengths(seq: EpochSequence, point: ResumePoint) -> list[int]:
    plans = stream_plans(seq.total, None if point.base is None else list(point.base), point.layout)
    return [sum(hi - lo for (_a, _b, lo, hi), _r in plan) for plan in plans]


@pytest.mark.parametrize("shuffle", ["none", "chunk_window"])
@pytest.mark.parametrize("seed", range(6))
def test_one_ledger_over_many_checkpoints_gives_the_receipts_of_every_id_read(shuffle, seed):
    rng = random.Random(seed)
    seq = EpochSequence(SIZES, OrderSpec(shuffle, seed, rng.choice([1, 2, 3])), epoch=rng.randrange(3))
    layout = Layout(world_size=rng.choice([1, 2, 3]), num_workers=rng.choice([1, 2]), pad=rng.random() < 0.5)
    fresh = ResumePoint(seq.epoch, None, layout, (0,) * (layout.world_size * layout.num_workers))
    lengths = plan_lengths(seq, fresh)
    # a resume cut from a position part-way (what a restore on another layout starts from)
    partway = [rng.randrange(n + 1) for n in lengths]
    plans = stream_plans(seq.total, None, layout)
    base = tuple(remaining(plans, partway))
    other = Layout(world_size=rng.choice([1, 2]), num_workers=rng.choice([1, 3]))
    resumed = ResumePoint(seq.epoch, base, other, (0,) * (other.world_size * other.num_workers))
    for start in (fresh, resumed):
        ledger = ReceiptLedger()
        lengths = plan_lengths(seq, start)
        counts = [0] * len(lengths)
        for _checkpoint in range(6):  # counts only grow within an epoch, by uneven steps
            counts = [min(n, c + rng.randrange(0, 9)) for c, n in zip(counts, lengths)]
            point = ResumePoint(seq.epoch, start.base, start.layout, tuple(counts))
            assert receipt_of(seq, point, None, ledger) == expected(ids_read(seq, point))
            mine = range(0, start.layout.num_workers)  # rank 0's streams
            assert receipt_of(seq, point, mine, ledger) == expected(ids_read(seq, point, mine))
        # a ledger asked for an earlier position (a loader restored backwards) starts over
        point = ResumePoint(seq.epoch, start.base, start.layout, tuple(c // 2 for c in counts))
        assert receipt_of(seq, point, None, ledger) == expected(ids_read(seq, point))


def test_the_whole_epoch_sums_to_the_range_hash():
    seq = EpochSequence(SIZES, OrderSpec("chunk_window", 5, 2), epoch=1)
    layout = Layout(world_size=2, num_workers=2)
    full = tuple(plan_lengths(seq, ResumePoint(1, None, layout, (0,) * 4)))
    receipt = receipt_of(seq, ResumePoint(1, None, layout, full))
    assert receipt == Receipt(seq.total, range_hash(seq.total)) == expected(list(range(seq.total)))
