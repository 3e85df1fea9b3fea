"""CombinedStreamingDataset / ParallelStreamingDataset over members that are not
StreamingDatasets (ranges, lists, litdata-protocol datasets), read by real DataLoader worker
processes: plain sequences are split among the workers (each item once), a protocol member
gets the loader's options before the workers copy it, and a transform's generators give each
tuple its own numbers, the same on every run."""

from __future__ import annotations

import pytest

import shardwright as sw

torch = pytest.importorskip("torch")


class SelfSplitting(torch.utils.data.IterableDataset):
    """litdata's protocol member that splits itself among workers with the count the loader
    forwarded (set_num_workers); it refuses to run in a worker count it was not told."""

    def __init__(self, items: list[int]):
        super().__init__()
        self.items, self.num_workers, self.shuffle = items, None, None

    def set_num_workers(self, n: int) -> None:
        self.num_workers = n

    def set_shuffle(self, shuffle: bool) -> None:
        self.shuffle = shuffle

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None or self.num_workers != info.num_workers or self.shuffle is not False:
            raise RuntimeError(f"not configured for this worker: {self.num_workers}, shuffle {self.shuffle}")
        return iter(self.items[info.id :: info.num_workers])


def test_two_workers_read_each_item_of_ranges_lists_and_protocol_members_once():
    mix = sw.CombinedStreamingDataset([range(30), list(range(100, 111)), SelfSplitting(list(range(500, 520)))])
    loader = sw.StreamingDataLoader(mix, batch_size=4, num_workers=2, shuffle=False)
    for _epoch in range(2):
        got = sorted(int(x) for batch in loader for x in batch)
        assert got == [*range(30), *range(100, 111), *range(500, 520)]


def test_zipped_ranges_in_two_workers_draw_distinct_reproducible_numbers():
    def draw(samples, rngs):
        return float(samples[0]), torch.rand(1, generator=rngs["torch"]).item()

    def run() -> list[tuple[float, float]]:
        zipped = sw.ParallelStreamingDataset([range(12), range(100, 112)], transform=draw, seed=5)
        loader = sw.StreamingDataLoader(zipped, batch_size=3, num_workers=2)
        return sorted((float(a), float(r)) for x, rs in loader for a, r in zip(x, rs))

    first = run()
    assert [a for a, _ in first] == [float(i) for i in range(12)]  # each tuple once across the workers
    assert len({r for _, r in first}) == 12
    assert run() == first


def test_a_mix_of_ranges_saved_mid_epoch_by_two_workers_resumes_each_item_exactly_once():
    def make():
        return sw.CombinedStreamingDataset([range(40), list(range(100, 120)), range(500, 530)], 7, [1, 2, 1])

    def loader():
        return sw.StreamingDataLoader(make(), batch_size=4, num_workers=2)

    whole = sorted(int(x) for b in loader() for x in b)
    first = loader()
    head: list[int] = []
    for batch in first:  # a state taken while both workers have batches in flight
        head += [int(x) for x in batch]
        if len(head) >= 24:
            break
    state = first.state_dict()
    assert sorted(state["num_samples_yielded"]) == [0, 1]  # litdata's keys: items taken, by worker
    again = loader()
    again.load_state_dict(state)
    rest = [int(x) for b in again for x in b]
    assert sorted(head + rest) == whole
    assert sorted(int(x) for b in again for x in b) == whole  # the next epoch is whole again
