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
import signal
import sys
import threading
import time
import traceback
import types

from .. import telemetry
from ..errors import ShardwrightError, UsageError, bounded_text, short_repr
from ..format.packed import LeafColumns
from ..process import die_with_parent, host_identity, reuse_freed_memory
from ..protocol.failures import FailureRecord, write_failure
from ..protocol.progress import read_snapshot
from ..protocol.records import CommitRecord
from ..secrets import redact, redact_url_credentials, secret_values
from ..sources import BadRow
from ..storage import open_storage
from .committer import ChunkCommitter
from .failed_dir import FailedDir
from .hotloop import FLUSH_BYTES, LOOK, CompiledLoop, Raised, Returned, int64_view, refuse_async, replay
from .inflight import NOT_RESUMABLE, InflightRunner
from .messages import MAX_STORED_TEXT, Committed, InFlight, Progress, WorkerExited, worker_failed
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
# A worker's committer threads spend their rounds in system calls (writes, fsyncs, the claim
# checks), each followed by taking the GIL back from the thread running fn. CPython makes a
# waiting thread wait a whole switch interval (5 ms by default) before it asks the running one
# to let go, so a round of a few dozen calls fell behind the hot loop, and the worker waited
# for that backlog at its end (issue 19: +1.4-2.0 ms a worker with checkpoints on 200k small
# dicts; +0.0-0.4 ms at 1 ms). Only in our worker processes, never the user's main process.
WORKER_SWITCH_INTERVAL = 0.001


class Worker:
    def __init__(self, wid: int, fn, cfg: WorkerConfig, result_q, stop_event, current_inputs):
        self.wid = wid
        self.fn = fn
        self.cfg = cfg
        self.result_q = result_q
        self.stop_event = stop_event
        self.current_inputs = current_inputs
        self.current_view = int64_view(current_inputs)  # the same slots, for the compiled hot loop's stores
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
        self._loops: dict[bool, tuple[object, CompiledLoop | None]] = {}  # rows -> (encoder, its compiled loop)
        threading.Thread(target=_tick, args=(self.look,), name="shardwright-tick", daemon=True).start()

    def _on_commit(self, record: CommitRecord, file_key: str | None) -> None:
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
                rows = type(task.inputs) not in (list, range)  # a source's rows (a list or range: a sequence's)
                if self._compiled(rows) is None:  # the format is not known yet, or has no compiled loop
                    i = self._run_plain(writer, task, i, rows)
                loop = self._compiled(rows) if i < task.end else None
                if loop is not None:
                    self._run_compiled(writer, task, i, loop)
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

    def _compiled(self, rows: bool) -> CompiledLoop | None:
        """The hot loop compiled for the run's format (hotloop.py), once it is known; None
        when it is not known yet or has no compiled encoder. Made once per worker."""
        encoder = self.gate.encoder
        if encoder is None or encoder.flat is None:
            return None
        if rows not in self._loops or self._loops[rows][0] is not encoder:
            self._loops[rows] = (encoder, CompiledLoop.build(encoder, rows))
        return self._loops[rows][1]

    def _looked(self, i: int, counted: int) -> int:
        """The hot loop's look before input ``i`` (its batch handed over): progress and stops.
        Inputs ``counted..i-1`` are done; returns ``i``, the new ``counted``."""
        self._pending_progress += i - counted
        now = time.monotonic()
        if now - self._last_progress >= PROGRESS_INTERVAL:
            self.flush_progress()
            self._last_progress = now
        if self.should_stop():
            raise _Stop
        return i

    def _run_plain(self, writer: ShardWriter, task: ShardTask, start: int, rows: bool) -> int:
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
        no per-item sizes summed, cut or put in the chunk's header (issue 36).

        Returns the input it stopped before: ``task.end``, or earlier once the format is
        known and has a compiled loop (:meth:`_run_compiled` takes the rest)."""
        fn, inputs, base, current, wid = self.fn, task.inputs, task.next_input, self.current_inputs, self.wid
        generator = types.GeneratorType
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
            hand_over(writer, batch, itemsize, mixed, first)
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
                    flush(i)
                    counted = self._looked(i, counted)
                    if gated and self.gate.encoder is not None:  # the format is known: skip the gate's call
                        if self._compiled(rows) is not None:
                            return i  # (finally: inputs start..i-1 are counted)
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
                    self._process_input(writer, value, i, i, 0, first=Raised(exc))
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
                    self._process_input(writer, value, i, i, 0, first=Returned(result))
                    continue
                mixed = True
                try:
                    data = encode(result, i)
                except BaseException:  # e.g. the sample's structure differs: keep the inputs before it
                    flush(i)
                    if isinstance(result, (types.CoroutineType, types.AsyncGeneratorType)):
                        refuse_async(result)
                    raise
                if gated and self.gate.encoder is not None:
                    # The first sample fixed the format just now: take its compiled
                    # encoder from the next input on, not from the next look 20 ms later
                    # (a worker's first shard ran most of its items through the gate:
                    # ~1 us an item instead of ~0.3, issue 36's profile). Once: samples
                    # of a format with no compiled encoder pay no lookup each.
                    encode, flat, gated = self.gate.encoder.encode, self.gate.encoder.flat, False
                    fixed(self.gate.encoder)
                    if self._compiled(rows) is not None:  # the compiled loop takes the next input on
                        append(data)
                        i += 1
                        flush(i)
                        return i
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
        return i

    def _run_compiled(self, writer: ShardWriter, task: ShardTask, start: int, loop: CompiledLoop) -> None:
        """:meth:`_run_plain`'s loop over inputs ``start..task.end``, once the format is known,
        with its compiled encoder inlined (hotloop.py): the compiled segment runs the inputs
        whose samples it takes, and returns here for a batch to hand over, a look, or an input
        it does not finish, which is handled as in :meth:`_run_plain`, in the same order."""
        current, wid, look, end, base = self.current_view, self.wid, self.look, task.end, task.next_input
        encode = self.gate.encode
        batch: list[bytes] = []
        cols = LeafColumns(loop.encoder.data_format) if loop.columns else None  # the batch, for leaves of fixed size
        segment = loop.bind(
            self.fn, task.inputs, base, current, wid, look, cols.appenders if cols is not None else (batch.append,)
        )
        itemsize = loop.itemsize
        step = max(1, FLUSH_BYTES // itemsize) if itemsize is not None else end - start  # inputs a batch holds
        first = i = counted = start  # first: the input whose sample is batch[0]
        nbytes = 0  # the batch's bytes (formats of variable size)
        mixed = False  # the batch has items the general encoder made (their sizes are checked)
        in_segment = False
        look[0] = True  # the first input looks at once

        def flush(upto: int) -> None:
            nonlocal first, nbytes, mixed, i
            if cols is not None and len(cols):
                try:
                    writer.add_block(cols.block(), cols.itemsize, first)
                except OverflowError:  # an int outside int64: the items one by one, to the input that fails
                    done: list[bytes] = []
                    try:
                        replay(cols, encode, loop.encoder.data_spec, first, done)
                    except BaseException:
                        i = first + len(done)  # the input the failure names; the ones before it are kept
                        raise
                    finally:
                        cols.clear()
                        writer.add_run(done, first)
            hand_over(writer, batch, itemsize, mixed, first)
            first, nbytes, mixed = upto, 0, False

        try:
            while i < end:
                in_segment = True
                i, nbytes, outcome = segment(i, min(end, first + step), nbytes)
                in_segment = False
                if outcome is None:  # the batch is full, or the shard's inputs are all in it
                    flush(i)
                elif outcome is LOOK:
                    look[0] = False
                    flush(i)
                    counted = self._looked(i, counted)
                elif (
                    type(outcome) is Returned
                    and outcome.value is not None
                    and type(outcome.value) is not types.GeneratorType
                ):
                    mixed = True  # a sample for the general encoder: the same bytes, or the error naming the problem
                    try:
                        data = encode(outcome.value, i)
                    except BaseException:  # keep the inputs before it
                        flush(i)
                        if isinstance(outcome.value, (types.CoroutineType, types.AsyncGeneratorType)):
                            refuse_async(outcome.value)
                        raise
                    if cols is not None and len(data) == cols.itemsize:
                        cols.add_item(data)  # its bytes as the general encoder made them
                    elif cols is not None:  # an item of another size (never made for this format so far)
                        flush(i)
                        batch.append(data)
                        flush(i + 1)
                    else:
                        batch.append(data)
                    nbytes += len(data)
                    i += 1
                    if nbytes >= FLUSH_BYTES:
                        flush(i)
                else:  # fn raised, returned None or a generator, or a source's bad row
                    flush(i + 1)
                    first_outcome = None if isinstance(outcome, BadRow) else outcome
                    self._process_input(writer, task.inputs[i - base], i, i, 0, first=first_outcome)
                    i += 1
            flush(end)
        except BaseException:
            if in_segment:
                i = current[wid]  # the input fn was given when it raised (the segment stored it)
            else:
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
                    if type(outcome) is Raised:
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
                refuse_async(result)
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


def hand_over(writer: ShardWriter, batch: list[bytes], itemsize: int | None, mixed: bool, first: int) -> None:
    """Give the hot loop's batch of item bytes (inputs ``first``..) to the shard's writer and
    empty it: one block when every item has the format's fixed size (format/packed.py; items
    the general encoder made, ``mixed``, have their sizes checked), else item by item."""
    if batch:
        if itemsize is not None and (not mixed or all(len(item) == itemsize for item in batch)):
            writer.add_block(b"".join(batch), itemsize, first)
        else:
            writer.add_run(batch, first)
        batch.clear()


def _tick(look: list[bool]) -> None:
    while True:
        time.sleep(STOP_CHECK_INTERVAL)
        look[0] = True


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
        result_q.put(worker_failed(wid, "setup", exc, -1, traceback.format_exc(), secret_values(cfg.storage_options)))
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
        result_q.put(worker_failed(wid, "fn", failure.original, i, failure.tb, worker.secrets))
        _close_quietly(worker, wid, result_q)
    except BaseException as exc:
        _close_quietly(worker, wid, result_q)
        kind = "shardwright" if isinstance(exc, ShardwrightError) else "internal"
        result_q.put(worker_failed(wid, kind, exc, worker.current_inputs[wid], traceback.format_exc(), worker.secrets))
    worker.flush_progress()
    result_q.put(WorkerExited(wid, stopped))


def _close_quietly(worker: Worker, wid: int, result_q) -> None:
    """Wait for queued commits; a commit failure is reported (it is the root cause)."""
    try:
        worker.committer.close()
    except BaseException as exc:
        result_q.put(
            worker_failed(wid, "storage", exc, worker.current_inputs[wid], traceback.format_exc(), worker.secrets)
        )
