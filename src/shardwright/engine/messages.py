"""Typed messages between worker processes and the main process (frozen, picklable)."""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.records import CommitRecord


@dataclass(frozen=True)
class Progress:
    """``inputs`` more inputs finished since the worker's previous Progress."""

    wid: int
    inputs: int


@dataclass(frozen=True)
class Committed:
    """A commit record of this worker became the commit point of its chunk."""

    wid: int
    record: CommitRecord
    file_key: str | None = None  # the record file it was written into (records.trusted_progress)


@dataclass(frozen=True)
class InFlight:
    """The inputs a worker has in flight now (``concurrency``, engine.inflight), each with the
    JSON of its last ResumePoint state ("" before its first): for ``shardwright status``."""

    wid: int
    inputs: tuple[int, ...]
    states: tuple[str, ...]
    calls: tuple[int, ...] = ()  # each input's calls in flight under a Limiter (engine.call_count)


@dataclass(frozen=True)
class WorkerFailed:
    """The worker stops because of an error. ``kind``: "fn" (fn raised on ``input_index``),
    "setup" (the worker could not start), "storage" (a commit failed), "shardwright" (one of
    our errors, e.g. a sample that cannot be written) or "internal" (a bug)."""

    wid: int
    kind: str
    message: str
    input_index: int
    traceback: str
    pickled_exception: bytes | None  # the original exception, when it pickles


@dataclass(frozen=True)
class WorkerExited:
    """The worker's last message. ``stopped``: it stopped early because it was asked to."""

    wid: int
    stopped: bool


WorkerMessage = Progress | Committed | InFlight | WorkerFailed | WorkerExited
