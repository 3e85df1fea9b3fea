"""Worker processes: apply ``fn`` to the inputs of whole shards and commit chunks as they fill.

A worker takes one shard at a time from the task queue, resumes it where its records say,
and hands each full chunk to its committer thread (committer.py), which commits it in the
protocol's order while the worker keeps computing.

Workers never decide anything about the run: they send typed messages (messages.py) about
progress, commits, failures and their exit to the main process, which owns the progress
bar, errors and publishing.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
import traceback
import types

from .. import telemetry
from ..errors import ShardwrightError, UsageError, bounded_text, short_repr
from ..process import die_with_parent, host_identity, reuse_freed_memory
from ..protocol.failures import FailureRecord, write_failure
from ..protocol.progress import read_snapshot
from ..protocol.records import CommitRecord
from ..secrets import redact, redact_exception, redact_url_credentials, secret_values
from ..sources import BadRow
from ..storage import open_storage
from .committer import ChunkCommitter
from .failed_dir import FailedDir
from .guards import explain_fn_error
from .inflight import NOT_RESUMABLE, InflightRunner
from .messages import Committed, InFlight, Progress, WorkerExited, WorkerFailed
from .resume import ResumePoint
from .shard_writer import FormatGate, ShardWriter
from .stops import FnFailed as _FnFailed
from .stops import InputTimeout
from .stops import StopRequested as _Stop
from .tasks import ShardTask, WorkerConfig

PROGRESS_INTERVAL = 0.2  # seconds between progress messages (the bar refreshes every second)
# Seconds between looks at the pool's stop event and the parent's pid. Event.is_set() takes
# the event's locks: checked before every input it was ~15 % of a small item's cost in the
# worker (issue 19's profile). The event is asynchronous anyway (another worker failed, or
# Ctrl-C), so seeing it up to this much later only delays a stop that was already racing
# with the inputs in flight; fencing, not this check, keeps a deposed run from committing.
STOP_CHECK_INTERVAL = 0.02
# The hot loop hands its encoded items to the shard's writer at least this often (and every
# STOP_CHECK_INTERVAL): a chunk is cut no later than this many bytes past its limit.
FLUSH_BYTES = 1 << 20
# A worker's committer threads spend their rounds in system calls (writes, fsyncs, the claim
# checks), each followed by taking the GIL back from the thread running fn. CPython makes a
# waiting thread wait a whole switch interval (5 ms by default) before it asks the running one
# to let go, so a round of a few dozen calls fell behind the hot loop, and the worker waited
# for that backlog at its end (issue 19: +1.4-2.0 ms a worker with checkpoints on 200k small
# dicts; +0.0-0.4 ms at 1 ms). Only in our worker processes, never the user's main process.
WORKER_SWITCH_INTERVAL = 0.001
MAX_STORED_TEXT = 16_000  # characters of an error message or traceback kept in records and errors


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
        self.committer = ChunkCommitter(self.storage, cfg.round, self._on_commit)
        self.gate = FormatGate(self.storage, cfg.round.run_id, cfg.tokens)
        self._pending_progress = 0
        self._last_progress = time.monotonic()
        self._parent = os.getppid()
        self._stop_seen = False
        self._next_stop_check = 0.0  # monotonic time of the next look at stop_event and the parent
        self.secrets = secret_values(cfg.storage_options)  # kept out of failure records
        self.failed_dir = (
            FailedDir(cfg.failed_dir, cfg.storage_options, cfg.output_dir, cfg.round.run_id) if cfg.failed_dir else None
        )
        self.inflight = InflightRunner(self) if cfg.inflight.in_flight else None
        # The hot loop's clock: a thread sets look[0] every STOP_CHECK_INTERVAL, so the loop
        # reads a list item per input instead of calling time.monotonic() (~55 ns of a small
        # item's ~450 ns of loop, issue 36). A daemon: it ends with the worker process.
        self.look = [True]
        threading.Thread(target=_tick, args=(self.look,), name="shardwright-tick", daemon=True).start()

    def _on_commit(self, record: CommitRecord, file_key: str) -> None:
        self.result_q.put(Committed(self.wid, record, file_key))

    def should_stop(self) -> bool:
        """A signal, the pool's stop event or the parent's death; the last two are looked at
        every STOP_CHECK_INTERVAL seconds, and once seen the answer stays True."""
        if self.signalled or self._stop_seen:
            return True
        now = time.monotonic()
        if now < self._next_stop_check:
            return False
        self._next_stop_check = now + STOP_CHECK_INTERVAL
        self._stop_seen = self.stop_event.is_set() or os.getppid() != self._parent
        return self._stop_seen

    def tick(self) -> None:
        self._pending_progress += 1
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_INTERVAL:
            self.flush_progress()
            self._last_progress = now

    def flush_progress(self) -> None:
        if self._pending_progress:
            self.result_q.put(Progress(self.wid, self._pending_progress))
            self._pending_progress = 0

    def new_writer(self, task: ShardTask) -> ShardWriter:
        return ShardWriter(task, self.cfg, self.committer, lambda: getattr(self.gate.encoder, "itemsize", None))

    def run_shard(self, task: ShardTask) -> None:
        writer = self.new_writer(task)
        start, skip = self._take_up_tail(task, writer)
        try:
            i = start
            if task.ids is None and task.base_skips is None and self.cfg.timeout is None and not self.cfg.retry_run:
                if skip:  # a resumed generator: its first input takes the general path
                    self.current_inputs[self.wid] = i  # a failure names it (it read "input -1 (?)")
                    self._process_input(writer, task.inputs[i - task.next_input], i, i, skip)
                    self.tick()
                    i += 1
                self._run_plain(writer, task, i)
            else:
                for i in range(start, task.end):
                    if self.should_stop():
                        raise _Stop
                    self.current_inputs[self.wid] = task.input_id(i)
                    value = task.inputs[i - task.next_input]
                    first_skip = max(task.first_skip(i), skip if i == start else 0)
                    self._process_input(writer, value, i, task.input_id(i), first_skip)
                    self.tick()
            writer.position = (task.end, 0)
            writer.commit(done=True)
        except _Stop:
            writer.stop()  # keep what is done, as a pending tail: the rerun resumes at writer.position
            raise

    def _take_up_tail(self, task: ShardTask, writer: ShardWriter) -> tuple[int, int]:
        """Where the shard's inputs resume, (input, its outputs kept): after the pending tail
        a stopped writer left in the snapshot that extends the shard's chain tip (its items
        reopen the chunk in progress, see shard_writer), or after the records alone. A
        snapshot with inputs in flight (a run with ``concurrency``) is left to that machinery:
        its work is redone here, which is always correct."""
        committed = (task.next_input, task.skip_outputs)
        resume = (task.next_input, task.first_skip(task.next_input))
        if not self.cfg.round.use_checkpoint or task.fresh:
            return resume
        snapshot = read_snapshot(
            self.storage, self.cfg.round.run_id, task.shard, task.next_seq, task.prev_epoch, committed
        )
        if snapshot is None or snapshot.slots or not committed <= snapshot.buffer.position <= (task.end, 0):
            return resume
        writer.take_up(snapshot.buffer)
        head, kept = snapshot.buffer.position
        self._pending_progress += head - task.next_input  # their outputs are in the tail: done
        return head, (max(kept, task.first_skip(head)) if head < task.end else 0)

    def _run_plain(self, writer: ShardWriter, task: ShardTask, start: int) -> None:
        """The hot loop over inputs ``start..task.end`` of a task whose input ids are their
        positions, with nothing to skip and no timeout.

        fn's first call and the encoding of the one sample it returns are inline, and the
        items gather in ``batch`` and go to the writer together (ShardWriter.add_run) every
        STOP_CHECK_INTERVAL seconds or FLUSH_BYTES. Anything else (fn raised, returned a
        generator or None, a source's bad row) flushes the batch and goes to
        :meth:`_process_input` with fn's first outcome, so fn is never called more often
        than the retries allow; a sample that cannot be encoded flushes the inputs before it.
        Stops and progress are looked at every STOP_CHECK_INTERVAL seconds, as in the
        general loop; the current input is stored for every input.

        Each sample is encoded as it comes (a sample fn mutates later is written as it was).
        When every item has one size (a format of int/float/bool leaves), a flush hands the
        writer the batch joined into one block (ShardWriter.add_block, format/packed.py):
        no per-item sizes summed, cut or put in the chunk's header (issue 36)."""
        fn, inputs, base, current, wid = self.fn, task.inputs, task.next_input, self.current_inputs, self.wid
        monotonic, generator = time.monotonic, types.GeneratorType
        rows = type(inputs) not in (list, range)  # a source's rows (a plain sequence's values: a list or range)
        encode, flat = self.gate.encode, None
        gated = True  # encode is the format gate's: the format may be fixed by the next sample
        batch: list[bytes] = []
        append = batch.append
        first = start  # the input whose sample is batch[0]
        batch_bytes = 0
        look = self.look
        look[0] = True  # the first input looks at once
        i = counted = start  # inputs start..counted-1 are in self._pending_progress

        itemsize: int | None = None  # every item's size when the format's leaves are all of fixed size
        mixed = False  # the batch has items the compiled encoder did not make (their sizes are checked)
        flush_items = 0  # itemsize: the batch goes to the writer at this many items (FLUSH_BYTES)
        flush_at = -1  # itemsize: the input whose item fills the batch

        def flush(upto: int) -> None:
            nonlocal first, batch_bytes, mixed, flush_at
            if batch:
                if itemsize is not None and (not mixed or all(len(item) == itemsize for item in batch)):
                    writer.add_block(b"".join(batch), itemsize, first)  # one block: format/packed.py
                else:
                    writer.add_run(batch, first)
                batch.clear()
            first, batch_bytes, mixed = upto, 0, False
            flush_at = upto + flush_items - 1

        def fixed(encoder) -> None:
            """The format is known: items of a fixed-size format go to the writer as blocks."""
            nonlocal itemsize, flush_items, flush_at
            itemsize = getattr(encoder, "fixed_size", None)
            if itemsize is not None:
                flush_items = max(1, FLUSH_BYTES // itemsize)
                flush_at = first + flush_items - 1

        try:
            for i in range(start, task.end):
                # One store into shared memory (~25 ns): a worker that dies inside fn
                # (os._exit, a native crash) is reported at the input it died on.
                current[wid] = i
                if look[0]:
                    look[0] = False
                    now = monotonic()
                    flush(i)
                    self._pending_progress += i - counted
                    counted = i
                    if now - self._last_progress >= PROGRESS_INTERVAL:
                        self.flush_progress()
                        self._last_progress = now
                    if self.should_stop():
                        raise _Stop
                    if gated and self.gate.encoder is not None:  # the format is known: skip the gate's call
                        encode, flat, gated = self.gate.encoder.encode, self.gate.encoder.flat, False
                        fixed(self.gate.encoder)
                value = inputs[i - base]
                if rows and isinstance(value, BadRow):
                    flush(i + 1)
                    self._process_input(writer, value, i, i, 0)
                    continue
                try:
                    result = fn(value)
                except (Exception, SystemExit) as exc:
                    flush(i + 1)
                    self._process_input(writer, value, i, i, 0, first=_Raised(exc))
                    continue
                if flat is not None and (data := flat(result)) is not None:
                    append(data)  # the commonest sample (flat.py): checked and encoded at once
                    if itemsize is not None:
                        if i >= flush_at:
                            flush(i + 1)
                        continue
                    batch_bytes += len(data)
                    if batch_bytes >= FLUSH_BYTES:
                        flush(i + 1)
                    continue
                if result is None or type(result) is generator:  # (the compiled encoder takes neither)
                    flush(i + 1)
                    self._process_input(writer, value, i, i, 0, first=_Returned(result))
                    continue
                mixed = True
                try:
                    data = encode(result, i)
                except BaseException:  # e.g. the sample's structure differs: keep the inputs before it
                    flush(i)
                    if isinstance(result, (types.CoroutineType, types.AsyncGeneratorType)):
                        _refuse_async(result)
                    raise
                if gated and self.gate.encoder is not None:
                    # The first sample fixed the format just now: take its compiled
                    # encoder from the next input on, not from the next look 20 ms later
                    # (a worker's first shard ran most of its items through the gate:
                    # ~1 us an item instead of ~0.3, issue 36's profile). Once: samples
                    # of a format with no compiled encoder pay no lookup each.
                    encode, flat, gated = self.gate.encoder.encode, self.gate.encoder.flat, False
                    fixed(self.gate.encoder)
                append(data)
                batch_bytes += len(data)
                if batch_bytes >= FLUSH_BYTES or (itemsize is not None and i >= flush_at):
                    flush(i + 1)
            flush(task.end)
            i = task.end
        except BaseException:
            current[wid] = i  # the input a failure names (worker_main reports it)
            raise
        finally:
            self._pending_progress += i - counted

    def _process_input(self, writer: ShardWriter, value, i: int, input_id: int, skip: int, first=None) -> None:
        """One input, with retries. ``first``: fn's outcome on this input when the hot loop
        already called it (its return value, or _Raised); None: fn is called here."""
        attempt = 0
        mark = writer.mark()
        apply = self._apply_fn if self.cfg.timeout is None else self._apply  # one call less per input
        while True:
            attempt += 1
            try:
                if first is None:
                    apply(writer, value, i, input_id, skip)
                else:
                    outcome, first = first, None
                    if type(outcome) is _Raised:
                        raise outcome.exc
                    self._add_outputs(writer, outcome.value, i, input_id, skip)
                writer.position = (i + 1, 0)
                self.resolved(input_id, attempt)
                return
            except (_Stop, ShardwrightError):
                raise
            except (Exception, SystemExit) as exc:  # fn's own failure (sys.exit() in fn too)
                writer.rollback(mark)
                # outputs of input i committed inside this attempt stay: the next attempt skips them
                skip = max(skip, writer.position[1] if writer.position[0] == i else 0)
                if attempt <= self.cfg.max_retries:
                    telemetry.get().retry("fn")
                    continue
                if self.cfg.on_error == "skip":
                    self._record_failure(input_id, value, exc, attempt)
                    writer.failed.append([input_id, skip])
                    writer.position = (i + 1, 0)
                    return
                writer.stop()  # what came before input i is good: keep it (a pending tail)
                raise _FnFailed(exc, traceback.format_exc()) from exc

    def _apply(self, writer: ShardWriter, value, i: int, input_id: int, skip: int) -> None:
        if self.cfg.timeout is None:
            self._apply_fn(writer, value, i, input_id, skip)
            return

        def expired(signum, frame):  # runs in this (the main) thread, inside fn
            raise InputTimeout(
                f"fn did not finish input {input_id:,} ({short_repr(value)}) within timeout={self.cfg.timeout:g} s"
            )

        previous = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, self.cfg.timeout)
        try:
            self._apply_fn(writer, value, i, input_id, skip)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def _apply_fn(self, writer: ShardWriter, value, i: int, input_id: int, skip: int) -> None:
        if isinstance(value, BadRow):  # a source's row that could not be read (file:line)
            if value.blank:
                return  # a blank JSONL line: no input, no failure
            raise value.error(skipping=self.cfg.on_error == "skip")
        self._add_outputs(writer, self.fn(value), i, input_id, skip)

    def _add_outputs(self, writer: ShardWriter, result, i: int, input_id: int, skip: int) -> None:
        """What fn returned for input ``i``: one sample, a generator of samples, or None."""
        if isinstance(result, types.GeneratorType):
            for j, sample in enumerate(result):
                if j < skip:
                    continue  # committed by an earlier run
                if type(sample) is ResumePoint:  # fn takes no resume=: it could never be resumed there
                    raise UsageError(NOT_RESUMABLE)
                writer.add(self.gate.encode(sample, input_id), input_id, after=(i, j + 1))
                if self.should_stop():
                    raise _Stop
        elif result is not None:
            if isinstance(result, (types.CoroutineType, types.AsyncGeneratorType)):
                _refuse_async(result)
            writer.add(self.gate.encode(result, input_id), input_id, after=(i + 1, 0))

    def show_in_flight(self, inputs: tuple[int, ...], states: tuple[str, ...], calls: tuple[int, ...] = ()) -> None:
        """The inputs in flight now, their last ResumePoint states and calls in flight (shardwright status)."""
        self.result_q.put(InFlight(self.wid, inputs, states, calls))

    def resolved(self, input_id: int, attempts: int) -> None:
        """Input ``input_id`` succeeded: a retry run says so in failed_dir."""
        if self.cfg.retry_run and self.failed_dir is not None:
            self.failed_dir.resolved(input_id, self.cfg.round.generation, self.cfg.node_rank, attempts)

    def _record_failure(self, input_id: int, value, exc: BaseException, attempts: int) -> None:
        self.record_failure(input_id, value, exc, attempts, traceback.format_exc())

    def record_failure(self, input_id: int, value, exc: BaseException, attempts: int, tb: str) -> None:
        record = FailureRecord(
            input_index=input_id,
            input_repr=redact_url_credentials(redact(short_repr(value, 500), self.secrets)),
            exception_type=type(exc).__name__,
            message=redact_url_credentials(redact(bounded_text(str(exc), MAX_STORED_TEXT), self.secrets)),
            traceback=redact_url_credentials(redact(bounded_text(tb, MAX_STORED_TEXT), self.secrets)),
            host=host_identity(),
            pid=os.getpid(),
            node=self.cfg.node_rank,
            attempts=attempts,
            generation=self.cfg.round.generation,
            time=time.time(),
        )
        write_failure(self.storage, record)  # the output's own record first: the one the run relies on
        if self.failed_dir is not None:
            self.failed_dir.failed(record, self.cfg.node_rank)


class _Raised:
    """fn's first call on an input raised this (the hot loop hands it to the retry logic)."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


class _Returned:
    """fn's first call on an input returned this (a generator or None)."""

    __slots__ = ("value",)

    def __init__(self, value: object):
        self.value = value


def _refuse_async(result: types.CoroutineType | types.AsyncGeneratorType) -> None:
    """A sync fn (a wrapper, a lambda) returned a coroutine or an async generator: say so, not
    that it cannot be pickled."""
    if isinstance(result, types.CoroutineType):
        result.close()  # never awaited: no "coroutine was never awaited" warning on top
    raise UsageError(
        f"fn returned {type(result).__name__} {short_repr(result)}: it is async, but was not seen as async when the "
        "call started (a wrapper around an async fn?). Pass the async def (or async generator) function itself as fn"
    )


def _describe(exc: BaseException) -> str:
    return bounded_text(explain_fn_error(f"{type(exc).__name__}: {exc}"), MAX_STORED_TEXT)


def _failure(
    wid: int, kind: str, exc: BaseException, input_index: int, tb: str, secrets: list[str] | None = None
) -> WorkerFailed:
    secrets = secrets if secrets is not None else secret_values(None)
    pickled = _picklable_exception(exc)
    if pickled is not None and redact_exception(exc, secrets) is not exc:
        pickled = None  # the message above is redacted; the original must not travel with it
    return WorkerFailed(
        wid,
        kind,
        redact(_describe(exc), secrets),
        input_index,
        redact(bounded_text(tb, MAX_STORED_TEXT), secrets),
        pickled,
    )


def _tick(look: list[bool]) -> None:
    while True:
        time.sleep(STOP_CHECK_INTERVAL)
        look[0] = True


def _picklable_exception(exc: BaseException) -> bytes | None:
    # An exception with a huge message would chain megabytes onto the FnError (its message
    # and traceback are already sent, bounded): then it is not sent at all.
    try:
        if len(str(exc)) > MAX_STORED_TEXT:
            return None
    except Exception:
        return None
    try:
        data = pickle.dumps(exc)
        pickle.loads(data)
        return data
    except Exception:
        return None


def worker_main(
    wid: int, fn, cfg: WorkerConfig, task_q, result_q, stop_event, current_inputs, parent_pid: int | None = None
) -> None:
    """Entry point of a worker process. ``parent_pid``: the main process's pid, when it is this
    process's parent (fork, spawn): a main process SIGKILLed between the fork and the request
    below would otherwise leave this worker orphaned, waiting on its queue for good."""
    die_with_parent(parent_pid)  # a SIGKILLed main process must not leave workers writing on
    reuse_freed_memory()  # large items: reuse the last chunk's pages, not fresh zeroed ones
    sys.setswitchinterval(WORKER_SWITCH_INTERVAL)  # the committer's threads get the GIL back sooner
    worker_ref: list[Worker] = []

    def on_signal(signum, frame):  # the main process decides; we just stop at the next input
        if worker_ref:
            worker_ref[0].signalled = True

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal Ctrl-C reaches the whole group
    signal.signal(signal.SIGTERM, on_signal)
    try:
        worker = Worker(wid, fn, cfg, result_q, stop_event, current_inputs)
    except BaseException as exc:
        result_q.put(_failure(wid, "setup", exc, -1, traceback.format_exc(), secret_values(cfg.storage_options)))
        result_q.put(WorkerExited(wid, False))
        return
    worker_ref.append(worker)
    stopped = False
    try:
        while True:
            task = task_q.get()
            if task is None:
                break
            if worker.inflight is not None:  # inputs in flight together (several shards at once), or an async fn
                ended = worker.inflight.run_tasks(task, task_q, worker.new_writer)
                worker.flush_progress()
                if ended:
                    break
                continue
            worker.run_shard(task)
            worker.flush_progress()
        worker.committer.close()
    except _Stop:
        stopped = True
        _close_quietly(worker, wid, result_q)
    except _FnFailed as failure:
        # report first, so the main process stops the other workers now, not after our commits
        i = worker.current_inputs[wid]
        result_q.put(_failure(wid, "fn", failure.original, i, failure.tb, worker.secrets))
        _close_quietly(worker, wid, result_q)
    except BaseException as exc:
        _close_quietly(worker, wid, result_q)
        kind = "shardwright" if isinstance(exc, ShardwrightError) else "internal"
        result_q.put(_failure(wid, kind, exc, worker.current_inputs[wid], traceback.format_exc(), worker.secrets))
    worker.flush_progress()
    result_q.put(WorkerExited(wid, stopped))


def _close_quietly(worker: Worker, wid: int, result_q) -> None:
    """Wait for queued commits; a commit failure is reported (it is the root cause)."""
    try:
        worker.committer.close()
    except BaseException as exc:
        result_q.put(_failure(wid, "storage", exc, worker.current_inputs[wid], traceback.format_exc(), worker.secrets))
