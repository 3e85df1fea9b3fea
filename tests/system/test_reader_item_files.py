"""Chunks of large items are read one item at a time into each item's own buffer (unchecked: no
mmap; checked: copied out of the mapping the checksum read): real files, read by the real
reader, damaged and replaced under it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardwright import StreamingDataset, optimize
from shardwright.errors import CorruptStateError
from shardwright.reader.itemfile import ITEM_READ_BYTES

ITEM = ITEM_READ_BYTES  # bytes of each item's array: at the threshold, so item files are used


def big(i: int) -> dict:
    return {"i": i, "x": np.full(ITEM, i % 251, dtype=np.uint8), "f": np.arange(3, dtype=np.float64) + i}


def small(i: int) -> dict:
    return {"i": i, "x": np.full(16, i % 251, dtype=np.uint8)}


def write(out: Path, fn, n: int = 24) -> str:
    optimize(fn, list(range(n)), str(out), chunk_size=4, num_workers=1, verbose=False)
    return str(out)


def mapped_chunks(out: str) -> set[str]:
    """The dataset's chunk files this process has mapped now (from /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        return {os.path.basename(line.split()[-1]) for line in f if out in line and line.rstrip().endswith(".bin")}


def check(item: dict, i: int) -> None:
    assert item["i"] == i
    assert item["x"].shape == (ITEM,) and int(item["x"].min()) == int(item["x"].max()) == i % 251
    assert np.array_equal(item["f"], np.arange(3, dtype=np.float64) + i)


def test_large_items_are_read_without_mapping_their_chunk(tmp_path):
    out = write(tmp_path / "big", big)
    seen = []
    for item in StreamingDataset(out, check_checksums=False):
        seen.append(item)
        assert mapped_chunks(out) == set()  # read with preadv: nothing mapped
    for i, item in enumerate(seen):
        check(item, i)
    # each item owns its buffer: writable, and no two items share memory
    seen[0]["x"][:] = 7
    assert seen[0]["x"].flags.writeable and int(seen[1]["x"][0]) == 1
    assert not any(np.shares_memory(seen[0]["x"], other["x"]) for other in seen[1:])
    check(next(iter(StreamingDataset(out, check_checksums=False))), 0)  # the file is untouched


def test_small_items_and_unchecked_chunks_are_still_mapped(tmp_path):
    out = write(tmp_path / "small", small)
    it = iter(StreamingDataset(out, check_checksums=False))
    next(it)
    assert len(mapped_chunks(out)) == 1  # small items: one mapping per chunk, no call per item
    big_out = write(tmp_path / "big", big)
    ds = StreamingDataset(big_out)  # checksums on: each chunk is checked, then read item by item
    names = [entry.filename for entry in ds._source.chunks]
    chunk_of = [k for k, entry in enumerate(ds._source.chunks) for _ in range(entry.chunk_size)]
    seen = []
    for i, item in enumerate(ds):
        check(item, i)
        seen.append(item)
        # a checked chunk's items are copied out of the mapping its hash read: that chunk is
        # mapped, none left behind is (a chunk's last item may come once the reader has moved on)
        k, mapped = chunk_of[i], mapped_chunks(big_out)
        last = i + 1 == len(chunk_of) or chunk_of[i + 1] != k
        assert (names[k] in mapped or last) and not mapped & set(names[:k])
    assert mapped_chunks(big_out) == set()  # the last chunk's map is closed once it is read
    # copies: each item owns its buffer, writable, sharing no memory with another or the file
    seen[0]["x"][:] = 7
    assert seen[0]["x"].flags.writeable and int(seen[1]["x"][0]) == 1
    assert not any(np.shares_memory(seen[0]["x"], other["x"]) for other in seen[1:])
    check(next(iter(StreamingDataset(big_out))), 0)


def test_a_damaged_chunk_is_refused_before_any_of_its_items(tmp_path):
    out = write(tmp_path / "big", big)
    ds = StreamingDataset(out)
    third = os.path.join(out, ds._source.chunks[2].filename)
    with open(third, "r+b") as f:  # one byte inside an item: the size and offsets still agree
        f.seek(os.path.getsize(third) - 10)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    seen = []
    with pytest.raises(CorruptStateError, match=r"is damaged: its bytes have xxh3_128 checksum"):
        for item in ds:
            seen.append(item["i"])
    before = sum(entry.chunk_size for entry in ds._source.chunks[:2])
    assert seen == list(range(before))  # every item of chunks 0 and 1, nothing of chunk 2


def test_shuffled_and_subsampled_reads_give_the_same_items(tmp_path):
    out = write(tmp_path / "big", big)
    shuffled = list(StreamingDataset(out, shuffle=True, seed=3, check_checksums=False))
    assert sorted(item["i"] for item in shuffled) == list(range(24))
    for item in shuffled:
        check(item, item["i"])


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_a_chunk_truncated_while_read_is_named_not_a_short_item(tmp_path, shuffle, checked):
    # two chunks of 70 items; the one being read is cut in half under the open reader (checked:
    # its items are copied out of a mapping, where a page past the new end would be SIGBUS)
    out = str(tmp_path / "big")
    optimize(big, list(range(140)), out, chunk_size=70, num_workers=1, num_shards=2, verbose=False)
    ds = StreamingDataset(out, shuffle=shuffle, check_checksums=checked)
    it = iter(ds)
    first = next(it)
    chunk = os.path.join(out, ds._source.chunks[first["i"] // 70].filename)
    os.truncate(chunk, os.path.getsize(chunk) // 2)
    got = [first]
    with pytest.raises(CorruptStateError, match=r"ends inside item .*truncated"):
        for item in it:
            got.append(item)
    for item in got:  # what came before the error is whole: read before the truncation
        check(item, item["i"])


def test_a_truncated_chunk_is_refused_before_any_of_its_items(tmp_path):
    out = write(tmp_path / "big", big)
    ds = StreamingDataset(out, check_checksums=False)
    second = os.path.join(out, ds._source.chunks[1].filename)
    os.truncate(second, os.path.getsize(second) - 1)
    got = []
    with pytest.raises(CorruptStateError, match=r"is [0-9,]+ bytes but index.json says [0-9,]+: truncated"):
        for item in ds:
            got.append(item["i"])
    first = ds._source.chunks[0].chunk_size
    assert got == list(range(first))  # the first chunk's items, none of the damaged one's


def test_a_symlinked_chunk_of_large_items_is_refused(tmp_path):
    out = write(tmp_path / "big", big)
    ds = StreamingDataset(out, check_checksums=False)
    name = os.path.join(out, ds._source.chunks[0].filename)
    secret = tmp_path / "elsewhere.bin"
    os.rename(name, secret)
    os.symlink(secret, name)
    with pytest.raises(CorruptStateError, match="is a symbolic link"):
        next(iter(ds))


def test_a_missing_chunk_is_named(tmp_path):
    out = write(tmp_path / "big", big)
    ds = StreamingDataset(out, check_checksums=False)
    os.remove(os.path.join(out, ds._source.chunks[0].filename))
    with pytest.raises(CorruptStateError, match="is missing"):
        next(iter(ds))


def test_no_descriptor_is_left_open(tmp_path):
    out = write(tmp_path / "big", big)

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    for _ in range(3):
        assert sum(1 for _ in StreamingDataset(out, check_checksums=False)) == 24
    it = iter(StreamingDataset(out, shuffle=True, check_checksums=False))
    next(it)
    del it  # an abandoned iteration
    import gc

    gc.collect()
    assert open_fds() <= before  # none left open by the readers (other threads may have closed theirs)


def test_a_two_worker_loader_reads_every_large_item_once(tmp_path):
    from shardwright import StreamingDataLoader

    out = write(tmp_path / "big", big)
    for shuffle in (False, True):
        ds = StreamingDataset(out, shuffle=shuffle, check_checksums=False)
        seen = []
        for batch in StreamingDataLoader(ds, batch_size=5, num_workers=2):
            for i, x in zip(batch["i"].tolist(), batch["x"]):
                assert int(x.min()) == int(x.max()) == i % 251 and x.shape == (ITEM,)
                seen.append(i)
        assert sorted(seen) == list(range(24))


def test_a_resumed_stream_continues_mid_chunk_with_the_next_item(tmp_path):
    # In order, runs of ids inside a chunk are read by one loop (reader.items): a stream
    # resumed inside a chunk (item 6 of 4-item chunks) must start exactly at the next item,
    # and a chunk-window boundary (4 chunks a window) must lose or repeat nothing.
    out = write(tmp_path / "big", big, n=40)
    ds = StreamingDataset(out, check_checksums=False, iterable=True)
    first = []
    for item in ds:
        first.append(item["i"])
        if len(first) == 6:
            state = ds.state_dict()
            break
    resumed = StreamingDataset(out, check_checksums=False, iterable=True)
    resumed.load_state_dict(state)
    rest = list(resumed)
    for k, item in enumerate(rest):
        check(item, 6 + k)
    assert first + [item["i"] for item in rest] == list(range(40))


_BATCH_TWICE = """
import resource, sys
import numpy as np
from shardwright.reader.itemfile import keep_freed_item_memory
if sys.argv[1] == "tuned":
    keep_freed_item_memory()
def batch():  # what a loader worker does: a batch of 256 KiB items alive, then all freed
    items = [np.empty(256 << 10, np.uint8) for _ in range(256)]
    for item in items:
        item[::4096] = 1  # every page written
batch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
batch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_a_loader_worker_keeps_a_freed_batch_for_the_next_one():
    # Real page faults of a real process: by default glibc gives a freed 64 MiB batch back
    # and the next batch faults every page in again; a tuned worker reuses it.
    faults = {
        mode: int(
            subprocess.run(
                [sys.executable, "-c", _BATCH_TWICE, mode], capture_output=True, text=True, check=True
            ).stdout
        )
        for mode in ("default", "tuned")
    }
    pages = 256 * (256 << 10) // 4096
    assert faults["default"] > pages // 2, faults
    assert faults["tuned"] < pages // 10, faults
