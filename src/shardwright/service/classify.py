"""User or system, and is it worth retrying? The jobs service's view of an error.

Whose error it is and its HTTP status come from the one table in ``shardwright.errors``
(:data:`~shardwright.errors.ERROR_CLASSIFICATION`, :func:`~shardwright.errors.classify`).
The service adds one thing: which *system* errors are **transient**, i.e. retried
automatically (up to ``--auto-retries``), each retry an attempt of its own:

=====================  =====================================================
transient              why a new attempt may succeed
=====================  =====================================================
StorageError           storage unreachable or throttled, a network blip
WorkerDiedError        a worker was killed (OOM killer, a node's hiccup)
LeaseLostError         the run was paused too long and another took over
(job process died)     the job process itself was killed by a signal
=====================  =====================================================

Every other system error (CorruptStateError, an unexpected exception: a bug) and every
user error (FnError, bad options or inputs, ...) ends the job as FAILED.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import errors

TRANSIENT: tuple[type, ...] = (errors.StorageError, errors.WorkerDiedError, errors.LeaseLostError)


@dataclass(frozen=True)
class ServiceErrorClass:
    kind: str  # "user" | "system"
    status: int  # HTTP status
    transient: bool  # retried automatically by the jobs service


def error_class(exc: BaseException | type) -> ServiceErrorClass:
    """The classification of an exception (or class), with the service's ``transient``."""
    cls = exc if isinstance(exc, type) else type(exc)
    row = errors.ErrorClass("system", 500)
    for base in cls.__mro__:
        if base in errors.ERROR_CLASSIFICATION:
            row = errors.ERROR_CLASSIFICATION[base]
            break
    return ServiceErrorClass(row.kind, row.http_status, row.kind == "system" and issubclass(cls, TRANSIENT))


def error_info(exc: BaseException, message: str | None = None) -> dict:
    """The API's ``error`` object of an exception: kind, type, message, input_index, transient."""
    row = error_class(exc)
    text = message if message is not None else str(exc)
    return {
        "kind": row.kind,
        "type": type(exc).__name__,
        "message": text.split("\n--- worker traceback ---")[0].strip() or type(exc).__name__,
        "input_index": getattr(exc, "input_index", None),
        "transient": row.transient,
    }
