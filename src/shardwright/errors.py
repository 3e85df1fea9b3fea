"""Every error shardwright raises on purpose, and how each is classified.

Each message names the problem and the fix in one or two sentences. Catch
``ShardwrightError`` to handle them all, or the Python way: a usage mistake is also a
``ValueError`` (``TypeError`` for a wrong type), a missing dataset also a
``FileNotFoundError``, a storage failure also an ``OSError``.

Every class is either a **user** error (the caller can fix it: arguments, inputs, fn, the
output's contents) or a **system** error (the machine, the network, the storage, a dead
worker: retrying may help). :data:`ERROR_CLASSIFICATION` says which, and which system errors
are transient (a new attempt may get past them); :func:`classify` looks an exception up.

::

    ShardwrightError
    ├── UsageError (ValueError)                user       a bad argument
    │   ├── ArgumentTypeError (TypeError)      user       an argument of the wrong type
    │   ├── InputsError (TypeError)            user       inputs not a sequence / not picklable
    │   ├── OutputDirError                     user       output_dir unusable or holds foreign files
    │   │   └── OutputIsAFileError (NotADirectoryError)  a file where a directory must be
    │   ├── RunMismatchError                   user       resume refused: inputs/settings changed
    │   ├── DatasetExistsError                 user       a finished dataset is there, mode=None
    │   ├── SampleFormatError                  user       fn returned a sample that cannot be written
    │   └── ResumeStateError                   user       a loader state of another dataset, or damaged
    ├── DatasetNotFoundError (FileNotFoundError) user      no dataset at that location
    │   └── IncompleteDatasetError             user       a run is writing it; no index.json yet
    ├── IncompleteRunError                     user       merge: some shards are not finished
    ├── ConcurrentRunError                     user       another live run holds the lease
    ├── FnError                                user       fn raised on an input
    ├── UnsupportedFormatError                 user       a litdata-only feature or a pickle leaf
    ├── CorruptStateError                      system    a state file or chunk is damaged
    ├── StorageError (OSError)                 system, transient  credentials, bucket, network, disk full
    ├── WorkerDiedError                        system, transient  a worker died (OOM killer, segfault)
    └── LeaseLostError                         system, transient  another run took this run's lease
"""

from __future__ import annotations

from dataclasses import dataclass


class ShardwrightError(Exception):
    """Base class of every error shardwright raises on purpose."""

    def __str__(self) -> str:
        # OSError subclasses would otherwise print "(errno, strerror)" tuples
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class UsageError(ShardwrightError, ValueError):
    """An argument is not usable; the message names it and the value to pass instead."""


class ArgumentTypeError(UsageError, TypeError):
    """An argument has the wrong type (``num_workers="4"``, ``chunk_size=True``)."""


class InputsError(UsageError, TypeError):
    """``inputs`` is not usable (not a sequence, not picklable, ...)."""


class OutputDirError(UsageError):
    """output_dir cannot be used: a file, not writable, a typo'd URL, or holds something we must not touch."""


class OutputIsAFileError(OutputDirError, NotADirectoryError):
    """output_dir (or a dataset path given to the reader) is a file, not a directory."""


class RunMismatchError(UsageError):
    """Resuming was refused: inputs or output-shaping settings changed since the interrupted run."""


class DatasetExistsError(UsageError, RuntimeError):
    """output_dir already holds a finished dataset and mode=None was given.

    Also a RuntimeError, as litdata's is: ``except RuntimeError`` around optimize() keeps
    catching it."""


class SampleFormatError(UsageError):
    """A sample cannot be written: structure/leaf types differ from the first sample, int overflow, ..."""


class ResumeStateError(UsageError):
    """A loader state cannot be applied: another dataset, other order options, or damaged."""


class DatasetNotFoundError(ShardwrightError, FileNotFoundError):
    """There is no dataset at that location (no directory, no index.json, no run)."""


class IncompleteDatasetError(DatasetNotFoundError):
    """The output has no index.json yet: the run that writes it has not finished."""


class IncompleteRunError(ShardwrightError):
    """Some shards are not finished (e.g. another node's share), so the index cannot be published."""

    def __init__(self, message: str, *, missing_shards: list[int] | None = None):
        super().__init__(message)
        self.missing_shards = list(missing_shards or [])


class ConcurrentRunError(ShardwrightError):
    """Another live run holds the lease on this output (or on this node's share of it)."""


class FnError(ShardwrightError, RuntimeError):
    """``fn`` raised on an input. The original exception is chained as ``__cause__``.

    Also a RuntimeError, as litdata's failures are: ``except RuntimeError`` keeps catching it."""

    def __init__(self, message: str, *, input_index: int, input_repr: str, worker_traceback: str):
        super().__init__(message)
        self.input_index = input_index
        self.input_repr = input_repr
        self.worker_traceback = worker_traceback

    def __reduce__(self):  # picklable across processes (keyword-only arguments)
        return (_rebuild_fn_error, (self.args[0], self.input_index, self.input_repr, self.worker_traceback))


def _rebuild_fn_error(message: str, input_index: int, input_repr: str, worker_traceback: str) -> FnError:
    return FnError(message, input_index=input_index, input_repr=input_repr, worker_traceback=worker_traceback)


class UnsupportedFormatError(ShardwrightError):
    """The dataset uses a feature shardwright does not read (in-file zstd frames, encryption, Arrow rows,
    media/json leaves), or one it does not read by default (pickle leaves)."""


class CorruptStateError(ShardwrightError):
    """A checkpoint, run record, index.json or chunk is unreadable or was edited by hand."""


class StorageError(ShardwrightError, OSError):
    """Reading or writing the output location failed (credentials, bucket, network, disk full)."""


class WorkerDiedError(ShardwrightError):
    """A worker process ended without reporting (OOM killer, segfault, os._exit in fn)."""


class LeaseLostError(ShardwrightError):
    """Another run took over this run's lease (this one was paused or cut off too long): it stopped."""


@dataclass(frozen=True)
class ErrorClass:
    kind: str  # "user" or "system"
    transient: bool = False  # a system error a new attempt may get past (the jobs service retries it)


_USER = ErrorClass("user")
_SYSTEM = ErrorClass("system")
_TRANSIENT = ErrorClass("system", transient=True)

#: The one place that says whether an error is the caller's to fix, and whether a new attempt may
#: succeed (the HTTP status the jobs API answers with is the service's: shardwright.service.classify).
ERROR_CLASSIFICATION: dict[type[ShardwrightError], ErrorClass] = {
    ArgumentTypeError: _USER,
    InputsError: _USER,
    OutputIsAFileError: _USER,
    OutputDirError: _USER,
    RunMismatchError: _USER,
    DatasetExistsError: _USER,
    SampleFormatError: _USER,
    ResumeStateError: _USER,
    UsageError: _USER,
    IncompleteDatasetError: _USER,
    DatasetNotFoundError: _USER,
    IncompleteRunError: _USER,
    ConcurrentRunError: _USER,
    FnError: _USER,
    UnsupportedFormatError: _USER,
    CorruptStateError: _SYSTEM,
    StorageError: _TRANSIENT,  # unreachable, throttled, a network blip
    WorkerDiedError: _TRANSIENT,  # a worker killed (the OOM killer, a node's hiccup)
    LeaseLostError: _TRANSIENT,  # paused too long, another took over: resume
    ShardwrightError: _SYSTEM,
}


def classify(exc: BaseException | type[BaseException]) -> ErrorClass:
    """The classification of an exception (or its class): its nearest class in
    :data:`ERROR_CLASSIFICATION`; anything that is not a ShardwrightError is a system error that
    a retry would not fix (a bug)."""
    cls = exc if isinstance(exc, type) else type(exc)
    for base in cls.__mro__:
        if base in ERROR_CLASSIFICATION:
            return ERROR_CLASSIFICATION[base]
    return _SYSTEM


def require_bool(name: str, value: object, *, optional: bool = False) -> bool | None:
    """``value`` when it is True or False (or None when ``optional``); ArgumentTypeError naming
    ``name`` otherwise: the string "false" is truthy, so a lenient ``bool(value)`` would
    silently turn it into True."""
    if isinstance(value, bool) or (optional and value is None):
        return value
    allowed = "True, False or None" if optional else "True or False"
    raise ArgumentTypeError(f"{name} must be {allowed}; got {short_repr(value)} ({type(value).__name__})")


def short_repr(value: object, limit: int = 80) -> str:
    """``repr(value)`` for a message: never raises, at most ``limit`` characters."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def bounded_text(text: str, limit: int) -> str:
    """``text`` cut to at most about ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit:,} more characters not shown]"
