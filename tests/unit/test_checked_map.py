"""Checked chunks of large items (reader.checked_map, reader.itemfile): checked on the reader's
thread before any of their items, items copied out of the mapping the hash read, and a damaged or
truncated chunk refused. Real files written by optimize."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from shardwright import StreamingDataset, optimize
from shardwright.format import ChecksumMismatch
from shardwright.reader.checked_map import open_checked
from shardwright.reader.itemfile import ITEM_READ_BYTES, ItemFile


def big(i: int) -> dict:
    return {"i": i, "x": np.full(ITEM_READ_BYTES, i % 251, dtype=np.uint8)}


@pytest.fixture
def dataset(tmp_path: Path) -> str:
    out = str(tmp_path / "big")
    optimize(big, list(range(12)), out, chunk_size=3, num_workers=1, num_shards=2, verbose=False)  # 4 chunks of 3
    return out


def opener(path: str):
    def open_chunk() -> tuple[int, int]:
        fd = os.open(path, os.O_RDONLY)
        return fd, os.fstat(fd).st_size

    return open_chunk


def flip_last_byte(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        byte = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_damaged_chunk_is_refused_before_any_of_its_items(dataset):
    ds = StreamingDataset(dataset)
    assert [item["i"] for item in ds] == list(range(12))
    damaged = StreamingDataset(dataset)
    flip_last_byte(os.path.join(dataset, damaged._source.chunks[2].filename))
    seen = []
    with pytest.raises(ChecksumMismatch, match="is damaged"):
        for item in damaged:
            seen.append(item["i"])
    assert seen == list(range(sum(entry.chunk_size for entry in damaged._source.chunks[:2])))


def test_a_checked_chunk_is_taken_mapped_and_its_items_are_copies(dataset):
    ds = StreamingDataset(dataset)
    entry = ds._source.chunks[0]
    path = os.path.join(dataset, entry.filename)
    fd, size, mapped = open_checked(opener(path), entry.checksum, path)
    assert mapped is not None and len(mapped) == size
    file = ItemFile.open(fd, size, entry, path, mapped)
    assert file is not None
    items = [file.read(0), *file.read_run(1, entry.chunk_size)]
    whole = np.frombuffer(mapped, dtype=np.uint8)
    for j, item in enumerate(items):
        assert item.flags.writeable and item.flags.owndata and not np.shares_memory(item, whole)
        assert bytes(item) == bytes(whole[file.offsets[j] : file.offsets[j + 1]])
    del whole
    file.close()
    assert mapped.closed and file.fd == -1


def test_a_damaged_chunk_is_not_taken_and_nothing_is_left_open(dataset):
    ds = StreamingDataset(dataset)
    entry = ds._source.chunks[1]
    path = os.path.join(dataset, entry.filename)
    flip_last_byte(path)
    opened: list[int] = []

    def open_chunk() -> tuple[int, int]:
        fd, size = opener(path)()
        opened.append(fd)
        return fd, size

    with pytest.raises(ChecksumMismatch, match="is damaged"):
        open_checked(open_chunk, entry.checksum, path)
    with pytest.raises(OSError):
        os.fstat(opened[0])  # closed


TRUNCATED = """
import os, sys
import numpy as np
from shardwright import StreamingDataset
from shardwright.errors import CorruptStateError
from shardwright.reader.checked_map import open_checked
from shardwright.reader.itemfile import ItemFile

dataset = sys.argv[1]
entry = next(entry for entry in StreamingDataset(dataset)._source.chunks if entry.chunk_size >= 2)
path = os.path.join(dataset, entry.filename)
def open_chunk():
    fd = os.open(path, os.O_RDONLY)
    return fd, os.fstat(fd).st_size
fd, size, mapped = open_checked(open_chunk, entry.checksum, path)
file = ItemFile.open(fd, size, entry, path, mapped)
first = file.read(0)
assert bytes(first) == bytes(np.frombuffer(mapped, dtype=np.uint8)[file.offsets[0] : file.offsets[1]])
os.truncate(path, file.offsets[1] + 10)  # item 1 cut: its mapped pages past the new end are SIGBUS
for read in (lambda: file.read(1), lambda: list(file.read_run(1, entry.chunk_size))):
    try:
        read()
    except CorruptStateError as exc:
        print(exc)
file.close()
"""


def test_an_item_past_the_end_of_a_mapped_chunk_truncated_under_it_is_an_error(dataset):
    # in a process of its own: without the check, the copy out of the mapping dies of SIGBUS
    done = subprocess.run([sys.executable, "-c", TRUNCATED, dataset], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all("ends inside item 1: it was truncated or replaced" in line for line in lines)
