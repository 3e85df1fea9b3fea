"""Trust round 8 (docs/trust-round8.md): commit records damaged on disk are refused, never
resumed from. Before, one digit changed in a record ("next_input":6 read as 8, "done":false
as true, "skip_outputs":0 as 1) made the resumed run skip inputs and publish the dataset
without them, with no word."""

from __future__ import annotations

import json

import pytest

from shardwright.errors import CorruptStateError
from shardwright.protocol.records import load_progress
from support.sealed_records import written_records


def test_records_as_written_are_read_back(tmp_path):
    storage, _ = written_records(tmp_path)
    progress = load_progress(storage, {0: (0, 12)})[0]
    assert (progress.next_seq, progress.next_input, progress.done) == (3, 6, False)


@pytest.mark.parametrize(
    "old,new",
    [
        ('"next_input":6', '"next_input":8'),  # inputs 6 and 7 skipped
        (
            '"skip_outputs":0,"done":false,"failed":[],"run_id":"run","epoch":7,"prev_epoch":7}]',
            '"skip_outputs":1,"done":false,"failed":[],"run_id":"run","epoch":7,"prev_epoch":7}]',
        ),
        (
            '"done":false,"failed":[],"run_id":"run","epoch":7,"prev_epoch":7}]',
            '"done":true,"failed":[],"run_id":"run","epoch":7,"prev_epoch":7}]',
        ),
        ('"checksum":"xxh3_128:', '"checksum":"xxh3_129:'),
        ('"checksum"', '"chfcksum"'),
    ],
    ids=["next_input", "skip_outputs", "done", "algorithm", "key"],
)
def test_a_record_with_one_field_changed_on_disk_is_refused(tmp_path, old, new):
    storage, key = written_records(tmp_path)
    text = storage.read_bytes(key).decode()
    assert old in text
    at = text.rfind(old)
    storage.write_bytes(key, (text[:at] + new + text[at + len(old) :]).encode())
    with pytest.raises(CorruptStateError, match="checksum"):
        load_progress(storage, {0: (0, 12)})


def test_a_record_file_written_before_checksums_is_still_read(tmp_path):
    storage, key = written_records(tmp_path)
    body = json.loads(storage.read_bytes(key))
    storage.write_bytes(key, json.dumps({"records": body["records"]}).encode())  # an older version's file
    assert load_progress(storage, {0: (0, 12)})[0].next_input == 6
