"""litdata drop-in, round 2 (issue 34 §1): the behaviours litdata's own tests rely on."""

from __future__ import annotations

import numpy as np
import pytest

from shardwright import CombinedStreamingDataset, StreamingDataset
from shardwright.errors import ArgumentTypeError, DatasetExistsError, FnError, UsageError
from shardwright.reader.combined import MixRule, mix_choices, mix_length
from support.datasets import write_dataset


def loader_class():
    return pytest.importorskip("shardwright.reader.loader").StreamingDataLoader


@pytest.fixture
def two(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    write_dataset(a, [{"i": i} for i in range(30)], chunk_size=4)
    write_dataset(b, [{"i": 1000 + i} for i in range(6)], chunk_size=4)
    return a, b


def test_fn_error_and_dataset_exists_are_runtime_errors_as_in_litdata():
    assert issubclass(FnError, RuntimeError) and issubclass(DatasetExistsError, RuntimeError)
    assert issubclass(DatasetExistsError, ValueError)  # today's base kept
    err = FnError("boom", input_index=3, input_repr="3", worker_traceback="")
    with pytest.raises(RuntimeError, match="boom"):
        raise err


def test_combined_takes_litdatas_argument_order(two):
    a, b = (StreamingDataset(p) for p in two)
    mix = CombinedStreamingDataset([a, b], 7, [0.5, 0.5], iterate_over_all=True, batching_method="stratified")
    assert mix.seed == 7 and mix.weights == [0.5, 0.5]
    assert sorted(x["i"] for x in mix) == list(range(30)) + [1000 + i for i in range(6)]
    with pytest.raises(ArgumentTypeError, match="second argument is seed .* pass it as weights="):
        CombinedStreamingDataset([a, b], [1, 1])
    with pytest.raises(UsageError, match="batching_method must be one of"):
        CombinedStreamingDataset([a, b], batching_method="random")
    with pytest.raises(ArgumentTypeError, match="iterate_over_all must be True or False"):
        CombinedStreamingDataset([a, b], iterate_over_all="false")


def test_stop_at_first_exhausted_ends_when_the_smallest_share_runs_out(two):
    a, b = (StreamingDataset(p) for p in two)
    mix = CombinedStreamingDataset([a, b], seed=3, weights=[1, 1], iterate_over_all=False)
    got = [x["i"] for x in mix]
    small = [i for i in got if i >= 1000]
    assert small == [1000 + i for i in range(6)], "the small dataset is read to its end, in order"
    assert got[-1] >= 1000, "and the mix stops right there"
    assert len(got) < 36 and len(set(got)) == len(got)
    with pytest.raises(TypeError, match="no length before iteration"):
        len(mix)


def test_mix_length_and_choices_agree():
    rng = lambda: np.random.Generator(np.random.PCG64(5))  # noqa: E731
    rule = MixRule(stop_at_first=True)
    steps = np.concatenate(list(mix_choices([100, 10], [1.0, 1.0], rng(), mix=rule)))
    assert mix_length([100, 10], [1.0, 1.0], rng(), rule) == len(steps)
    assert (steps == 1).sum() == 10 and steps[-1] == 1
    assert mix_length([100, 10], [1.0, 1.0], rng()) == 110
    assert list(mix_choices([3, 0], [1.0, 1.0], rng(), mix=rule)) == []


def test_per_stream_batches_come_from_one_dataset(two):
    loader = loader_class()
    a, b = (StreamingDataset(p) for p in two)
    mix = CombinedStreamingDataset([a, b], seed=1, weights=[1, 1], batching_method="per_stream")
    batches = [[int(v) for v in batch["i"]] for batch in loader(mix, batch_size=3)]
    assert all(len({v >= 1000 for v in batch}) == 1 for batch in batches)
    assert sorted(v for batch in batches for v in batch) == list(range(30)) + [1000 + i for i in range(6)]


def test_stop_at_first_resumes_exactly_mid_epoch(two):
    loader_cls = loader_class()

    def mix():
        a, b = (StreamingDataset(p) for p in two)
        return CombinedStreamingDataset([a, b], seed=3, weights=[1, 1], iterate_over_all=False)

    first = loader_cls(mix(), batch_size=2)
    seen = []
    for n, batch in enumerate(first):
        seen += [int(v) for v in batch["i"]]
        if n == 2:
            state = first.state_dict()
            break
    second = loader_cls(mix(), batch_size=2)
    second.load_state_dict(state)
    rest = [int(v) for batch in second for v in batch["i"]]
    # a resumed epoch mixes what is left afresh (deterministically): no item twice, and it
    # still stops where the first share runs out
    assert len(set(seen + rest)) == len(seen + rest) and rest
    small = [i for i in seen + rest if i >= 1000]
    assert rest[-1] >= 1000 and sorted(small) == [1000 + i for i in range(6)]


def test_current_epoch_counts_as_litdata_does(two):
    loader_cls = loader_class()
    loader = loader_cls(StreamingDataset(two[0]), batch_size=4)
    assert loader.current_epoch == 0
    during = [loader.current_epoch for _ in loader]
    assert set(during) == {1} and loader.current_epoch == 1
    assert {loader.current_epoch for _ in loader} == {2}
    state = loader.state_dict()  # taken between epochs: the next is not started yet
    fresh = loader_cls(StreamingDataset(two[0]), batch_size=4)
    fresh.load_state_dict(state)
    assert fresh.current_epoch == 2
    it = iter(fresh)
    next(it)
    assert fresh.current_epoch == 3
    mid = fresh.state_dict()
    again = loader_cls(StreamingDataset(two[0]), batch_size=4)
    again.load_state_dict(mid)
    assert again.current_epoch == 3


class Doubled(StreamingDataset):
    def transform(self, item):
        return {"i": item["i"] * 2}


def test_a_subclass_transform_method_is_applied_as_in_litdata(two):
    ds = Doubled(two[0])
    assert ds[3] == {"i": 6}
    assert [x["i"] for x in ds][:3] == [0, 2, 4]
    given = Doubled(two[0], transform=lambda item: {"i": item["i"] + 1})
    assert given[3] == {"i": 4}, "transform= wins over the method, as in litdata"


def test_a_str_index_says_there_are_no_keys(two):
    with pytest.raises(KeyError, match="keys/"):
        StreamingDataset(two[0])["item-0"]


def test_litdatas_input_dir_forms_local_prefix_and_dir_object(two, tmp_path):
    """litdata's ``local:`` (a network drive) and ``resolver.Dir(path=, url=)`` name the same
    dataset as the plain path; a Dir's path is the cache of its url."""
    a, _ = two
    want = [{"i": i} for i in range(30)]
    assert [dict(x) for x in StreamingDataset(f"local:{a}")] == want

    class Dir:  # litdata.streaming.resolver.Dir's shape (a dataclass of path and url)
        def __init__(self, path=None, url=None):
            self.path, self.url = path, url

    assert [dict(x) for x in StreamingDataset(Dir(path=str(a)))] == want
    # a local url is read in place (no cache); a store's url caches under path (tests/system/test_s3.py)
    assert [dict(x) for x in StreamingDataset(Dir(path=str(tmp_path / "copy"), url=f"file://{a}"))] == want
    with pytest.raises(UsageError, match="neither url nor path"):
        StreamingDataset(Dir())


def test_r2_needs_its_endpoint_in_one_line():
    with pytest.raises(
        UsageError, match=r"Cloudflare R2 is read through its S3 API: pass storage_options=\{'endpoint_url'"
    ):
        StreamingDataset("r2://bucket/data")
