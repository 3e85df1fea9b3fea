"""Trust round 5 (issue 33, 1c): every state file read from disk is bounded before it is read.
A file planted or damaged to be huge (here sparse: 4 GiB on disk in no blocks) is one
CorruptStateError naming the file, raised with at most the bound in memory."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from shardwright.errors import CorruptStateError
from shardwright.protocol.jsonio import MAX_STATE_BYTES
from shardwright.protocol.lease import live_leases
from shardwright.protocol.manifest import read_manifest
from shardwright.protocol.progress import MAX_SNAPSHOT_BYTES, read_snapshot
from shardwright.protocol.records import load_progress
from shardwright.protocol.run_record import read_run_record
from shardwright.storage import open_storage

HUGE = 4 << 30  # past every bound


def plant(root, key: str, size: int = HUGE) -> None:
    path = os.path.join(root, *key.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)  # sparse: no disk, no memory, the size a reader would believe


def refused_within_bound(call, key: str, bound: int) -> str:
    tracemalloc.start()
    try:
        with pytest.raises(CorruptStateError) as info:
            call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert key in str(info.value) and "not read" in str(info.value), info.value
    assert peak < bound + (64 << 20), f"{peak:,} bytes allocated for a refused file"
    return str(info.value)


@pytest.mark.parametrize(
    ("key", "call", "bound"),
    [
        (".shardwright/manifest.json", read_manifest, MAX_STATE_BYTES),
        (".shardwright/run.json", read_run_record, MAX_STATE_BYTES),
        (".shardwright/leases/node-0.json", lambda s: live_leases(s), 1 << 20),
        (".shardwright/shards/00000-000000-1.json", lambda s: load_progress(s, {0: (0, 10)}), 64 << 20),
        (".shardwright/progress/00000-1.bin", lambda s: read_snapshot(s, "r", 0, 0, None, (0, 0)), MAX_SNAPSHOT_BYTES),
    ],
)
def test_a_huge_state_file_is_refused_before_it_is_read(tmp_path, key, call, bound):
    storage = open_storage(str(tmp_path))
    plant(tmp_path, key)
    refused_within_bound(lambda: call(storage), key, bound)


def test_the_bound_is_inclusive(tmp_path):
    storage = open_storage(str(tmp_path))
    plant(tmp_path, ".shardwright/leases/node-0.json", 1 << 20)
    assert live_leases(storage) == []  # read (all zeros: not a lease), not refused for its size


def test_a_huge_index_is_refused_by_every_reader_before_it_is_read(tmp_path):
    """index.json over format.limits' decoded-bytes limit: the reader, verify and diff refuse it
    with nothing of it in memory (3 GiB were read, a MemoryError under a memory cap)."""
    from shardwright import StreamingDataset
    from shardwright.reader.diff import diff
    from shardwright.reader.verify import verify

    plant(tmp_path / "d", "index.json")
    for call in (lambda: StreamingDataset(str(tmp_path / "d")), lambda: verify(str(tmp_path / "d"))):
        text = refused_within_bound(call, "index.json", 0)
        assert "SHARDWRIGHT_MAX_DECODED_BYTES" in text
    refused_within_bound(lambda: diff(str(tmp_path / "d"), str(tmp_path / "d")), "index.json", 0)


def test_finished_by_another_needs_run_json_to_name_the_run(tmp_path):
    """A paused run is told another run finished only when run.json names its run: an
    abandoned run (manifest gone) over an older dataset is not 'finished'."""
    import json

    from shardwright.protocol.publish import finished_by_another
    from support.datasets import write_dataset

    write_dataset(tmp_path / "d", [{"i": i} for i in range(8)], chunk_size=4)
    storage = open_storage(str(tmp_path / "d"))
    assert finished_by_another(storage, "run-a") is None  # no run.json: nothing says who published
    record = {"run_id": "run-a", "inputs": {"count": 8}, "failed_inputs": [], "items_added": 8}
    storage.write_bytes(".shardwright/run.json", json.dumps(record).encode())
    said = finished_by_another(storage, "run-a")
    assert said is not None and "8 items" in said and "nothing needs doing" in said
    assert finished_by_another(storage, "run-b") is None  # an older run's dataset: run-b was abandoned


@pytest.mark.parametrize("backend", ["local", "memory"])
def test_the_swap_path_is_bounded_too(tmp_path, backend):
    """Round 5's leftover: taking a lease or the format claim reads the file through the
    compare-and-swap path (read_versioned), which read it whole: a planted 4 GiB lease or
    format.json was read into memory before being judged damaged and taken over."""
    from shardwright.protocol.claim import claim_format
    from shardwright.protocol.layout import lease_key
    from shardwright.protocol.lease import Lease

    if backend == "local":
        storage = open_storage(str(tmp_path))
        plant(tmp_path, lease_key("node-0"))
        plant(tmp_path, ".shardwright/format.json", MAX_STATE_BYTES + 1)
    else:
        from shardwright.storage.memory import MemoryStorage

        storage = MemoryStorage()
        storage.write_bytes(lease_key("node-0"), b" " * ((1 << 20) + 1))
        storage.write_bytes(".shardwright/format.json", b" " * 2048)
    lease = Lease(storage, "node-0", "the output")
    refused_within_bound(lease.try_acquire, lease_key("node-0"), 1 << 20)
    if backend == "local":
        refused_within_bound(lambda: claim_format(storage, "run-a", ["int"], None, 0), "format.json", 0)
