"""Chunks of large items are written as parts (header + items, no joined copy) with the
checksum computed over the parts: the same bytes and checksum as the joined chunk."""

from __future__ import annotations

import os
import uuid

import pytest

from shardwright.format import build_chunk, chunk_checksum, chunk_header, parts_checksum
from shardwright.protocol.commit import LARGE_ITEM_BYTES, PendingChunk, RoundSettings, commit_round
from shardwright.storage import MemoryStorage, open_storage
from shardwright.storage.files import write_all


@pytest.mark.parametrize(
    "items",
    [[b"a"], [b"", b"xyz", b""], [bytes([k]) * (k * 37 % 500) for k in range(256)], [b"z" * (1 << 20)] * 3],
)
def test_parts_checksum_and_header_make_the_joined_chunk(items):
    parts = [chunk_header(items), *items]
    assert b"".join(parts) == build_chunk(items)
    assert parts_checksum(parts) == chunk_checksum(build_chunk(items))


def test_write_all_survives_many_parts_and_partial_writes(tmp_path):
    parts = [os.urandom(k % 13) for k in range(5000)] + [memoryview(b"tail")]
    path = tmp_path / "f"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        write_all(fd, parts)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(bytes(p) for p in parts)


@pytest.mark.parametrize("url", ["memory", "local"])
def test_a_round_of_large_items_records_the_bytes_it_wrote(url, tmp_path):
    name = f"parts-{uuid.uuid4().hex[:8]}"
    storage = open_storage(f"memory://{name}" if url == "memory" else str(tmp_path / "out"))
    large = [os.urandom(LARGE_ITEM_BYTES + k) for k in range(3)]
    small = [os.urandom(10) for _ in range(3)]
    jobs = [PendingChunk(0, 0, large, 0, 3, 0, False), PendingChunk(1, 0, small, 3, 6, 0, False)]
    try:
        records = commit_round(storage, jobs, RoundSettings("run", 0, None, True))
        for record, items in zip(records, (large, small)):
            entry = record.chunk
            assert entry is not None
            data = storage.read_bytes(entry.filename)
            assert data == build_chunk(items)
            assert entry.chunk_bytes == record.stored_bytes == len(data)
            assert entry.checksum == chunk_checksum(data)
    finally:
        if url == "memory":
            MemoryStorage.drop(name)
