"""RunRecord (run.json) and LeaseHolder (a lease file): typed records read with
from_json(data, where), and the one home of is_published, the num_shards clamp and the
start-over hint."""

from __future__ import annotations

import json
import os
import socket
import time
from types import SimpleNamespace

import pytest

from shardwright.errors import CorruptStateError
from shardwright.format import ChunkEntry
from shardwright.protocol.hints import start_over_hint
from shardwright.protocol.layout import RUN_RECORD_KEY, chunk_filename
from shardwright.protocol.lease import LeaseHolder, read_leases
from shardwright.protocol.run_record import RunRecord, read_run_record
from shardwright.protocol.shards import clamp_num_shards, default_num_shards
from shardwright.storage import MemoryStorage


def record(**changes):
    data = {"run_id": "r1", "inputs": {"count": 10}, "settings": {"num_shards": 2}, "fn_name": "m.f"}
    data.update(changes)
    return data


def test_run_record_reads_typed_fields_and_keeps_the_whole_record():
    rec = RunRecord.from_json(record(failed_inputs=[[3, 0], [7, 2]], items_added=5, seconds=1.5), "run.json")
    assert (rec.run_id, rec.fn_name, rec.fn_code, rec.items_added) == ("r1", "m.f", None, 5)
    assert rec.failed_inputs == ((3, 0), (7, 2))
    assert rec.to_json()["seconds"] == 1.5


@pytest.mark.parametrize(
    "data",
    [
        [],
        record(inputs={"count": "10"}),
        record(inputs="x"),
        record(failed_inputs=[[10, 0]]),  # beyond the run's inputs
        record(failed_inputs=[[1, -1]]),
        record(failed_inputs=[3]),
        record(failed_inputs={"3": 0}),
    ],
)
def test_damaged_run_record_names_the_file_and_a_safe_fix(data):
    with pytest.raises(CorruptStateError) as info:
        RunRecord.from_json(data, "out/.shardwright/run.json")
    assert "out/.shardwright/run.json" in str(info.value) and "delete" in str(info.value)


def test_run_record_on_storage_round_trips_and_bad_json_is_corrupt():
    storage = MemoryStorage("typed-records-test")
    try:
        assert read_run_record(storage) is None
        storage.write_bytes(RUN_RECORD_KEY, json.dumps(record()).encode())
        assert read_run_record(storage) == RunRecord.from_json(record(), "x")
        storage.write_bytes(RUN_RECORD_KEY, b"{not json")
        with pytest.raises(CorruptStateError, match="is not a JSON object"):
            read_run_record(storage)
    finally:
        MemoryStorage.drop("typed-records-test")


def test_lease_holder_fields_are_bounded_and_damage_reads_as_not_live():
    now = time.time()
    live = LeaseHolder.from_json(
        {
            "owner": "o",
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "heartbeat": now,
            "ttl": 30,
            "epoch": 7,
            "num_nodes": 2,
            "node_rank": 1,
            "current_inputs": [4, True, "x", -1],
        },
        "leases/node-1.json",
    )
    assert live.is_live() and live.epoch == 7 and live.num_nodes == 2 and live.current_inputs == (4, -1)
    assert "heartbeat 0 s ago" in live.describe("k", "u")
    damaged = LeaseHolder.from_json({"heartbeat": "soon", "ttl": 1e300, "pid": "1", "epoch": float("nan")}, "x")
    assert (damaged.heartbeat, damaged.ttl, damaged.pid, damaged.epoch) == (0.0, None, None, 0)
    assert not damaged.is_live()
    assert LeaseHolder.from_json(["not", "an", "object"], "x") == LeaseHolder()
    assert LeaseHolder.parse(b"{", "x") is None and LeaseHolder.parse(b"[]", "x") is None
    future = LeaseHolder.from_json({"heartbeat": now + 3600, "ttl": 30}, "x")
    assert "in the future" in future.describe("leases/node-0.json", "s3://b/p")


def test_a_negative_ttl_makes_a_lease_dead_at_once():
    holder = LeaseHolder.from_json({"heartbeat": time.time() - 1, "ttl": -5}, "x")
    assert holder.ttl == -5 and holder.dead_reason() is not None


def test_unreadable_lease_files_are_skipped():
    storage = MemoryStorage("typed-leases-test")
    try:
        storage.write_bytes(".shardwright/leases/node-0.json", b"[1, 2]")
        storage.write_bytes(".shardwright/leases/node-1.json", json.dumps({"owner": "o"}).encode())
        assert [(name, h.owner) for name, h in read_leases(storage)] == [("node-1", "o")]
    finally:
        MemoryStorage.drop("typed-leases-test")


@pytest.mark.parametrize("num_shards, num_inputs, clamped", [(64, 10, 10), (4, 10, 4), (5, 0, 1), (1, 1, 1)])
def test_num_shards_clamp(num_shards, num_inputs, clamped):
    assert clamp_num_shards(num_shards, num_inputs) == clamped
    assert default_num_shards(num_inputs) == clamp_num_shards(16, num_inputs)


def test_start_over_hint_keeps_a_published_dataset_for_appends():
    assert "published dataset is kept" in start_over_hint("append", "out")
    assert "mode='overwrite'" in start_over_hint(None, "out")


def test_is_published_has_one_home():
    import importlib

    from shardwright.protocol.manifest import is_published

    for name in ("decide", "publish", "abandon"):
        module = importlib.import_module(f"shardwright.protocol.{name}")
        assert getattr(module, "is_published", is_published) is is_published, name
    ours = ChunkEntry(filename=chunk_filename(3, 0, 0, None, epoch=1), chunk_size=1, chunk_bytes=1)
    older = ChunkEntry(filename=chunk_filename(2, 0, 0, None, epoch=1), chunk_size=1, chunk_bytes=1)
    run = SimpleNamespace(generation=3)  # is_published reads only the manifest's generation
    assert is_published([older, ours], run) and not is_published([older], run) and not is_published([], run)
