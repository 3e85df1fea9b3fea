"""The jobs service's typed records: job states, attempt outcomes, errors, progress, and the
status file a job process reports through (:class:`RunnerReport`).

Records are frozen; each has ``to_json()`` and ``from_json(data, where)``, which accepts what
older servers wrote (missing fields take their defaults) and refuses what no server wrote,
naming the file or row (``where``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from ..errors import CorruptStateError, classify
from .transient import is_transient_fn_failure


class JobState(str, Enum):
    """A job's state as the API shows it ("launching" is the scheduler's own flag, not a state)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELED = "CANCELED"

    def is_terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELED)

    def __str__(self) -> str:
        return self.value


class AttemptOutcome(str, Enum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"
    INTERRUPTED = "interrupted"  # the server stopped while it ran: the job goes back to PENDING

    def __str__(self) -> str:
        return self.value


class Trigger(str, Enum):
    """Why an attempt started."""

    SUBMIT = "submit"
    RETRY = "retry"
    AUTO_RETRY = "auto-retry"
    SERVER_RESTART = "server-restart"

    def __str__(self) -> str:
        return self.value


class TerminalStateError(Exception):
    """A transition out of a terminal state that is not an explicit retry (a bug: refused)."""


def check_transition(old: JobState, new: JobState, *, retry: bool = False) -> None:
    """SUCCEEDED is final; FAILED and CANCELED leave only through an explicit retry (to PENDING)."""
    if not old.is_terminal() or old == new:
        return
    if retry and old in (JobState.FAILED, JobState.CANCELED) and new == JobState.PENDING:
        return
    raise TerminalStateError(f"a {old} job cannot become {new}" + ("" if retry else " (only a retry leaves it)"))


def _object(data: Any, where: str) -> dict:
    if not isinstance(data, dict):
        raise CorruptStateError(f"{where}: expected a JSON object, found {type(data).__name__}")
    return data


def _count(data: dict, key: str, where: str) -> int:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise CorruptStateError(f"{where}: {key} must be a count; found {value!r}")
    return value


def _optional_time(data: dict, key: str, where: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise CorruptStateError(f"{where}: {key} must be a time in seconds; found {value!r}")
    return float(value)


@dataclass(frozen=True)
class JobError:
    """What the API says about a failure: whose (``kind``), which error, on which input."""

    kind: str  # "user" | "system"
    type: str
    message: str
    input_index: int | None = None
    transient: bool = False  # retried automatically by the service (errors.classify)

    MESSAGE_LIMIT = 4000

    @classmethod
    def from_exception(cls, exc: BaseException, message: str | None = None) -> JobError:
        """The one builder from an exception: classification from :func:`shardwright.errors.classify`,
        the first part of the message (a worker's traceback stays in the log)."""
        row = classify(exc)
        text = (message if message is not None else str(exc)).split("\n--- worker traceback ---")[0].strip()
        index = getattr(exc, "input_index", None)
        if is_transient_fn_failure(exc):  # a teacher's 429/5xx, a timeout: the system's, retried
            row = replace(row, kind="system", transient=True)
            text = f"a service fn calls failed transiently (retried with backoff): {text}"
        return cls(
            kind=row.kind,
            type=type(exc).__name__,
            message=text[: cls.MESSAGE_LIMIT] or type(exc).__name__,
            input_index=index if isinstance(index, int) and not isinstance(index, bool) else None,
            transient=row.transient,
        )

    @classmethod
    def system(cls, type_: str, message: str, *, transient: bool = False) -> JobError:
        """A failure of the machinery that no exception describes (a process killed, Slurm ended)."""
        return cls("system", type_, message, None, transient)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "type": self.type,
            "message": self.message,
            "input_index": self.input_index,
            "transient": self.transient,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> JobError:
        data = _object(data, where)
        kind, type_, message = data.get("kind"), data.get("type"), data.get("message")
        index, transient = data.get("input_index"), data.get("transient", False)
        if kind not in ("user", "system") or not isinstance(type_, str) or not isinstance(message, str):
            raise CorruptStateError(f"{where}: an error needs kind user|system, type and message; found {data!r:.200}")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            raise CorruptStateError(f"{where}: error input_index must be an int; found {index!r}")
        if not isinstance(transient, bool):
            raise CorruptStateError(f"{where}: error transient must be true or false; found {transient!r}")
        return cls(kind, type_, message[: cls.MESSAGE_LIMIT], index, transient)


@dataclass(frozen=True)
class Progress:
    inputs_done: int = 0
    inputs_total: int = 0
    items: int = 0

    def to_json(self) -> dict:
        return {"inputs_done": self.inputs_done, "inputs_total": self.inputs_total, "items": self.items}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Progress:
        data = _object(data, where)
        return cls(
            _count(data, "inputs_done", where), _count(data, "inputs_total", where), _count(data, "items", where)
        )

    def finished(self) -> Progress:
        """Every input done (the dataset is published)."""
        return replace(self, inputs_done=self.inputs_total)


class ReportState(str, Enum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RunResult:
    published: bool
    items: int
    resumed: bool

    def to_json(self) -> dict:
        return {"published": self.published, "items": self.items, "resumed": self.resumed}


@dataclass(frozen=True)
class RunnerReport:
    """The status file a job process writes (atomically, every second) and the server reads:
    it survives the server, so a restarted server still learns how an attempt ended."""

    attempt: int
    state: ReportState = ReportState.RUNNING
    pid: int | None = None
    progress: Progress | None = None
    error: JobError | None = None
    signal: str | None = None  # INTERRUPTED: which signal stopped it
    started_at: float | None = None
    updated_at: float | None = None
    finished_at: float | None = None
    result: RunResult | None = None
    extra: dict = field(default_factory=dict, compare=False)  # fields a newer runner wrote: kept as is

    def to_json(self) -> dict:
        return {
            **self.extra,
            "attempt": self.attempt,
            "pid": self.pid,
            "state": self.state.value,
            "progress": self.progress.to_json() if self.progress else None,
            "error": self.error.to_json() if self.error else None,
            "signal": self.signal,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            "finished_at": self.finished_at,
            "result": self.result.to_json() if self.result else None,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> RunnerReport:
        data = _object(data, where)
        known = {"attempt", "pid", "state", "progress", "error", "signal", "started_at", "updated_at"}
        known |= {"finished_at", "result"}
        try:
            state = ReportState(data.get("state", "running"))
        except ValueError:
            raise CorruptStateError(f"{where}: unknown state {data.get('state')!r}") from None
        attempt, pid = data.get("attempt", 0), data.get("pid")
        if isinstance(attempt, bool) or not isinstance(attempt, int):
            raise CorruptStateError(f"{where}: attempt must be an int; found {attempt!r}")
        if pid is not None and (isinstance(pid, bool) or not isinstance(pid, int)):
            raise CorruptStateError(f"{where}: pid must be an int; found {pid!r}")
        result = data.get("result")
        if result is not None:
            result = _object(result, where)
            result = RunResult(
                result.get("published") is True, _count(result, "items", where), result.get("resumed") is True
            )
        signal = data.get("signal")
        return cls(
            attempt=attempt,
            state=state,
            pid=pid,
            progress=Progress.from_json(data["progress"], where) if data.get("progress") is not None else None,
            error=JobError.from_json(data["error"], where) if data.get("error") is not None else None,
            signal=signal if isinstance(signal, str) else None,
            started_at=_optional_time(data, "started_at", where),
            updated_at=_optional_time(data, "updated_at", where),
            finished_at=_optional_time(data, "finished_at", where),
            result=result,
            extra={k: v for k, v in data.items() if k not in known},
        )


__all__ = [
    "AttemptOutcome",
    "JobError",
    "JobState",
    "Progress",
    "ReportState",
    "RunResult",
    "RunnerReport",
    "TerminalStateError",
    "Trigger",
    "check_transition",
]
