"""Inputs read where they live: parquet, JSONL, file listings and Hugging Face datasets.

Each function returns a lazy, sliceable, picklable :class:`~collections.abc.Sequence` that
``optimize`` takes as ``inputs``. Its identity is its metadata (paths, sizes, versions, row
counts, the dataset fingerprint), never a pickle of its rows, and only metadata lives in
the main process: workers read the rows of their shard.

=================  ===========================================================================
module             its one job
=================  ===========================================================================
:mod:`.locate`     paths, URLs and globs -> listed files on a read-only input view; RangedFile
:mod:`.base`       :class:`Source`: units, slicing, identity, the run-state hooks; BadRow
:mod:`.parquet`    ``parquet()``: rows of parquet files (row groups read by workers)
:mod:`.jsonl`      ``jsonl()``: lines of JSONL files (a line index kept with the run)
:mod:`.files`      ``files()``: FileRef per listed file (compact listing in the driver)
:mod:`.hf`         ``hf()``: rows of a map-style ``datasets.Dataset``
=================  ===========================================================================

Layer: above storage and format, below the engine (pyproject's import-linter contract).
"""

from __future__ import annotations

from .base import BadRow, Source, UnitIdentity
from .files import FileRef, FilesSource, files
from .hf import HFSource, hf
from .jsonl import JsonlSource, jsonl
from .parquet import ParquetSource, parquet

__all__ = [
    "BadRow",
    "FileRef",
    "FilesSource",
    "HFSource",
    "JsonlSource",
    "ParquetSource",
    "Source",
    "UnitIdentity",
    "files",
    "hf",
    "jsonl",
    "parquet",
]
