"""The committer thread of a worker: commits chunks in rounds while the worker computes on."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

from ..protocol.commit import PendingChunk, RoundSettings, commit_round
from ..protocol.records import CommitRecord
from ..storage import Storage

# What may wait for the committer per worker: bounds memory, while small chunks still batch
# into large commit rounds (one barrier per round).
PENDING_BYTES_LIMIT = 64 * 1024 * 1024
PENDING_CHUNKS_LIMIT = 256
ROUND_LIMIT_ENV = "SHARDWRIGHT_COMMIT_ROUND"  # most chunks per commit round (tests: 1 record file per chunk)


class ChunkCommitter:
    """Commits chunks, in order, on a thread of its own (group commit).

    Each round takes every chunk waiting in the queue and commits them with
    :func:`shardwright.protocol.commit.commit_round` (chunk files, one barrier, records).
    After a power cut only records of the last round can be torn; load_progress drops a torn
    record and every later one of its shard, which only means redoing those chunks.
    """

    def __init__(self, storage: Storage, run: RoundSettings, on_commit: Callable[[CommitRecord], None]):
        self.storage = storage
        self.run = run
        self.on_commit = on_commit
        self.error: BaseException | None = None
        self._queue: queue.Queue[PendingChunk | None] = queue.Queue()
        self._room = threading.Condition()
        self._pending_bytes = 0
        self._pending_chunks = 0
        self._round_limit = int(os.environ.get(ROUND_LIMIT_ENV, PENDING_CHUNKS_LIMIT))
        self._thread = threading.Thread(target=self._run, name="chunk-committer", daemon=True)
        self._thread.start()

    def submit(self, job: PendingChunk) -> None:
        self.raise_if_failed()
        size = job.nbytes
        with self._room:  # backpressure; one chunk may always wait, however large
            self._room.wait_for(
                lambda: (
                    self._pending_chunks == 0
                    or (
                        self._pending_bytes + size <= PENDING_BYTES_LIMIT
                        and self._pending_chunks < PENDING_CHUNKS_LIMIT
                    )
                )
            )
            self._pending_bytes += size
            self._pending_chunks += 1
        self._queue.put(job)

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
            first = self._queue.get()
            batch: list[PendingChunk] = []
            if first is None:
                closing = True
            else:
                batch.append(first)
                while len(batch) < self._round_limit:
                    try:
                        job = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if job is None:
                        closing = True
                        break
                    batch.append(job)
            try:
                if self.error is None and batch:
                    for record in commit_round(self.storage, batch, self.run):
                        self.on_commit(record)
                if closing and self.error is None:
                    self.storage.barrier()  # the last round's records, durable before we report done
            except BaseException as exc:  # reported through raise_if_failed; nothing after it commits
                self.error = exc
            finally:
                with self._room:
                    self._pending_chunks -= len(batch)
                    self._pending_bytes -= sum(job.nbytes for job in batch)
                    self._room.notify_all()
