"""The in-flight machinery (engine.inflight) on a real ShardWriter: inputs finish out of order,
their outputs reach the writer in input order; ResumePoints are kept and resumed from; the
progress snapshot (protocol.progress) round-trips and is taken up only on the tip it extends."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import replace

import pytest

import shardwright
from shardwright.engine.calls import RetryPolicy
from shardwright.engine.inflight import InflightRunner
from shardwright.engine.io_options import InflightOptions
from shardwright.engine.resume import classify_fn
from shardwright.engine.shard_writer import ShardWriter
from shardwright.engine.stops import FnFailed, StopRequested
from shardwright.engine.tasks import ShardTask, WorkerConfig
from shardwright.protocol.commit import PendingChunk, RoundSettings
from shardwright.protocol.progress import (
    BufferState,
    ProgressSnapshot,
    SlotState,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
    write_snapshot,
)
from shardwright.storage import open_storage


class Committer:
    """Stands in for the committer threads: keeps what the writer submits, writes snapshots."""

    def __init__(self, storage) -> None:
        self.storage = storage
        self.chunks: list[PendingChunk] = []
        self.snapshots: list[ProgressSnapshot] = []

    def submit(self, job: PendingChunk) -> None:
        self.chunks.append(job)

    def save_progress(self, snapshot: ProgressSnapshot) -> None:
        self.snapshots.append(snapshot)
        write_snapshot(self.storage, snapshot)


class Gate:
    def encode(self, sample, input_index: int) -> bytes:
        return repr(sample).encode()


class Worker:
    """The hooks InflightRunner uses of engine.worker.Worker, with a stop after ``stop_after`` ticks."""

    def __init__(self, fn, concurrency: int, storage, max_retries: int = 0, on_error: str = "raise", stop_after=None):
        self.fn = fn
        self.wid = 0
        self.current_inputs = [-1]
        self.gate = Gate()
        self.storage = storage
        self.committer = Committer(storage)
        self.ticks = 0
        self.stop_after = stop_after
        self.failures: list[tuple[int, int]] = []
        self.cfg = WorkerConfig(
            output_dir=storage.url,
            storage_options=None,
            round=RoundSettings("run-1", 0, None, True),
            chunk_size=5,
            chunk_bytes=None,
            on_error=on_error,
            max_retries=max_retries,
            node_rank=0,
            inflight=InflightOptions(concurrency=concurrency, durable_every=60, stop_grace=5, kind=classify_fn(fn)),
        )

    def should_stop(self) -> bool:
        return self.stop_after is not None and self.ticks >= self.stop_after

    def tick(self) -> None:
        self.ticks += 1

    def resolved(self, input_id: int, attempts: int) -> None:
        pass

    def show_in_flight(self, inputs, states, calls=()) -> None:
        self.shown = (inputs, states)

    def record_failure(self, input_id, value, exc, attempts, tb) -> None:
        self.failures.append((input_id, attempts))


def task_of(n: int, **changes) -> ShardTask:
    task = ShardTask(shard=0, start=0, end=n, next_input=0, skip_outputs=0, next_seq=0, inputs=list(range(n)))
    return replace(task, **changes)


def run(worker: Worker, task: ShardTask) -> ShardWriter:
    writer = ShardWriter(task, worker.cfg, worker.committer)  # type: ignore[arg-type]
    InflightRunner(worker).run_shard(task, writer)
    return writer


def outputs(worker: Worker) -> list[bytes]:
    return [item for chunk in worker.committer.chunks for item in chunk.items]


def memory():
    return open_storage(f"memory://inflight-{uuid.uuid4().hex}")


@pytest.mark.parametrize("concurrency", [1, 3, 16])
def test_out_of_order_completions_reach_the_writer_in_input_order(concurrency):
    rng = random.Random(concurrency)
    delays = [rng.random() * 0.01 for _ in range(40)]

    async def fn(x):
        await asyncio.sleep(delays[x])
        return x if x % 7 else None  # None: no sample for this input

    worker = Worker(fn, concurrency, memory())
    run(worker, task_of(40))
    assert outputs(worker) == [repr(x).encode() for x in range(40) if x % 7]
    chunks = worker.committer.chunks
    assert chunks[-1].done and chunks[-1].next_input == 40
    assert all(a.next_input <= b.first_input for a, b in zip(chunks, chunks[1:], strict=False))


def test_inputs_in_flight_never_exceed_concurrency():
    state = {"now": 0, "most": 0}

    async def fn(x):
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        await asyncio.sleep(0.001 * (x % 3))
        state["now"] -= 1
        return x

    worker = Worker(fn, 4, memory())
    run(worker, task_of(30))
    assert state["most"] == 4


def test_threads_run_a_sync_generator_in_order():
    def fn(x, resume=None):
        yield {"x": x, "k": 0}
        yield shardwright.ResumePoint({"k": 1})
        yield {"x": x, "k": 1}

    worker = Worker(fn, 4, memory())
    run(worker, task_of(12))
    assert outputs(worker) == [repr({"x": x, "k": k}).encode() for x in range(12) for k in range(2)]


def test_a_failed_attempt_resumes_at_its_resume_point_and_progress_resets_the_count():
    calls: list[tuple[int, object]] = []
    fail_at = {(0, 1), (0, 3)}  # two scattered failures on input 0, each after progress

    async def fn(x, resume=None):
        calls.append((x, resume))
        for page in range(resume["page"] if resume else 0, 5):
            if (x, page) in fail_at:
                fail_at.discard((x, page))
                raise ConnectionError(f"page {page}")
            yield {"x": x, "page": page}
            yield shardwright.ResumePoint({"page": page + 1})

    worker = Worker(fn, 2, memory(), max_retries=1)
    run(worker, task_of(2))
    assert outputs(worker) == [repr({"x": x, "page": p}).encode() for x in range(2) for p in range(5)]
    assert calls == [(0, None), (1, None), (0, {"page": 1}), (0, {"page": 3})]


def test_an_input_that_keeps_failing_is_skipped_with_its_attempts():
    async def fn(x):
        if x == 2:
            raise ValueError("bad input")
        return x

    worker = Worker(fn, 3, memory(), max_retries=2, on_error="skip")
    writer = run(worker, task_of(5))
    assert outputs(worker) == [repr(x).encode() for x in (0, 1, 3, 4)]
    assert worker.failures == [(2, 3)]
    assert any(chunk.failed == ((2, 0),) for chunk in worker.committer.chunks)
    assert writer.failed == []


def test_on_error_raise_keeps_the_inputs_before_the_failure():
    async def fn(x):
        if x == 6:
            raise ValueError("boom")
        await asyncio.sleep(0.001)
        return x

    worker = Worker(fn, 2, memory())
    task = task_of(10)
    writer = ShardWriter(task, worker.cfg, worker.committer)  # type: ignore[arg-type]
    with pytest.raises(FnFailed):
        InflightRunner(worker).run_shard(task, writer)
    # the full chunk is committed; the one in progress is not cut short but kept as a pending tail
    assert outputs(worker) == [repr(x).encode() for x in range(5)]
    tail = worker.committer.snapshots[-1]
    assert (tail.seq, tail.committed, tail.buffer.position, tail.buffer.items) == (1, (5, 0), (6, 0), [b"5"])
    assert worker.current_inputs == [6]


def test_resume_point_from_a_fn_without_resume_is_a_clear_error():
    async def fn(x):
        yield shardwright.ResumePoint({"page": 1})

    worker = Worker(fn, 1, memory())
    with pytest.raises(shardwright.UsageError, match="does not accept resume="):
        run(worker, task_of(1))


def test_a_stop_snapshots_the_inputs_in_flight_and_a_resume_repeats_no_page():
    calls: list[tuple[int, int]] = []

    async def fn(x, resume=None):
        for page in range(resume["page"] if resume else 0, 3):
            calls.append((x, page))
            await asyncio.sleep(0.001 * (1 + x % 3))
            yield {"x": x, "page": page}
            yield shardwright.ResumePoint({"page": page + 1})

    storage = memory()
    first = Worker(fn, 4, storage, stop_after=3)
    task = task_of(10)
    writer = ShardWriter(task, first.cfg, first.committer)  # type: ignore[arg-type]
    with pytest.raises(StopRequested):
        InflightRunner(first).run_shard(task, writer)
    committed = first.committer.chunks[-1]
    snapshot = first.committer.snapshots[-1]
    tip = (committed.next_input, committed.skip_outputs)
    assert snapshot.seq == len(first.committer.chunks) and snapshot.committed == tip

    # the resume: a task at the chain's tip, as load_progress would build it
    start = committed.next_input
    resumed_task = task_of(
        10,
        next_input=start,
        skip_outputs=committed.skip_outputs,
        next_seq=len(first.committer.chunks),
        inputs=list(range(start, 10)),
        prev_epoch=0,
    )
    second = Worker(fn, 4, storage)
    second.committer.chunks = list(first.committer.chunks)
    run(second, resumed_task)
    assert outputs(second) == [repr({"x": x, "page": p}).encode() for x in range(10) for p in range(3)]
    assert len(calls) == len(set(calls)) == 30  # not one page asked for twice


def test_snapshot_round_trip_and_matching():
    storage = memory()
    snapshot = ProgressSnapshot(
        run_id="r",
        shard=2,
        seq=3,
        tip_epoch=7,
        committed=(10, 0),
        epoch=7,
        buffer=BufferState(10, (12, 0), [[11, 0]], [b"a", b""]),
        slots=[SlotState(13, 0, [b"xyz"], '{"page":1}', 1, False), SlotState(14, 0, [], None, 0, True, True)],
    )
    data = encode_snapshot(snapshot)
    assert decode_snapshot(data) == snapshot
    write_snapshot(storage, snapshot)
    assert read_snapshot(storage, "r", 2, 3, 7, (10, 0)) == snapshot
    assert read_snapshot(storage, "r", 2, 4, 7, (10, 0)) is None  # a later record: stale
    assert read_snapshot(storage, "other", 2, 3, 7, (10, 0)) is None
    for damaged in (b"\0" * len(data), data[:-1], data[:20], b"garbage"):
        with pytest.raises(ValueError):
            decode_snapshot(damaged)


def test_a_plain_workers_tail_stopped_inside_a_generator_is_taken_up_in_flight():
    """A pending tail (engine.shard_writer) may end inside a generator's outputs (input 3, two
    of its four outputs kept); a resume with ``concurrency`` reopens it and calls fn on input 3
    again skipping those two, and on no input before it."""
    calls: list[int] = []

    async def fn(x):
        calls.append(x)
        for page in range(4):
            await asyncio.sleep(0)
            yield {"x": x, "page": page}

    def item(x: int, page: int) -> bytes:
        return repr({"x": x, "page": page}).encode()

    storage = memory()
    kept = [item(x, p) for x in range(3) for p in range(4)][5:] + [item(3, 0), item(3, 1)]  # after the chunk of 5
    write_snapshot(
        storage,
        ProgressSnapshot("run-1", 0, 1, 0, (1, 1), 0, BufferState(1, (3, 2), [], kept)),
    )
    worker = Worker(fn, 3, storage)
    run(worker, task_of(6, next_input=1, skip_outputs=1, next_seq=1, inputs=list(range(1, 6)), prev_epoch=0))
    assert outputs(worker) == [item(x, p) for x in range(6) for p in range(4)][5:]
    assert sorted(calls) == [3, 4, 5]


class Throttled(Exception):
    """Carries an HTTP 429 and a Retry-After header, as openai's and httpx's errors do."""

    status_code = 429

    def __init__(self) -> None:
        super().__init__("slow down")
        self.headers = {"Retry-After": "0.2"}


def test_transient_failures_are_retried_after_retry_after_and_a_user_error_is_not():
    seen: dict[int, list[float]] = {0: [], 1: []}

    async def fn(x):
        seen[x].append(time.monotonic())
        if x == 0 and len(seen[0]) < 3:
            raise Throttled()
        if x == 1:
            raise ValueError("malformed request")
        return x

    worker = Worker(fn, 2, memory(), on_error="skip")
    worker.cfg = replace(
        worker.cfg, inflight=replace(worker.cfg.inflight, retries=RetryPolicy(base_delay=0.0, max_delay=0.0))
    )
    run(worker, task_of(2))
    assert outputs(worker) == [repr(0).encode()]
    # Retry-After 0.2 s is the floor of each wait (asyncio may wake a timer up to its clock's
    # resolution early, hence the small allowance)
    assert len(seen[0]) == 3 and all(b - a >= 0.19 for a, b in zip(seen[0], seen[0][1:], strict=False))
    assert len(seen[1]) == 1  # not transient, max_retries=0: not retried
    assert worker.failures == [(1, 1)]


def test_a_worker_takes_further_shards_while_it_has_room():
    import queue

    seen_together: list[int] = []
    now = {"shards": set()}

    async def fn(x):
        now["shards"].add(x // 3)
        seen_together.append(len(now["shards"]))
        await asyncio.sleep(0.002)
        return x

    worker = Worker(fn, 8, memory())
    tasks = [
        task_of(12, shard=s, start=3 * s, end=3 * s + 3, next_input=3 * s, inputs=list(range(3 * s, 3 * s + 3)))
        for s in range(4)
    ]
    pool: queue.Queue = queue.Queue()
    for task in tasks[1:]:
        pool.put(task)
    pool.put(None)
    writers: dict[int, ShardWriter] = {}

    def new_writer(task: ShardTask) -> ShardWriter:
        writers[task.shard] = ShardWriter(task, worker.cfg, worker.committer)  # type: ignore[arg-type]
        return writers[task.shard]

    assert InflightRunner(worker).run_tasks(tasks[0], pool, new_writer) is True  # the pool's end was taken
    assert max(seen_together) >= 2  # shards in flight together: 3 inputs each would leave 5 of 8 slots idle
    done = [c for c in worker.committer.chunks if c.done]
    assert sorted(c.shard for c in done) == [0, 1, 2, 3]
    for shard in range(4):
        items = [i for c in worker.committer.chunks if c.shard == shard for i in c.items]
        assert items == [repr(x).encode() for x in range(3 * shard, 3 * shard + 3)]


def test_stop_requested_asks_the_worker_running_in_this_process():
    import shardwright
    from shardwright.engine.stops import watch_stops

    assert shardwright.stop_requested() is False  # outside a worker
    asked = {"stop": False}
    watch_stops(lambda: asked["stop"])
    try:
        assert shardwright.stop_requested() is False
        asked["stop"] = True
        assert shardwright.stop_requested() is True
    finally:
        watch_stops(None)
    assert shardwright.stop_requested() is False


def test_a_worker_takes_more_shards_only_within_its_even_share_of_inputs():
    from types import SimpleNamespace

    from shardwright.engine.inflight import InflightRunner

    runner = object.__new__(InflightRunner)
    held = [
        SimpleNamespace(task=SimpleNamespace(end=10), head=4),
        SimpleNamespace(task=SimpleNamespace(end=20), head=18),
    ]
    runner.cfg = SimpleNamespace(fair_share=8)  # 6 + 2 inputs held: the share is used up
    assert not runner.holds_less_than_its_share(held)
    runner.cfg = SimpleNamespace(fair_share=9)
    assert runner.holds_less_than_its_share(held)
    runner.cfg = SimpleNamespace(fair_share=None)  # no share known: as many as concurrency allows
    assert runner.holds_less_than_its_share(held)
