"""verify() on the in-memory backend (every registered backend reads through the same Storage
interface): intact, a flipped bit and a missing chunk, each named."""

from __future__ import annotations

import uuid

from shardwright.reader.verify import verify
from shardwright.storage import open_storage
from support.datasets import write_dataset


def test_verify_reads_any_backend(tmp_path):
    local = tmp_path / "ds"
    entries = write_dataset(local, [{"i": i, "s": "x" * 40} for i in range(30)], chunk_size=10)
    url = f"memory://verify-{uuid.uuid4().hex}"
    storage = open_storage(url)
    for path in local.iterdir():
        storage.write_bytes(path.name, path.read_bytes())
    assert verify(url).ok
    damaged = bytearray(storage.read_bytes(entries[0].filename))
    damaged[-4] ^= 0x80
    storage.write_bytes(entries[0].filename, bytes(damaged))
    storage.delete(entries[2].filename)
    report = verify(url)
    assert {d.filename: ("checksum" in d.problem, "missing" in d.problem) for d in report.damaged} == {
        entries[0].filename: (True, False),
        entries[2].filename: (False, True),
    }
