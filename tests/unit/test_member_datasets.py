"""reader/members.py: CombinedStreamingDataset and ParallelStreamingDataset over datasets that
are not StreamingDatasets (litdata's dataset protocol, plain ranges and lists), as litdata
accepts them; the members' own state_dict / load_state_dict resume them."""

from __future__ import annotations

import pytest

from shardwright import CombinedStreamingDataset, ParallelStreamingDataset, StreamingDataset
from shardwright.errors import ArgumentTypeError, ResumeStateError, UsageError
from support.datasets import write_dataset

torch = pytest.importorskip("torch")
StreamingDataLoader = pytest.importorskip("shardwright.reader.loader").StreamingDataLoader


class Counter:
    """A member with litdata's protocol: it records what the mix forwards to it and saves
    its own position (its counter); a loaded state applies at the next iteration."""

    def __init__(self, size: int, step: int):
        self.size, self.step, self.counter, self.resume_from = size, step, 0, 0
        self.calls: list[tuple] = []

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        self.counter, self.resume_from = self.resume_from, 0
        return self

    def __next__(self) -> int:
        if self.counter == self.size:
            raise StopIteration
        self.counter += 1
        return self.step * (self.counter - 1)

    def state_dict(self, num_workers: int, batch_size: int, num_samples_yielded: int) -> dict:
        return {"counter": self.counter, "seen": num_samples_yielded}

    def load_state_dict(self, state: dict) -> None:
        self.resume_from = state["counter"]

    def __getattr__(self, name: str):
        if not name.startswith("set_"):
            raise AttributeError(name)
        return lambda value: self.calls.append((name, value))


def test_ranges_mix_every_item_once_interleaved_as_litdata_draws_them():
    mix = CombinedStreamingDataset([range(10), range(0, -10, -1)], seed=42)
    assert len(mix) == 20
    first = list(mix)
    assert sorted(first) == sorted([*range(10), *range(0, -10, -1)])
    assert [x for x in first if x > 0] == list(range(1, 10))  # each member keeps its own order
    assert list(CombinedStreamingDataset([range(10), range(0, -10, -1)], seed=7)) != first
    mix.set_epoch(1)
    assert list(mix) == first  # litdata's draws depend on the seed only; members reorder themselves
    # litdata 0.2.76 gives this sequence for these members, seed and weights
    litdata_42 = [0, 0, 1, 2, -1, -2, -3, 3, 4, 5, 6, -4, 7, 8, -5, -6, 9, -7, -8]
    stop = CombinedStreamingDataset([range(10), range(0, -10, -1)], 42, weights=(0.5, 0.5), iterate_over_all=False)
    assert list(stop) == litdata_42


def test_a_zero_weight_member_is_not_read_when_the_first_exhausted_ends_the_epoch():
    mix = CombinedStreamingDataset([range(10), [100, 101]], weights=[1.0, 0.0], iterate_over_all=False, seed=1)
    assert list(mix) == list(range(10))
    with pytest.raises(TypeError, match="has no len"):
        len(CombinedStreamingDataset([iter_only(3), range(2)], weights=[1, 1]))


def iter_only(n: int):
    class Only(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(n))

    return Only()


def test_mistakes_get_one_line():
    with pytest.raises(ArgumentTypeError, match="element 1 is a int, which is not one: pass a list of its items"):
        CombinedStreamingDataset([range(3), 7])
    with pytest.raises(ArgumentTypeError, match="element 0 is a dict"):
        CombinedStreamingDataset([{"a": 1}, range(3)])
    with pytest.raises(UsageError, match=r"dataset 0 has no len\(\).*pass weights="):
        CombinedStreamingDataset([iter_only(3), range(3)])
    with pytest.raises(UsageError, match="weights must be 2 positive finite numbers"):
        CombinedStreamingDataset([range(3), range(3)], weights=[0, 0])


def test_the_loaders_options_are_forwarded_to_members_that_take_them():
    a, b = Counter(4, 1), Counter(4, -1)
    mix = CombinedStreamingDataset([a, b, range(3)], weights=[1, 1, 1])
    loader = StreamingDataLoader(mix, batch_size=2, shuffle=True, drop_last=True)
    list(loader)
    for member in (a, b):
        names = {name for name, _ in member.calls}
        assert {"set_shuffle", "set_drop_last", "set_batch_size", "set_num_workers", "set_epoch"} <= names
        assert ("set_shuffle", True) in member.calls and ("set_batch_size", 2) in member.calls


def test_members_own_states_resume_the_mix():
    mix = CombinedStreamingDataset([Counter(10, 1), Counter(10, -1)], seed=42, weights=(0.5, 0.5))
    assert mix.state_dict(0, 1) == {}  # before the first iteration, as litdata's
    it = iter(mix)
    head = [next(it) for _ in range(7)]
    state = mix.state_dict(0, 1)
    taken = [sum(1 for x in head if x > 0 or x == 0 and k == 0) for k in (0, 1)]
    assert {k: v["counter"] for k, v in state.items()} == {"0": state["0"]["seen"], "1": state["1"]["seen"]}
    assert sum(v["counter"] for v in state.values()) == 7 and taken[0] >= 1
    again = CombinedStreamingDataset([Counter(10, 1), Counter(10, -1)], seed=42, weights=(0.5, 0.5))
    again.load_state_dict({"dataset": state})
    rest = list(again)
    assert sorted(head + rest) == sorted([*range(10), *range(0, -10, -1)])  # every item exactly once


def test_per_stream_takes_each_members_batch_size_in_a_row():
    mix = CombinedStreamingDataset(
        [range(200), range(1000, 1200)], seed=123, weights=[0.5, 0.5], batching_method="per_stream",
        iterate_over_all=False,
    )  # fmt: skip
    mix.set_batch_size([1, 3])
    runs: list[list[int]] = []
    for x in mix:
        if runs and (runs[-1][0] >= 1000) == (x >= 1000):
            runs[-1].append(x)
        else:
            runs.append([x])
    assert len(runs) > 50
    assert all(len(r) == (3 if r[0] >= 1000 else 1) for r in runs[:-1])


def test_the_loader_saves_a_mix_of_other_members_in_litdatas_format_and_resumes_it_exactly():
    def make():
        return CombinedStreamingDataset([range(20), Counter(10, -1), list(range(100, 106))], 3, [1, 2, 1])

    whole = [x for b in StreamingDataLoader(make(), batch_size=3) for x in b.tolist()]
    for cut in (1, 4, len(whole) // 3):
        loader = StreamingDataLoader(make(), batch_size=3)
        head: list[int] = []
        for batch in loader:
            head += batch.tolist()
            if len(head) >= 3 * cut:
                break
        state = loader.state_dict()
        counts = state["num_samples_yielded"][0]
        assert sum(counts) == len(head) and state["current_epoch"] == 1 and state["latest_worker_idx"] == 0
        assert state["dataset"]["1"] == {"counter": counts[1], "seen": counts[1]}  # the member's own state
        assert state["dataset"]["0"] == {"items_read": counts[0]}  # a range has none: ours
        again = StreamingDataLoader(make(), batch_size=3)
        again.load_state_dict(state)
        assert again.current_epoch == 1
        assert head + [x for b in again for x in b.tolist()] == whole  # the draws replayed, each item once
    with pytest.raises(ResumeStateError, match="resumes from what this loader's state_dict"):
        StreamingDataLoader(make(), batch_size=3).load_state_dict({"dataset": {}})


@pytest.mark.parametrize("length", [None, 13, 25])
def test_the_loader_saves_a_zip_of_other_members_with_its_cycles_and_resumes_it_exactly(length):
    def tuples(loader) -> list[tuple[int, int]]:
        return [(int(a), int(b)) for batch in loader for a, b in zip(*batch)]

    def make():
        return StreamingDataLoader(ParallelStreamingDataset([range(10), list(range(100, 107))], length=length), 2)

    whole = tuples(make())
    for cut in (1, 4, 8):
        loader = make()
        head: list[tuple[int, int]] = []
        for batch in loader:
            head += [(int(a), int(b)) for a, b in zip(*batch)]
            if len(head) >= 2 * cut:
                break
        state = loader.state_dict()
        assert set(state) == {"dataset", "current_epoch", "latest_worker_idx", "num_samples_yielded", "num_cycles"}
        again = make()
        again.load_state_dict(state)
        assert head + tuples(again) == whole


def test_a_streaming_dataset_mixes_with_a_range(tmp_path):
    write_dataset(tmp_path, [{"i": i} for i in range(12)], chunk_size=5)
    mix = CombinedStreamingDataset([StreamingDataset(str(tmp_path)), range(100, 105)], weights=[1, 1])
    got = [x["i"] if isinstance(x, dict) else x for x in mix]
    assert sorted(int(x) for x in got) == [*range(12), *range(100, 105)]
    with pytest.raises(UsageError, match="saved with StreamingDataLoader.state_dict"):
        CombinedStreamingDataset([StreamingDataset(str(tmp_path))]).state_dict()


@pytest.mark.parametrize(
    ("first", "length", "expected"),
    [
        (range(5), None, [(0, 0), (1, -1), (2, -2), (3, -3), (4, -4)]),
        (range(10), 8, [(0, 0), (1, -1), (2, -2), (3, -3), (4, -4), (5, 0), (6, -1), (7, -2)]),
        (range(5), 7, [(0, 0), (1, -1), (2, -2), (3, -3), (4, -4), (0, 0), (1, -1)]),
    ],
)
def test_parallel_zips_ranges_and_cycles_the_shorter(first, length, expected):
    zipped = ParallelStreamingDataset([first, range(0, -5, -1)], length=length)
    assert len(zipped) == len(expected)
    assert list(zipped) == expected
    assert list(ParallelStreamingDataset([range(10), range(0)], length=3)) == []  # an empty member cannot cycle


def test_parallel_members_states_resume_the_zip_and_transforms_draw_reproducibly():
    zipped = ParallelStreamingDataset([Counter(10, 1), Counter(7, -1)], length=10)
    it = iter(zipped)
    head = [next(it) for _ in range(8)]
    state = zipped.state_dict(0, 1)
    assert head[7] == (7, 0) and state["1"]["counter"] == 1  # the shorter one cycled
    again = ParallelStreamingDataset([Counter(10, 1), Counter(7, -1)], length=10)
    again.load_state_dict(state)
    assert list(again)[:2] == [(8, -1), (9, -2)]  # each member goes on from its own state

    def draw(samples, rngs):
        return samples[0], rngs["numpy"].random()

    one = list(ParallelStreamingDataset([range(6)], transform=draw, seed=3))
    assert one == list(ParallelStreamingDataset([range(6)], transform=draw, seed=3))
    assert len({r for _, r in one}) == 6
    other = ParallelStreamingDataset([range(6)], transform=draw, seed=4)
    assert [r for _, r in other] != [r for _, r in one]
    with pytest.raises(UsageError, match="transform function must take 1 or 2 arguments"):
        ParallelStreamingDataset([range(3)], transform=lambda a, b, c: a)


@pytest.mark.parametrize("options", [{}, {"iterate_over_all": False}, {"batching_method": "per_stream"}])
def test_a_mix_of_ranges_resumes_exactly_from_its_state(options):
    def make():
        mix = CombinedStreamingDataset([range(10), list(range(100, 104)), range(50, 60)], 3, [1, 2, 1], **options)
        mix.set_batch_size([2, 1, 3])
        return mix

    whole = list(make())
    for cut in sorted({0, 5, len(whole) // 2, len(whole) - 1, len(whole)}):
        mix = make()
        it = iter(mix)
        head = [next(it) for _ in range(cut)]
        state = mix.state_dict()
        assert set(state) == {"0", "1", "2"} and sum(part["items_read"] for part in state.values()) == cut
        again = make()
        again.load_state_dict(state)  # the members skip what was read; the draws are replayed
        assert head + list(again) == whole
        assert list(again) == whole  # applied once: the next iteration starts the epoch afresh


def test_litdatas_profiler_options_are_refused_in_one_line():
    for name in ("profile_batches", "profile_cprofile", "profile_dir"):
        with pytest.raises(UsageError, match=rf"StreamingDataLoader\({name}=\) is refused: .*torch.profiler"):
            StreamingDataLoader(CombinedStreamingDataset([range(3)]), **{name: True})
    with pytest.raises(UsageError, match=r"\(profile_batches=, profile_cprofile=\) is refused"):
        StreamingDataLoader(CombinedStreamingDataset([range(3)]), profile_cprofile=True, profile_batches=True)


def test_a_mix_read_by_a_loader_still_iterates_plainly_by_itself():
    mix = CombinedStreamingDataset([range(3), range(10, 13)], weights=[1, 1])
    loader = StreamingDataLoader(mix, batch_size=2)
    assert sorted(x for b in loader for x in b.tolist()) == [0, 1, 2, 10, 11, 12]
    assert sorted(mix) == [0, 1, 2, 10, 11, 12]  # plain items, not the loader's tagged ones
    zipped = ParallelStreamingDataset([range(3), range(10, 13)])
    StreamingDataLoader(zipped, batch_size=2)
    assert list(zipped) == [(0, 10), (1, 11), (2, 12)]
