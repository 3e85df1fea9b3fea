"""Typed messages between worker processes and the main process (frozen, picklable)."""

from __future__ import annotations

import pickle
from dataclasses import dataclass

from ..errors import bounded_text
from ..protocol.records import CommitRecord
from ..secrets import redact, redact_exception, secret_values
from .guards import explain_fn_error

MAX_STORED_TEXT = 16_000  # characters of an error message or traceback kept in records and errors


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


def _describe(exc: BaseException) -> str:
    return bounded_text(explain_fn_error(f"{type(exc).__name__}: {exc}"), MAX_STORED_TEXT)


def worker_failed(
    wid: int, kind: str, exc: BaseException, input_index: int, tb: str, secrets: list[str] | None = None
) -> WorkerFailed:
    """The WorkerFailed message of ``exc``: its message and traceback bounded and redacted,
    the exception itself pickled when it pickles and says nothing the redaction hid."""
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
