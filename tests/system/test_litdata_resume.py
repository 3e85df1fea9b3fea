"""litdata 0.2.76 loader checkpoints resumed under shardwright: a dataset written by
shardwright.optimize is read mid-epoch by litdata's own StreamingDataLoader, its state_dict()
is loaded into shardwright's loader (same and other num_workers), and the epoch ends with
every sample read exactly once. shuffle=True litdata states are refused with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

import shardwright as sw
from shardwright.errors import ResumeStateError

torch = pytest.importorskip("torch")
ld = pytest.importorskip("litdata")

N = 103  # not a multiple of batch_size * workers: litdata gives the remainder to one worker


def write(out: Path) -> str:
    sw.optimize(lambda i: {"i": i}, list(range(N)), str(out), chunk_size=10, num_workers=1, verbose=False)
    return str(out)


def litdata_checkpoint(path: str, workers: int, batches: int, batch_size: int = 4, **kwargs) -> tuple[dict, list]:
    """litdata's loader state after ``batches`` batches, and the samples it yielded."""
    loader = ld.StreamingDataLoader(ld.StreamingDataset(path, **kwargs), batch_size=batch_size, num_workers=workers)
    seen: list[int] = []
    for k, batch in enumerate(loader):
        seen += batch["i"].tolist()
        if k + 1 == batches:
            break
    return loader.state_dict(), seen


@pytest.mark.parametrize(("saved_workers", "resumed_workers", "batches"), [(2, 2, 7), (2, 0, 5), (2, 3, 13), (3, 1, 4)])
def test_litdata_loader_state_resumes_exactly_once(tmp_path, saved_workers, resumed_workers, batches):
    path = write(tmp_path / "ds")
    state, seen = litdata_checkpoint(path, saved_workers, batches, shuffle=False)
    assert len(seen) == 4 * batches
    loader = sw.StreamingDataLoader(sw.StreamingDataset(path, shuffle=False), batch_size=4, num_workers=resumed_workers)
    loader.load_state_dict(state)
    assert loader.current_epoch == 1  # litdata's count: the first epoch, under way
    rest = [x for batch in loader for x in batch["i"].tolist()]
    assert sorted(seen + rest) == list(range(N))  # every sample of the epoch exactly once
    assert [x for batch in loader for x in batch["i"].tolist()] != []  # the next epoch is whole
    assert loader.current_epoch == 2


def test_litdata_dataset_state_resumes_the_dataset(tmp_path):
    path = write(tmp_path / "ds")
    state, seen = litdata_checkpoint(path, 2, 3, shuffle=False)
    ds = sw.StreamingDataset(path, shuffle=False)
    ds.load_state_dict(state["dataset"])  # litdata's dataset-level state
    rest = [int(item["i"]) for item in ds]
    assert sorted(seen + rest) == list(range(N))


def test_litdata_shuffled_state_is_refused_with_the_reason(tmp_path):
    path = write(tmp_path / "ds")
    state, _seen = litdata_checkpoint(path, 2, 3, shuffle=True)
    loader = sw.StreamingDataLoader(sw.StreamingDataset(path, shuffle=True), batch_size=4, num_workers=2)
    with pytest.raises(ResumeStateError, match="shuffle=True: litdata's shuffled order") as info:
        loader.load_state_dict(state)
    assert "\n" not in str(info.value)


def test_litdata_state_of_another_dataset_is_refused(tmp_path):
    state, _seen = litdata_checkpoint(write(tmp_path / "a"), 2, 3, shuffle=False)
    sw.optimize(lambda i: {"i": i}, list(range(50)), str(tmp_path / "b"), chunk_size=7, num_workers=1, verbose=False)
    loader = sw.StreamingDataLoader(sw.StreamingDataset(str(tmp_path / "b")), batch_size=4)
    with pytest.raises(ResumeStateError, match="other chunk files"):
        loader.load_state_dict(state)


def test_dataset_state_with_litdatas_signature_round_trips(tmp_path):
    path = write(tmp_path / "ds")
    saved = sw.StreamingDataset(path, shuffle=False).state_dict(num_samples_yielded=12, num_workers=2, batch_size=4)
    assert saved["num_samples_yielded"] == 12 and saved["shuffle"] is False
    ds = sw.StreamingDataset(path, shuffle=False)
    ds.load_state_dict(saved)  # 12 samples of litdata's split: items 0..7 of worker 0, 52..55 of worker 1
    assert sorted(int(item["i"]) for item in ds) == [i for i in range(N) if not (i < 8 or 52 <= i < 56)]


def test_litdata_combined_loader_state_is_refused_with_the_reason(tmp_path):
    path = write(tmp_path / "ds")
    combined = ld.CombinedStreamingDataset([ld.StreamingDataset(path), ld.StreamingDataset(path)])
    loader = ld.StreamingDataLoader(combined, batch_size=4, num_workers=0)
    next(iter(loader))
    ours = sw.StreamingDataLoader(sw.StreamingDataset(path), batch_size=4)
    with pytest.raises(ResumeStateError, match="StreamingDataset only"):
        ours.load_state_dict(loader.state_dict())


def test_litdata_state_after_a_whole_epoch_goes_on_with_the_next(tmp_path):
    path = write(tmp_path / "ds")
    loader = ld.StreamingDataLoader(ld.StreamingDataset(path, shuffle=False), batch_size=4, num_workers=2)
    assert sum(len(batch["i"]) for batch in loader) == N
    ours = sw.StreamingDataLoader(sw.StreamingDataset(path, shuffle=False), batch_size=4, num_workers=2)
    ours.load_state_dict(loader.state_dict())
    assert ours.current_epoch == 1  # as litdata's loader: the first epoch is over, the second not begun
    assert sorted(x for batch in ours for x in batch["i"].tolist()) == list(range(N))
    assert ours.current_epoch == 2
