"""Buffer segments of progress snapshots (protocol.segments, issue 35): a periodic snapshot of a
large buffer no longer cuts the chunk, so a ``concurrency`` run writes the same chunks however
often its snapshots fire; a snapshot whose segment is missing or damaged is ignored, never read
as wrong data; the first snapshot format is still read."""

from __future__ import annotations

import asyncio
import json
import struct

import pytest
from test_inflight_machinery import Worker, memory, outputs, run, task_of

from shardwright.engine.inflight import InflightRunner
from shardwright.engine.shard_writer import ShardWriter
from shardwright.engine.stops import StopRequested
from shardwright.protocol.layout import PROGRESS_PREFIX, is_state_key
from shardwright.protocol.progress import (
    MAGIC,
    BufferState,
    ProgressSnapshot,
    SnapshotWriter,
    encode_snapshot,
    read_snapshot,
    write_snapshot,
)
from shardwright.protocol.segments import MAX_SEGMENT_BYTES, cut_segments

ITEM = 512 * 1024  # each input's sample: the buffer passes 8 MiB after 17 inputs
INPUTS = 60


def big_run(durable_every: float, stop_after: int | None = None, storage=None, calls=None) -> Worker:
    async def fn(x):
        if calls is not None:
            calls.append(x)
        await asyncio.sleep(0.02 * (x % 3))  # out of order: the reorder buffer delivers them in order
        return "x" * ITEM + str(x)

    worker = Worker(fn, 4, storage or memory(), stop_after=stop_after)
    options = worker.cfg.inflight
    object.__setattr__(options, "durable_every", durable_every)
    object.__setattr__(worker.cfg, "chunk_size", None)
    object.__setattr__(worker.cfg, "chunk_bytes", 20 * 1024 * 1024)
    return worker


def cut(worker: Worker) -> list[tuple[int, int, int]]:
    """Each committed chunk's (first input, next input, items)."""
    return [(c.first_input, c.next_input, len(c.items)) for c in worker.committer.chunks]


def test_snapshots_of_a_buffer_past_8_mib_do_not_cut_the_chunk():
    """Until segments, a snapshot finding more than 8 MiB in the writer's buffer committed it as a
    chunk there, so the cut (names, bytes, digest) depended on when snapshots fired."""
    never = big_run(durable_every=3600)
    run(never, task_of(INPUTS))
    often = big_run(durable_every=0.05)
    run(often, task_of(INPUTS))
    assert cut(often) == cut(never) and outputs(often) == outputs(never)
    assert len(often.committer.snapshots) > 3  # they fired, with buffers past 8 MiB
    assert max(sum(map(len, s.buffer.items)) for s in often.committer.snapshots) > 8 * 1024 * 1024
    # cut by chunk_bytes alone: 39 samples of 512 KiB and a few bytes fill 20 MiB
    assert [c.first_input for c in never.committer.chunks] == [0, 39]


def test_a_stop_with_a_large_buffer_resumes_from_its_segments_with_the_same_chunks():
    storage = memory()
    reference = big_run(durable_every=3600)
    run(reference, task_of(INPUTS))
    first = big_run(durable_every=0.05, stop_after=30, storage=storage)
    task = task_of(INPUTS)
    with pytest.raises(StopRequested):
        InflightRunner(first).run_shard(task, ShardWriter(task, first.cfg, first.committer))  # type: ignore[arg-type]
    tail = first.committer.snapshots[-1]
    assert tail.buffer.segments and not first.committer.chunks  # 30 inputs: all in the open chunk
    assert any(key.endswith(".seg") for key in storage.list(PROGRESS_PREFIX))
    calls: list[int] = []
    second = big_run(durable_every=0.05, storage=storage, calls=calls)
    run(second, task_of(INPUTS, prev_epoch=None))
    assert cut(second) == cut(reference) and outputs(second) == outputs(reference)
    assert min(calls) >= 30 and sorted(calls) == sorted(set(calls))  # the 30 inputs of the tail: not called again


def snapshot_with_segments(storage, epoch: int = 3, items=None) -> ProgressSnapshot:
    items = items if items is not None else [b"a" * 700_000, b"b" * 900_000, b"tail"]
    buffer = BufferState(4, (7, 0), [], items, cut_segments(items[:2]))
    snapshot = ProgressSnapshot("r", 1, 2, 5, (4, 0), epoch, buffer)
    assert write_snapshot(storage, snapshot)
    return snapshot


def read(storage):
    return read_snapshot(storage, "r", 1, 2, 5, (4, 0))


def segment_keys(storage) -> list[str]:
    return [k for k in storage.list(PROGRESS_PREFIX) if k.endswith(".seg")]


def test_segments_round_trip_and_a_missing_or_damaged_one_means_no_snapshot():
    storage = memory()
    items = [b"a" * 700_000, b"b" * 900_000, b"tail"]
    snapshot_with_segments(storage, items=items)
    (key,) = segment_keys(storage)  # two items in one segment, the last inline
    assert is_state_key(key)  # cleanup (protocol step 6) deletes it with the snapshots
    got = read(storage)
    assert got is not None and got.buffer.items == items and got.buffer.first_input == 4
    data = storage.read_bytes(key)
    for damaged in (data[:-1], data[:-1] + b"!", b""):
        storage.write_bytes(key, damaged)
        assert read(storage) is None  # the records stand: the work past them is redone
    storage.delete(key)
    assert read(storage) is None


def test_a_newer_snapshot_with_a_lost_segment_falls_back_to_an_older_one_that_is_whole():
    storage = memory()
    snapshot_with_segments(storage, epoch=3)
    snapshot_with_segments(storage, epoch=4, items=[b"c" * 2_000_000, b"d"])
    newer = [k for k in segment_keys(storage) if "-4-" in k]
    assert read(storage).epoch == 4
    storage.delete(newer[0])
    got = read(storage)
    assert got is not None and got.epoch == 3 and got.buffer.items[-1] == b"tail"


def test_a_listed_segment_size_is_bounded_before_anything_is_read():
    storage = memory()
    snapshot = snapshot_with_segments(storage)
    snapshot.buffer.segments[0].nbytes = MAX_SEGMENT_BYTES + 1
    storage.write_bytes(f"{PROGRESS_PREFIX}00001-3.bin", encode_snapshot(snapshot))
    assert read(storage) is None


def test_a_snapshot_of_an_earlier_format_is_ignored_and_its_work_redone():
    """The first format (buffer inline) had no checksum: a damaged byte in it could not be told
    from a real one, so it is never resumed from (trust round 7); the records stand."""
    storage = memory()
    items = [b"one", b"two"]
    data = encode_snapshot(ProgressSnapshot("r", 1, 2, 5, (4, 0), 3, BufferState(4, (6, 0), [], items)))
    (length,) = struct.unpack_from("<Q", data, len(MAGIC))
    header = json.loads(data[len(MAGIC) + 8 : len(MAGIC) + 8 + length])
    del header["buffer"]["segments"]  # as the first format wrote it
    text = json.dumps(header, separators=(",", ":")).encode()
    old = b"SWPROG1\n" + struct.pack("<Q", len(text)) + text + data[len(MAGIC) + 8 + length : -16]
    storage.write_bytes(f"{PROGRESS_PREFIX}00001-3.bin", old)
    assert read(storage) is None
    storage.write_bytes(f"{PROGRESS_PREFIX}00001-3.bin", data)  # the same snapshot, this format
    got = read(storage)
    assert got is not None and got.buffer.items == items


def test_a_writer_deletes_the_segments_its_next_snapshot_no_longer_lists():
    storage = memory()
    writer = SnapshotWriter(storage)
    first = [b"a" * 1_500_000]
    writer.write(ProgressSnapshot("r", 1, 2, 5, (4, 0), 3, BufferState(4, (5, 0), [], first, cut_segments(first))))
    (old,) = segment_keys(storage)
    more = first + [b"b" * 1_500_000]
    segments = cut_segments(first) + cut_segments(more[1:])
    writer.write(ProgressSnapshot("r", 1, 2, 5, (4, 0), 3, BufferState(4, (6, 0), [], more, segments)))
    assert old in segment_keys(storage) and len(segment_keys(storage)) == 2  # the same content, the same name
    writer.write(ProgressSnapshot("r", 1, 3, 3, (6, 0), 3, BufferState(6, (7, 0), [], [b"c"])))  # after a chunk
    assert segment_keys(storage) == []
