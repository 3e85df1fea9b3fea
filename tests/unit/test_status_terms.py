"""Issue 32 item 6: status in the user's terms: the inputs live workers are on, by name and
with their ResumePoint state; done / in progress / pending / failed counts and an ETA; a
shard a live worker holds is in progress before its first record (it read "0 in progress")."""

from __future__ import annotations

import json
import os
import time

from shardwright.cli.main import print_status
from shardwright.process import host_identity
from shardwright.protocol.layout import claim_name, lease_key
from shardwright.protocol.manifest import create_manifest
from shardwright.protocol.records import CommitRecord, write_records
from shardwright.protocol.status import read_status
from shardwright.storage import open_storage
from support.manifests import recorded_manifest

DOCS = [f"/data/doc{i:03d}.txt" for i in range(20)]


def running(tmp_path):
    storage = open_storage(str(tmp_path / "out"))
    manifest = recorded_manifest(DOCS, chunk_size=1000, fn_name="sdg.pages", created_at=time.time() - 100)
    create_manifest(storage, manifest)
    write_records(storage, [CommitRecord(0, 0, None, 0, 0, 5, 0, False, ((3, 0),), "run")])  # shard 0: 5 done, 1 failed
    holder = {
        "owner": "o",
        "host": host_identity(),
        "pid": os.getpid(),
        "heartbeat": time.time(),
        "ttl": 60.0,
        "shard": 1,
        "current_inputs": [5, 12],
        "current_names": ["", "/data/doc012.txt"],
        "current_states": ["", '{"page": 17}'],
    }
    storage.write_bytes(lease_key(claim_name(1)), json.dumps(holder).encode())
    return storage


def test_status_names_the_inputs_in_progress_and_counts_them(tmp_path, capsys):
    report = read_status(running(tmp_path))
    assert report.state == "running"
    assert report.shards_in_progress == [0, 1], "a live claim is in progress before its first record"
    assert [e.describe() for e in report.in_progress] == ["input 5", "/data/doc012.txt: page 17"]
    # each input once (trust round 10 row 10): input 3 failed, not done too; 20 - 5 - 2 pending
    assert report.counts == {"done": 4, "in_tails": 0, "in_progress": 2, "pending": 13, "failed": 1}
    assert report.eta_s is not None and report.eta_s > 0
    data = report.to_json()
    assert data["in_progress"][1]["name"] == "/data/doc012.txt" and data["in_progress"][1]["state"] == '{"page": 17}'
    json.dumps(data)
    print_status(report)
    out = capsys.readouterr().out
    assert "4 done, 2 in progress, 13 pending, 1 failed, about" in out
    assert "now:    /data/doc012.txt: page 17 (worker 1" in out
