"""shardwright: turn any list of inputs into a chunked, streamable dataset (litdata's format),
exactly once, resumable after any crash."""

from . import cluster as _cluster  # noqa: F401  (registers the cluster executors: executor="ray")
from .engine import OptimizeResult, abandon, optimize
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
    "optimize",
    "abandon",
    "OptimizeResult",
    "StreamingDataset",
    "StreamingDataLoader",
    "TokensLoader",
    "CombinedStreamingDataset",
    "ShardwrightError",
    "ArgumentTypeError",
    "ConcurrentRunError",
    "CorruptStateError",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "FnError",
    "IncompleteDatasetError",
    "IncompleteRunError",
    "InputsError",
    "LeaseLostError",
    "OutputDirError",
    "OutputIsAFileError",
    "RunMismatchError",
    "SampleFormatError",
    "StorageError",
    "UnsupportedFormatError",
    "UsageError",
    "WorkerDiedError",
]

_READER_NAMES = ("StreamingDataset", "StreamingDataLoader", "TokensLoader", "CombinedStreamingDataset")


def __getattr__(name: str) -> object:
    # The reader may import torch (to subclass its Dataset): only pay that when it is used.
    if name in _READER_NAMES:
        from . import reader

        return getattr(reader, name)
    raise AttributeError(f"module 'shardwright' has no attribute {name!r}")
