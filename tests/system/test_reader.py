"""StreamingDataset on local directories (no cache involved), and the chunk cache of remote
datasets exercised over a local Storage (the S3 end-to-end tests are in test_s3.py).

tests/system/test_litdata_compat.py already covers: access patterns and slicing on a hand-written
dataset, empty dataset, missing dir, missing index, corrupt index, missing/short chunks,
chunk count mismatch, unsupported formats, pickling, DataLoader workers, litdata's
decompressed copies. This file adds what those do not.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from shardwright import StreamingDataset, optimize
from shardwright.errors import CorruptStateError
from shardwright.format import ChunkEntry, ItemEncoder, build_chunk
from shardwright.protocol.layout import chunk_filename
from shardwright.reader import _CACHE_MARKER, _ChunkCache, _try_evict
from shardwright.storage import LocalStorage
from support.helpers import errors_of_threads, fork_pool_map


def item(i: int) -> dict:
    return {"i": i, "a": np.full(64, i % 200, dtype=np.uint8), "s": f"item-{i}"}


def gen(i: int):
    for j in range(i % 3):
        yield {"i": i, "j": j}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """600 items in 60 chunks over 6 shards, written by optimize."""
    out = tmp_path_factory.mktemp("reader") / "ds"
    optimize(item, list(range(600)), str(out), chunk_size=10, num_shards=6, num_workers=2, verbose=False)
    return out


def check(x: dict, i: int) -> None:
    assert x["i"] == i and x["s"] == f"item-{i}"
    assert x["a"].dtype == np.uint8 and x["a"].shape == (64,) and int(x["a"][0]) == i % 200


# --- local, cache-free ---------------------------------------------------------------------------


def test_basic_access(dataset):
    ds = StreamingDataset(dataset)
    assert len(ds) == 600 and len(ds.chunks) == 60 and ds.cache_dir is None
    assert ds.config.chunk_size == 10 and ds.config.compression is None
    check(ds[0], 0)
    check(ds[599], 599)
    check(ds[-1], 599)
    check(ds[-600], 0)
    check(ds[np.int32(77)], 77)
    for bad in (600, -601):
        with pytest.raises(IndexError, match="out of range for a dataset of 600 items"):
            ds[bad]
    for bad in (1.5, None):
        with pytest.raises(TypeError):
            ds[bad]
    with pytest.raises(KeyError, match="keys/ sidecar"):  # a str is litdata's look-up by key
        ds["3"]


def test_slices(dataset):
    ds = StreamingDataset(dataset)
    assert [x["i"] for x in ds[5:9]] == [5, 6, 7, 8]
    assert [x["i"] for x in ds[-3:]] == [597, 598, 599]
    assert [x["i"] for x in ds[590:10000]] == list(range(590, 600))
    assert [x["i"] for x in ds[::-97]] == list(range(599, -1, -97))
    assert [x["i"] for x in ds[100:50:-10]] == list(range(100, 50, -10))
    assert ds[10:10] == [] and ds[700:] == []
    with pytest.raises(ValueError):
        ds[::0]


def test_iteration_order_and_reiteration(dataset):
    ds = StreamingDataset(dataset)
    for _ in range(2):
        for i, x in enumerate(ds):
            check(x, i)
    it1, it2 = iter(ds), iter(ds)  # independent iterators
    assert next(it1)["i"] == 0 and next(it1)["i"] == 1 and next(it2)["i"] == 0


def test_generator_and_append_order(tmp_path):
    out = str(tmp_path / "ds")
    optimize(gen, list(range(40)), out, chunk_size=4, num_shards=5, num_workers=2, verbose=False)
    optimize(gen, list(range(40, 60)), out, chunk_size=4, num_shards=3, num_workers=2, verbose=False, mode="append")
    ds = StreamingDataset(out)
    assert [(x["i"], x["j"]) for x in ds] == [(i, j) for i in range(60) for j in range(i % 3)]


def test_file_url_and_pathlike(dataset):
    assert StreamingDataset(f"file://{dataset}")[3]["i"] == 3
    assert StreamingDataset(Path(dataset))[4]["i"] == 4
    assert StreamingDataset(str(dataset)).output_dir == str(dataset)


def test_output_dir_is_a_file(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file, not a dataset directory"):
        StreamingDataset(f)


def test_unsupported_url_and_bad_cache_bound(dataset):
    with pytest.raises(ValueError, match="unsupported URL"):
        StreamingDataset("hdfs://bucket/data")
    with pytest.raises(ValueError, match="max_cache_bytes"):
        StreamingDataset(dataset, max_cache_bytes="lots")
    # Cache settings do not apply to local datasets: nothing is created.
    ds = StreamingDataset(dataset, cache_dir=dataset.parent / "unused", max_cache_bytes="1MB")
    check(ds[10], 10)
    assert ds.cache_dir is None and not (dataset.parent / "unused").exists()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_lru_releases_chunks(dataset):
    ds = StreamingDataset(dataset)
    check(ds[0], 0)
    gc.collect()
    before = _open_fds()
    for i in range(0, 600, 10):  # one item of every chunk: far more chunks than the LRU keeps
        check(ds[i], i)
    gc.collect()
    assert _open_fds() <= before + 5, "mmaps of chunks that left the LRU are still open"


def test_items_stay_valid_after_their_chunk_left_the_lru(dataset):
    ds = StreamingDataset(dataset)
    kept = [ds[i] for i in range(10)]  # chunk 0's items hold views into its mmap
    for i in range(10, 600, 10):
        ds[i]
    for i, x in enumerate(kept):
        check(x, i)


def test_concurrent_threads(dataset):
    ds = StreamingDataset(dataset)

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for i in rng.integers(0, 600, 400):
            check(ds[int(i)], int(i))

    assert errors_of_threads(worker, range(4)) == []


def test_dataloader_fork_after_parent_read(dataset):
    torch = pytest.importorskip("torch")
    ds = StreamingDataset(dataset)
    check(ds[300], 300)  # the parent has mapped chunks before the workers fork
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=2, multiprocessing_context=multiprocessing.get_context("fork")
    )
    assert sorted(int(x["i"]) for x in loader) == list(range(600))


def test_zstd_local(tmp_path):
    out = str(tmp_path / "z")
    optimize(item, list(range(50)), out, chunk_size=7, num_shards=2, compression="zstd", num_workers=1, verbose=False)
    ds = StreamingDataset(out)
    assert all(c.filename.endswith(".zstd.bin") for c in ds.chunks)
    for i, x in enumerate(ds):
        check(x, i)
    assert [x["i"] for x in ds[-8:-2]] == list(range(42, 48))


# --- the chunk cache of remote datasets, over a local Storage -----------------------------------


def _source(tmp_path: Path, sizes: list[int]) -> tuple[LocalStorage, list[ChunkEntry]]:
    """Chunk files of the given item counts (~100 bytes per item) in a local "remote"."""
    root = tmp_path / "remote"
    root.mkdir()
    enc = ItemEncoder()
    entries = []
    for k, n in enumerate(sizes):
        raw = build_chunk([enc.encode({"k": k, "pad": b"x" * 90}, k) for _ in range(n)])
        name = chunk_filename(0, 0, k, None)
        (root / name).write_bytes(raw)
        entries.append(ChunkEntry(name, n, len(raw)))
    return LocalStorage(root), entries


def _cache(tmp_path: Path, storage, max_bytes: int, name: str = "ds") -> _ChunkCache:
    return _ChunkCache(str(tmp_path / "cache"), name, "s3://b/p", storage, max_bytes)


def _cached(cache: _ChunkCache) -> list[str]:
    return sorted(n for n in os.listdir(cache.directory) if n.startswith("chunk-"))


def test_cache_fetches_once_and_marks_its_directory(tmp_path):
    storage, entries = _source(tmp_path, [10, 10])
    cache = _cache(tmp_path, storage, 10**9)
    pin = cache.open(entries[0])
    assert pin.size == entries[0].chunk_bytes
    assert Path(pin.path).read_bytes() == (tmp_path / "remote" / entries[0].filename).read_bytes()
    pin.close()
    (tmp_path / "remote" / entries[0].filename).unlink()  # cached: the source is not read again
    cache.open(entries[0]).close()
    assert os.path.isfile(os.path.join(cache.directory, _CACHE_MARKER))


def test_cache_evicts_least_recently_used_and_never_a_pinned_chunk(tmp_path):
    storage, entries = _source(tmp_path, [10] * 6)
    size = entries[0].chunk_bytes
    cache = _cache(tmp_path, storage, max_bytes=10**9)
    held = cache.open(entries[0])  # pinned the whole time
    for e in entries[1:]:
        time.sleep(0.01)
        cache.open(e).close()
    time.sleep(0.01)
    cache.open(entries[1]).close()  # read again: now the most recently used
    # An eviction frees a tenth of the bound more than asked: to 3 chunks here.
    cache.max_bytes = 10 * size
    cache.evict(4 * size)
    names = [e.filename for e in entries]
    assert _cached(cache) == sorted([names[0], names[5], names[1]])
    cache.evict(0)
    assert _cached(cache) == [names[0]]  # pinned: never evicted
    held.close()
    cache._estimate = None  # forget the last scan
    cache.evict(0)
    assert _cached(cache) == []


def test_cache_bound_while_reading_sequentially(tmp_path):
    storage, entries = _source(tmp_path, [10] * 20)
    size = entries[0].chunk_bytes
    cache = _cache(tmp_path, storage, max_bytes=4 * size + 10)
    for e in entries:
        pin = cache.open(e)
        total, _ = cache._scan()
        assert total <= cache.max_bytes
        pin.close()


def test_cache_bound_covers_other_datasets_but_never_foreign_directories(tmp_path):
    storage, entries = _source(tmp_path, [10] * 4)
    size = entries[0].chunk_bytes
    a = _cache(tmp_path, storage, max_bytes=2 * size + 10, name="a")
    b = _cache(tmp_path, storage, max_bytes=2 * size + 10, name="b")
    foreign = tmp_path / "cache" / "not-a-cache"
    foreign.mkdir(parents=True)
    (foreign / "chunk-0-00000-000000.bin").write_bytes(b"z" * (10 * size))
    for e in entries[:2]:
        a.open(e).close()
    time.sleep(0.01)
    for e in entries[2:]:
        b.open(e).close()
    assert _cached(a) == [] and len(_cached(b)) == 2  # a's chunks were the oldest of the root
    assert (foreign / "chunk-0-00000-000000.bin").stat().st_size == 10 * size  # not ours: untouched


def test_cache_evicted_between_check_and_lock_is_fetched_again(tmp_path):
    storage, entries = _source(tmp_path, [10])
    cache = _cache(tmp_path, storage, 10**9)
    cache.open(entries[0]).close()
    path = cache.path_of(entries[0])
    assert _try_evict(path, cache.lock_path(path))
    pin = cache.open(entries[0])
    assert pin.size == entries[0].chunk_bytes and os.path.exists(path)
    assert not _try_evict(path, cache.lock_path(path))  # pinned
    pin.close()


def test_cache_removes_temp_files_of_dead_processes(tmp_path):
    storage, entries = _source(tmp_path, [10])
    cache = _cache(tmp_path, storage, 10**9)
    cache.open(entries[0]).close()
    dead = multiprocessing.get_context("fork").Process(target=lambda: None)
    dead.start()
    dead.join()
    stale = Path(cache.directory) / f".{entries[0].filename}.tmp-{dead.pid}-1-00000000ab"
    live = Path(cache.directory) / f".{entries[0].filename}.tmp-{os.getpid()}-1-00000000cd"
    for f in (stale, live):
        f.write_bytes(b"partial")
        os.utime(f, (time.time() - 3600, time.time() - 3600))
    total, _ = cache._scan()
    assert not stale.exists() and live.exists()  # a live process may still be downloading
    assert total == entries[0].chunk_bytes + len(b"partial")


def test_cache_missing_source_chunk_is_corrupt_state(tmp_path):
    storage, entries = _source(tmp_path, [10])
    (tmp_path / "remote" / entries[0].filename).unlink()
    cache = _cache(tmp_path, storage, 10**9)
    with pytest.raises(CorruptStateError, match=f"chunk s3://b/p/{entries[0].filename} named in .* is missing"):
        cache.open(entries[0])


class CountingStorage(LocalStorage):
    """A local "remote" that records every download and is slow, like a network."""

    def __init__(self, root, calls: str):
        super().__init__(root)
        self.calls = calls

    def download_to(self, key, local_path, **kwargs):
        Path(self.calls, f"{key}.{os.getpid()}.{threading.get_ident()}").write_text("")
        time.sleep(0.05)  # the other processes must wait for this download, not start their own
        super().download_to(key, local_path, **kwargs)


def _open_size(args) -> int:
    cache, entry = args
    pin = cache.open(entry)
    try:
        return pin.size
    finally:
        pin.close()


def test_cache_processes_download_each_chunk_once(tmp_path):
    storage, entries = _source(tmp_path, [200] * 8)
    calls = tmp_path / "calls"
    calls.mkdir()
    cache = _cache(tmp_path, CountingStorage(storage.root, str(calls)), 10**9)
    jobs = [(cache, e) for e in entries for _ in range(4)]
    sizes = fork_pool_map(_open_size, jobs, 4)
    assert sizes == [e.chunk_bytes for _, e in jobs]
    downloads = sorted(p.name.split(".bin")[0] + ".bin" for p in calls.iterdir())
    assert downloads == sorted(e.filename for e in entries), downloads
