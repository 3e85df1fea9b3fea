"""The engine: optimize() and the worker processes that carry out the commit protocol."""

from .abandon import abandon
from .datasets import merge_datasets, walk
from .map_run import map
from .media_folder import iter_webdataset_tar, list_media_folder
from .optimize_hf import optimize_hf
from .result import OptimizeResult
from .run import optimize

__all__ = [
    "OptimizeResult",
    "abandon",
    "iter_webdataset_tar",
    "list_media_folder",
    "map",
    "merge_datasets",
    "optimize",
    "optimize_hf",
    "walk",
]
