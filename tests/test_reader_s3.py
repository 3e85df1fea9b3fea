"""The training reader on the real S3 server: prefetch from the epoch plan under injected
latency, and ranks that download only their share of the chunks."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from shardwright import StreamingDataset, optimize

pytestmark = pytest.mark.s3

ROWS = 1000
CHUNKS = 40


def array_item(i: int) -> dict:
    return {"i": i, "a": np.full(ROWS, i % 251, dtype=np.uint8)}


@pytest.fixture(scope="module")
def remote(s3_server):
    bucket = s3_server.create_bucket()
    url = f"s3://{bucket}/train"
    optimize(
        array_item,
        list(range(CHUNKS * 20)),
        url,
        chunk_size=20,
        num_shards=4,
        num_workers=2,
        storage_options=s3_server.storage_options,
        verbose=False,
    )
    yield url
    try:
        s3_server.delete_bucket(bucket)
    except Exception:
        pass


def dir_bytes(root: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


def test_prefetch_from_the_plan_hides_latency(remote, fault_proxy, tmp_path):
    fault_proxy.configure(latency=0.05)  # every S3 request takes 50 ms more
    chunk = 20 * (ROWS + 100)
    limit = 16 * chunk
    ds = StreamingDataset(
        remote,
        storage_options=fault_proxy.storage_options,
        cache_dir=tmp_path / "cache",
        max_cache_bytes=limit,
        shuffle=True,
        seed=2,
        shuffle_window=4,
        prefetch=4,
        iterable=True,
    )
    seen = []
    for item in ds:
        seen.append(item["i"])
        time.sleep(0.001)  # a training step: the downloads of the next window overlap it
    assert sorted(seen) == list(range(CHUNKS * 20))
    waits = ds._source.cache.reader_waits
    # Warm-up: the first window's chunks (4) are waited for; after that, reads find their chunk.
    assert waits <= 6, f"{waits} reads waited for a download"
    assert dir_bytes(tmp_path / "cache") <= limit + 2 * chunk


def test_without_prefetch_every_chunk_is_waited_for(remote, fault_proxy, tmp_path):
    """The control: the test above could not pass without the prefetcher."""
    ds = StreamingDataset(
        remote,
        storage_options=fault_proxy.storage_options,
        cache_dir=tmp_path / "cache",
        shuffle=True,
        seed=2,
        prefetch=False,
        iterable=True,
    )
    assert len(list(ds)) == CHUNKS * 20
    assert ds._source.cache.reader_waits == CHUNKS


def test_each_rank_downloads_its_share(remote, fault_proxy, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    downloaded = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        before = fault_proxy.stats["requests"]
        ds = StreamingDataset(
            remote, storage_options=fault_proxy.storage_options, cache_dir=tmp_path / f"c{rank}", shuffle=True, seed=5
        )
        items = [x["i"] for x in ds]
        assert len(items) == CHUNKS * 10
        downloaded.append(fault_proxy.stats["requests"] - before - 1)  # minus index.json
    assert all(n <= CHUNKS // 2 + 1 for n in downloaded), downloaded
