"""The engine: optimize() and the worker processes that carry out the commit protocol."""

from .abandon import abandon
from .datasets import merge_datasets, walk
from .map_run import map
from .media_folder import iter_webdataset_tar, list_media_folder
from .optimize_hf import optimize_hf
from .result import OptimizeResult
from .resume import ResumePoint
from .run import optimize
from .stops import stop_requested

__all__ = [
    "OptimizeResult",
    "ResumePoint",
    "abandon",
    "iter_webdataset_tar",
    "list_media_folder",
    "map",
    "merge_datasets",
    "optimize",
    "optimize_hf",
    "stop_requested",
    "walk",
]
