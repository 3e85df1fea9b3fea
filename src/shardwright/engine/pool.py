"""The worker pool, as seen from the main process: start workers, watch them, stop them."""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from .messages import WorkerExited, WorkerFailed
from .tasks import ShardTask, WorkerConfig
from .worker import worker_main

STOP_GRACE_SECONDS = float(os.environ.get("SHARDWRIGHT_STOP_GRACE", "5"))
DEATH_GRACE_SECONDS = 1.0  # a worker's last messages may still be in the pipe when it exits


@dataclass(frozen=True)
class DeadWorker:
    """A worker that ended without its exit message."""

    wid: int
    pid: int | None
    exitcode: int | None
    input_index: int  # the input it was on, -1 before its first


@dataclass
class PoolOutcome:
    interrupted_by: int | None = None  # signal number
    aborted: str | None = None  # on_idle() asked to stop at once (the node's lease was taken over)
    error: WorkerFailed | None = None  # the first failure a worker reported
    dead_worker: DeadWorker | None = None


class WorkerPool:
    """Runs shard tasks on worker processes and watches them until each has exited."""

    def __init__(self, fn: Callable, cfg: WorkerConfig, num_workers: int, start_method: str):
        self.fn, self.cfg, self.num_workers, self.start_method = fn, cfg, num_workers, start_method
        self._watch: _Watch | None = None

    def current_inputs(self) -> list[int]:
        """The run-wide input each worker is on (-1 before its first), while :meth:`run` runs."""
        return list(self._watch.current) if self._watch is not None else []

    def run(
        self,
        feed: Callable[[], ShardTask | None],
        on_message: Callable[[Any], None],
        on_idle: Callable[[], str | None],
    ) -> PoolOutcome:
        """Run the tasks ``feed`` gives, one at a time, just before a worker can take one (so
        a shard is claimed when it starts, not when the run starts), until it gives None.
        ``on_message`` gets every Progress/Committed message; ``on_idle`` is called ten times
        a second and stops the pool at once when it returns a reason."""
        # cast: typeshed's BaseContext lacks Process, which every concrete context has
        ctx = cast(Any, mp.get_context(self.start_method))
        self._watch = _Watch(ctx, self, feed, on_message, on_idle)
        return self._watch.run()


class _Watch:
    """One run of a pool: its queues and processes, fed and watched until each worker exited
    (or was killed), and what stopped it."""

    def __init__(
        self,
        ctx: Any,
        pool: WorkerPool,
        feed: Callable[[], ShardTask | None],
        on_message: Callable[[Any], None],
        on_idle: Callable[[], str | None],
    ):
        self.feed, self.on_message, self.on_idle = feed, on_message, on_idle
        self.grace = _in_flight_grace(pool.cfg)  # on a stop, before workers are killed
        self.task_q, self.result_q = ctx.Queue(), ctx.Queue()
        self.stop_event = ctx.Event()
        self.current = ctx.Array("q", [-1] * pool.num_workers, lock=False)
        # fork and spawn make each worker a child of this process; forkserver's are the server's
        parent = os.getpid() if pool.start_method in ("fork", "spawn") else None
        self.procs = [
            ctx.Process(
                target=worker_main,
                name=f"shardwright-worker-{wid}",
                daemon=True,
                args=(wid, pool.fn, pool.cfg, self.task_q, self.result_q, self.stop_event, self.current, parent),
            )
            for wid in range(pool.num_workers)
        ]
        self.queued = 0  # tasks put and not yet known to be taken (an upper bound)
        self.fed_all = False
        self.outcome = PoolOutcome()
        self.exited = [False] * len(self.procs)
        self.found_dead_at: dict[int, float] = {}
        self.stop_deadline: float | None = None
        self.signals_seen: list[int] = []

    def run(self) -> PoolOutcome:
        for proc in self.procs:
            proc.start()
        previous = _install_handlers(self._on_signal)
        last_check = time.monotonic()
        try:
            while not all(self.exited):
                if not self.fed_all:
                    self._top_up()
                message = self._receive()
                now = time.monotonic()
                if message is not None and now - last_check < 0.1 and not self.signals_seen:
                    continue  # busy: drain messages, but still check on workers ten times a second
                last_check = now
                if self._must_stop_now(now):
                    _kill_all(self.procs)
                    break
        finally:
            _restore_handlers(previous)
            for proc in self.procs:
                proc.join(timeout=2)
            _kill_all(self.procs)
            for q in (self.task_q, self.result_q):
                q.cancel_join_thread()
                q.close()
        return self.outcome

    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals_seen.append(signum)

    def _top_up(self) -> None:
        """Keep one task queued per worker at most; once the feed is done (or the pool is
        stopping), every worker gets its sentinel."""
        if self.stop_event.is_set():
            self.fed_all = True  # stopping: no more tasks, but idle workers must still get their sentinel
        else:
            try:
                self.queued = min(self.queued, self.task_q.qsize())
            except NotImplementedError:  # macOS: keep one task ahead of each worker at most
                self.queued = min(self.queued, len(self.procs) - 1)
            while self.queued < len(self.procs):
                task = self.feed()
                if task is None:
                    self.fed_all = True
                    break
                self.task_q.put(task)
                self.queued += 1
        if self.fed_all:
            for _ in self.procs:
                self.task_q.put(None)

    def _receive(self) -> object | None:
        """The next worker message (None after 0.1 s without one), handled."""
        try:
            message = self.result_q.get(timeout=0.1)
        except queue.Empty:
            return None
        if isinstance(message, WorkerExited):
            self.exited[message.wid] = True
        elif isinstance(message, WorkerFailed):
            if self.outcome.error is None and self.outcome.dead_worker is None:
                self.outcome.error = message
            self.stop_event.set()
        else:
            self.on_message(message)
        return message

    def _must_stop_now(self, now: float) -> bool:
        """The checks made ten times a second: True when the workers must be killed at once."""
        abort = self.on_idle()
        if abort:  # another process owns these shards now: commit nothing more
            self.outcome.aborted = abort
            return True
        if self.signals_seen and self.outcome.interrupted_by is None:
            self.outcome.interrupted_by = self.signals_seen[0]
            self.stop_event.set()
        if len(self.signals_seen) >= 2:  # second Ctrl-C: abort now; commits already made stay
            return True
        self._find_dead(now)
        if self.stop_event.is_set() and self.stop_deadline is None:
            self.stop_deadline = now + STOP_GRACE_SECONDS + self.grace
        return self.stop_deadline is not None and now > self.stop_deadline  # fn is stuck; committed chunks are safe

    def _find_dead(self, now: float) -> None:
        """A worker gone without its exit message, past the grace its last messages need."""
        for wid, proc in enumerate(self.procs):
            if self.exited[wid] or proc.is_alive():
                continue
            first_seen = self.found_dead_at.setdefault(wid, now)
            if now - first_seen >= DEATH_GRACE_SECONDS:
                self.exited[wid] = True
                if self.outcome.dead_worker is None and self.outcome.interrupted_by is None:
                    self.outcome.dead_worker = DeadWorker(wid, proc.pid, proc.exitcode, self.current[wid])
                self.stop_event.set()


def _in_flight_grace(cfg: WorkerConfig) -> float:
    """Inputs in flight may run on to their next ResumePoint for this long after a stop."""
    return cfg.inflight.stop_grace if cfg.inflight.in_flight else 0.0


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
