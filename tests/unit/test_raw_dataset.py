"""reader/raw.py: StreamingRawDataset lists a local folder, reads files in place, groups them
through setup(), and shuffles and resumes through StreamingDataLoader exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

import shardwright as sw
from shardwright.errors import ArgumentTypeError, UsageError

torch = pytest.importorskip("torch")


@pytest.fixture
def folder(tmp_path) -> Path:
    for i in range(23):
        sub = tmp_path / f"c{i % 3}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i:02d}.bin").write_bytes(bytes([i]) * (i + 1))
    return tmp_path


def first_bytes(batch):
    return [x[0] for x in batch]


def test_files_are_listed_sorted_and_read_in_place(folder):
    ds = sw.StreamingRawDataset(str(folder))
    assert len(ds) == 23
    assert [Path(f.path).name for f in ds.files[:2]] == ["f00.bin", "f03.bin"]  # c0/ first, names sorted
    assert ds[1] == bytes([3]) * 4 and ds.files[1].size == 4
    paths = sw.StreamingRawDataset(str(folder), item_type="path")
    assert paths[0] == str(folder / "c0" / "f00.bin")


def test_setup_groups_files_and_transform_applies(folder):
    class Pairs(sw.StreamingRawDataset):
        def setup(self, files):
            return [files[i : i + 2] for i in range(0, len(files) - 1, 2)]

    ds = Pairs(str(folder), transform=lambda parts: sum(len(p) for p in parts))
    assert len(ds) == 11
    assert ds[0] == 1 + 4


@pytest.mark.parametrize("shuffle", [False, True])
def test_loader_resumes_exactly(folder, shuffle):
    def loader():
        ds = sw.StreamingRawDataset(str(folder), shuffle=shuffle)
        return sw.StreamingDataLoader(ds, batch_size=4, collate_fn=first_bytes)

    whole = [x for b in loader() for x in b]
    assert sorted(whole) == list(range(23))
    listed = sw.StreamingRawDataset(str(folder))
    assert shuffle or whole == [listed[i][0] for i in range(23)]  # unshuffled: the listing's order
    first = loader()
    it = iter(first)
    head = [x for _ in range(3) for x in next(it)]
    again = loader()
    again.load_state_dict(first.state_dict())
    assert head + [x for b in again for x in b] == whole


def test_another_epoch_is_shuffled_anew(folder):
    loader = sw.StreamingDataLoader(
        sw.StreamingRawDataset(str(folder), shuffle=True), batch_size=4, collate_fn=first_bytes
    )
    one, two = ([x for b in loader for x in b] for _ in range(2))
    assert sorted(one) == sorted(two) == list(range(23)) and one != two


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"item_type": "text"}, UsageError, "item_type must be"),
        ({"indexer": object()}, UsageError, "override setup"),
        ({"shuffle": "yes"}, ArgumentTypeError, "shuffle must be True or False"),
    ],
)
def test_mistakes_get_one_line(folder, kwargs, error, match):
    with pytest.raises(error, match=match):
        sw.StreamingRawDataset(str(folder), **kwargs)


def test_a_missing_folder_is_refused(tmp_path):
    with pytest.raises(UsageError, match="is not a folder"):
        sw.StreamingRawDataset(str(tmp_path / "nope"))


def test_persistent_workers_see_the_next_epoch(folder):
    ds = sw.StreamingRawDataset(str(folder), shuffle=True)
    loader = sw.StreamingDataLoader(ds, batch_size=4, num_workers=1, persistent_workers=True, collate_fn=first_bytes)
    one, two = ([x for b in loader for x in b] for _ in range(2))
    assert sorted(one) == sorted(two) == list(range(23)) and one != two


def test_an_empty_folder_is_refused(tmp_path):
    with pytest.raises(UsageError, match="No files found in"):
        sw.StreamingRawDataset(str(tmp_path))


def test_setup_mistakes_and_indices_get_litdata_errors(folder):
    class NotAList(sw.StreamingRawDataset):
        def setup(self, files):
            return files[0]

    class NotFiles(sw.StreamingRawDataset):
        def setup(self, files):
            return [123]

    with pytest.raises(TypeError, match="The setup method must return a list"):
        NotAList(str(folder))
    with pytest.raises(TypeError, match="Dataset items must be of type FileMetadata"):
        NotFiles(str(folder))[0]
    ds = sw.StreamingRawDataset(str(folder))
    with pytest.raises(IndexError, match="Index 23 out of range"):
        ds[23]
    assert ds[-1] == ds[22]
    assert ds.__getitems__([1, 0]) == [ds[1], ds[0]]
    with pytest.raises(TypeError, match="list of indices"):
        ds.__getitems__(0)
    with pytest.raises(IndexError, match="out of range"):
        ds.__getitems__([0, 99])
    assert (ds.max_prefetch, ds.prefetch_cache_size) == (16, 32)  # litdata's defaults, readable
