"""Properties of the pure order / partition / plan functions (shardwright.reader.order,
.partition, .plan), checked over many random cases (seeded, so a failure reproduces)."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from shardwright.reader.order import EpochSequence, OrderSpec, iter_segment, segment_ids, segment_windows
from shardwright.reader.partition import Layout, batches_taken, rank_range, stream_ranges, worker_batch_counts
from shardwright.reader.plan import length, remaining, stream_plans


def items_of(seq: EpochSequence, plan) -> list[int]:
    return [int(i) for seg, _repeat in plan for _g, window in iter_segment(seq, seg) for i in window]


def random_case(rng: random.Random):
    sizes = [rng.randint(0, 30) for _ in range(rng.randint(0, 25))]
    spec = OrderSpec(rng.choice(["none", "chunk_window"]), rng.randint(0, 2**32), rng.randint(1, 5))
    drop, pad = rng.choice([(False, False), (True, False), (False, True)])
    layout = Layout(rng.randint(1, 5), rng.randint(1, 4), rng.randint(1, 9), drop, pad)
    return sizes, spec, layout


CASES = 400


def test_every_item_once_and_equal_batches_per_rank():
    rng = random.Random(1)
    for case in range(CASES):
        sizes, spec, layout = random_case(rng)
        total = sum(sizes)
        seq = EpochSequence(sizes, spec, epoch=rng.randint(0, 5))
        plans = stream_plans(total, None, layout)
        own = Counter()
        per_rank_batches = []
        for rank in range(layout.world_size):
            rank_plans = plans[rank * layout.num_workers : (rank + 1) * layout.num_workers]
            counts = [-(-length([s for s, _ in p]) // layout.batch_size) for p in rank_plans]
            per_rank_batches.append(sum(counts))
            for plan in rank_plans:
                own.update(int(i) for seg, repeat in plan if not repeat for _g, w in iter_segment(seq, seg) for i in w)
        assert all(c == 1 for c in own.values()), f"case {case}: an item twice"
        assert set(own) <= set(range(total))
        missing = total - len(own)
        if layout.drop_last:
            assert missing < layout.world_size, f"case {case}"
        else:
            assert missing == 0, f"case {case}: {missing} items never read"
        if layout.drop_last or layout.pad:
            assert len(set(per_rank_batches)) <= 1, f"case {case}: ranks have {per_rank_batches} batches"
        else:
            assert max(per_rank_batches, default=0) - min(per_rank_batches, default=0) <= 1


def test_only_the_last_batch_of_a_rank_is_partial():
    rng = random.Random(2)
    for _ in range(CASES):
        sizes, _spec, layout = random_case(rng)
        for rank in range(layout.world_size):
            start, end = rank_range(sum(sizes), layout, rank)
            runs = [r for r in stream_ranges(sum(sizes), layout)[rank * layout.num_workers :][: layout.num_workers]]
            partial = [(x, y) for x, y in runs if (y - x) % layout.batch_size]
            assert len(partial) <= 1 and all(y == end for _x, y in partial)


def test_chunk_order_and_windows():
    spec = OrderSpec("chunk_window", seed=7, window=3)
    sizes = [10] * 12
    seq0, seq1 = EpochSequence(sizes, spec, 0), EpochSequence(sizes, spec, 1)
    assert sorted(seq0.order.tolist()) == list(range(12)) and seq0.order.tolist() != list(range(12))
    assert seq0.order.tolist() != seq1.order.tolist(), "set_epoch must change the chunk order"
    assert EpochSequence(sizes, spec, 0).order.tolist() == seq0.order.tolist(), "deterministic"
    # 5 pieces with window 3: 2 + 3, never a lone chunk at the end.
    assert [len(w) for w in segment_windows(seq0, 0, 50)] == [2, 3]
    # Neighbours from one chunk are rare inside a window of 3 chunks.
    items = [int(i) for _g, w in iter_segment(seq0, (0, 120, 0, 120)) for i in w]
    same = sum(a // 10 == b // 10 for a, b in zip(items, items[1:])) / (len(items) - 1)
    assert same < 0.5
    assert sorted(items) == list(range(120))
    plain = EpochSequence(sizes, OrderSpec("none", 7, 3), 0)
    assert [int(i) for _g, w in iter_segment(plain, (0, 120, 0, 120)) for i in w] == list(range(120))


def test_segment_ids_are_the_windows_items_when_the_order_keeps_items_in_place():
    rng = random.Random(19)
    for _ in range(CASES):
        sizes, spec, layout = random_case(rng)
        spec = OrderSpec("none", spec.seed, spec.window)
        seq = EpochSequence(sizes, spec, rng.randint(0, 3))
        most = rng.randint(1, 40)
        for plan in stream_plans(sum(sizes), None, layout):
            for seg, _repeat in plan:
                batches = [ids.tolist() for ids in segment_ids(seq, seg, most)]
                assert all(0 < len(ids) <= most for ids in batches)
                assert [i for ids in batches for i in ids] == [int(i) for _g, w in iter_segment(seq, seg) for i in w]
    with pytest.raises(ValueError, match="keep items in place"):
        next(segment_ids(EpochSequence([3], OrderSpec("chunk_window", 0, 2), 0), (0, 3, 0, 3), 8))


def test_ranks_touch_their_share_of_chunks():
    spec = OrderSpec("chunk_window", seed=3, window=4)
    sizes = [100] * 64
    seq = EpochSequence(sizes, spec, 0)
    layout = Layout(world_size=4, num_workers=2, batch_size=8, drop_last=True)
    plans = stream_plans(sum(sizes), None, layout)
    loads = 0
    for plan in plans:
        chunks = {g for seg, _ in plan for w in segment_windows(seq, seg[0], seg[1]) for g, _s, _n in w}
        loads += len(chunks)
    assert loads <= 1.25 * len(sizes), f"{loads} chunk loads for {len(sizes)} chunks"


@pytest.mark.parametrize("seed", range(3))
def test_resume_on_any_layout_reads_the_rest_exactly_once(seed):
    rng = random.Random(100 + seed)
    for case in range(CASES // 3):
        sizes, spec, layout = random_case(rng)
        layout = Layout(layout.world_size, layout.num_workers, layout.batch_size)  # no drop / pad: all items
        total = sum(sizes)
        seq = EpochSequence(sizes, spec, 0)
        base = None
        seen: Counter = Counter()
        for _hop in range(3):  # resume twice, each time on another layout
            plans = stream_plans(total, base, layout)
            consumed = []
            for plan in plans:
                n = rng.randint(0, length([s for s, _ in plan]))
                consumed.append(n)
                seen.update(items_of(seq, plan)[:n])
            base = remaining(plans, consumed)
            _, spec2, layout2 = random_case(rng)
            layout = Layout(layout2.world_size, layout2.num_workers, layout2.batch_size)
        for plan in stream_plans(total, base, layout):
            seen.update(items_of(seq, plan))
        assert sorted(seen.elements()) == list(range(total)), f"case {case}"


def test_resume_same_layout_continues_each_stream():
    spec = OrderSpec("chunk_window", 5, 2)
    sizes = [7, 9, 3, 12, 8, 10]
    seq = EpochSequence(sizes, spec, 2)
    layout = Layout(2, 2, 3)
    plans = stream_plans(sum(sizes), None, layout)
    base = remaining(plans, [3, 0, 6, 1])
    rest = [i for plan in stream_plans(sum(sizes), base, Layout()) for i in items_of(seq, plan)]
    expected = [i for plan, c in zip(plans, [3, 0, 6, 1]) for i in items_of(seq, plan)[c:]]
    assert rest == expected


def test_batches_taken_matches_round_robin():
    rng = random.Random(4)
    for _ in range(300):
        counts = [rng.randint(0, 6) for _ in range(rng.randint(1, 5))]
        order = []  # simulate torch's in-order round robin that skips exhausted workers
        left = list(counts)
        while any(left):
            for k in range(len(counts)):
                if left[k]:
                    order.append(k)
                    left[k] -= 1
        for t in range(len(order) + 1):
            assert batches_taken(counts, t) == [order[:t].count(k) for k in range(len(counts))]
    with pytest.raises(ValueError):
        batches_taken([1, 2], 4)


def test_bad_options_are_clear():
    with pytest.raises(ValueError, match="shuffle algorithm 'zigzag' is unknown"):
        OrderSpec("zigzag", 1, 1)
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        OrderSpec("none", -1, 1)
    with pytest.raises(ValueError, match="batch_size must be an int from 1 to"):
        Layout(batch_size=0)
    with pytest.raises(ValueError, match="cannot both be set"):
        Layout(drop_last=True, pad=True)
    assert worker_batch_counts(10, Layout(num_workers=3, batch_size=4)) == [1, 1, 1]
    assert np.array_equal(EpochSequence([], OrderSpec("none", 0, 1), 0).order, [])
