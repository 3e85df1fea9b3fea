"""Publishing takes the records this call's workers reported, without reading them back, only
when one listing of ``shards/`` shows exactly the files they wrote (records.trusted_progress,
step 4 of the protocol's docstring); a record of another epoch planted beside them is read and
its chain wins, as it did when publish read every record back (issue 36)."""

from __future__ import annotations

import os
import time

import shardwright
from shardwright.protocol import records
from shardwright.protocol.layout import SHARDS_PREFIX
from shardwright.protocol.manifest import read_manifest
from shardwright.protocol.records import CommitRecord, write_records
from shardwright.storage import LocalStorage

N = 3_000


def small_dict(i):
    return {"i": i, "x": i * i}


def count_record_reads(monkeypatch) -> list[str]:
    """The record files read by THIS process (the main one: publish); forked workers' reads
    land in their own copy of the list."""
    read, original, main = [], records.read_state, os.getpid()

    def counted(storage, key, *args, **kwargs):
        if os.getpid() == main and key.startswith(SHARDS_PREFIX):
            read.append(key)
        return original(storage, key, *args, **kwargs)

    monkeypatch.setattr(records, "read_state", counted)
    return read


def test_a_run_publishes_without_reading_back_the_records_its_workers_wrote(tmp_path, monkeypatch):
    read = count_record_reads(monkeypatch)
    out = str(tmp_path / "out")
    shardwright.optimize(small_dict, list(range(N)), out, num_workers=2, chunk_size=100, verbose=False)
    assert read == []  # before: every record file, once per shard's round
    ds = shardwright.StreamingDataset(out)
    assert len(ds) == N and ds[N - 1] == small_dict(N - 1)


def plant_a_thiefs_done_record(out: str) -> None:
    """What a process that took shard 0's claim over would leave: its own record 0 (a higher
    epoch) saying the shard is done, with no chunk."""
    storage = LocalStorage(out)
    manifest = read_manifest(storage)
    start, end = manifest.shard_bounds()[0]
    epoch = int(time.time() * 1000) + 10**6  # above our claim's (taken by compare-and-swap over it)
    write_records(storage, [CommitRecord(0, 0, None, 0, start, end, 0, True, (), manifest.run_id, epoch, None)])
    storage.barrier()


def test_a_record_of_another_epoch_planted_during_the_run_is_read_and_its_chain_published(tmp_path, monkeypatch):
    read = count_record_reads(monkeypatch)
    out = str(tmp_path / "out")

    def fn(i):
        if i == N - 1:  # the last input of the last shard (one worker takes them in order)
            plant_a_thiefs_done_record(out)
        return small_dict(i)

    shardwright.optimize(fn, list(range(N)), out, num_workers=1, chunk_size=100, verbose=False)
    ds = shardwright.StreamingDataset(out)
    shard0_reads = [k for k in read if k.startswith(SHARDS_PREFIX + "00000-")]
    assert shard0_reads  # shard 0 was read back: its listing held a file our worker did not write
    # storage's chain of shard 0 is the thief's: done, no chunk. Without the fallback the dataset
    # would hold every input (our worker's records, from memory).
    assert 0 < len(ds) < N and ds[0] != small_dict(0)
    assert ds[len(ds) - 1] == small_dict(N - 1)
