"""Inputs in flight inside a worker process (issue 32): up to ``concurrency`` inputs of a shard
at once, on one asyncio loop per worker process.

fn is awaited (``async def``: one sample or None), iterated (an async generator: many
samples and ResumePoints), or run in ``concurrency`` daemon threads (a plain function or
generator, which must then be thread-safe). Inputs finish out of order; each one's outputs
wait in its :class:`~.inflight_slot.Slot` and reach the shard's writer in input order (the reorder buffer:
:meth:`InflightShard.deliver`), so the dataset and the commit records are exactly those of
one input at a time. At most ``REORDER_WINDOW`` x concurrency inputs are started past the
oldest unfinished one, which bounds the outputs waiting in memory.

A slot keeps where its input resumes: the state of the last ResumePoint fn yielded and how
many outputs came before it. A failed attempt is retried from there (the outputs it already
has are skipped, not added twice); ``max_retries`` counts the failed attempts since the input
last made progress (a new sample or ResumePoint). On a stop (Ctrl-C, SIGTERM, the pool's
stop) no new input starts and no failed attempt is retried; inputs in flight run on to their
next ResumePoint (or their end) for up to ``stop_grace`` seconds. What they did is kept by
the progress snapshot (``protocol.progress``), so a resume repeats no call.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

from .. import telemetry
from ..errors import ShardwrightError, UsageError, short_repr
from ..protocol.progress import SlotState, read_snapshot
from ..sources import BadRow
from . import call_count
from .calls import AttemptHistory
from .fn_threads import FnThreads
from .inflight_slot import Slot
from .resume import ASYNC, ASYNC_GEN, ResumePoint
from .shard_writer import ShardWriter
from .stops import FnFailed, InputTimeout, StopRequested, watch_stops
from .tasks import ShardTask

__all__ = ["InflightRunner"]

REORDER_WINDOW = 4  # inputs started past the oldest unfinished one: at most this x concurrency
WAKE_INTERVAL = 0.05  # seconds between looks at the stop event while every input is waiting
SHOW_INTERVAL = 0.5  # seconds between reports of the inputs in flight (shardwright status)
MAX_SHOWN = 256  # inputs in flight reported per worker at most (status lists them by name)
NOT_RESUMABLE = (
    "fn yielded a ResumePoint but does not accept resume=: add the keyword (def fn(x, resume=None)) so that an "
    "interrupted input can be resumed there"
)


class InflightRunner:
    """The in-flight machinery of one worker process: its loop, its threads, and the hooks
    into the worker (fn, the format gate, stops, progress, failure records)."""

    def __init__(self, worker: Any):
        self.worker = worker
        self.cfg = worker.cfg
        self.options = worker.cfg.inflight
        self.kind = self.options.kind
        self.loop = asyncio.new_event_loop()
        self.threads = FnThreads(self.loop, self.options.concurrency) if not self.kind.is_async else None
        self.stopping = False  # read by fn's threads at each ResumePoint
        watch_stops(lambda: self.stopping or self.worker.should_stop())  # fn's stop_requested()

    def run_shard(self, task: ShardTask, writer: ShardWriter) -> None:
        """Every input of ``task`` (its outputs added to ``writer`` in input order, its done
        record submitted), or StopRequested / FnFailed / our own error after committing what
        is in order."""
        self.loop.run_until_complete(self._run([InflightShard(self, task, writer)], None))

    def run_tasks(self, first: ShardTask, task_q: Any, new_writer: Callable[[ShardTask], ShardWriter]) -> bool:
        """``first`` and, while this worker has room for more inputs in flight than its shards
        still have to start, further tasks taken from ``task_q`` (the pool claims a shard
        only when a worker may take it): returns once every shard taken is done, True if the
        pool's end of tasks (None) was taken meanwhile."""
        self.new_writer = new_writer
        return self.loop.run_until_complete(self._run([InflightShard(self, first, new_writer(first))], task_q))

    def holds_less_than_its_share(self, shards: list[InflightShard]) -> bool:
        """Whether taking another shard keeps this worker within its even share of inputs (the
        rest is left for the other workers: a document each, not all of them here)."""
        share = self.cfg.fair_share
        return share is None or sum(shard.task.end - shard.head for shard in shards) < share

    async def _run(self, shards: list[InflightShard], task_q: Any) -> bool:
        options = self.options
        limit, window = options.concurrency, options.concurrency * REORDER_WINDOW
        next_save = time.monotonic() + options.durable_every
        next_show, shown = 0.0, None
        deadline: float | None = None  # stopping: when inputs in flight are given up
        ended = False
        flight = telemetry.InFlight(telemetry.get())  # the run telemetry's calls in flight
        try:
            while shards:
                if not self.stopping and self.worker.should_stop():
                    self.stopping = True
                    deadline = time.monotonic() + options.stop_grace
                in_flight = sum(len(shard.running) for shard in shards)
                if not self.stopping:
                    for shard in shards:  # the oldest shard first: it is the one a resume waits for
                        while (
                            in_flight < limit
                            and shard.next_start < shard.task.end
                            and shard.next_start - shard.head < window
                        ):
                            in_flight += shard.start_next()
                    if (
                        in_flight < limit
                        and task_q is not None
                        and not ended
                        and all(shard.next_start >= shard.task.end for shard in shards)
                        and self.holds_less_than_its_share(shards)
                    ):
                        try:
                            task = task_q.get_nowait()
                        except queue.Empty:
                            task = False
                        if task is None:
                            ended = True  # the pool has no more: finish these
                        elif task:
                            shards.append(InflightShard(self, task, self.new_writer(task)))
                            continue
                for shard in list(shards):
                    shard.deliver()
                    if shard.head >= shard.task.end:
                        shard.writer.position = (shard.task.end, 0)
                        shard.writer.commit(done=True)
                        shards.remove(shard)
                futures = {future: shard for shard in shards for future in shard.running}
                flight.set(len(futures))
                if not futures:
                    if self.stopping or not shards:
                        break
                    continue
                done, _ = await asyncio.wait(futures, timeout=WAKE_INTERVAL, return_when=asyncio.FIRST_COMPLETED)
                for future in done:
                    shard = futures[future]
                    shard.finished(future, shard.running.pop(future))
                now = time.monotonic()
                for shard in shards:
                    if shard.writer.seq != shard.saved_seq or (shard.dirty and now >= next_save):
                        shard.deliver()
                        shard.save()  # a chunk was committed (the last snapshot no longer extends the tip), or it is time
                if now >= next_save:
                    next_save = now + options.durable_every
                if now >= next_show:
                    next_show = now + SHOW_INTERVAL
                    shown = self._show(shards, shown)
                if deadline is not None and now >= deadline:
                    break  # the grace is over: what fn did up to its last ResumePoint is kept
            flight.set(0)
            if shards:
                for shard in shards:
                    shard.give_up()
                raise StopRequested
            return ended
        except BaseException:
            self.stopping = True
            for shard in shards:  # the others keep what they did too (each only once)
                with contextlib.suppress(Exception):  # a failed committer reports itself at close
                    shard.give_up()
            raise

    def _show(self, shards: list[InflightShard], shown: tuple | None) -> tuple:
        """Report the inputs in flight (oldest first) when they changed since ``shown``."""
        slots = [slot for shard in shards for slot in shard.running.values()][:MAX_SHOWN]
        now = (
            tuple(s.input_id for s in slots),
            tuple(s.point or "" for s in slots),
            tuple(s.calls.count for s in slots),
        )
        if now != shown:
            self.worker.show_in_flight(*now)
        return now


class InflightShard:
    """One shard's inputs in flight, and its reorder buffer."""

    def __init__(self, runner: InflightRunner, task: ShardTask, writer: ShardWriter):
        self.runner, self.task, self.writer = runner, task, writer
        self.worker = runner.worker
        self.fn = runner.worker.fn
        self.slots: dict[int, Slot] = {}
        self.head = writer.position[0]  # the oldest input whose outputs have not reached the writer
        self.next_start = self.head
        self.running: dict[asyncio.Future, Slot] = {}
        self.given_up = False
        self.dirty = False  # something happened since the last progress snapshot
        self.saved_seq = writer.seq  # the writer's next record when the last snapshot was taken
        self.checkpoint = runner.cfg.round.use_checkpoint  # without records, a snapshot extends nothing
        if self.checkpoint:
            self._restore()

    def _cancel_running(self) -> None:
        for future in self.running:
            future.cancel()  # a thread's call runs on, unheard: its outputs no longer count
        self.running.clear()

    def start_next(self) -> int:
        """Start the next input (1), or take up its finished slot from a snapshot (0)."""
        position = self.next_start
        self.next_start += 1
        slot = self.slots.get(position)
        if slot is None:
            task = self.task
            value = task.inputs[position - task.next_input]
            slot = self.slots[position] = Slot(position, task.input_id(position), value, task.first_skip(position))
        if slot.done:
            return 0
        self._launch(slot)
        return 1

    def _launch(self, slot: Slot, delay: float = 0.0) -> None:
        slot.attempts += 1
        if slot.attempts > 1:
            telemetry.get().retry("fn")
        future: asyncio.Future
        if delay > 0:
            future = asyncio.ensure_future(self._after_backoff(slot, delay), loop=self.runner.loop)
        elif self.runner.threads is not None:
            future = self.runner.threads.run(lambda: self._attempt_in_thread(slot))
        else:
            future = asyncio.ensure_future(self._attempt_async(slot), loop=self.runner.loop)
        self.running[future] = slot

    async def _after_backoff(self, slot: Slot, delay: float) -> bool:
        """A retry after its backoff; a stop meanwhile ends the wait (the resume retries it)."""
        until = time.monotonic() + delay
        while (left := until - time.monotonic()) > 0:
            if self.runner.stopping:
                return False  # not started: nothing to lose, the slot keeps its ResumePoint
            await asyncio.sleep(min(left, WAKE_INTERVAL))
        if self.runner.threads is not None:
            return await self.runner.threads.run(lambda: self._attempt_in_thread(slot))
        return await self._attempt_async(slot)

    # --- one attempt -----------------------------------------------------------------------
    async def _attempt_async(self, slot: Slot) -> bool:
        token = call_count.bind(slot.calls)  # this task's context only: its Limiter calls count for the input
        try:
            return await self._attempt_async_bound(slot)
        finally:
            call_count.unbind(token)

    async def _attempt_async_bound(self, slot: Slot) -> bool:
        timeout = self.runner.cfg.timeout
        if timeout is None:
            return await self._iterate_async(slot)
        try:
            return await asyncio.wait_for(self._iterate_async(slot), timeout)
        except asyncio.TimeoutError:
            raise InputTimeout(
                f"fn did not finish input {slot.input_id:,} ({short_repr(slot.value)}) within timeout={timeout:g} s"
            ) from None

    async def _iterate_async(self, slot: Slot) -> bool:
        """True: the input is finished; False: paused at a ResumePoint (stopping)."""
        if isinstance(slot.value, BadRow):
            raise slot.value.error(skipping=self.runner.cfg.on_error == "skip")
        kwargs, index = slot.resume_kwargs()
        if self.runner.kind.mode == ASYNC:
            result = await self.fn(slot.value, **kwargs)
            if result is not None:
                self.output(slot, 0, result)
            return True
        if self.runner.kind.mode != ASYNC_GEN:  # pragma: no cover - the runner picks threads for sync fns
            raise AssertionError(self.runner.kind)
        outputs = self.fn(slot.value, **kwargs)
        try:
            async for out in outputs:
                if type(out) is ResumePoint:
                    self.point(slot, out, index)
                    if self.runner.stopping:
                        return False
                else:
                    self.output(slot, index, out)
                    index += 1
        finally:
            await outputs.aclose()
        return True

    def _attempt_in_thread(self, slot: Slot) -> bool:
        """In one of fn's threads: outputs go to the loop (encoded there, in call order)."""
        token = call_count.bind(slot.calls)
        try:
            return self._attempt_in_thread_bound(slot)
        finally:
            call_count.unbind(token)

    def _attempt_in_thread_bound(self, slot: Slot) -> bool:
        if isinstance(slot.value, BadRow):
            raise slot.value.error(skipping=self.runner.cfg.on_error == "skip")
        kwargs, index = slot.resume_kwargs()
        result = self.fn(slot.value, **kwargs)
        post = self.runner.loop.call_soon_threadsafe
        if isinstance(result, types.GeneratorType):
            try:
                for out in result:
                    if type(out) is ResumePoint:
                        post(self.point, slot, out, index)
                        if self.runner.stopping:
                            return False
                    else:
                        post(self.output, slot, index, out)
                        index += 1
            finally:
                result.close()
        elif result is not None:
            post(self.output, slot, 0, result)
        return True

    def output(self, slot: Slot, index: int, sample: object) -> None:
        """Output number ``index`` of the slot's input (on the loop)."""
        if slot.fatal is not None or index < slot.produced:
            return  # already here (an attempt resumed before it), or the input already failed us
        try:
            if type(sample) is ResumePoint:  # an async fn returned one: not a sample
                raise UsageError("fn returned a ResumePoint; yield it between samples from a generator fn")
            data = self.worker.gate.encode(sample, slot.input_id)
        except BaseException as exc:  # e.g. a sample of another structure: reported when the attempt ends
            slot.fatal = exc
            return
        slot.items.append(data)
        slot.failures = 0  # progress
        self.dirty = True

    def point(self, slot: Slot, point: ResumePoint, index: int) -> None:
        """fn yielded a ResumePoint after ``index`` outputs of this attempt's input."""
        if slot.fatal is not None:
            return
        if not self.runner.kind.accepts_resume:
            slot.fatal = UsageError(NOT_RESUMABLE)
            return
        if index > slot.point_outputs or (index == slot.point_outputs and point.text != slot.point):
            slot.failures = 0  # progress (a ResumePoint this input had already passed is not)
        if index >= slot.point_outputs:
            slot.point, slot.point_outputs = point.text, index
            self.dirty = True

    # --- an attempt ended --------------------------------------------------------------------
    def finished(self, future: asyncio.Future, slot: Slot) -> None:
        exc = future.exception()
        if slot.fatal is not None:
            exc = slot.fatal
        self.dirty = True
        if exc is None:
            if future.result():
                slot.done = True
            return  # paused at a ResumePoint: the snapshot keeps it
        if isinstance(exc, ShardwrightError) and not isinstance(exc, InputTimeout):
            raise exc  # our own error (a sample that cannot be written): the run stops on it
        slot.failures += 1
        delay = self._retry_delay(slot, exc)
        if delay is not None and not self.runner.stopping:
            self._launch(slot, delay)
            return
        if delay is not None:
            return  # not retried now: the resume retries it from its last ResumePoint
        tb = "".join(traceback.format_exception(exc))
        if slot.history is not None and slot.attempts > 1:  # name every attempt, not only the last
            tb += f"\n{slot.history.describe()}\n"
        if self.runner.cfg.on_error == "skip":
            self.worker.record_failure(slot.input_id, slot.value, exc, slot.attempts, tb)
            slot.items.clear()
            slot.failed = slot.done = True
            return
        self.give_up()
        self.worker.current_inputs[self.worker.wid] = slot.input_id  # the input the FnError names
        raise FnFailed(exc, tb) from exc

    def _retry_delay(self, slot: Slot, exc: BaseException) -> float | None:
        """Seconds before the next attempt of ``slot``'s input, or None when it fails now.

        A transient failure (engine.calls: a timeout, a dropped connection, HTTP 408/425/429/5xx,
        or a type named in ``retries``) is retried with exponential backoff and full jitter,
        never sooner than the server's Retry-After, until ``retries.max_retries`` consecutive
        failures since the input last made progress; any other failure, at once, up to
        ``max_retries`` consecutive ones (as in the plain loop, which counts them per input)."""
        if slot.history is None:
            slot.history = AttemptHistory(self.runner.options.retries, attempts=slot.attempts)
        history = slot.history
        history.attempts = slot.attempts  # the attempt that just failed
        history.consecutive = slot.failures - 1  # progress since the last failure reset it
        delay = history.failed(exc)
        if delay is None and not history.policy.is_transient(exc) and slot.failures <= self.runner.cfg.max_retries:
            delay = 0.0
        return delay

    def give_up(self) -> None:
        """The worker stops (a stop, an error): commit what is in order (it is good), snapshot
        the rest, start nothing more. Only once: a shard given up is left alone after."""
        self.runner.stopping = True
        self._cancel_running()
        if self.given_up:
            return
        self.given_up = True
        self.deliver()
        if not self.writer.keeps_tails():  # else the chunk in progress stays open: a pending tail (shard_writer)
            self.writer.commit()
        self.save()

    # --- progress snapshots (protocol.progress) --------------------------------------------
    def save(self) -> None:
        """Hand the committer a snapshot of everything past the writer's last record."""
        self.dirty = False
        if not self.checkpoint:
            return
        writer = self.writer
        slots = [
            SlotState(p, s.base, list(s.items), s.point, s.point_outputs, s.done, s.failed)
            for p, s in sorted(self.slots.items())
            if s.items or s.point is not None or s.done
        ]
        if not slots and not writer.past_the_records():
            self.saved_seq = writer.seq
            return  # nothing past the last record
        self.worker.committer.save_progress(writer.snapshot(slots))
        self.saved_seq = writer.seq

    def _restore(self) -> None:
        """Take up the snapshot that extends the shard's chain tip, if there is one."""
        task, writer, cfg = self.task, self.writer, self.runner.cfg
        if task.fresh:
            return
        snapshot = read_snapshot(
            self.worker.storage,
            cfg.round.run_id,
            task.shard,
            task.next_seq,
            task.prev_epoch,
            (task.next_input, task.skip_outputs),
        )
        if snapshot is None:
            return
        buffer = snapshot.buffer
        head = buffer.position[0]
        if not task.next_input <= head <= task.end or not all(head <= s.position < task.end for s in snapshot.slots):
            return  # not this task's inputs (cannot happen for a snapshot that extends its tip): redo
        writer.take_up(buffer)
        for state in snapshot.slots:
            position = state.position
            slot = Slot(position, task.input_id(position), task.inputs[position - task.next_input], state.base)
            slot.items, slot.point, slot.point_outputs = state.items, state.point, state.point_outputs
            slot.done, slot.failed = state.done, state.failed
            self.slots[position] = slot
        kept = buffer.position[1]
        if kept and head < task.end and head not in self.slots:
            # a plain worker's tail stopped inside a generator's outputs: its next call skips those
            value = task.inputs[head - task.next_input]
            self.slots[head] = Slot(head, task.input_id(head), value, max(kept, task.first_skip(head)))
        self.head = self.next_start = head

    # --- the reorder buffer -----------------------------------------------------------------
    def deliver(self) -> None:
        """Hand every finished input at the head to the writer, in input order."""
        writer, slots, head = self.writer, self.slots, self.head
        while head in slots and slots[head].done:
            slot = slots.pop(head)
            if slot.failed:
                writer.failed.append([slot.input_id, slot.base])
            else:
                last = len(slot.items) - 1
                for k, data in enumerate(slot.items):
                    # the input is finished: a chunk cut after its last output resumes past it, not in it
                    writer.add(data, slot.input_id, after=(head + 1, 0) if k == last else (head, slot.base + k + 1))
                self.worker.resolved(slot.input_id, slot.attempts)
            writer.position = (head + 1, 0)
            self.worker.tick()
            self.dirty = True
            head += 1
        self.head = head
        if head < self.task.end:
            self.worker.current_inputs[self.worker.wid] = self.task.input_id(head)
