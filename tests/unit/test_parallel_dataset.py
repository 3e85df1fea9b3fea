"""reader/parallel.py: ParallelStreamingDataset zips datasets sample by sample, cycles the
shorter ones to ``length``, and resumes from a StreamingDataLoader state exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

import shardwright as sw
from shardwright.errors import ArgumentTypeError, UsageError

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> tuple[str, str]:
    root: Path = tmp_path_factory.mktemp("parallel")
    sw.optimize(lambda i: {"i": i}, list(range(10)), str(root / "a"), chunk_size=3, num_workers=1, verbose=False)
    sw.optimize(lambda i: {"j": 100 + i}, list(range(4)), str(root / "b"), chunk_size=3, num_workers=1, verbose=False)
    return str(root / "a"), str(root / "b")


def pairs(items) -> list[tuple[int, int]]:
    return [(int(a["i"]), int(b["j"])) for a, b in items]


def test_zips_until_the_shortest_ends(dirs):
    p = sw.ParallelStreamingDataset([sw.StreamingDataset(dirs[0]), sw.StreamingDataset(dirs[1])])
    assert pairs(p) == [(0, 100), (1, 101), (2, 102), (3, 103)]  # litdata 0.2.76 gives the same
    assert len(p) == 4


def test_length_cycles_the_shorter_dataset_and_epochs_go_on(dirs):
    p = sw.ParallelStreamingDataset([sw.StreamingDataset(dirs[0]), sw.StreamingDataset(dirs[1])], length=6)
    assert pairs(p) == [(0, 100), (1, 101), (2, 102), (3, 103), (4, 100), (5, 101)]
    p.set_epoch(1)  # resume=True: the next epoch goes on where this one stopped
    assert pairs(p) == [(6, 102), (7, 103), (8, 100), (9, 101), (0, 102), (1, 103)]
    same = sw.ParallelStreamingDataset(
        [sw.StreamingDataset(dirs[0]), sw.StreamingDataset(dirs[1])], length=6, resume=False
    )
    same.set_epoch(1)
    assert pairs(same) == pairs(p.__class__([sw.StreamingDataset(dirs[0]), sw.StreamingDataset(dirs[1])], length=6))


def test_shuffled_cycles_hold_every_item_once(dirs):
    p = sw.ParallelStreamingDataset(
        [sw.StreamingDataset(dirs[0], shuffle=True), sw.StreamingDataset(dirs[1])], length=20
    )
    firsts = [a for a, _b in pairs(p)]
    assert sorted(firsts[:10]) == list(range(10)) and sorted(firsts[10:]) == list(range(10))


def test_loader_state_resumes_exactly(dirs):
    def make():
        ds = [sw.StreamingDataset(dirs[0], shuffle=True), sw.StreamingDataset(dirs[1], shuffle=True)]
        return sw.StreamingDataLoader(sw.ParallelStreamingDataset(ds, length=15), batch_size=2)

    def flat(batches) -> list[tuple[int, int]]:
        return [(int(x), int(y)) for a, b in batches for x, y in zip(a["i"], b["j"])]

    whole = flat(make())
    loader = make()
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    state = loader.state_dict()
    again = make()
    again.load_state_dict(state)
    rest = list(again)
    assert flat(head) + flat(rest) == whole
    assert len(whole) == 15 and sorted(a for a, _b in whole[:10]) == list(range(10))


def test_transform_gets_seeded_generators(dirs):
    def jitter(samples, rngs):
        return int(samples[0]["i"]), rngs["random"].random()

    def make():
        return sw.ParallelStreamingDataset([sw.StreamingDataset(dirs[0])], length=5, transform=jitter)

    assert list(make()) == list(make())
    one = sw.ParallelStreamingDataset([sw.StreamingDataset(dirs[0])], transform=lambda s: int(s[0]["i"]) * 2)
    assert list(one) == [2 * i for i in range(10)]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length": float("inf")}, UsageError, "endless epoch"),
        ({"length": 0}, UsageError, "length must be None or an int"),
        ({"force_override_state_dict": True}, UsageError, "force_override_state_dict"),
        ({"resume": "yes"}, ArgumentTypeError, "resume must be True or False"),
        ({"transform": lambda a, b, c: a}, UsageError, "transform function must take 1 or 2 arguments"),
    ],
)
def test_mistakes_get_one_line(dirs, kwargs, error, match):
    with pytest.raises(error, match=match):
        sw.ParallelStreamingDataset([sw.StreamingDataset(dirs[0])], **kwargs)


def test_what_cannot_be_iterated_is_refused():
    with pytest.raises(ArgumentTypeError, match="element 1 is a int, which is not one: pass a list of its items"):
        sw.ParallelStreamingDataset([[1, 2, 3], 5])
