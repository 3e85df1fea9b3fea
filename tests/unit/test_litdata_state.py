"""reader/litdata_state.py: litdata 0.2.x resume states read by what they mean (which items
litdata's worker split and replay rule had read), checked against litdata's own functions."""

from __future__ import annotations

import itertools

import pytest

from shardwright.errors import ResumeStateError
from shardwright.reader.litdata_state import is_litdata_loader_state, is_litdata_state, litdata_worker_runs, read_ranges


def state(n_yielded: int, workers: int, batch: int, world: int = 1, drop_last: bool = False, **extra) -> dict:
    return {
        "num_samples_yielded": n_yielded, "num_workers": workers, "batch_size": batch, "world_size": world,
        "drop_last": drop_last, "input_dir_path": "/d", "current_epoch": 1, "shuffle": False,
        "sample_in_epoch": n_yielded * world, **extra,
    }  # fmt: skip


def test_states_are_told_apart():
    assert is_litdata_state(state(0, 1, 1))
    assert is_litdata_loader_state({"dataset": state(0, 1, 1), "current_epoch": 1, "num_samples_yielded": 0})
    assert not is_litdata_loader_state({"shardwright_loader": 1, "dataset": {}, "position": {}})
    assert not is_litdata_state({"dataset": {}, "order": [], "epoch": 0})


def test_read_ranges_one_rank():
    # 103 items, batch 4, 2 workers: worker 0 holds 0..51, worker 1 52..102 (the remainder);
    # 28 samples = 3 rounds of one batch each, then one more batch of worker 0.
    assert litdata_worker_runs(103, 1, 2, 4, False) == [52, 51]
    assert read_ranges(state(28, 2, 4), 103) == [(0, 16), (52, 64)]
    assert read_ranges(state(0, 2, 4), 103) == []


def test_read_ranges_stop_at_a_worker_run_end():
    assert read_ranges(state(10_000, 2, 4), 103) == [(0, 52), (52, 103)]


def test_damaged_counts_are_refused():
    with pytest.raises(ResumeStateError, match="'batch_size' is 0"):
        read_ranges(state(4, 2, 0), 10)


def test_same_split_and_replay_as_litdata():
    shuffle = pytest.importorskip("litdata.utilities.shuffle")
    env = pytest.importorskip("litdata.utilities.env")
    dataset = pytest.importorskip("litdata.streaming.dataset")
    for n, world, workers, batch, drop in itertools.product((7, 50, 103), (1, 2, 3), (1, 2, 3), (1, 4), (False, True)):
        intervals = [[i, i, min(i + 10, n), min(i + 10, n)] for i in range(0, n, 10)]
        _chunks, theirs = shuffle._associate_chunks_and_intervals_to_workers(
            env._DistributedEnv(world, 0, 1), range(len(intervals)), intervals, drop, workers, batch
        )
        assert litdata_worker_runs(n, world, workers, batch, drop) == [sum(b - a for _, a, b, _ in w) for w in theirs]
        for yielded in (0, 1, batch * workers + 1, 3 * batch):
            taken = dataset._replay_sampling(yielded, batch, workers)
            runs = litdata_worker_runs(n, world, workers, batch, drop)
            expected = [min(taken[w], runs[r * workers + w]) for r in range(world) for w in range(workers)]
            got = [hi - lo for lo, hi in read_ranges(state(yielded, workers, batch, world, drop), n)]
            assert got == [e for e in expected if e > 0]
