"""Run history: one small record per optimize() call on a node (an *attempt*), kept in the
output itself so that ``shardwright status``, ``shardwright runs`` and the jobs service can
say what happened to a run after the process that ran it is gone.

``.shardwright/history/{started_ns:020d}-{attempt id}.json`` holds an :class:`Attempt`:
when, who (host, pid, user, Slurm task), how far (inputs done before and after, items
written) and how it ended (``published``, ``waiting`` for other nodes, ``interrupted`` by a
signal, ``failed`` with the error's class, user/system kind, message, input index and
worker). An attempt killed by SIGKILL or a power cut writes nothing: its run shows as
interrupted. History is informational: nothing in the commit protocol reads it, so a lost
or damaged history file never changes what is committed. It is bounded: at most
:data:`MAX_ATTEMPTS` files (the oldest are deleted) and every text field is capped.
"""

from __future__ import annotations

import getpass
import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, fields

from ..errors import bounded_text, classify
from ..process import host_identity, slurm_task
from ..storage import Storage
from .jsonio import dumps
from .layout import HISTORY_PREFIX

MAX_ATTEMPTS = 100
MAX_MESSAGE = 2_000
MAX_RECORD_BYTES = 64 * 1024
ENDINGS = ("published", "waiting", "noop", "interrupted", "failed")


@dataclass(frozen=True)
class StopError:
    """The error that ended an attempt."""

    type: str  # the exception's class name
    kind: str  # "user" or "system" (errors.ERROR_CLASSIFICATION)
    message: str  # capped at MAX_MESSAGE characters
    input_index: int | None = None  # the input fn failed on / a dead worker was on
    worker: int | None = None


@dataclass(frozen=True)
class Attempt:
    """One optimize() call on one node, as it ended."""

    attempt_id: str
    run_id: str | None  # None when it stopped before a run existed (a refused call)
    mode: str | None
    node_rank: int
    num_nodes: int
    host: str
    pid: int
    user: str
    slurm_task: str | None
    started_at: float
    finished_at: float
    inputs_total: int
    inputs_done_before: int
    inputs_done_after: int
    items_written: int
    ended: str  # one of ENDINGS
    error: StopError | None = None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> Attempt | None:
        """The attempt, or None for anything that is not one (history is best effort)."""
        if not isinstance(data, dict):
            return None
        names = {f.name for f in fields(cls)}
        try:
            values = {k: v for k, v in data.items() if k in names}
            error = values.get("error")
            if error is not None:
                values["error"] = StopError(
                    **{k: v for k, v in error.items() if k in {f.name for f in fields(StopError)}}
                )
            attempt = cls(**values)
        except (TypeError, AttributeError):
            return None
        if attempt.ended not in ENDINGS or not isinstance(attempt.started_at, (int, float)):
            return None
        return attempt


def stop_error(exc: BaseException) -> StopError:
    """What an attempt records of the exception that ended it (never a secret: callers pass
    errors whose messages are already free of credentials; the message is capped)."""
    kind = classify(exc).kind
    return StopError(
        type=type(exc).__name__,
        kind=kind,
        message=bounded_text(str(exc).split("\n--- worker traceback")[0], MAX_MESSAGE),
        input_index=getattr(exc, "input_index", None),
        worker=getattr(exc, "worker", None),
    )


def new_attempt_id() -> str:
    return uuid.uuid4().hex[:12]


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers): the uid says enough
        return str(os.getuid())


def attempt_record(
    *,
    attempt_id: str,
    run_id: str | None,
    mode: str | None,
    node_rank: int,
    num_nodes: int,
    started_at: float,
    inputs_total: int,
    inputs_done_before: int,
    inputs_done_after: int,
    items_written: int,
    ended: str,
    error: StopError | None = None,
) -> Attempt:
    return Attempt(
        attempt_id=attempt_id,
        run_id=run_id,
        mode=mode,
        node_rank=node_rank,
        num_nodes=num_nodes,
        host=host_identity(),
        pid=os.getpid(),
        user=_user(),
        slurm_task=slurm_task(),
        started_at=started_at,
        finished_at=time.time(),
        inputs_total=inputs_total,
        inputs_done_before=inputs_done_before,
        inputs_done_after=inputs_done_after,
        items_written=items_written,
        ended=ended,
        error=error,
    )


def history_key(attempt: Attempt) -> str:
    return f"{HISTORY_PREFIX}{int(attempt.started_at * 1e9):020d}-{attempt.attempt_id}.json"


def record_attempt(storage: Storage, attempt: Attempt) -> None:
    """Write ``attempt`` and trim the history to MAX_ATTEMPTS files (oldest first)."""
    data = dumps(attempt.to_json())
    if len(data) > MAX_RECORD_BYTES:  # cannot happen with capped fields; never store a huge file
        data = dumps(asdict(attempt) | {"error": None})[:MAX_RECORD_BYTES]
    storage.write_bytes(history_key(attempt), data)
    keys = storage.list(HISTORY_PREFIX)
    for key in keys[: max(0, len(keys) - MAX_ATTEMPTS)]:  # names sort by start time
        storage.delete(key)


def read_history(storage: Storage, limit: int = MAX_ATTEMPTS) -> list[Attempt]:
    """The newest ``limit`` attempts, oldest first; unreadable files are skipped."""
    keys = storage.list(HISTORY_PREFIX)[-limit:]
    attempts = []
    for key in keys:
        try:
            if storage.size(key) > MAX_RECORD_BYTES:
                continue  # never read a huge (hand-made or damaged) file into memory
            raw = storage.read_bytes(key)
        except (FileNotFoundError, IsADirectoryError):
            continue
        if len(raw) > MAX_RECORD_BYTES:  # grew between the two calls
            continue
        try:
            attempt = Attempt.from_json(json.loads(raw))
        except (ValueError, UnicodeDecodeError, RecursionError):
            continue
        if attempt is not None:
            attempts.append(attempt)
    return attempts


def last_attempt_of(storage: Storage, run_id: str) -> Attempt | None:
    """The newest attempt of ``run_id`` (across nodes), or None."""
    for attempt in reversed(read_history(storage)):
        if attempt.run_id == run_id:
            return attempt
    return None
