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
    "optimize", "OptimizeResult", "StreamingDataset", "StreamingDataLoader", "TokensLoader", "CombinedStreamingDataset", "ShardwrightError", "ConcurrentRunError",
    "CorruptStateError", "DatasetExistsError", "FnError", "IncompleteDatasetError", "IncompleteRunError",
    "InputsError", "OutputDirError", "RunMismatchError", "SampleFormatError", "StorageError", "UnsupportedFormatError", "WorkerDiedError",
]


_READER_NAMES = ("StreamingDataset", "StreamingDataLoader", "TokensLoader", "CombinedStreamingDataset")


def __getattr__(name: str):
    # The reader may import torch (to subclass its Dataset): only pay that when it is used.
    if name in _READER_NAMES:
        from . import reader

        return getattr(reader, name)
    raise AttributeError(f"module 'shardwright' has no attribute {name!r}")
