"""shardwright: turn any list of inputs into a chunked, streamable dataset (litdata's format),
exactly once, resumable after any crash."""

from .engine import OptimizeResult, optimize
from .errors import (
    ArgumentTypeError,
    ConcurrentRunError,
    CorruptStateError,
    DatasetExistsError,
    DatasetNotFoundError,
    FnError,
    IncompleteDatasetError,
    IncompleteRunError,
    InputsError,
    LeaseLostError,
    OutputDirError,
    OutputIsAFileError,
    RunMismatchError,
    SampleFormatError,
    ShardwrightError,
    StorageError,
    UnsupportedFormatError,
    UsageError,
    WorkerDiedError,
)

__version__ = "0.1.0"

__all__ = [
    "optimize", "OptimizeResult", "StreamingDataset", "ShardwrightError", "ArgumentTypeError", "ConcurrentRunError",
    "CorruptStateError", "DatasetExistsError", "DatasetNotFoundError", "FnError", "IncompleteDatasetError",
    "IncompleteRunError", "InputsError", "LeaseLostError", "OutputDirError", "OutputIsAFileError", "RunMismatchError", "SampleFormatError",
    "StorageError", "UnsupportedFormatError", "UsageError", "WorkerDiedError",
]


def __getattr__(name: str) -> object:
    # The reader may import torch (to subclass its Dataset): only pay that when it is used.
    if name == "StreamingDataset":
        from .reader import StreamingDataset

        return StreamingDataset
    raise AttributeError(f"module 'shardwright' has no attribute {name!r}")
