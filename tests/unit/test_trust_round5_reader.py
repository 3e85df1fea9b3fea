"""Trust round 5: loader and dataset states from a hostile state_dict. Every field is checked
for its type (a string "false" is not a boolean, True is not the version 1) and bound (huge
epochs, stream counts, batch sizes), and a receipt that disagrees with its position (a consumed
count edited by hand would read samples twice) is refused: one ResumeStateError line each."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("torch")  # an optional extra: the unit layer also runs with the core dependencies only

from shardwright import StreamingDataset
from shardwright.errors import ResumeStateError
from shardwright.reader.combined import CombinedStreamingDataset
from shardwright.reader.loader import StreamingDataLoader
from shardwright.reader.parallel import ParallelStreamingDataset
from support.datasets import write_dataset


@pytest.fixture
def data(tmp_path):
    write_dataset(tmp_path / "a", [{"i": i} for i in range(40)], chunk_size=8)
    write_dataset(tmp_path / "b", [{"i": i} for i in range(25)], chunk_size=8)
    return str(tmp_path / "a"), str(tmp_path / "b")


def saved(loader: StreamingDataLoader, batches: int = 3) -> dict:
    it = iter(loader)
    for _ in range(batches):
        next(it)
    return loader.state_dict()


def edited(state: dict, path: tuple, value: object) -> dict:
    out = copy.deepcopy(state)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def refused(make_loader, state: dict) -> str:
    with pytest.raises(ResumeStateError) as info:
        make_loader().load_state_dict(state)
    assert "\n" not in str(info.value)
    return str(info.value)


SINGLE = ("position", "single")


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        (SINGLE + ("layout", "drop_last"), "false", "True or False"),
        (SINGLE + ("layout", "pad"), 1, "True or False"),
        (SINGLE + ("layout", "batch_size"), 10**30, "batch_size"),
        (SINGLE + ("layout", "num_workers"), 10**9, "num_workers"),
        (SINGLE + ("epoch",), 10**19, "epoch"),
        (("shardwright_loader",), True, "shardwright_loader"),
        (("receipt", "consumed", "count"), 8, "does not match its position"),
        (("receipt", "epoch"), "false", "does not match its position"),
        (("receipt", "ranks"), [], "does not match its position"),
        (("receipt",), "x", "not a dict"),
    ],
)
def test_a_hostile_loader_state_is_one_line(data, path, value, words):
    make = lambda: StreamingDataLoader(StreamingDataset(data[0]), batch_size=4)  # noqa: E731
    state = saved(make())
    assert words in refused(make, edited(state, path, value))


def test_a_position_edited_under_its_receipt_is_refused(data):
    make = lambda: StreamingDataLoader(StreamingDataset(data[0]), batch_size=4)  # noqa: E731
    state = saved(make())
    assert state["position"]["single"]["consumed"] == [12]
    # a valid position on its own: without the receipt check, 8 items would be read twice
    assert "does not match its position" in refused(make, edited(state, SINGLE + ("consumed",), [8]))
    loader = make()
    loader.load_state_dict(state)  # the intact state still resumes where it was
    assert [int(v) for b in loader for v in b["i"]] == list(range(12, 40))


@pytest.mark.parametrize(
    ("key", "value"),
    [("epoch", 10**30), ("streams", 10**30), ("yielded", 10**30), ("yielded", 41)],
)
def test_a_hostile_dataset_state_is_one_line(data, key, value):
    ds = StreamingDataset(data[0])
    it = iter(ds)
    for _ in range(5):
        next(it)
    state = ds.state_dict()
    state[key] = value
    with pytest.raises(ResumeStateError) as info:  # not an OverflowError, not an empty epoch
        StreamingDataset(data[0]).load_state_dict(state)
    assert "\n" not in str(info.value)


def test_mixed_and_zipped_states_are_bounded(data):
    def combined():
        parts = [StreamingDataset(data[0]), StreamingDataset(data[1])]
        return StreamingDataLoader(CombinedStreamingDataset(parts, seed=1, weights=[0.5, 0.5]), batch_size=4)

    state = saved(combined())
    refused(combined, edited(state, ("position", "generation"), 10**30))
    refused(combined, edited(state, ("position", "combined", 0, "layout", "drop_last"), "false"))

    def zipped():
        parts = [StreamingDataset(data[0]), StreamingDataset(data[1])]
        return StreamingDataLoader(ParallelStreamingDataset(parts), batch_size=4)

    state = saved(zipped())
    refused(zipped, edited(state, SINGLE + ("epoch",), 10**30))
