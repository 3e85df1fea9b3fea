"""The worker's committer on the in-memory backend: two threads (chunk writer, sealer) in
round order. What a failure leaves committed, and that a round's chunks are named by records
only after its own barrier, whichever thread runs ahead."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from shardwright.engine.committer import ChunkCommitter
from shardwright.errors import StorageError
from shardwright.protocol.commit import PendingChunk, RoundSettings
from shardwright.protocol.records import load_progress
from shardwright.storage import open_storage
from shardwright.storage.memory import MemoryStorage

SETTINGS = RoundSettings("run", 1, None, True)


@pytest.fixture
def storage(monkeypatch):
    monkeypatch.setenv("SHARDWRIGHT_COMMIT_ROUND", "1")  # one chunk a round: rounds to pipeline
    name = f"committer-{uuid.uuid4().hex}"
    yield open_storage(f"memory://{name}")
    MemoryStorage.drop(name)


def job(seq: int, done: bool = False) -> PendingChunk:
    return PendingChunk(0, seq, [b"item-%d" % seq, b"x" * 100], seq * 2, seq * 2 + 2, 0, done)


def test_every_round_is_committed_in_order_and_its_memory_freed(storage):
    committed = []
    committer = ChunkCommitter(storage, SETTINGS, lambda record, _key: committed.append(record))
    jobs = [job(seq, done=seq == 9) for seq in range(10)]
    for j in jobs:
        committer.submit(j)
    committer.close()
    assert [r.seq for r in committed] == list(range(10))
    assert all(j.items == [] for j in jobs)  # dropped once written, not kept until durable
    progress = load_progress(storage, {0: (0, 20)}, "run")[0]
    assert progress.done and progress.next_input == 20


def test_records_are_written_only_after_their_own_round_barrier(storage):
    """The sealer's barrier for round k may run while round k+1's chunk is being written;
    a crash at any moment must leave no record naming a chunk no barrier covered."""
    committer = ChunkCommitter(storage, SETTINGS, lambda record, _key: None)
    for seq in range(8):
        committer.submit(job(seq, done=seq == 7))
    committer.close()
    durable: set[str] = set()
    written_since_barrier: set[str] = set()
    for op, key in storage.operations():
        if op == "barrier":
            durable |= written_since_barrier
            written_since_barrier.clear()
        elif op == "write_bytes" and key and key.startswith(".shardwright/shards/"):
            records = storage.read_bytes(key).decode()
            named = [k for k in durable | written_since_barrier if k.startswith("chunk-") and k in records]
            assert named and all(k in durable for k in named), (key, named)
        elif op in ("write_bytes", "write_parts") and key:
            written_since_barrier.add(key)


def test_a_failed_write_keeps_the_rounds_written_before_it(storage):
    committed = []
    committer = ChunkCommitter(storage, SETTINGS, lambda record, _key: committed.append(record))
    gate = threading.Event()
    calls = {"chunks": 0}

    def fail_fourth_chunk(op: str, key: str | None):
        if op == "write_bytes" and key and key.startswith("chunk-"):
            calls["chunks"] += 1
            if calls["chunks"] == 4:
                gate.set()
                return StorageError("disk full while writing a chunk: free space and rerun")
        return None

    storage.fail_when(fail_fourth_chunk)
    for seq in range(3):
        committer.submit(job(seq))
    committer.submit(job(3))
    assert gate.wait(10)
    with pytest.raises(StorageError, match="disk full"):
        committer.close()
    assert [r.seq for r in committed] == [0, 1, 2]  # sealed: their chunks were good
    progress = load_progress(storage, {0: (0, 20)}, "run")[0]
    assert progress.next_input == 6 and not progress.done
    with pytest.raises(StorageError):
        committer.submit(job(4))  # nothing is taken after a failure


def test_a_failed_seal_stops_every_later_round(storage):
    committed = []
    committer = ChunkCommitter(storage, SETTINGS, lambda record, _key: committed.append(record))
    barriers = {"n": 0}

    def fail_second_barrier(op: str, key: str | None):
        if op == "barrier":
            barriers["n"] += 1
            if barriers["n"] == 2:
                return StorageError("S3 barrier kept failing: rerun the same call to resume")
        return None

    storage.fail_when(fail_second_barrier)
    for seq in range(6):
        committer.submit(job(seq))
    with pytest.raises(StorageError, match="kept failing"):
        committer.close()
    assert [r.seq for r in committed] == [0]
    assert load_progress(storage, {0: (0, 20)}, "run")[0].next_input == 2


def test_an_idle_sealer_makes_the_round_s_records_durable_at_once(storage):
    """No round waits: the records are made durable now, not by the next round's barrier."""
    committed = []
    committer = ChunkCommitter(storage, SETTINGS, lambda record, _key: committed.append(record))
    committer.submit(job(0))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the barrier follows the record write (the commit)
        ops = storage.operations()
        writes = [
            n for n, (op, key) in enumerate(ops) if op == "write_bytes" and key.startswith(".shardwright/shards/")
        ]
        if writes and any(op == "barrier" for op, _ in ops[writes[0] :]):
            break
        time.sleep(0.01)
    storage.crash()  # a power cut before any other round
    assert load_progress(storage, {0: (0, 20)}, "run")[0].next_input == 2
    committer.submit(job(1, done=True))
    committer.close()


def test_a_power_cut_after_close_loses_at_most_the_last_round(storage):
    """The last round's records get no barrier of their own (publishing does not need them)."""
    committer = ChunkCommitter(storage, SETTINGS, lambda record, _key: None)
    for seq in range(4):
        committer.submit(job(seq, done=seq == 3))
    committer.close()
    lost = storage.crash()
    assert all(key.startswith(".shardwright/shards/00000-000003-") for key in lost), lost
    progress = load_progress(storage, {0: (0, 20)}, "run")[0]
    assert progress.next_input in (6, 8) and progress.done == (progress.next_input == 8)
    present = set(storage.list("chunk-"))
    assert all(c.filename in present for c in progress.chunks)
