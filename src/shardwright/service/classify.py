"""User or system? The one table that classifies every error shardwright raises.

``kind`` says whose move it is: ``user`` = the request, the inputs, ``fn`` or the output
location must change (4XX in spirit); ``system`` = the machinery failed (5XX in spirit),
and ``transient`` system errors are retried automatically by the jobs service.
``status`` is the HTTP status the API answers with when the error stops a request.

==========================  ======  ======  =========  =============================================
error class                 kind    status  transient  why
==========================  ======  ======  =========  =============================================
ShardwrightError (base)     user    400     no         a bad argument (chunk_size, mode, ...)
OutputDirError              user    400     no         output_dir is a file, not writable, foreign
InputsError                 user    422     no         inputs not a sequence / not picklable
RunMismatchError            user    409     no         inputs or settings changed since the last run
DatasetExistsError          user    409     no         finished dataset there and mode=None
SampleFormatError           user    422     no         fn returned a sample that cannot be written
CorruptStateError           system  500     no         state files unreadable or edited by hand
IncompleteDatasetError      user    409     no         reading an output whose run has not finished
StorageError                system  503     yes        storage unreachable, credentials, disk full
ConcurrentRunError          system  409     yes        another live run holds the output's lease
WorkerDiedError             system  500     yes        a worker was killed (OOM killer, segfault)
FnError                     user    422     no         fn raised on an input (input_index is set)
IncompleteRunError          system  409     no         other nodes' shards are not finished
UnsupportedFormatError      user    415     no         a litdata-only feature shardwright can't read
(any other exception)       system  500     no         a bug: report it
(job process died)          system  500     yes        the job process was killed by a signal
==========================  ======  ======  =========  =============================================
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import errors


@dataclass(frozen=True)
class ErrorClass:
    kind: str  # "user" | "system"
    status: int  # HTTP status
    transient: bool  # retried automatically by the jobs service


USER, SYSTEM = "user", "system"

ERROR_TABLE: dict[type, ErrorClass] = {
    errors.ShardwrightError: ErrorClass(USER, 400, False),
    errors.OutputDirError: ErrorClass(USER, 400, False),
    errors.InputsError: ErrorClass(USER, 422, False),
    errors.RunMismatchError: ErrorClass(USER, 409, False),
    errors.DatasetExistsError: ErrorClass(USER, 409, False),
    errors.SampleFormatError: ErrorClass(USER, 422, False),
    errors.CorruptStateError: ErrorClass(SYSTEM, 500, False),
    errors.IncompleteDatasetError: ErrorClass(USER, 409, False),
    errors.StorageError: ErrorClass(SYSTEM, 503, True),
    errors.ConcurrentRunError: ErrorClass(SYSTEM, 409, True),
    errors.WorkerDiedError: ErrorClass(SYSTEM, 500, True),
    errors.FnError: ErrorClass(USER, 422, False),
    errors.IncompleteRunError: ErrorClass(SYSTEM, 409, False),
    errors.UnsupportedFormatError: ErrorClass(USER, 415, False),
}
UNEXPECTED = ErrorClass(SYSTEM, 500, False)
PROCESS_DIED = ErrorClass(SYSTEM, 500, True)


def error_class(exc: BaseException | type) -> ErrorClass:
    """The table's row for an exception (or class): the nearest classified base class."""
    cls = exc if isinstance(exc, type) else type(exc)
    for base in cls.__mro__:
        if base in ERROR_TABLE:
            return ERROR_TABLE[base]
    return UNEXPECTED


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
