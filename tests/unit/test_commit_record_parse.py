"""Commit records read back: the quick check of a plain record and the field-by-field check
agree on every record, and a damaged record is refused whichever check sees it first."""

from __future__ import annotations

import pytest

from shardwright.errors import CorruptStateError
from shardwright.format import ChunkEntry
from shardwright.protocol.records import MAX_NUMBER, CommitRecord

ENTRY = ChunkEntry("chunk-0-3.bin", 100, 3000, None, "xxh3_128:" + "a" * 32)
GOOD = [
    CommitRecord(0, 0, ENTRY, 3000, 0, 100, 0, False, (), "run", 5, None),
    CommitRecord(2, 7, None, 0, 700, 800, 3, True, (), "run", 5, 4),
    CommitRecord(1, 1, ENTRY, 3000, 10, 20, 0, False, ((12, 0), (15, 1)), "run", 0, 0),  # failed inputs
    CommitRecord(0, MAX_NUMBER, ENTRY, MAX_NUMBER, 0, 0, 0, False, (), "", 0, None),
]


@pytest.mark.parametrize("record", GOOD)
def test_records_read_back_as_written(record):
    assert CommitRecord.from_json(record.to_json(), "x") == record


@pytest.mark.parametrize(
    "change",
    [
        {"seq": -1},
        {"seq": MAX_NUMBER + 1},
        {"seq": 1.0},
        {"seq": True},
        {"stored_bytes": "3000"},
        {"done": 1},
        {"done": "false"},
        {"run_id": None},
        {"epoch": -5},
        {"prev_epoch": -1},
        {"prev_epoch": "3"},
        {"failed": [[1]]},
        {"failed": "none"},
        {"chunk": {"filename": "../../etc/passwd", "chunk_size": 1, "chunk_bytes": 1}},
        {"chunk": {"filename": "c.bin", "chunk_size": -1, "chunk_bytes": 1}},
        {"chunk": []},
    ],
)
def test_damaged_records_are_refused(change):
    data = {**GOOD[0].to_json(), **change}
    with pytest.raises(CorruptStateError):
        CommitRecord.from_json(data, "x")


@pytest.mark.parametrize(
    "missing", ["shard", "seq", "stored_bytes", "first_input", "next_input", "done", "run_id", "epoch"]
)
def test_a_missing_field_is_named(missing):
    data = GOOD[0].to_json()
    del data[missing]
    with pytest.raises(CorruptStateError, match=f"'{missing}'"):
        CommitRecord.from_json(data, "x")
