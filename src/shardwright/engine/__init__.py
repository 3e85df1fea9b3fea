"""The engine: optimize() and the worker processes that carry out the commit protocol."""

from .abandon import abandon
from .datasets import merge_datasets, walk
from .map_run import map
from .media_folder import iter_webdataset_tar, list_media_folder
from .result import OptimizeResult
from .resume import ResumePoint
from .run import optimize

__all__ = [
    "OptimizeResult",
    "ResumePoint",
    "abandon",
    "iter_webdataset_tar",
    "list_media_folder",
    "map",
    "merge_datasets",
    "optimize",
    "walk",
]
