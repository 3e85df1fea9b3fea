"""Checked chunks of large items (reader.checkahead, reader.itemfile): checked ahead only with a
core to spare, items copied out of the mapping the hash read, and a damaged or truncated chunk
refused. Real files written by optimize; the policy is the module's own function, swapped."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from shardwright import StreamingDataset, optimize
from shardwright.format import ChecksumMismatch
from shardwright.reader import checkahead
from shardwright.reader.checkahead import CheckAhead
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


def test_no_core_to_spare_checks_inline_and_still_refuses_a_damaged_chunk(dataset, monkeypatch):
    monkeypatch.setattr(checkahead, "spare_core", lambda: False)
    ds = StreamingDataset(dataset)
    assert [item["i"] for item in ds] == list(range(12))
    assert ds._source.state().checks.ahead_checked == 0  # every chunk checked inline, on take()
    damaged = StreamingDataset(dataset)
    flip_last_byte(os.path.join(dataset, damaged._source.chunks[2].filename))
    seen = []
    with pytest.raises(ChecksumMismatch, match="is damaged"):
        for item in damaged:
            seen.append(item["i"])
    assert seen == list(range(sum(entry.chunk_size for entry in damaged._source.chunks[:2])))


def test_a_spare_core_checks_ahead(dataset, monkeypatch):
    monkeypatch.setattr(checkahead, "spare_core", lambda: True)
    ds = StreamingDataset(dataset)
    assert [item["i"] for item in ds] == list(range(12))
    assert ds._source.state().checks.ahead_checked == len(ds._source.chunks) - 1


def test_the_policy_is_asked_again_after_its_time(monkeypatch):
    answers = iter([False, True])
    monkeypatch.setattr(checkahead, "spare_core", lambda: next(answers))
    checks = CheckAhead()
    assert not checks._worth_it() and not checks._worth_it()  # one answer, used for a second
    checks._spare = (False, checks._spare[1] - CheckAhead.POLICY_SECONDS)  # that second has passed
    assert checks._worth_it()


def test_one_cpu_is_no_core_to_spare():
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform")
    code = textwrap.dedent(
        """
        import os
        from shardwright.reader.checkahead import spare_core
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        print(spare_core())
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_checked_chunk_is_taken_mapped_and_its_items_are_copies(dataset):
    ds = StreamingDataset(dataset)
    entry = ds._source.chunks[0]
    path = os.path.join(dataset, entry.filename)
    fd, size, mapped = CheckAhead().take(entry.filename, opener(path), entry.checksum, path)
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
        CheckAhead().take(entry.filename, open_chunk, entry.checksum, path)
    with pytest.raises(OSError):
        os.fstat(opened[0])  # closed


TRUNCATED = """
import os, sys
import numpy as np
from shardwright import StreamingDataset
from shardwright.errors import CorruptStateError
from shardwright.reader.checkahead import CheckAhead
from shardwright.reader.itemfile import ItemFile

dataset = sys.argv[1]
entry = next(entry for entry in StreamingDataset(dataset)._source.chunks if entry.chunk_size >= 2)
path = os.path.join(dataset, entry.filename)
def open_chunk():
    fd = os.open(path, os.O_RDONLY)
    return fd, os.fstat(fd).st_size
fd, size, mapped = CheckAhead().take(entry.filename, open_chunk, entry.checksum, path)
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
