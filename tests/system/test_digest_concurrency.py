"""The same dataset bytes and digest for a ``concurrency`` run (inputs in flight, issue 32)
whatever its snapshots' timing, SIGTERM and SIGKILL (issue 35). Its progress snapshots fire
every ``durable_every`` and save a writer's buffer of megabytes as append-only segments
(protocol.segments); until segments, a snapshot that found more than 8 MiB there committed it
as a chunk, so the cut, the chunk names and the digest depended on when snapshots fired.

Each signal is sent on an event (a new record or a new segment file on disk), never after a
delay; every kill is checked against a clean run's files (names and bytes)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from support.crash_child import call_times, calls_per_input
from support.digests import every_file
from support.helpers import assert_exactly_once, committed_records, finish, kill_group, start_child, wait_for

pytestmark = pytest.mark.slow

CONCURRENCY, WORKERS, DURABLE_EVERY = 4, 2, 0.1
# 800 samples of 64 KiB in 2 shards: a shard's 10 MiB chunk takes ~160 inputs, so snapshots
# every 0.1 s find buffers of several MiB (past the old 8 MiB cut, past 1 MiB inline)
BASE = {
    "kind": "padded",
    "n": 800,
    "pad": 64 * 1024,
    "chunk_bytes": 10 * 1024 * 1024,
    "num_shards": 2,
    "sleep": 0.01,
    "extra": {"concurrency": CONCURRENCY, "durable_every": DURABLE_EVERY},
}


def segments(out: Path) -> set[str]:
    folder = out / ".shardwright" / "progress"
    return {p.name for p in folder.glob("*.seg")} if folder.exists() else set()


def reference(tmp_path: Path) -> dict:
    clean = {**BASE, "num_workers": 1, "output_dir": str(tmp_path / "clean")}
    clean["extra"] = {"concurrency": CONCURRENCY, "durable_every": 3600}  # snapshots never fire
    finish(clean)
    return every_file(Path(clean["output_dir"]))


def stopped_on_an_event(config: dict, sig: int) -> float:
    """Start the call; once it commits a record or writes a new segment, send ``sig`` (SIGTERM
    to the main process, as a scheduler does; SIGKILL to the whole group). When it was sent."""
    out = Path(config["output_dir"])
    records, seen = committed_records(str(out)), segments(out)
    proc = start_child(config)
    try:
        assert wait_for(
            lambda: proc.poll() is not None or committed_records(str(out)) > records or bool(segments(out) - seen),
            120,
        )
        assert proc.poll() is None, "the run ended before its signal: " + proc.communicate()[1][-3000:]
        at = time.time()  # the wall clock, as the calls file stamps each call
        if sig == signal.SIGKILL:
            kill_group(proc)
            proc.wait(60)
        else:
            os.kill(proc.pid, sig)
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 143, err[-3000:]
    finally:
        kill_group(proc)
    return at


def test_sigterm_then_sigkill_keep_every_file_and_repeat_at_most_the_calls_in_flight(tmp_path):
    clean = reference(tmp_path)
    calls = str(tmp_path / "calls")
    run = {**BASE, "num_workers": WORKERS, "calls": calls, "output_dir": str(tmp_path / "run")}
    stopped_on_an_event(run, signal.SIGTERM)
    assert calls_per_input(calls) and max(calls_per_input(calls).values()) == 1  # a stop repeats nothing
    killed_at = stopped_on_an_event(run, signal.SIGKILL)
    before = [t for _, t in call_times(calls) if t <= killed_at]
    finish(run)
    assert_exactly_once(run)
    assert every_file(Path(run["output_dir"])) == clean  # the same chunk names, bytes and index
    counts = calls_per_input(calls)
    assert sorted(counts) == list(range(BASE["n"]))
    repeated = sum(n - 1 for n in counts.values())
    margin = 2.0  # the committer's lag behind the interval on a machine shared with other tests
    recent = sum(1 for t in before if t > killed_at - DURABLE_EVERY - margin)
    assert repeated <= CONCURRENCY * WORKERS + recent, (repeated, recent)


@pytest.mark.parametrize("point", ["before_segment", "after_segment"])
def test_a_crash_around_a_segment_write_loses_nothing_and_keeps_every_file(tmp_path, point):
    """Each worker dies (as a SIGKILL or a power cut would) right before or right after its
    first segment is written: before, no segment exists; after, one exists that no snapshot
    lists yet. Either way the rerun ignores what is unlisted and writes the clean run's files."""
    clean = reference(tmp_path)
    out = tmp_path / "crashed"
    run = {**BASE, "num_workers": WORKERS, "output_dir": str(out)}
    crashed = start_child(run, SHARDWRIGHT_CRASH_AT=point)
    try:
        _, err = crashed.communicate(timeout=300)
    finally:
        kill_group(crashed)
    assert crashed.returncode != 0, "no worker reached its crash point"
    assert bool(segments(out)) == (point == "after_segment"), segments(out)
    finish(run)
    assert_exactly_once(run)
    assert every_file(out) == clean
    assert segments(out) == set()  # cleanup (protocol step 6) deleted the segments with the snapshots
