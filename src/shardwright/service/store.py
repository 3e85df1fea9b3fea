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
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace

STATES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELED")
FINAL_STATES = ("SUCCEEDED", "FAILED", "CANCELED")


@dataclass(frozen=True)
class AttemptRecord:
    number: int
    trigger: str  # "submit" | "retry" | "auto-retry" | "server-restart"
    started_at: float
    finished_at: float | None = None
    outcome: str = "running"  # running | succeeded | failed | canceled | interrupted
    error: dict | None = None
    pid: int | None = None
    pid_start: str | None = None  # the process's start time (/proc), so a reused pid is never killed
    slurm_job_ids: tuple = ()


@dataclass(frozen=True)
class JobRecord:
    id: str
    state: str
    pipeline: str
    inputs: list | None  # None in list() results (they can be large); get() has them
    output_dir: str
    config: dict
    options: dict
    executor: dict
    storage_option_keys: tuple
    created_at: float
    queue_pos: int = 0
    progress: dict = field(default_factory=lambda: {"inputs_done": 0, "inputs_total": 0, "items": 0})
    error: dict | None = None
    started_at: float | None = None
    finished_at: float | None = None
    cancel_requested: bool = False
    auto_retries: int = 0  # automatic retries used since the last submit/retry
    not_before: float = 0.0  # an automatic retry waits until then
    attempts: tuple = ()  # AttemptRecord, oldest first

    @property
    def current_attempt(self) -> AttemptRecord | None:
        return self.attempts[-1] if self.attempts else None


class JobStore(ABC):
    """What the service needs from a job database."""

    @abstractmethod
    def create(self, job: JobRecord) -> JobRecord: ...

    @abstractmethod
    def get(self, job_id: str) -> JobRecord | None: ...

    @abstractmethod
    def list(self, state: str | None = None, limit: int = 1000) -> list[JobRecord]:
        """Jobs in queue order, without their inputs (``inputs`` is None)."""

    @abstractmethod
    def update(self, job_id: str, **fields) -> JobRecord: ...

    @abstractmethod
    def delete(self, job_id: str) -> bool: ...

    @abstractmethod
    def add_attempt(self, job_id: str, attempt: AttemptRecord) -> None: ...

    @abstractmethod
    def update_attempt(self, job_id: str, number: int, **fields) -> None: ...

    @abstractmethod
    def next_queue_pos(self) -> int: ...


def new_job_id() -> str:
    return uuid.uuid4().hex[:12]


_JSON_JOB = ("inputs", "config", "options", "executor", "storage_option_keys", "progress", "error")
_JSON_ATTEMPT = ("error", "slurm_job_ids")

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
    """SQLite (WAL) behind a lock: one connection, used by the server's threads."""

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

    @staticmethod
    def _attempt(row) -> AttemptRecord:
        data = dict(row)
        data.pop("job_id")
        for key in _JSON_ATTEMPT:
            data[key] = json.loads(data[key]) if data[key] is not None else None
        data["slurm_job_ids"] = tuple(data["slurm_job_ids"] or ())
        return AttemptRecord(**data)

    def _job(self, row) -> JobRecord:
        data = dict(row)
        data.setdefault("inputs", None)
        for key in _JSON_JOB:
            data[key] = json.loads(data[key]) if data[key] is not None else None
        data["storage_option_keys"] = tuple(data["storage_option_keys"])
        data["cancel_requested"] = bool(data["cancel_requested"])
        rows = self._db.execute("SELECT * FROM attempts WHERE job_id = ? ORDER BY number", (data["id"],))
        data["attempts"] = tuple(self._attempt(r) for r in rows)
        return JobRecord(**data)

    @staticmethod
    def _encode(fields: dict, json_keys) -> dict:
        out = {}
        for key, value in fields.items():
            if key in json_keys:
                value = json.dumps(list(value) if isinstance(value, tuple) else value) if value is not None else None
            elif isinstance(value, bool):
                value = int(value)
            out[key] = value
        return out

    # -- the interface --------------------------------------------------------------------------

    def create(self, job: JobRecord) -> JobRecord:
        fields = {k: v for k, v in job.__dict__.items() if k != "attempts"}
        row = self._encode(fields, _JSON_JOB)
        with self._lock:
            self._db.execute(
                f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values())
            )
            return self._job(self._db.execute("SELECT * FROM jobs WHERE id = ?", (job.id,)).fetchone())

    def get(self, job_id: str) -> JobRecord | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            return self._job(row) if row else None

    def list(self, state: str | None = None, limit: int = 1000) -> list[JobRecord]:
        columns = ", ".join(self._list_columns)
        with self._lock:
            if state:
                rows = self._db.execute(
                    f"SELECT {columns} FROM jobs WHERE state = ? ORDER BY queue_pos LIMIT ?", (state, limit)
                )
            else:
                rows = self._db.execute(f"SELECT {columns} FROM jobs ORDER BY queue_pos LIMIT ?", (limit,))
            return [self._job(r) for r in rows.fetchall()]

    def update(self, job_id: str, **fields) -> JobRecord:
        row = self._encode(fields, _JSON_JOB)
        with self._lock:
            if row:
                sets = ", ".join(f"{k} = ?" for k in row)
                self._db.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*row.values(), job_id))
            found = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if found is None:
                raise KeyError(job_id)
            return self._job(found)

    def delete(self, job_id: str) -> bool:
        with self._lock:
            self._db.execute("DELETE FROM attempts WHERE job_id = ?", (job_id,))
            return self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,)).rowcount > 0

    def add_attempt(self, job_id: str, attempt: AttemptRecord) -> None:
        row = {"job_id": job_id, **self._encode(attempt.__dict__, _JSON_ATTEMPT)}
        with self._lock:
            self._db.execute(
                f"INSERT INTO attempts ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", tuple(row.values())
            )

    def update_attempt(self, job_id: str, number: int, **fields) -> None:
        row = self._encode(fields, _JSON_ATTEMPT)
        with self._lock:
            sets = ", ".join(f"{k} = ?" for k in row)
            self._db.execute(
                f"UPDATE attempts SET {sets} WHERE job_id = ? AND number = ?", (*row.values(), job_id, number)
            )

    def next_queue_pos(self) -> int:
        with self._lock:
            (top,) = self._db.execute("SELECT COALESCE(MAX(queue_pos), 0) FROM jobs").fetchone()
            return int(top) + 1


def now() -> float:
    return time.time()


__all__ = [
    "AttemptRecord",
    "JobRecord",
    "JobStore",
    "SqliteJobStore",
    "STATES",
    "FINAL_STATES",
    "new_job_id",
    "replace",
    "now",
]
