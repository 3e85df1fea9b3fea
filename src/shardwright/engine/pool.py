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

    def current_inputs(self) -> list[int]:
        """The run-wide input each worker is on (-1 before its first), while :meth:`run` runs."""
        current = getattr(self, "_current", None)
        return list(current) if current is not None else []

    def run(  # noqa: C901  (complexity 32; being split into a small watch object, issue 31 §5)
        self,
        tasks: list[ShardTask],
        on_message: Callable[[Any], None],
        on_idle: Callable[[], str | None],
        feed: Callable[[], ShardTask | None] | None = None,
    ) -> PoolOutcome:
        """Run ``tasks``; ``on_message`` gets every Progress/Committed message, ``on_idle`` is
        called ten times a second and stops the pool at once when it returns a reason.
        ``feed`` (optional) gives more tasks after ``tasks``, one at a time, just before a
        worker can take it (so a shard is claimed when it starts, not when the run starts);
        None when there are no more."""
        # cast: typeshed's BaseContext lacks Process, which every concrete context has
        ctx = cast(Any, mp.get_context(self.start_method))
        task_q, result_q = ctx.Queue(), ctx.Queue()
        stop_event = ctx.Event()
        current = ctx.Array("q", [-1] * self.num_workers, lock=False)
        self._current = current
        procs = [
            ctx.Process(
                target=worker_main,
                name=f"shardwright-worker-{wid}",
                daemon=True,
                args=(wid, self.fn, self.cfg, task_q, result_q, stop_event, current),
            )
            for wid in range(self.num_workers)
        ]
        for proc in procs:
            proc.start()
        for task in tasks:
            task_q.put(task)
        queued = len(tasks)  # tasks put and not yet known to be taken (an upper bound)
        fed_all = feed is None

        def top_up() -> None:
            nonlocal queued, fed_all
            if not fed_all and stop_event.is_set():
                fed_all = True  # stopping: no more tasks, but idle workers must still get their sentinel
            elif not fed_all:
                try:
                    queued = min(queued, task_q.qsize())
                except NotImplementedError:  # macOS: keep one task ahead of each worker at most
                    queued = min(queued, len(procs) - 1)
                while queued < len(procs):
                    task = feed() if feed is not None else None
                    if task is None:
                        fed_all = True
                        break
                    task_q.put(task)
                    queued += 1
            if fed_all:
                for _ in procs:
                    task_q.put(None)

        if fed_all:
            top_up()

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
                if not fed_all:
                    top_up()
                try:
                    message = result_q.get(timeout=0.1)
                except queue.Empty:
                    message = None
                if isinstance(message, WorkerExited):
                    exited[message.wid] = True
                elif isinstance(message, WorkerFailed):
                    if outcome.error is None and outcome.dead_worker is None:
                        outcome.error = message
                    stop_event.set()
                elif message is not None:
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
                            outcome.dead_worker = DeadWorker(wid, proc.pid, proc.exitcode, current[wid])
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
