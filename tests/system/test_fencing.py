"""A paused writer wakes up (issue 8): run A is SIGSTOPped past its lease TTL, run B (the same
call) takes over, A is SIGCONTed while B writes. Real processes and signals, local disk and
the real S3 server: the published dataset holds every input exactly once, in order."""

from __future__ import annotations

import json
import random

import pytest

from support.fencing import check_round, held, pause_and_take_over


@pytest.mark.slow
def test_paused_writer_cannot_corrupt_local(tmp_path):
    # "stamped" samples have random sizes, so A's and B's chunks of the same shard and seq
    # hold different items (what made the same names corrupt the dataset before fencing)
    rng = random.Random("fencing-local")
    for trial in range(3):
        config = {
            "kind": "stamped",
            "n": 900,
            "chunk_bytes": 400,
            "sleep": 0.008,
            "num_workers": 2,
            "output_dir": str(tmp_path / f"out-{trial}"),
        }
        config = held(config, tmp_path / f"gate-{trial}")
        check_round(config, None, pause_and_take_over(config, rng, None))


@pytest.mark.s3
@pytest.mark.slow
def test_paused_writer_cannot_corrupt_s3(s3_url, s3_storage_options, tmp_path):
    rng = random.Random("fencing-s3")
    for trial in range(2):
        config = {
            "kind": "stamped",
            "n": 700,
            "chunk_bytes": 400,
            "sleep": 0.01,
            "num_workers": 2,
            "output_dir": f"{s3_url}-{trial}",
            "storage_options": s3_storage_options,
        }
        config = held(config, tmp_path / f"gate-{trial}")
        check_round(config, s3_storage_options, pause_and_take_over(config, rng, s3_storage_options))


def test_superseded_records_are_ignored(tmp_path):
    """The chain rule as a table of files: a fenced writer's late record at the same seq as the
    new holder's loses; its records chained after its own late ones are dropped by repair."""
    from shardwright.format import ChunkEntry
    from shardwright.protocol.records import CommitRecord, load_progress, write_records
    from shardwright.storage import open_storage

    storage = open_storage(str(tmp_path), create=True)

    def rec(seq: int, epoch: int, prev: int | None, next_input: int, done: bool = False) -> CommitRecord:
        entry = ChunkEntry(f"chunk-1-00000-{seq:06d}-{epoch}.bin", chunk_size=1, chunk_bytes=8)
        return CommitRecord(0, seq, entry, 8, next_input - 1, next_input, 0, done, (), "run", epoch, prev)

    write_records(storage, [rec(0, 10, None, 1)])  # A, before the pause
    write_records(storage, [rec(1, 20, 10, 2)])  # B took over after record 0
    write_records(storage, [rec(1, 10, 10, 2), rec(2, 10, 10, 3)])  # A, late
    write_records(storage, [rec(2, 20, 20, 3), rec(3, 20, 20, 4, done=True)])  # B finishes
    progress = load_progress(storage, {0: (0, 4)}, "run", repair=True)[0]
    assert [(r.seq, r.epoch) for r in progress.records] == [(0, 10), (1, 20), (2, 20), (3, 20)]
    assert progress.done
    assert sorted(k.rsplit("/", 1)[1] for k in storage.list(".shardwright/shards/")) == [
        "00000-000000-10.json",
        "00000-000001-20.json",
        "00000-000002-20.json",
    ]


def test_committer_and_publisher_check_the_lease(tmp_path):
    """A writer whose lease was taken over writes no record (its chunk is a harmless orphan,
    named by its own content), and cannot confirm its lease before publishing."""
    from shardwright import LeaseLostError
    from shardwright.protocol.commit import PendingChunk, RoundSettings, commit_round
    from shardwright.protocol.layout import SHARDS_PREFIX
    from shardwright.protocol.lease import Lease
    from shardwright.storage import open_storage

    storage = open_storage(str(tmp_path), create=True)
    lease = Lease(storage, "node-0", "the run")
    lease.acquire(storage.url)
    try:
        settings = RoundSettings("run", 1, None, True, lease.epoch, lease.key, lease.owner)
        commit_round(storage, [PendingChunk(0, 0, [b"x"], 0, 1, 0, False)], settings)
        assert len(storage.list(SHARDS_PREFIX)) == 1
        taken = json.loads(storage.read_bytes(lease.key))
        storage.write_bytes(lease.key, json.dumps({**taken, "owner": "B", "epoch": lease.epoch + 1}).encode())
        with pytest.raises(LeaseLostError):
            commit_round(storage, [PendingChunk(0, 1, [b"y"], 1, 2, 0, True)], settings)
        assert len(storage.list(SHARDS_PREFIX)) == 1, "a fenced writer wrote a record"
        assert len(storage.list("chunk-")) == 2, "its chunk (named by its content) is an orphan beside the first"
        with pytest.raises(LeaseLostError):
            lease.confirm()
    finally:
        lease.release()
    assert json.loads(storage.read_bytes(lease.key))["owner"] == "B", "release must not delete B's lease"
