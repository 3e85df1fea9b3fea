"""StreamingRawDataset over an S3 prefix (the real S3 test server): files read in place,
through the chunk cache with cache_files=True, and resumed with DataLoader workers."""

from __future__ import annotations

import os

import pytest

import shardwright as sw
from shardwright.storage import open_storage

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.s3


def first_bytes(batch):
    return [x[0] for x in batch]


@pytest.fixture
def prefix(s3_url, s3_storage_options) -> str:
    storage = open_storage(s3_url, s3_storage_options)
    for i in range(17):
        storage.write_bytes(f"img/{i % 2}/f{i:02d}.jpg", bytes([i]) * (100 + i))
    return s3_url + "/img"


def test_remote_files_read_in_place_and_cached(prefix, s3_storage_options, tmp_path):
    ds = sw.StreamingRawDataset(prefix, storage_options=s3_storage_options)
    assert len(ds) == 17 and ds[0] == bytes([0]) * 100
    cached = sw.StreamingRawDataset(
        prefix, storage_options=s3_storage_options, cache_files=True, cache_dir=str(tmp_path), item_type="path"
    )
    path = cached[1]
    assert path.startswith(str(tmp_path)) and open(path, "rb").read() == bytes([2]) * 102
    assert len([n for _r, _d, names in os.walk(tmp_path) for n in names if n.endswith(".jpg")]) == 1


def test_remote_resume_with_workers(prefix, s3_storage_options, tmp_path):
    def loader(workers: int):
        ds = sw.StreamingRawDataset(
            prefix, storage_options=s3_storage_options, cache_files=True, cache_dir=str(tmp_path), shuffle=True
        )
        return sw.StreamingDataLoader(ds, batch_size=3, num_workers=workers, collate_fn=first_bytes)

    whole = [x for b in loader(2) for x in b]
    assert sorted(whole) == list(range(17))
    first = loader(2)
    it = iter(first)
    head = [x for _ in range(2) for x in next(it)]
    state = first.state_dict()
    del it
    again = loader(1)
    again.load_state_dict(state)
    assert sorted(head + [x for b in again for x in b]) == list(range(17))
