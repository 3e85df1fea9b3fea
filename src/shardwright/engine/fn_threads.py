"""The daemon threads that run a plain (synchronous) fn for the in-flight machinery's asyncio
loop (engine.inflight): a call goes in, an asyncio future of its result comes out."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["FnThreads"]


class FnThreads:
    """``size`` daemon threads running calls for the loop (a stuck fn never holds up the
    process's exit, as a ThreadPoolExecutor's threads would at interpreter shutdown)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int):
        self.loop = loop
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        for k in range(size):
            threading.Thread(target=self._serve, name=f"shardwright-fn-{k}", daemon=True).start()

    def run(self, call: Callable[[], Any]) -> asyncio.Future:
        future = self.loop.create_future()
        self.jobs.put((call, future))
        return future

    def _serve(self) -> None:
        while True:
            call, future = self.jobs.get()
            try:
                result = call()
            except BaseException as exc:
                self.loop.call_soon_threadsafe(settle, future, None, exc)
            else:
                self.loop.call_soon_threadsafe(settle, future, result, None)


def settle(future: asyncio.Future, result: object, exc: BaseException | None) -> None:
    """Complete ``future`` on its loop's thread (a future cancelled meanwhile stays so)."""
    if future.cancelled():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
