"""Every error shardwright raises on purpose.

Each message names the problem and the fix in one or two sentences; callers can catch
``ShardwrightError`` to handle them all.
"""

from __future__ import annotations


class ShardwrightError(Exception):
    """Base class of every error shardwright raises on purpose."""


class OutputDirError(ShardwrightError):
    """output_dir cannot be used: a file, not writable, or holds something we must not touch."""


class InputsError(ShardwrightError):
    """``inputs`` is not usable (not a sequence, not picklable, ...)."""


class RunMismatchError(ShardwrightError):
    """Resuming was refused: inputs or output-shaping settings changed since the interrupted run."""


class DatasetExistsError(ShardwrightError):
    """output_dir already holds a finished dataset and mode=None was given."""


class SampleFormatError(ShardwrightError):
    """A sample cannot be written: structure/leaf types differ from the first sample, int overflow, ..."""


class CorruptStateError(ShardwrightError):
    """A checkpoint, run record or index.json is unreadable or was edited by hand."""


class IncompleteDatasetError(ShardwrightError):
    """The output has no index.json yet: the run that writes it has not finished."""


class StorageError(ShardwrightError):
    """Reading or writing the output location failed (credentials, bucket, network, disk full)."""


class ConcurrentRunError(ShardwrightError):
    """Another live run holds the lease on this output (or on this node's share of it)."""


class WorkerDiedError(ShardwrightError):
    """A worker process ended without reporting (OOM killer, segfault, os._exit in fn)."""


class FnError(ShardwrightError):
    """``fn`` raised on an input. The original exception is chained as ``__cause__``."""

    def __init__(self, message: str, *, input_index: int, input_repr: str, worker_traceback: str):
        super().__init__(message)
        self.input_index = input_index
        self.input_repr = input_repr
        self.worker_traceback = worker_traceback


class IncompleteRunError(ShardwrightError):
    """Some shards are not finished (e.g. another node's share), so the index cannot be published."""


class UnsupportedFormatError(ShardwrightError):
    """The dataset uses a litdata-only feature shardwright does not read (in-file zstd frames, encryption, Arrow rows, media/json leaves)."""
