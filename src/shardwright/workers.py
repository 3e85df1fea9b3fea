"""Worker processes: apply ``fn`` to the inputs of whole shards and commit chunks as they fill.

A worker takes one shard at a time from the task queue, resumes it where its records say,
and hands each full chunk to a background committer thread, which writes the chunk file
and then its record (the order of the commit protocol, see checkpoint.py) while the worker
keeps computing. What waits for the committer is bounded in bytes and chunks, so memory is too.

Workers never decide anything about the run: they report progress, commits, failures and
their exit to the main process, which owns the progress bar, errors and publishing.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import queue
import signal
import socket
import threading
import time
import traceback
import types
from dataclasses import dataclass

from . import checkpoint
from .checkpoint import CommitRecord
from .errors import ShardwrightError
from .format import ChunkEntry, ItemEncoder, build_chunk, chunk_filename, compress
from .token_format import TokenEncoder
from .planning import short_repr
from .storage import Storage, open_storage

PROGRESS_INTERVAL = 0.2  # seconds between progress messages (the bar refreshes every second)
# What may wait for the committer per worker: bounds memory, while small chunks still batch
# into large commit rounds (one barrier per round).
PENDING_BYTES_LIMIT = 64 * 1024 * 1024
PENDING_CHUNKS_LIMIT = 256
ROUND_LIMIT_ENV = "SHARDWRIGHT_COMMIT_ROUND"  # most chunks per commit round (tests: 1 record file per chunk)


@dataclass(frozen=True)
class WorkerConfig:
    output_dir: str
    storage_options: dict | None
    generation: int
    chunk_size: int | None
    chunk_bytes: int | None
    compression: str | None
    use_checkpoint: bool
    on_error: str  # "raise" or "skip"
    max_retries: int
    node_rank: int
    run_id: str
    tokens: bool = False  # item_loader=TokensLoader(): raw token items, chunk entries with dim


@dataclass(frozen=True)
class ShardTask:
    shard: int
    start: int
    end: int
    next_input: int
    skip_outputs: int
    next_seq: int
    inputs: list  # the input values from next_input to end (only those still to do)
    ids: list | None = None  # run-wide input ids of those values when they are not next_input.. (a retry)
    base_skips: list | None = None  # a retry: outputs of each input committed by the run that failed it

    def input_id(self, position: int) -> int:
        return self.ids[position - self.next_input] if self.ids is not None else position

    def first_skip(self, position: int) -> int:
        """Outputs of this input already committed, which fn's rerun must not add again."""
        resumed = self.skip_outputs if position == self.next_input else 0
        base = self.base_skips[position - self.next_input] if self.base_skips is not None else 0
        return max(resumed, base)


def _die_with_parent() -> None:
    """A SIGKILLed main process must not leave workers writing on (litdata's orphans)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class ChunkCommitter:
    """Writes chunks then their records, in order, on a thread of its own (group commit).

    Each round takes every job waiting in the queue and does, for the whole batch:
    1. write the chunk files (not yet durable);
    2. ``storage.barrier()``: the chunks, and the records of earlier rounds, become durable;
    3. write the records (made durable by the next round's barrier, or by close()).
    So a durable record never names a chunk that is not durable, and one barrier serves a
    whole batch instead of an fsync per file (2,000 small chunks: seconds saved). After a
    power cut only records of the last round can be torn; load_progress drops a torn record
    and every later one of its shard, which only means redoing those chunks.
    """

    def __init__(self, storage: Storage, cfg: WorkerConfig, report, token_itemsize=None):
        self.storage = storage
        self.cfg = cfg
        self.report = report
        self.token_itemsize = token_itemsize  # token datasets: bytes per token, once known
        self.error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue()
        self._room = threading.Condition()
        self._pending_bytes = 0
        self._pending_chunks = 0
        self._round_limit = int(os.environ.get(ROUND_LIMIT_ENV, PENDING_CHUNKS_LIMIT))
        self._thread = threading.Thread(target=self._run, name="chunk-committer", daemon=True)
        self._thread.start()

    def submit(self, shard: int, seq: int, items: list[bytes], first_input: int, next_input: int,
               skip_outputs: int, done: bool, failed: tuple) -> None:
        self.raise_if_failed()
        size = sum(len(x) for x in items)
        with self._room:  # backpressure; one chunk may always wait, however large
            self._room.wait_for(lambda: self._pending_chunks == 0 or (
                self._pending_bytes + size <= PENDING_BYTES_LIMIT and self._pending_chunks < PENDING_CHUNKS_LIMIT))
            self._pending_bytes += size
            self._pending_chunks += 1
        self._queue.put((shard, seq, items, first_input, next_input, skip_outputs, done, failed))

    def raise_if_failed(self) -> None:
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self.raise_if_failed()

    def _run(self) -> None:
        closing = False
        while not closing:
            batch = [self._queue.get()]
            while batch[-1] is not None and len(batch) < self._round_limit:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if batch[-1] is None:
                closing, batch = True, batch[:-1]
            try:
                if self.error is None:
                    self._commit_batch(batch)
                if closing and self.error is None:
                    self.storage.barrier()  # the last round's records, durable before we report done
            except BaseException as exc:  # reported through raise_if_failed; nothing after it commits
                self.error = exc
            finally:
                with self._room:
                    self._pending_chunks -= len(batch)
                    self._pending_bytes -= sum(len(x) for job in batch for x in job[2])
                    self._room.notify_all()

    def _commit_batch(self, batch: list[tuple]) -> None:
        records = []
        for shard, seq, items, first_input, next_input, skip_outputs, done, failed in batch:
            entry, stored = None, 0
            if items:
                raw = build_chunk(items)
                name = chunk_filename(self.cfg.generation, shard, seq, self.cfg.compression)
                data = compress(raw, self.cfg.compression)
                self.storage.write_bytes(name, data, durable=False)  # protocol step 1: chunk first
                dim = sum(len(x) for x in items) // self.token_itemsize() if self.cfg.tokens else None
                entry = ChunkEntry(filename=name, chunk_size=len(items), chunk_bytes=len(raw), dim=dim)
                stored = len(data)
            records.append(CommitRecord(shard, seq, entry, stored, first_input, next_input, skip_outputs, done, failed,
                                        self.cfg.run_id))
        if not records:
            return
        self.storage.barrier()
        checkpoint.crash_point("after_chunk")
        if self.cfg.use_checkpoint:
            checkpoint.write_records(self.storage, records)  # protocol step 2: the commit point
        for record in records:
            self.report(("commit", record.to_json()))


class FormatGate:
    """Encodes samples; the first sample anywhere in the run fixes the format (format.json)."""

    def __init__(self, storage: Storage, run_id: str, tokens: bool = False):
        self.storage = storage
        self.run_id = run_id
        self.encoder_class = TokenEncoder if tokens else ItemEncoder
        self.encoder: ItemEncoder | TokenEncoder | None = None

    def encode(self, sample, input_index: int) -> bytes:
        if self.encoder is None:
            known = checkpoint.read_format(self.storage, self.run_id)
            if known is None:
                probe = self.encoder_class()
                data = probe.encode(sample, input_index)
                known = checkpoint.claim_format(self.storage, self.run_id, probe.data_format, probe.data_spec,
                                                input_index)
                if known["data_format"] == probe.data_format and known["data_spec"] == probe.data_spec:
                    self.encoder = probe
                    self.encoder.format_input_index = known["input_index"]
                    return data
            self.encoder = self.encoder_class(known["data_format"], known["data_spec"])
            self.encoder.format_input_index = known["input_index"]
        return self.encoder.encode(sample, input_index)


class ShardWriter:
    """Buffers one shard's encoded items and cuts them into chunks.

    ``position`` is where the shard would resume if everything added so far were committed:
    (next input, outputs of it already taken). It is what each commit record stores.
    """

    def __init__(self, task: ShardTask, cfg: WorkerConfig, committer: ChunkCommitter):
        self.task, self.cfg, self.committer = task, cfg, committer
        self.items: list[bytes] = []
        self.items_bytes = 0
        self.seq = task.next_seq
        self.position = (task.next_input, task.skip_outputs)
        self.committed = self.position
        self.first_input = task.next_input
        self.failed: list[list[int]] = []  # [run-wide id, outputs committed] skipped since the last commit

    def add(self, data: bytes, input_index: int, after: tuple[int, int]) -> None:
        if self.items and self.cfg.chunk_bytes and self.items_bytes + len(data) > self.cfg.chunk_bytes:
            self.commit()  # the chunk ends before this item, at the current position
        if not self.items:
            self.first_input = input_index
        self.items.append(data)
        self.items_bytes += len(data)
        self.position = after
        if self.cfg.chunk_size and len(self.items) >= self.cfg.chunk_size:
            self.commit()

    def commit(self, done: bool = False) -> None:
        if not self.items and not done and not self.failed:
            return
        next_input, skip = self.position
        self.committer.submit(self.task.shard, self.seq, self.items, self.first_input, next_input, skip, done,
                              tuple(self.failed))
        self.seq += 1
        self.committed = self.position
        self.items, self.items_bytes, self.failed = [], 0, []

    def mark(self) -> tuple[int, int, tuple[int, int]]:
        return self.seq, len(self.items), self.position

    def rollback(self, mark: tuple[int, int, tuple[int, int]]) -> None:
        """Forget what an input added since ``mark`` (fn failed on it, or is retried)."""
        seq, length, position = mark
        if seq == self.seq:
            del self.items[length:]
            self.position = position
        else:  # a chunk was committed inside this input: keep that, drop the rest
            self.items.clear()
            self.position = self.committed
        self.items_bytes = sum(len(x) for x in self.items)


class Worker:
    def __init__(self, wid: int, fn, cfg: WorkerConfig, result_q, stop_event, current_inputs):
        self.wid = wid
        self.fn = fn
        self.cfg = cfg
        self.result_q = result_q
        self.stop_event = stop_event
        self.current_inputs = current_inputs
        self.signalled = False
        self.storage = open_storage(cfg.output_dir, cfg.storage_options)
        self.gate = FormatGate(self.storage, cfg.run_id, cfg.tokens)
        self.committer = ChunkCommitter(self.storage, cfg, self.report, lambda: getattr(self.gate.encoder, "itemsize", None))
        self._pending_progress = 0
        self._last_progress = time.monotonic()
        self._parent = os.getppid()

    def report(self, message: tuple) -> None:
        self.result_q.put((message[0], self.wid) + tuple(message[1:]))

    def should_stop(self) -> bool:
        return self.signalled or self.stop_event.is_set() or os.getppid() != self._parent

    def tick(self) -> None:
        self._pending_progress += 1
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_INTERVAL:
            self.flush_progress()
            self._last_progress = now

    def flush_progress(self) -> None:
        if self._pending_progress:
            self.report(("progress", self._pending_progress))
            self._pending_progress = 0

    def run_shard(self, task: ShardTask) -> None:
        writer = ShardWriter(task, self.cfg, self.committer)
        try:
            for i in range(task.next_input, task.end):
                if self.should_stop():
                    raise _Stop
                self.current_inputs[self.wid] = task.input_id(i)
                self._process_input(writer, task.inputs[i - task.next_input], i, task.input_id(i), task.first_skip(i))
                self.tick()
            writer.position = (task.end, 0)
            writer.commit(done=True)
        except _Stop:
            writer.commit()  # keep what is done: the rerun resumes at writer.position
            raise

    def _process_input(self, writer: ShardWriter, value, i: int, input_id: int, skip: int) -> None:
        attempt = 0
        mark = writer.mark()
        while True:
            attempt += 1
            try:
                self._apply(writer, value, i, input_id, skip)
                writer.position = (i + 1, 0)
                return
            except (_Stop, ShardwrightError):
                raise
            except Exception as exc:  # fn's own failure
                writer.rollback(mark)
                # outputs of input i committed inside this attempt stay: the next attempt skips them
                skip = max(skip, writer.position[1] if writer.position[0] == i else 0)
                if attempt <= self.cfg.max_retries:
                    continue
                if self.cfg.on_error == "skip":
                    self._record_failure(input_id, value, exc, attempt)
                    writer.failed.append([input_id, skip])
                    writer.position = (i + 1, 0)
                    return
                writer.commit()  # what came before input i is good: keep it
                raise _FnFailed(exc, traceback.format_exc()) from exc

    def _apply(self, writer: ShardWriter, value, i: int, input_id: int, skip: int) -> None:
        result = self.fn(value)
        if isinstance(result, types.GeneratorType):
            for j, sample in enumerate(result):
                if j < skip:
                    continue  # committed by an earlier run
                writer.add(self.gate.encode(sample, input_id), input_id, after=(i, j + 1))
                if self.should_stop():
                    raise _Stop
        elif result is not None:
            writer.add(self.gate.encode(result, input_id), input_id, after=(i + 1, 0))

    def _record_failure(self, input_id: int, value, exc: BaseException, attempts: int) -> None:
        checkpoint.write_failure(self.storage, checkpoint.FailureRecord(
            input_index=input_id, input_repr=short_repr(value, 500), exception_type=type(exc).__name__,
            message=str(exc), traceback=traceback.format_exc(), host=socket.gethostname(), pid=os.getpid(),
            node=self.cfg.node_rank, attempts=attempts, generation=self.cfg.generation, time=time.time(),
        ))


class _Stop(Exception):
    """Raised inside a worker when the main process (or a signal) asks it to stop."""


class _FnFailed(Exception):
    def __init__(self, original: BaseException, tb: str):
        super().__init__(str(original))
        self.original = original
        self.tb = tb


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _picklable_exception(exc: BaseException) -> bytes | None:
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return None


def worker_main(wid: int, fn, cfg: WorkerConfig, task_q, result_q, stop_event, current_inputs) -> None:
    """Entry point of a worker process."""
    _die_with_parent()
    worker_ref: list[Worker] = []

    def on_signal(signum, frame):  # the main process decides; we just stop at the next input
        if worker_ref:
            worker_ref[0].signalled = True

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal Ctrl-C reaches the whole group
    signal.signal(signal.SIGTERM, on_signal)
    try:
        worker = Worker(wid, fn, cfg, result_q, stop_event, current_inputs)
    except BaseException as exc:
        result_q.put(("error", wid, "setup", _describe(exc), -1, "", traceback.format_exc(), _picklable_exception(exc)))
        result_q.put(("exit", wid, False))
        return
    worker_ref.append(worker)
    stopped = False
    try:
        while True:
            task = task_q.get()
            if task is None:
                break
            worker.report(("start", task.shard))
            worker.run_shard(task)
            worker.flush_progress()
            worker.report(("shard_done", task.shard))
        worker.committer.close()
    except _Stop:
        stopped = True
        _close_quietly(worker, wid, result_q)
    except _FnFailed as failure:
        # report first, so the main process stops the other workers now, not after our commits
        i = worker.current_inputs[wid]
        result_q.put(("error", wid, "fn", _describe(failure.original), i, "", failure.tb,
                      _picklable_exception(failure.original)))
        _close_quietly(worker, wid, result_q)
    except BaseException as exc:
        _close_quietly(worker, wid, result_q)
        kind = "shardwright" if isinstance(exc, ShardwrightError) else "internal"
        result_q.put(("error", wid, kind, _describe(exc), worker.current_inputs[wid], "",
                      traceback.format_exc(), _picklable_exception(exc)))
    worker.flush_progress()
    result_q.put(("exit", wid, stopped))


def _close_quietly(worker: Worker, wid: int, result_q) -> None:
    """Wait for queued commits; a commit failure is reported (it is the root cause)."""
    try:
        worker.committer.close()
    except BaseException as exc:
        result_q.put(("error", wid, "storage", _describe(exc), worker.current_inputs[wid], "",
                      traceback.format_exc(), _picklable_exception(exc)))


# --- the pool, as seen from the main process ---------------------------------------------------

STOP_GRACE_SECONDS = float(os.environ.get("SHARDWRIGHT_STOP_GRACE", "5"))
DEATH_GRACE_SECONDS = 1.0  # a worker's last messages may still be in the pipe when it exits


@dataclass
class PoolOutcome:
    interrupted_by: int | None = None  # signal number
    aborted: str | None = None  # on_idle() asked to stop at once (the node's lease was taken over)
    error: tuple | None = None  # the first ("error", wid, kind, message, input, repr, tb, pickled)
    dead_worker: tuple | None = None  # (wid, pid, exitcode, input index)


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (what the OOM killer sends)" if exitcode == -signal.SIGKILL else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {exitcode} without reporting (os._exit or a crash in native code)"


class WorkerPool:
    """Runs shard tasks on worker processes and watches them until each has exited."""

    def __init__(self, fn, cfg: WorkerConfig, num_workers: int, start_method: str):
        self.fn, self.cfg, self.num_workers, self.start_method = fn, cfg, num_workers, start_method

    def run(self, tasks: list[ShardTask], on_message, on_idle) -> PoolOutcome:
        import multiprocessing as mp

        ctx = mp.get_context(self.start_method)
        task_q, result_q = ctx.Queue(), ctx.Queue()
        stop_event = ctx.Event()
        current = ctx.Array("q", [-1] * self.num_workers, lock=False)
        procs = [
            ctx.Process(target=worker_main, name=f"shardwright-worker-{wid}", daemon=True,
                        args=(wid, self.fn, self.cfg, task_q, result_q, stop_event, current))
            for wid in range(self.num_workers)
        ]
        for proc in procs:
            proc.start()
        for task in tasks:
            task_q.put(task)
        for _ in procs:
            task_q.put(None)

        outcome = PoolOutcome()
        exited = [False] * len(procs)
        found_dead_at: dict[int, float] = {}
        stop_deadline: float | None = None
        signals_seen: list[int] = []
        last_check = time.monotonic()

        def on_signal(signum, frame):
            signals_seen.append(signum)

        previous = _install_handlers(on_signal)
        try:
            while not all(exited):
                try:
                    message = result_q.get(timeout=0.1)
                except queue.Empty:
                    message = None
                if message is not None:
                    kind, wid = message[0], message[1]
                    if kind == "exit":
                        exited[wid] = True
                    elif kind == "error":
                        if outcome.error is None and outcome.dead_worker is None:
                            outcome.error = message
                        stop_event.set()
                    else:
                        on_message(message)
                now = time.monotonic()
                if message is not None and now - last_check < 0.1 and not signals_seen:
                    continue  # busy: drain messages, but still check on workers ten times a second
                last_check = now
                abort = on_idle()
                if abort:  # another process owns these shards now: commit nothing more
                    outcome.aborted = abort
                    _kill_all(procs)
                    break
                if signals_seen and outcome.interrupted_by is None:
                    outcome.interrupted_by = signals_seen[0]
                    stop_event.set()
                if len(signals_seen) >= 2:  # second Ctrl-C: abort now; commits already made stay
                    _kill_all(procs)
                    break
                for wid, proc in enumerate(procs):
                    if exited[wid] or proc.is_alive():
                        continue
                    first_seen = found_dead_at.setdefault(wid, now)
                    if now - first_seen >= DEATH_GRACE_SECONDS:
                        exited[wid] = True
                        if outcome.dead_worker is None and outcome.interrupted_by is None:
                            outcome.dead_worker = (wid, proc.pid, proc.exitcode, current[wid])
                        stop_event.set()
                if stop_event.is_set() and stop_deadline is None:
                    stop_deadline = now + STOP_GRACE_SECONDS
                if stop_deadline is not None and now > stop_deadline:
                    _kill_all(procs)  # fn is stuck; committed chunks are safe
                    break
        finally:
            _restore_handlers(previous)
            for proc in procs:
                proc.join(timeout=2)
            _kill_all(procs)
            for q in (task_q, result_q):
                q.cancel_join_thread()
                q.close()
        return outcome


def _kill_all(procs) -> None:
    for proc in procs:
        if proc.is_alive():
            proc.kill()
    for proc in procs:
        proc.join(timeout=5)


def _install_handlers(handler):
    if threading.current_thread() is not threading.main_thread():
        return None
    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_handlers(previous) -> None:
    if previous:
        for sig, old in previous.items():
            signal.signal(sig, old)
