"""Start tests/support/inflight_child.py and read ``shardwright status`` of its output: shared by
the in-flight tests (tests/system/test_inflight.py, test_status_calls.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from shardwright.protocol.manifest import read_manifest
from shardwright.protocol.progress import read_snapshot
from shardwright.protocol.records import load_progress
from shardwright.storage import open_storage

from .helpers import HERE, child_env

CHILD = str(HERE / "inflight_child.py")
CONCURRENCY = 4
WORKERS = 2
DURABLE_EVERY = 0.5


def start_inflight(
    out: str,
    url: str,
    mode: str,
    env: dict | None = None,
    concurrency: int = CONCURRENCY,
    durable_every: float = DURABLE_EVERY,
    stdout: int = subprocess.PIPE,
) -> subprocess.Popen:
    """The child in its own session (kill_group reaches it and its workers only)."""
    return subprocess.Popen(
        [sys.executable, CHILD, out, url, mode, str(concurrency), str(durable_every)],
        env=env if env is not None else child_env(),
        start_new_session=True,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


def status(out: str, env: dict, *extra: str) -> subprocess.CompletedProcess:
    """``shardwright status OUT [extra]``, run by the real CLI."""
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "status", out, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def in_progress(out: str, env: dict) -> list[dict]:
    """The ``in_progress`` entries of ``status --json`` ([] while there is no status to read)."""
    result = status(out, env, "--json")
    return json.loads(result.stdout).get("in_progress") or [] if result.returncode == 0 else []


def durable_outputs(out: str) -> int:
    """How many outputs a resume of ``out`` would keep (a SIGKILL loses the rest), read as the
    resume reads them: each shard's committed chunks, and the progress snapshot extending its
    records' tip (buffered outputs, each finished input's outputs and, for an unfinished one,
    those before its last ResumePoint)."""
    storage = open_storage(out)
    manifest = read_manifest(storage)
    if manifest is None:
        return 0
    kept = 0
    for p in load_progress(storage, manifest.shard_bounds(), manifest.run_id).values():
        kept += sum(chunk.chunk_size for chunk in p.chunks)
        tip = p.records[-1].epoch if p.records else None
        snapshot = read_snapshot(storage, manifest.run_id, p.shard, p.next_seq, tip, (p.next_input, p.skip_outputs))
        if snapshot is not None:
            kept += len(snapshot.buffer.items)
            kept += sum(len(slot.items) if slot.done else slot.point_outputs for slot in snapshot.slots)
    return kept
