"""A stop keeps the chunk in progress as a pending tail (engine.shard_writer, protocol 3b):
not committed, saved in the shard's progress snapshot, reopened by the resume, so the shard's
chunks are cut exactly where a run that never stopped cuts them (issue 35) and no input whose
output is in the tail is given to fn again. A real Worker on a local output, its real
committer threads, stopped by the flag its SIGTERM handler sets."""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import replace

import pytest

from shardwright.engine.shard_writer import TAIL_LIMIT_BYTES, ShardWriter
from shardwright.engine.stops import StopRequested
from shardwright.engine.tasks import ShardTask, WorkerConfig
from shardwright.engine.worker import STOP_CHECK_INTERVAL, Worker
from shardwright.protocol.commit import PendingChunk, RoundSettings
from shardwright.protocol.progress import read_snapshot
from shardwright.protocol.records import ShardProgress, load_progress

END = 40  # shard 0 covers inputs 0..39


class Recorder:
    """Stands in for the committer: keeps the chunks and snapshots the writer hands it."""

    def __init__(self) -> None:
        self.chunks: list[PendingChunk] = []
        self.snapshots: list = []

    def submit(self, job: PendingChunk) -> None:
        self.chunks.append(job)

    def save_progress(self, snapshot) -> None:
        self.snapshots.append(snapshot)


def config(output_dir: str, use_checkpoint: bool = True, **changes) -> WorkerConfig:
    cfg = WorkerConfig(
        output_dir=output_dir,
        storage_options=None,
        round=RoundSettings("run-1", 0, None, use_checkpoint),
        chunk_size=7,
        chunk_bytes=None,
        on_error="raise",
        max_retries=0,
        node_rank=0,
    )
    return replace(cfg, **changes)


def task_at(progress: ShardProgress, inputs: list) -> ShardTask:
    """The task load_progress's view of the shard gives a worker (as engine.planning does)."""
    return ShardTask(
        shard=0,
        start=0,
        end=END,
        next_input=progress.next_input,
        skip_outputs=progress.skip_outputs,
        next_seq=progress.next_seq,
        inputs=inputs[progress.next_input :],
        prev_epoch=progress.records[-1].epoch if progress.records else None,
    )


def run_worker(fn, cfg: WorkerConfig, inputs: list, stop_after: int | None = None) -> bool:
    """One worker on shard 0 from where its records (and tail) say; True if it was stopped
    (its SIGTERM flag set after ``stop_after`` calls of fn)."""
    calls = [0]
    worker: Worker | None = None

    def counted(x):
        calls[0] += 1
        if calls[0] == stop_after and worker is not None:
            worker.signalled = True  # what worker_main's SIGTERM handler does
            while not worker.look[0]:  # the hot loop looks at its stops once its clock ticked: wait for the tick
                time.sleep(STOP_CHECK_INTERVAL / 4)
        return fn(x)

    worker = Worker(0, counted, cfg, queue.Queue(), threading.Event(), [-1])
    progress = load_progress(worker.storage, {0: (0, END)}, "run-1")[0]
    try:
        worker.run_shard(task_at(progress, inputs))
        stopped = False
    except StopRequested:
        stopped = True
    worker.committer.close()
    return stopped


def chunks_of(output_dir: str) -> list[tuple[int, int, int, str]]:
    """(seq, first input, next input, chunk name) of shard 0's committed chunks."""
    from shardwright.storage import open_storage

    progress = load_progress(open_storage(output_dir), {0: (0, END)}, "run-1")[0]
    return [
        (r.seq, r.first_input, r.next_input, r.chunk.filename if r.chunk else "") for r in progress.records if r.chunk
    ]


def plain(x: int) -> dict:
    return {"x": x}


def pages(x: int):
    for page in range(x % 4):
        yield {"x": x, "page": page}


@pytest.mark.parametrize("timeout", [None, 60.0], ids=["hot-loop", "general-loop"])
@pytest.mark.parametrize("fn", [plain, pages])
@pytest.mark.parametrize("stops", [[3], [9, 1, 5], [20, 12]])
def test_stopped_and_resumed_shard_commits_the_chunks_of_a_run_never_stopped(tmp_path, fn, stops, timeout):
    inputs = list(range(END))
    clean = str(tmp_path / "clean")
    assert not run_worker(fn, config(clean, timeout=timeout), inputs)
    out = str(tmp_path / "stopped")
    calls: list[int] = []

    def counting(x):
        calls.append(x)
        return fn(x)

    landed = sum(run_worker(counting, config(out, timeout=timeout), inputs, stop_after=n) for n in stops)
    assert landed == len(stops)
    assert not run_worker(counting, config(out, timeout=timeout), inputs)
    assert chunks_of(out) == chunks_of(clean)
    again = sorted(x for x in set(calls) if calls.count(x) > 1)
    # a plain fn is called once per input; a generator stopped between two outputs is called
    # again on that input (which skips the outputs kept), at most once per stop
    assert sorted(set(calls)) == inputs and len(again) <= (len(stops) if fn is pages else 0), again


def test_the_tail_is_in_the_snapshot_and_not_in_the_index(tmp_path):
    out = str(tmp_path / "out")
    assert run_worker(plain, config(out), list(range(END)), stop_after=10)
    assert [(seq, first, nxt) for seq, first, nxt, _ in chunks_of(out)] == [(0, 0, 7)]  # one full chunk
    from shardwright.storage import open_storage

    tail = read_snapshot(open_storage(out), "run-1", 0, 1, 0, (7, 0))
    assert tail is not None and tail.slots == []
    assert (tail.buffer.first_input, tail.buffer.position, len(tail.buffer.items)) == (7, (10, 0), 3)


def test_without_checkpoints_a_stop_commits_the_chunk_in_progress():
    writer = ShardWriter(task_at(ShardProgress(0, 0, END), []), config("memory://x", use_checkpoint=False), Recorder())  # type: ignore[arg-type]
    for x in range(3):
        writer.add(b"x", x, after=(x + 1, 0))
    writer.stop()
    assert [(c.first_input, c.next_input, len(c.items)) for c in writer.committer.chunks] == [(0, 3, 3)]  # type: ignore[attr-defined]
    assert writer.committer.snapshots == []  # type: ignore[attr-defined]


def test_a_tail_too_large_for_a_snapshot_is_committed_instead():
    recorder = Recorder()
    writer = ShardWriter(task_at(ShardProgress(0, 0, END), []), config("memory://x", chunk_size=None), recorder)  # type: ignore[arg-type]
    writer.add(b"x", 0, after=(1, 0))
    writer.items_bytes = TAIL_LIMIT_BYTES + 1  # as if the chunk in progress held that much
    writer.stop()
    assert len(recorder.chunks) == 1 and recorder.snapshots == []


def test_a_stop_right_after_a_commit_writes_no_tail():
    recorder = Recorder()
    writer = ShardWriter(task_at(ShardProgress(0, 0, END), []), config("memory://x"), recorder)  # type: ignore[arg-type]
    for x in range(7):
        writer.add(b"x", x, after=(x + 1, 0))
    assert len(recorder.chunks) == 1
    writer.stop()
    assert len(recorder.chunks) == 1 and recorder.snapshots == []
    writer.failed.append([7, 0])  # an input skipped (on_error="skip") since: a tail without items
    writer.position = (8, 0)
    writer.stop()
    assert [(s.buffer.position, s.buffer.failed, s.buffer.items) for s in recorder.snapshots] == [
        ((8, 0), [[7, 0]], [])
    ]


@pytest.mark.parametrize("fresh", [True, False])
def test_a_new_runs_worker_does_not_look_for_a_tail_a_resumed_one_does(tmp_path, fresh):
    """A new run's first node (share.run_share's ``fresh``) has no snapshot to take up: looking
    would cost a listing of .shardwright/progress per shard (a LIST request on an object store)."""
    from shardwright.protocol.layout import PROGRESS_PREFIX

    worker = Worker(0, plain, config(str(tmp_path / "out")), queue.Queue(), threading.Event(), [-1])
    listed: list[str] = []
    real_list = worker.storage.list
    worker.storage.list = lambda prefix="": listed.append(prefix) or real_list(prefix)  # type: ignore[method-assign]
    progress = load_progress(worker.storage, {0: (0, END)}, "run-1")[0]
    worker.run_shard(replace(task_at(progress, list(range(END))), fresh=fresh))
    worker.committer.close()
    looked = [p for p in listed if p.startswith(PROGRESS_PREFIX)]
    assert (looked == []) is fresh, listed


def manifest_of(output_dir: str, run_id: str = "run-1") -> None:
    """The run manifest a real call writes first (status reads the run from it): one shard."""
    from shardwright.protocol.fingerprint import InputsFingerprint
    from shardwright.protocol.manifest import Manifest, OutputSettings, create_manifest
    from shardwright.storage import open_storage

    create_manifest(
        open_storage(output_dir),
        Manifest(
            run_id=run_id,
            generation=0,
            mode="create",
            num_inputs=END,
            num_shards=1,
            inputs=InputsFingerprint.of(list(range(END))).to_json(),
            settings=OutputSettings(chunk_size=7, chunk_bytes=None, compression=None, num_shards=1),
            use_checkpoint=True,
            base_chunks=[],
            base_config=None,
            fn_name="m.f",
            created_at=0.0,
        ),
    )


def test_status_counts_the_inputs_kept_in_a_pending_tail_as_done_but_not_committed(tmp_path, capsys):
    from shardwright.cli.main import print_status, status_report
    from shardwright.protocol.status import read_status
    from shardwright.storage import open_storage

    out = str(tmp_path / "out")
    manifest_of(out)
    assert run_worker(plain, config(out), list(range(END)), stop_after=10)  # chunk 0..6 committed, 7..9 in the tail
    report = read_status(open_storage(out))
    assert (report.state, report.inputs_done, report.inputs_in_tails) == ("interrupted", 7, 3)
    assert report.counts == {"done": 7, "in_tails": 3, "in_progress": 0, "pending": END - 10, "failed": 0}
    assert status_report(out)["inputs_in_tails"] == 3  # status --json
    print_status(report)
    assert "7 of 40 committed (17.5%) (+3 kept in pending tails, committed on resume)" in capsys.readouterr().out
    # the resume takes the tail up and commits it: nothing is left in a tail, every input is done
    assert not run_worker(plain, config(out), list(range(END)))
    again = read_status(open_storage(out))
    assert (again.inputs_done, again.inputs_in_tails, again.counts["pending"]) == (END, 0, 0)


def test_status_ignores_a_damaged_tail_as_the_resume_does(tmp_path):
    import pathlib

    from shardwright.protocol.status import read_status
    from shardwright.storage import open_storage

    out = str(tmp_path / "out")
    manifest_of(out)
    assert run_worker(plain, config(out), list(range(END)), stop_after=10)
    assert read_status(open_storage(out)).inputs_in_tails == 3
    (snapshot,) = pathlib.Path(out, ".shardwright", "progress").glob("*.bin")
    data = bytearray(snapshot.read_bytes())
    data[-40] ^= 1  # one bit flipped on disk: the checksum refuses it, the resume redoes 7..9
    snapshot.write_bytes(bytes(data))
    report = read_status(open_storage(out))
    assert (report.inputs_done, report.inputs_in_tails, report.counts["pending"]) == (7, 0, END - 7)


def test_a_snapshot_key_names_its_shard_whatever_its_width():
    """status finds the shards with a snapshot from the keys' names (layout.snapshot_shard):
    a shard past 99,999 has six digits, and a buffer segment is no snapshot."""
    from shardwright.protocol.layout import progress_key, segment_key, snapshot_shard

    assert snapshot_shard(progress_key(7, 3)) == 7
    assert snapshot_shard(progress_key(123_456, 3)) == 123_456
    assert snapshot_shard(segment_key(7, 3, "0" * 32)) is None
    assert snapshot_shard("chunk-0-00007-000000-x.bin") is None


def fails_on_2_and_8(x: int) -> dict:
    if x in (2, 8):
        raise ValueError(f"input {x} fails")
    return {"x": x}


def test_status_counts_an_input_that_failed_inside_a_tail_as_failed_once(tmp_path):
    """Trust round 10 row 10: "64 done (+37 in pending tails), 0 in progress, 195 pending, 4
    failed" beside "6 failure record(s)": the 2 inputs that failed inside the tail were pending,
    and the 4 committed failures were counted twice (in "done" and in "failed"), so pending was
    short by 2 (the rerun called fn 197 times)."""
    from shardwright.protocol.status import read_status
    from shardwright.storage import open_storage

    out = str(tmp_path / "out")
    manifest_of(out)
    # 0..7 committed (input 2 failed there: chunk of 7 items), 8 failed and 9..10 kept in the tail
    assert run_worker(fails_on_2_and_8, config(out, on_error="skip"), list(range(END)), stop_after=11)
    report = read_status(open_storage(out))
    assert (report.inputs_done, report.failed_records) == (8, 2), "0..7 through the records; 2 failure records"
    # each input once: 0..7 less the failed 2 done, 9..10 in the tail, 2 and 8 failed, 11..39 pending
    assert report.counts == {"done": 7, "in_tails": 2, "in_progress": 0, "pending": 29, "failed": 2}
