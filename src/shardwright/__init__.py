"""shardwright: turn any list of inputs into a chunked, streamable dataset (litdata's format),
exactly once, resumable after any crash."""

from .api import OptimizeResult, optimize
from .errors import (
    ConcurrentRunError,
    CorruptStateError,
    DatasetExistsError,
    FnError,
    IncompleteDatasetError,
    IncompleteRunError,
    InputsError,
    OutputDirError,
    RunMismatchError,
    SampleFormatError,
    ShardwrightError,
    StorageError,
    WorkerDiedError,
)
from .reader import StreamingDataset

__version__ = "0.1.0"

__all__ = [
    "optimize", "OptimizeResult", "StreamingDataset", "ShardwrightError", "ConcurrentRunError",
    "CorruptStateError", "DatasetExistsError", "FnError", "IncompleteDatasetError", "IncompleteRunError",
    "InputsError", "OutputDirError", "RunMismatchError", "SampleFormatError", "StorageError", "WorkerDiedError",
]
