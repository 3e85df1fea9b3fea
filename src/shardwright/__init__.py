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
    UnsupportedFormatError,
    WorkerDiedError,
)
__version__ = "0.1.0"

__all__ = [
    "optimize", "OptimizeResult", "StreamingDataset", "ShardwrightError", "ConcurrentRunError",
    "CorruptStateError", "DatasetExistsError", "FnError", "IncompleteDatasetError", "IncompleteRunError",
    "InputsError", "OutputDirError", "RunMismatchError", "SampleFormatError", "StorageError", "UnsupportedFormatError", "WorkerDiedError",
]


def __getattr__(name: str):
    # The reader may import torch (to subclass its Dataset): only pay that when it is used.
    if name == "StreamingDataset":
        from .reader import StreamingDataset

        return StreamingDataset
    raise AttributeError(f"module 'shardwright' has no attribute {name!r}")
