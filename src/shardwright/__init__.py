"""shardwright: turn any list of inputs into a chunked, streamable dataset (litdata's format),
exactly once, resumable after any crash."""

from importlib import metadata as _metadata
from typing import TYPE_CHECKING

from . import cluster as _cluster  # noqa: F401  (registers the cluster executors: executor="ray")
from . import sources
from .engine import (
    OptimizeResult,
    ResumePoint,
    abandon,
    iter_webdataset_tar,
    list_media_folder,
    map,
    merge_datasets,
    optimize,
    walk,
)
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
from .format import (
    Audio,
    File,
    Graph,
    Image,
    Jpeg,
    JpegArray,
    Mesh,
    Nifti,
    Pdf,
    Pil,
    Tensor,
    Text,
    Tiff,
    TokensLoader,
    Video,
)

if TYPE_CHECKING:  # what __getattr__ returns, for type checkers (the reader imports torch)
    from .reader import CombinedStreamingDataset, StreamingDataLoader, StreamingDataset, litdata_collate
    from .reader.parallel import ParallelStreamingDataset
    from .reader.raw import StreamingRawDataset
    from .reader.splits import train_test_split

try:  # the installed distribution's version: one home, pyproject.toml
    __version__ = _metadata.version("shardwright")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "optimize",
    "abandon",
    "map",
    "list_media_folder",
    "iter_webdataset_tar",
    "merge_datasets",
    "walk",
    "train_test_split",
    "litdata_collate",
    "sources",
    "verify",
    "OptimizeResult",
    "ResumePoint",
    "StreamingDataset",
    "StreamingDataLoader",
    "TokensLoader",
    "CombinedStreamingDataset",
    "ParallelStreamingDataset",
    "StreamingRawDataset",
    # litdata's media wrappers (shardwright.format.media)
    "Audio",
    "File",
    "Graph",
    "Image",
    "Jpeg",
    "JpegArray",
    "Mesh",
    "Nifti",
    "Pdf",
    "Pil",
    "Tensor",
    "Text",
    "Tiff",
    "Video",
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

_READER_NAMES = (
    "StreamingDataset",
    "StreamingDataLoader",
    "CombinedStreamingDataset",
    "ParallelStreamingDataset",
    "StreamingRawDataset",
    "litdata_collate",
    "train_test_split",
)


def __getattr__(name: str) -> object:
    # The reader may import torch (to subclass its Dataset): only pay that when it is used.
    if name in _READER_NAMES:
        from . import reader

        return getattr(reader, name)
    if name == "verify":
        from .reader.verify import verify

        return verify
    raise AttributeError(f"module 'shardwright' has no attribute {name!r}")
