"""Trust round 7 (docs/trust-round7.md), with real processes and real signals: a progress
snapshot damaged on disk after a SIGKILL is never resumed from."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
from pathlib import Path

from support.helpers import child_env, wait_for

SCRIPT = """
import os, sys, time
import shardwright as sw

out, gate = sys.argv[1], sys.argv[2]

def pages(doc, resume=None):
    for page in range((resume or {}).get("page", 0), 10):
        while page >= 3 and not os.path.exists(gate):
            time.sleep(0.02)  # held here until the test has killed the run
        yield {"doc": doc, "page": page}
        yield sw.ResumePoint({"page": page + 1})

sw.optimize(pages, ["doc-0"], out, num_workers=1, chunk_size=100, durable_every=0.05, concurrency=2)
"""

STATE_AT_3 = b'page\\":3'  # the ResumePoint state {"page":3} as JSON text inside the header


def _snapshot_at_page_3(out) -> str | None:
    for path in glob.glob(f"{out}/.shardwright/progress/*"):
        try:
            if STATE_AT_3 in open(path, "rb").read():
                return path
        except FileNotFoundError:  # replaced meanwhile
            pass
    return None


def test_a_snapshot_damaged_on_disk_is_ignored_and_no_page_is_skipped(tmp_path):
    """Before: one byte of the ResumePoint state changed ({"page":3} read as {"page":8}) and the
    resumed run published pages [0, 1, 2, 8, 9], without a word."""
    import shardwright as sw

    script, out, gate = tmp_path / "pages.py", tmp_path / "out", tmp_path / "gate"
    script.write_text(SCRIPT)
    run = [sys.executable, str(script), str(out), str(gate)]
    first = subprocess.Popen(run, env=child_env(), start_new_session=True, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: first.poll() is not None or _snapshot_at_page_3(out) is not None, 120)
        assert first.poll() is None, first.communicate()[1][-2000:]
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    snapshot = _snapshot_at_page_3(out)
    data = open(snapshot, "rb").read()
    with open(snapshot, "wb") as f:
        f.write(data.replace(STATE_AT_3, STATE_AT_3[:-1] + b"8"))  # one byte, as bit rot would
    gate.touch()
    resumed = subprocess.run(run, env=child_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(row["page"] for row in sw.StreamingDataset(str(out))) == list(range(10))


RECORDS_SCRIPT = """
import os, sys, time
import shardwright as sw

out, gate = sys.argv[1], sys.argv[2]

def fn(i):
    while i % 12 >= 7 and not os.path.exists(gate):
        time.sleep(0.02)  # held here until the test has killed the run
    return {"i": i}

sw.optimize(fn, list(range(24)), out, num_workers=1, chunk_size=2, num_shards=2, concurrency=2, durable_every=0.05)
"""


def _record_holding(out, text: bytes) -> str | None:
    """The record file, or the worker's record log (protocol.record_log: local disk), holding ``text``."""
    for path in glob.glob(f"{out}/.shardwright/shards/*"):
        if text in open(path, "rb").read():
            return path
    return None


def _stripped(data: bytes, last: bytes) -> bytes:
    """The record file or log with the round holding ``last`` edited to next_input 8 and its
    checksum field deleted: an older version's shape."""
    import json

    lines = data.split(b"\n")
    at = next(k for k, line in enumerate(lines) if last in line)
    records = json.loads(lines[at])["records"]
    lines[at] = json.dumps({"records": records}, separators=(",", ":")).encode().replace(last, b'"next_input":8,')
    return b"\n".join(lines)


RECORD_TO_EDIT = b'"next_input":6,'  # shard 0's last record when the run holds on its gate


def _killed_after_a_record(tmp_path) -> tuple[list[str], Path, Path]:
    """RECORDS_SCRIPT started, SIGKILLed once a record holding RECORD_TO_EDIT is on disk (the
    run holds on its gate meanwhile): (its command, its output, its gate)."""
    script, out, gate = tmp_path / "run.py", tmp_path / "out", tmp_path / "gate"
    script.write_text(RECORDS_SCRIPT)
    run = [sys.executable, str(script), str(out), str(gate)]
    first = subprocess.Popen(run, env=child_env(), start_new_session=True, stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: first.poll() is not None or _record_holding(out, RECORD_TO_EDIT) is not None, 120)
        assert first.poll() is None, first.communicate()[1][-2000:]
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    return run, out, gate


def test_a_commit_record_damaged_on_disk_is_refused_not_resumed_from(tmp_path):
    """Trust round 8. Before: after a SIGKILL, shard 0's last record said "next_input":6;
    with that one digit changed to 8 the resumed run skipped inputs 6 and 7 and published
    22 of 24 items, exit 0."""
    import shardwright as sw

    run, out, gate = _killed_after_a_record(tmp_path)
    last = RECORD_TO_EDIT
    record = _record_holding(out, last)
    data = open(record, "rb").read()
    with open(record, "wb") as f:
        f.write(data.replace(last, b'"next_input":8,'))  # one byte, as bit rot would
    gate.touch()
    resumed = subprocess.run(run, env=child_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode != 0
    assert "does not match its checksum" in resumed.stderr
    assert not (out / "index.json").exists()
    with open(record, "wb") as f:  # restored: the run resumes and every input is there once
        f.write(data)
    resumed = subprocess.run(run, env=child_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(row["i"] for row in sw.StreamingDataset(str(out))) == list(range(24))


def test_a_record_stripped_of_its_checksum_is_refused_and_verify_names_it(tmp_path):
    """Trust round 9. Before: the same one-digit edit with the record file's checksum field
    deleted made the file look like an older version's, which was still read: the resumed
    run published 22 of 24 items, exit 0. And `verify` of a run with a damaged record said
    "rerun the same optimize call to finish it" (round 8, row 43)."""

    run, out, gate = _killed_after_a_record(tmp_path)
    last = RECORD_TO_EDIT
    record = _record_holding(out, last)
    edited = _stripped(open(record, "rb").read(), last)
    with open(record, "wb") as f:
        f.write(edited)  # the digit changed and the checksum field deleted: an older version's shape
    gate.touch()
    resumed = subprocess.run(run, env=child_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode != 0
    assert "has no checksum, though this run writes every record with one" in resumed.stderr
    assert not (out / "index.json").exists()
    verified = subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "verify", str(out)],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=120,
    )
    assert verified.returncode != 0
    line = verified.stderr.strip()
    assert "\n" not in line and os.path.basename(record) in line, verified.stderr
    assert "shardwright clean" in line and "rerun the same optimize call" not in line


def test_a_manifest_edited_back_to_protocol_6_does_not_unseal_its_records(tmp_path):
    """Trust round 10, row 1. Before: round 9's edit (next_input 6 to 8, the record's checksum
    deleted) with "protocol":7 edited to 6 in manifest.json (one bit) read the run as an older
    version's: the resumed run published 22 of 24 items, exit 0."""

    run, out, gate = _killed_after_a_record(tmp_path)
    last = RECORD_TO_EDIT
    manifest = out / ".shardwright" / "manifest.json"
    text = manifest.read_bytes()
    assert b'"protocol":7' in text.replace(b" ", b"")
    manifest.write_bytes(text.replace(b'"protocol": 7', b'"protocol": 6').replace(b'"protocol":7', b'"protocol":6'))
    record = _record_holding(out, last)
    edited = _stripped(open(record, "rb").read(), last)
    with open(record, "wb") as f:
        f.write(edited)
    gate.touch()
    resumed = subprocess.run(run, env=child_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode != 0, "the downgraded run was resumed from the edited record"
    assert "has no checksum, though this run writes every record with one" in resumed.stderr
    assert not (out / "index.json").exists()
