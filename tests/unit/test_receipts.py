"""Resume receipts (issue 35 §3): a loader state names the dataset digest and the samples
consumed; a restore onto another dataset version is refused, a restored loader says where it
resumed, require_resume refuses a fresh start, and epoch_report() proves every sample was read
exactly once — also across resumes on 2, then 3, then 1 rank(s)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytest.importorskip("torch")  # an optional extra: the unit layer also runs with the core dependencies only

from shardwright import StreamingDataset
from shardwright.errors import ResumeStateError, UsageError
from shardwright.reader.loader import StreamingDataLoader
from shardwright.reader.receipts import Receipt, sum_hash
from support.datasets import write_dataset

ITEMS = 50


@pytest.fixture
def data(tmp_path):
    write_dataset(tmp_path / "d", [{"i": i} for i in range(ITEMS)], chunk_size=7)
    return str(tmp_path / "d")


def dataset(path: str) -> StreamingDataset:
    return StreamingDataset(path, shuffle=True, seed=11)


def ids(batches: list) -> list[int]:
    return [int(v) for b in batches for v in b["i"]]


def take(loader: StreamingDataLoader, n: int) -> tuple[list[int], dict]:
    got = []
    for k, batch in enumerate(loader):
        got += [int(v) for v in batch["i"]]
        if k + 1 == n:
            break
    return got, loader.state_dict()


def test_the_digest_is_the_one_index_json_records(data):
    ds = dataset(data)
    assert ds.digest is not None and ds.digest.startswith("sw1-sha256:")


def test_a_whole_epoch_reads_every_sample_once(data):
    loader = StreamingDataLoader(dataset(data), batch_size=4)
    assert sorted(ids(list(loader))) == list(range(ITEMS))
    report = loader.epoch_report()
    assert report.exactly_once and report.seen == report.samples == ITEMS and report.epoch == 0
    assert "every sample exactly once" in str(report)


def test_a_state_carries_a_receipt_and_a_restore_says_where_it_resumed(data, caplog):
    first = StreamingDataLoader(dataset(data), batch_size=4)
    seen, state = take(first, 3)
    receipt = state["receipt"]
    midway = first.epoch_report()
    assert not midway.exactly_once and midway.seen == len(seen) == 12
    assert receipt["digest"] == dataset(data).digest and receipt["epoch"] == 0 and receipt["samples"] == ITEMS
    expected = Receipt(len(seen), sum_hash(np.array(seen)))
    assert Receipt.from_json(receipt["consumed"]) == expected == Receipt.from_json(receipt["ranks"][0])
    second = StreamingDataLoader(dataset(data), batch_size=4, require_resume=True)
    second.load_state_dict(state)
    with caplog.at_level(logging.INFO, logger="shardwright"):
        rest = ids(list(second))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resumed")]
    assert lines == [f"resumed epoch 0 at sample 12 of {ITEMS} (dataset {receipt['digest']})"]
    assert sorted(seen + rest) == list(range(ITEMS))
    assert second.epoch_report().exactly_once


def test_a_state_of_another_dataset_version_is_refused_naming_both(data):
    _seen, state = take(StreamingDataLoader(dataset(data), batch_size=4), 2)
    other = "sw1-sha256:" + "0" * 64
    state["receipt"]["digest"] = other
    with pytest.raises(ResumeStateError, match=f"{other}.*{dataset(data).digest}"):
        StreamingDataLoader(dataset(data), batch_size=4).load_state_dict(state)


def test_require_resume_refuses_to_start_at_zero(data):
    loader = StreamingDataLoader(dataset(data), batch_size=4, require_resume=True)
    with pytest.raises(UsageError, match="require_resume=True but load_state_dict"):
        next(iter(loader))


def test_an_epoch_resumed_on_2_then_3_then_1_ranks_reads_every_sample_once(data, monkeypatch):
    """Each rank is its own loader in this process (RANK / WORLD_SIZE); ranks go in lockstep,
    so rank 0's state is every rank's."""

    def ranks(world: int, state: dict | None, batches: int | None) -> tuple[list[int], dict]:
        seen, saved = [], {}
        for rank in range(world):
            monkeypatch.setenv("RANK", str(rank))
            monkeypatch.setenv("WORLD_SIZE", str(world))
            loader = StreamingDataLoader(dataset(data), batch_size=3, drop_last=False)
            if state is not None:
                loader.load_state_dict(state)
            if batches is None:
                seen += ids(list(loader))
                last = loader
            else:
                got, mine = take(loader, batches)
                seen += got
                saved = saved or mine
        if batches is None:
            return seen, {"report": last.epoch_report()}
        return seen, saved

    a, state = ranks(2, None, 2)
    b, state = ranks(3, state, 2)
    c, end = ranks(1, state, None)
    assert sorted(a + b + c) == list(range(ITEMS)), "the loaders read each sample once"
    report = end["report"]
    assert report.exactly_once and report.seen == ITEMS, report


def test_a_sample_read_twice_is_caught_by_the_hash():
    once = Receipt(2, sum_hash(np.array([3, 4])))
    twice = Receipt(2, sum_hash(np.array([3, 3])))
    assert once != twice and Receipt(1, sum_hash(np.array([3]))) + Receipt(1, sum_hash(np.array([4]))) == once
