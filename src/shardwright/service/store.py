"""The job store: a small interface (:class:`JobStore`) and its SQLite implementation.

Only the server process writes the store; job processes report through status files
(see runner.py). Nothing secret is stored: a job keeps the *names* of its storage_options,
never their values (those live in the server's memory only, see scheduler.py).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import CorruptStateError, StorageError
from ..storage.files import is_disk_full as storage_disk_full
from .model import AttemptOutcome, JobError, JobState, Progress, Trigger, check_transition

STATES = tuple(s.value for s in JobState)
FINAL_STATES = tuple(s.value for s in JobState if s.is_terminal())


class StoreFullError(StorageError):
    """The disk under the job store is full (HTTP 507): nothing of the request was kept."""


@dataclass(frozen=True)
class AttemptRecord:
    number: int
    trigger: Trigger
    started_at: float
    finished_at: float | None = None
    outcome: AttemptOutcome = AttemptOutcome.RUNNING
    error: JobError | None = None
    pid: int | None = None
    pid_start: str | None = None  # the process's start time (/proc), so a reused pid is never killed
    slurm_job_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobRecord:
    id: str
    state: JobState
    pipeline: str
    inputs: list | dict | None  # None in list() results (they can be large); get() has them; a dict: a source
    output_dir: str
    config: dict
    options: dict
    executor: dict
    storage_option_keys: tuple[str, ...]
    created_at: float
    queue_pos: int = 0
    progress: Progress = field(default_factory=Progress)
    error: JobError | None = None
    started_at: float | None = None
    finished_at: float | None = None
    cancel_requested: bool = False
    auto_retries: int = 0  # automatic retries used since the last submit/retry
    not_before: float = 0.0  # an automatic retry waits until then
    attempts: tuple[AttemptRecord, ...] = ()  # oldest first

    @property
    def current_attempt(self) -> AttemptRecord | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def executor_kind(self) -> str:
        return str(self.executor.get("kind", "local"))


class JobStore(ABC):
    """What the service needs from a job database. Every change of ``state`` passes the guard
    :func:`~shardwright.service.model.check_transition` (``retry=True`` only for an explicit retry)."""

    @abstractmethod
    def create(self, job: JobRecord) -> JobRecord: ...

    @abstractmethod
    def get(self, job_id: str) -> JobRecord | None: ...

    @abstractmethod
    def list(self, state: JobState | None = None, limit: int = 1000) -> list[JobRecord]:
        """Jobs in queue order, without their inputs (``inputs`` is None)."""

    @abstractmethod
    def update(self, job_id: str, *, retry: bool = False, **fields: Any) -> JobRecord: ...

    @abstractmethod
    def delete(self, job_id: str) -> bool: ...

    @abstractmethod
    def add_attempt(self, job_id: str, attempt: AttemptRecord, **job_fields: Any) -> JobRecord:
        """Record a new attempt and change the job's fields in one transaction."""

    @abstractmethod
    def update_attempt(self, job_id: str, number: int, **fields: Any) -> None: ...

    @abstractmethod
    def next_queue_pos(self) -> int: ...


def new_job_id() -> str:
    return uuid.uuid4().hex[:12]


def _decode_error(value: Any, where: str) -> JobError | None:
    return JobError.from_json(value, where) if value is not None else None


# column -> (encode for SQLite, decode from SQLite); columns not listed are stored as they are
_ENCODE: dict[str, Callable[[Any], Any]] = {
    "state": lambda v: JobState(v).value,
    "outcome": lambda v: AttemptOutcome(v).value,
    "trigger": lambda v: Trigger(v).value,
    "progress": lambda v: json.dumps(v.to_json()),
    "error": lambda v: json.dumps(v.to_json()) if v is not None else None,
    "cancel_requested": int,
    **{k: (lambda v: json.dumps(list(v) if isinstance(v, tuple) else v)) for k in ("inputs", "config", "options")},
    **{k: (lambda v: json.dumps(list(v))) for k in ("storage_option_keys", "slurm_job_ids")},
    "executor": json.dumps,
}


def _encode(values: dict) -> dict:
    return {k: _ENCODE[k](v) if k in _ENCODE else v for k, v in values.items()}


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, state TEXT NOT NULL, pipeline TEXT NOT NULL, inputs TEXT NOT NULL,
    output_dir TEXT NOT NULL, config TEXT NOT NULL, options TEXT NOT NULL, executor TEXT NOT NULL,
    storage_option_keys TEXT NOT NULL, created_at REAL NOT NULL, queue_pos INTEGER NOT NULL,
    progress TEXT NOT NULL, error TEXT, started_at REAL, finished_at REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0, auto_retries INTEGER NOT NULL DEFAULT 0,
    not_before REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, queue_pos);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE, number INTEGER NOT NULL,
    trigger TEXT NOT NULL, started_at REAL NOT NULL, finished_at REAL, outcome TEXT NOT NULL,
    error TEXT, pid INTEGER, pid_start TEXT, slurm_job_ids TEXT NOT NULL,
    PRIMARY KEY (job_id, number)
);
"""


class SqliteJobStore(JobStore):
    """SQLite (WAL) behind a lock: one connection, used by the server's threads. The schema is
    the one the first servers wrote: their stores load as they are."""

    def __init__(self, path: str):
        self.path = path
        if not os.path.exists(path):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))  # job records: owner only
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
            self._list_columns = [r[1] for r in self._db.execute("PRAGMA table_info(jobs)") if r[1] != "inputs"]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- rows <-> records ---------------------------------------------------------------------

    def _attempt(self, row: sqlite3.Row) -> AttemptRecord:
        where = f"{self.path}: job {row['job_id']} attempt {row['number']}"
        try:
            return AttemptRecord(
                number=int(row["number"]),
                trigger=Trigger(row["trigger"]),
                started_at=float(row["started_at"]),
                finished_at=row["finished_at"],
                outcome=AttemptOutcome(row["outcome"]),
                error=_decode_error(json.loads(row["error"]) if row["error"] else None, where),
                pid=row["pid"],
                pid_start=row["pid_start"],
                slurm_job_ids=tuple(str(i) for i in json.loads(row["slurm_job_ids"] or "[]")),
            )
        except ValueError as exc:
            raise CorruptStateError(f"{where}: {exc}") from None

    def _job(self, row: sqlite3.Row) -> JobRecord:
        data = dict(row)
        where = f"{self.path}: job {data['id']}"
        try:
            rows = self._db.execute("SELECT * FROM attempts WHERE job_id = ? ORDER BY number", (data["id"],))
            return JobRecord(
                id=data["id"],
                state=JobState(data["state"]),
                pipeline=data["pipeline"],
                inputs=json.loads(data["inputs"]) if data.get("inputs") is not None else None,
                output_dir=data["output_dir"],
                config=json.loads(data["config"]),
                options=json.loads(data["options"]),
                executor=json.loads(data["executor"]),
                storage_option_keys=tuple(json.loads(data["storage_option_keys"])),
                created_at=float(data["created_at"]),
                queue_pos=int(data["queue_pos"]),
                progress=Progress.from_json(json.loads(data["progress"]), where),
                error=_decode_error(json.loads(data["error"]) if data["error"] else None, where),
                started_at=data["started_at"],
                finished_at=data["finished_at"],
                cancel_requested=bool(data["cancel_requested"]),
                auto_retries=int(data["auto_retries"]),
                not_before=float(data["not_before"]),
                attempts=tuple(self._attempt(r) for r in rows.fetchall()),
            )
        except ValueError as exc:  # json, enums
            raise CorruptStateError(f"{where}: {exc}") from None

    def _write(self, sql: str, args: tuple) -> sqlite3.Cursor:
        try:
            return self._db.execute(sql, args)
        except sqlite3.OperationalError as exc:
            if "full" in str(exc).lower():
                raise StoreFullError(f"the disk under the job store {self.path} is full: free space there") from None
            raise

    def _get_row(self, job_id: str) -> sqlite3.Row:
        found = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if found is None:
            raise KeyError(job_id)
        return found

    # -- the interface --------------------------------------------------------------------------

    def create(self, job: JobRecord) -> JobRecord:
        row = _encode({f.name: getattr(job, f.name) for f in fields(job) if f.name != "attempts"})
        with self._lock:
            self._write(
                f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values())
            )
            return self._job(self._get_row(job.id))

    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            return self._job(row) if row else None

    def list(self, state: JobState | None = None, limit: int = 1000) -> list[JobRecord]:
        columns = ", ".join(self._list_columns)
        with self._lock:
            if state:
                rows = self._db.execute(
                    f"SELECT {columns} FROM jobs WHERE state = ? ORDER BY queue_pos LIMIT ?",
                    (JobState(state).value, limit),
                )
            else:
                rows = self._db.execute(f"SELECT {columns} FROM jobs ORDER BY queue_pos LIMIT ?", (limit,))
            return [self._job(r) for r in rows.fetchall()]

    def _update(self, job_id: str, retry: bool, values: dict) -> None:
        """Under self._lock, inside a transaction."""
        if "state" in values:
            check_transition(JobState(self._get_row(job_id)["state"]), JobState(values["state"]), retry=retry)
        row = _encode(values)
        if row:
            sets = ", ".join(f"{k} = ?" for k in row)
            self._write(f"UPDATE jobs SET {sets} WHERE id = ?", (*row.values(), job_id))

    def update(self, job_id: str, *, retry: bool = False, **values: Any) -> JobRecord:
        with self._lock, self._transaction():
            self._update(job_id, retry, values)
            return self._job(self._get_row(job_id))

    def delete(self, job_id: str) -> bool:
        with self._lock, self._transaction():
            self._write("DELETE FROM attempts WHERE job_id = ?", (job_id,))
            return self._write("DELETE FROM jobs WHERE id = ?", (job_id,)).rowcount > 0

    def add_attempt(self, job_id: str, attempt: AttemptRecord, **job_fields: Any) -> JobRecord:
        row = {"job_id": job_id, **_encode({f.name: getattr(attempt, f.name) for f in fields(attempt)})}
        with self._lock, self._transaction():
            self._update(job_id, False, job_fields)
            self._write(
                f"INSERT INTO attempts ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values())
            )
            return self._job(self._get_row(job_id))

    def update_attempt(self, job_id: str, number: int, **values: Any) -> None:
        row = _encode(values)
        with self._lock:
            sets = ", ".join(f"{k} = ?" for k in row)
            self._write(f"UPDATE attempts SET {sets} WHERE job_id = ? AND number = ?", (*row.values(), job_id, number))

    def next_queue_pos(self) -> int:
        with self._lock:
            (top,) = self._db.execute("SELECT COALESCE(MAX(queue_pos), 0) FROM jobs").fetchone()
            return int(top) + 1

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error (the connection is in autocommit mode)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind, exc, tb) -> None:
        if kind is not None:
            self.db.execute("ROLLBACK")
            return
        try:
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as error:
            self.db.execute("ROLLBACK")
            if "full" in str(error).lower():
                raise StoreFullError(f"the disk under the job store is full ({error}): free space there") from None
            raise


def is_disk_full(exc: BaseException) -> bool:
    """The job store's disk is full: SQLite's "full" error, or an OSError the storage layer
    calls one (storage.files, the one home of those errnos)."""
    return isinstance(exc, StoreFullError) or storage_disk_full(exc)


__all__ = [
    "AttemptRecord",
    "JobRecord",
    "JobStore",
    "SqliteJobStore",
    "StoreFullError",
    "STATES",
    "FINAL_STATES",
    "is_disk_full",
    "new_job_id",
    "replace",
]
