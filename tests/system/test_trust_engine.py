"""optimize() never deletes what it did not write, never writes to a location it would misread,
and never returns as success without a dataset (issue 14: BAD 2's protocol half, BAD 4's engine half)."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from shardwright import optimize
from shardwright.errors import IncompleteRunError, OutputDirError
from shardwright.protocol.layout import STATE_DIR, is_state_key, lease_key


def plain(i: int) -> dict:
    return {"i": i}


FOREIGN = [
    "jobs.db",
    "jobs.db-wal",
    "api-token",
    "jobs/0001/spec.json",
    "shards/notes.txt",
    "history/readme",
    "leases/x.txt",
]


def test_overwrite_deletes_only_the_state_files_the_engine_writes(tmp_path):
    out = tmp_path / "ds"
    optimize(plain, list(range(20)), str(out), chunk_size=5, num_workers=1, verbose=False)
    for name in FOREIGN:  # another program's files in a directory named like ours
        path = out / STATE_DIR / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("not shardwright's")
    optimize(plain, list(range(30)), str(out), chunk_size=5, num_workers=1, verbose=False, mode="overwrite")
    for name in FOREIGN:
        assert (out / STATE_DIR / name).read_text() == "not shardwright's", name
    assert sum(c["chunk_size"] for c in json.loads((out / "index.json").read_text())["chunks"]) == 30


def test_state_key_names():
    assert is_state_key(".shardwright/manifest.json") and is_state_key(".shardwright/shards/00001-000002-3.json")
    assert is_state_key(".shardwright/failed/000000000012-g3.json")
    assert is_state_key(".shardwright/history/00000001700000000000000-abc123.json") is False  # 23 digits
    assert is_state_key(".shardwright/history/01700000000000000000-abc123.json")
    assert not any(is_state_key(f"{STATE_DIR}/{name}") for name in FOREIGN)


@pytest.mark.parametrize("url", ["s3://bucket/a//x", "s3://bucket/./x", "s3://bucket/a/../x", "s3://bucket//x"])
def test_object_store_location_with_empty_dot_or_dotdot_segments_is_refused_before_writing(url):
    with pytest.raises(OutputDirError, match="segment"):
        optimize(plain, list(range(10)), url, num_workers=1, verbose=False)


def test_single_node_run_that_cannot_publish_is_an_error_not_a_success(tmp_path):
    out = tmp_path / "ds"
    # Another live process (another host) holds the publish lease: this run can finish its
    # shards but not publish. It must not return as if it had succeeded.
    holder = {"owner": "someone-else", "host": "another-host", "pid": 1, "heartbeat": time.time() + 600, "ttl": 3600}
    (out / STATE_DIR / "leases").mkdir(parents=True)
    (out / lease_key("publish")).write_text(json.dumps(holder))
    with pytest.raises(
        IncompleteRunError,
        match=r"could not publish .*index.json: another process holds the publish lease .*another-host",
    ):
        optimize(plain, list(range(10)), str(out), num_workers=1, verbose=False)
    assert not (out / "index.json").exists()
    assert socket.gethostname() != "another-host" and os.path.exists(out / lease_key("publish"))
