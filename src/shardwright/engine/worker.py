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
import time
import traceback
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..errors import ShardwrightError, bounded_text, short_repr
from ..format import TOKENS_LOADER, ItemEncoder, TokenEncoder
from ..process import die_with_parent, host_identity
from ..protocol.claim import claim_format, read_format
from ..protocol.claims import ClaimTicket
from ..protocol.commit import PendingChunk, RoundSettings
from ..protocol.failures import FailureRecord, write_failure
from ..protocol.manifest import Manifest
from ..protocol.records import CommitRecord
from ..secrets import redact, redact_exception, secret_values
from ..sources import BadRow
from ..storage import Storage, open_storage
from .committer import ChunkCommitter
from .failed_dir import FailedDir
from .guards import explain_fn_error
from .messages import Committed, Progress, WorkerExited, WorkerFailed
from .options import OptimizeOptions

PROGRESS_INTERVAL = 0.2  # seconds between progress messages (the bar refreshes every second)
# Seconds between looks at the pool's stop event and the parent's pid. Event.is_set() takes
# the event's locks: checked before every input it was ~15 % of a small item's cost in the
# worker (issue 19's profile). The event is asynchronous anyway (another worker failed, or
# Ctrl-C), so seeing it up to this much later only delays a stop that was already racing
# with the inputs in flight; fencing, not this check, keeps a deposed run from committing.
STOP_CHECK_INTERVAL = 0.02
MAX_STORED_TEXT = 16_000  # characters of an error message or traceback kept in records and errors


class LeaseTicket(Protocol):
    """What workers need of the node's lease (protocol.lease.Lease): its epoch and identity."""

    epoch: int
    key: str
    owner: str


@dataclass(frozen=True)
class WorkerConfig:
    """What every worker of a run needs; derived from the options and the run's manifest."""

    output_dir: str
    storage_options: dict | None
    round: RoundSettings
    chunk_size: int | None
    chunk_bytes: int | None
    on_error: str  # "raise" or "skip"
    max_retries: int
    node_rank: int
    timeout: float | None = None  # seconds per input (SIGALRM in the worker), None: no limit
    tokens: bool = False  # item_loader=TokensLoader(): raw token items, chunk entries with dim
    failed_dir: str | None = None  # where failure records are copied too (failed_dir=), best effort
    retry_run: bool = False  # a run redoing inputs that failed before: a success is "resolved"

    @classmethod
    def for_run(
        cls,
        output_url: str,
        options: OptimizeOptions,
        manifest: Manifest,
        node_rank: int,
        lease: LeaseTicket | None = None,
    ) -> WorkerConfig:
        """``lease``: a run-wide lease every record write checks (None: each shard's claim,
        carried by its ShardTask, is the lease its writes are fenced by)."""
        settings = manifest.settings
        return cls(
            output_dir=output_url,
            storage_options=options.storage_options,
            round=RoundSettings(
                run_id=manifest.run_id,
                generation=manifest.generation,
                compression=settings.compression,
                use_checkpoint=manifest.use_checkpoint,
                epoch=lease.epoch if lease is not None else 0,
                lease_key=lease.key if lease is not None else None,
                lease_owner=lease.owner if lease is not None else None,
            ),
            chunk_size=settings.chunk_size,
            chunk_bytes=settings.chunk_bytes,
            on_error=options.on_error,
            max_retries=options.max_retries,
            node_rank=node_rank,
            timeout=options.timeout,
            tokens=settings.item_loader == TOKENS_LOADER,
            failed_dir=options.engines.failed_dir,
            retry_run=manifest.mode == "retry",
        )


@dataclass(frozen=True)
class ShardTask:
    shard: int
    start: int
    end: int
    next_input: int
    skip_outputs: int
    next_seq: int
    inputs: Sequence  # the input values from next_input to end (a lazy slice of a source)
    ids: Sequence | None = None  # run-wide input ids of those values when they are not next_input.. (a retry)
    base_skips: list | None = None  # a retry: outputs of each input committed by the run that failed it
    prev_epoch: int | None = None  # epoch of the shard's last committed record (its chain's tip)
    claim: ClaimTicket | None = None  # the shard's claim (protocol 5): its epoch names what we write

    def input_id(self, position: int) -> int:
        return self.ids[position - self.next_input] if self.ids is not None else position

    def first_skip(self, position: int) -> int:
        """Outputs of this input already committed, which fn's rerun must not add again."""
        resumed = self.skip_outputs if position == self.next_input else 0
        base = self.base_skips[position - self.next_input] if self.base_skips is not None else 0
        return max(resumed, base)


class FormatGate:
    """Encodes samples; the first sample anywhere in the run fixes the format (format.json)."""

    def __init__(self, storage: Storage, run_id: str, tokens: bool = False):
        self.storage = storage
        self.run_id = run_id
        self.encoder_class = TokenEncoder if tokens else ItemEncoder
        self.encoder: ItemEncoder | TokenEncoder | None = None

    def encode(self, sample, input_index: int) -> bytes:
        if self.encoder is None:
            known = read_format(self.storage, self.run_id)
            if known is None:
                probe = self.encoder_class()
                data = probe.encode(sample, input_index)
                known = claim_format(
                    self.storage, self.run_id, list(probe.data_format or []), probe.data_spec, input_index
                )
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

    def __init__(
        self,
        task: ShardTask,
        cfg: WorkerConfig,
        committer: ChunkCommitter,
        token_itemsize: Callable[[], int | None] | None = None,
    ):
        self.task, self.cfg, self.committer = task, cfg, committer
        self.token_itemsize = token_itemsize  # token datasets: bytes per token, known once encoded
        self.items: list[bytes] = []
        self.items_bytes = 0
        self.seq = task.next_seq
        self.position = (task.next_input, task.skip_outputs)
        self.committed = self.position
        self.first_input = task.next_input
        self.failed: list[list[int]] = []  # [run-wide id, outputs committed] skipped since the last commit
        self.prev_epoch = task.prev_epoch  # the next record follows this epoch's (see protocol: fencing)
        self.epoch = task.claim.epoch if task.claim is not None else cfg.round.epoch
        self.claim = (task.claim.key, task.claim.owner) if task.claim is not None else None

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
        dim = None
        if self.cfg.tokens and self.items and self.token_itemsize is not None:
            dim = self.items_bytes // (self.token_itemsize() or 1)
        self.committer.submit(
            PendingChunk(
                self.task.shard,
                self.seq,
                self.items,
                self.first_input,
                next_input,
                skip,
                done,
                tuple(tuple(pair) for pair in self.failed),
                prev_epoch=self.prev_epoch,
                dim=dim,
                epoch=self.epoch,
                claim=self.claim,
            )
        )
        self.prev_epoch = self.epoch
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

    def _on_commit(self, record: CommitRecord) -> None:
        self.result_q.put(Committed(self.wid, record))

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

    def run_shard(self, task: ShardTask) -> None:
        writer = ShardWriter(task, self.cfg, self.committer, lambda: getattr(self.gate.encoder, "itemsize", None))
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
        apply = self._apply_fn if self.cfg.timeout is None else self._apply  # one call less per input
        while True:
            attempt += 1
            try:
                apply(writer, value, i, input_id, skip)
                writer.position = (i + 1, 0)
                if self.cfg.retry_run and self.failed_dir is not None:
                    self.failed_dir.resolved(input_id, self.cfg.round.generation, self.cfg.node_rank, attempt)
                return
            except (_Stop, ShardwrightError):
                raise
            except (Exception, SystemExit) as exc:  # fn's own failure (sys.exit() in fn too)
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
            raise value.error()
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
        record = FailureRecord(
            input_index=input_id,
            input_repr=redact(short_repr(value, 500), self.secrets),
            exception_type=type(exc).__name__,
            message=redact(bounded_text(str(exc), MAX_STORED_TEXT), self.secrets),
            traceback=redact(bounded_text(traceback.format_exc(), MAX_STORED_TEXT), self.secrets),
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


class InputTimeout(TimeoutError):
    """fn spent longer than ``timeout`` on one input: a failure of that input, like any
    exception fn raises (retried, skipped or raised as on_error says)."""


class _Stop(Exception):
    """Raised inside a worker when the main process (or a signal) asks it to stop."""


class _FnFailed(Exception):
    def __init__(self, original: BaseException, tb: str):
        super().__init__(str(original))
        self.original = original
        self.tb = tb


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


def worker_main(wid: int, fn, cfg: WorkerConfig, task_q, result_q, stop_event, current_inputs) -> None:
    """Entry point of a worker process."""
    die_with_parent()  # a SIGKILLed main process must not leave workers writing on
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
