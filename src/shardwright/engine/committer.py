"""The committer of a worker: commits chunks in rounds, on two threads (writing, sealing),
while the worker computes on."""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable

from .. import telemetry
from ..protocol.commit import PendingChunk, RoundSettings, seal_round, write_chunks
from ..protocol.progress import ProgressSnapshot, SnapshotWriter
from ..protocol.record_log import RecordLog
from ..protocol.records import CommitRecord
from ..storage import Storage

# What may wait for the committer per worker: bounds memory, while small chunks still batch
# into large commit rounds (one barrier per round).
PENDING_BYTES_LIMIT = 64 * 1024 * 1024
PENDING_CHUNKS_LIMIT = 256
# Written rounds queued for the sealer; the writer may hold one more while it waits to queue
# it. Bounds how far writing runs ahead of durability (the dirty page cache), not memory: a
# round's items are dropped once written.
SEALING_ROUNDS = 1
ROUND_LIMIT_ENV = "SHARDWRIGHT_COMMIT_ROUND"  # most chunks per commit round (tests: 1 record file per chunk)


class ChunkCommitter:
    """Commits chunks, in order, on two threads of its own (group commit, pipelined).

    The *writer* thread takes every chunk waiting in the queue as one round and writes its
    chunk files (:func:`~shardwright.protocol.commit.write_chunks`, protocol step 1); the
    chunks' memory is then free for the worker's next ones. The *sealer* thread takes the
    rounds in the same order and commits them (:func:`~shardwright.protocol.commit.seal_round`:
    barrier, fencing check, records). So the disk flushes round k while round k+1 is written
    into the page cache: large chunks no longer alternate copying and flushing (issue 19:
    the writer waited for every fsync before it could write the next chunk). At most
    SEALING_ROUNDS written rounds are queued for the sealer, plus the one the writer holds
    while it waits to queue it.

    Records become durable as soon as the sealer is idle: when no written round waits for it,
    it runs a barrier for the round's records at once, while the writer is still on the next
    round, so the next round's barrier (which a worker's last round waits for at close) holds
    its chunks alone. The last round's records get no barrier of their own: publishing names
    chunks that are durable already, and a power cut before the dataset is published only
    loses those records, which means redoing that round (the failures run.json lists then come
    from the selection written before index.json: protocol.publish.published_failures).

    After a power cut only records of the last round can be torn or lost; load_progress drops a
    torn record and every later one of its shard, which only means redoing those chunks. A
    failure stops the writer; the sealer still commits the rounds written before it (their
    chunks are good), then stops too.
    """

    def __init__(self, storage: Storage, run: RoundSettings, on_commit: Callable[[CommitRecord, str | None], None]):
        self.storage = storage
        self.run = run
        self.on_commit = on_commit
        self._write_error: BaseException | None = None
        self._seal_error: BaseException | None = None
        self._queue: queue.Queue[PendingChunk | ProgressSnapshot | None] = queue.Queue()
        # (round, its records, whether it is the worker's last, a snapshot after it, when its
        # writing started); None: no more rounds
        self._sealing: queue.Queue[
            tuple[list[PendingChunk], list[CommitRecord], bool, ProgressSnapshot | None, float] | None
        ] = queue.Queue(maxsize=SEALING_ROUNDS)
        self._room = threading.Condition()
        self._snapshots = SnapshotWriter(storage)  # on the sealer thread only
        # where storage appends in place, this worker's rounds go to one record log (issue 36)
        self._log = RecordLog(storage) if storage.APPENDS and run.use_checkpoint else None  # sealer thread only
        self._pending_bytes = 0
        self._pending_chunks = 0
        self._round_limit = int(os.environ.get(ROUND_LIMIT_ENV, PENDING_CHUNKS_LIMIT))
        self._sealer = threading.Thread(target=self._seal_loop, name="chunk-sealer", daemon=True)
        self._sealer.start()
        self._thread = threading.Thread(target=self._write_loop, name="chunk-committer", daemon=True)
        self._thread.start()

    @property
    def error(self) -> BaseException | None:
        """The first failure in commit order: a round's sealing comes before a later write."""
        return self._seal_error or self._write_error

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

    def save_progress(self, snapshot: ProgressSnapshot) -> None:
        """Write ``snapshot`` (protocol.progress) once every chunk submitted before it is
        committed: it then never claims less than the records it extends."""
        self.raise_if_failed()
        self._queue.put(snapshot)

    def raise_if_failed(self) -> None:
        error = self.error
        if error is not None:
            raise error

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._sealer.join()
        self.raise_if_failed()

    def _next_round(self) -> tuple[list[PendingChunk], bool, ProgressSnapshot | None]:
        """Every chunk waiting (up to the round limit, or up to a progress snapshot, which
        ends the round), whether close() was called, and the snapshot."""
        first = self._queue.get()
        if first is None:
            return [], True, None
        if isinstance(first, ProgressSnapshot):
            return [], False, first
        batch = [first]
        while len(batch) < self._round_limit:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return batch, True, None
            if isinstance(job, ProgressSnapshot):
                return batch, False, job
            batch.append(job)
        return batch, False, None

    def _release(self, batch: list[PendingChunk]) -> None:
        """The round's chunks are in the store's hands (local disk: the page cache): their
        items are dropped (the worker keeps no reference to them) and their room is free."""
        freed = sum(job.nbytes for job in batch)  # before the items go (nbytes may not be cached yet)
        for job in batch:
            job.items.clear()
        with self._room:
            self._pending_chunks -= len(batch)
            self._pending_bytes -= freed
            self._room.notify_all()

    def _write_loop(self) -> None:
        closing = False
        try:
            while not closing:
                batch, closing, snapshot = self._next_round()
                records: list[CommitRecord] = []
                started = time.perf_counter()
                try:
                    if self.error is None and batch:
                        records = write_chunks(self.storage, batch, self.run)
                except BaseException as exc:  # reported through raise_if_failed; nothing after it commits
                    self._write_error = exc
                finally:
                    self._release(batch)
                if records or (snapshot is not None and self.error is None):
                    self._sealing.put((batch, records, closing, snapshot, started))
        finally:
            self._sealing.put(None)

    def _seal_loop(self) -> None:
        while True:
            item = self._sealing.get()
            if item is None:
                break
            batch, records, last, snapshot, started = item
            if self._seal_error is not None:
                continue  # an earlier round failed: nothing after it commits
            try:
                counters = telemetry.get()
                with counters.span("shardwright.commit", chunks=len(batch)):
                    keys: list[str | None] = [*seal_round(self.storage, batch, records, self.run, self._log)]
                if batch:
                    counters.chunks_committed(len(batch), time.perf_counter() - started)
                for record, key in zip(records, keys or [None] * len(records)):
                    self.on_commit(record, key)  # with the key of the file it is in (records.trusted_progress)
                if snapshot is not None:  # after the records it extends (protocol.progress)
                    self._snapshots.write(snapshot)
                if self.run.use_checkpoint and not last and self._sealing.empty():
                    self.storage.barrier()  # idle: this round's records, durable now (see the class)
            except BaseException as exc:
                self._seal_error = exc
