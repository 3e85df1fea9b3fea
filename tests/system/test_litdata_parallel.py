"""ParallelStreamingDataset against litdata 0.2.76 (same tuples in one process), and resumed
from a StreamingDataLoader state with real DataLoader workers on another worker count."""

from __future__ import annotations

from pathlib import Path

import pytest

import shardwright as sw

torch = pytest.importorskip("torch")
ld = pytest.importorskip("litdata")


def write(root: Path) -> tuple[str, str]:
    sw.optimize(lambda i: {"i": i}, list(range(30)), str(root / "a"), chunk_size=4, num_workers=1, verbose=False)
    sw.optimize(lambda i: {"j": 100 + i}, list(range(7)), str(root / "b"), chunk_size=3, num_workers=1, verbose=False)
    return str(root / "a"), str(root / "b")


def pairs(batches) -> list[tuple[int, int]]:
    return [(int(x), int(y)) for a, b in batches for x, y in zip(a["i"], b["j"])]


@pytest.mark.parametrize("length", [None, 25])
def test_same_tuples_as_litdata_in_one_process(tmp_path, length):
    a, b = write(tmp_path)
    ours = sw.ParallelStreamingDataset([sw.StreamingDataset(a), sw.StreamingDataset(b)], length=length)
    theirs = ld.ParallelStreamingDataset([ld.StreamingDataset(a), ld.StreamingDataset(b)], length=length)
    assert [(int(x["i"]), int(y["j"])) for x, y in ours] == [(int(x["i"]), int(y["j"])) for x, y in theirs]


def test_resume_with_other_workers_reads_the_rest_exactly(tmp_path):
    a, b = write(tmp_path)

    def loader(workers: int):
        ds = [sw.StreamingDataset(a, shuffle=True), sw.StreamingDataset(b, shuffle=True)]
        return sw.StreamingDataLoader(sw.ParallelStreamingDataset(ds, length=40), batch_size=4, num_workers=workers)

    whole = pairs(loader(2))
    first = loader(2)
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = first.state_dict()
    del it
    again = loader(3)
    again.load_state_dict(state)
    rest = pairs(again)
    assert sorted(pairs(head) + rest) == sorted(whole)  # the epoch's tuples, each once
    assert len(whole) == 40
