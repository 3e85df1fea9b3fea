"""``sources.hf``: the rows of a map-style, arrow-backed Hugging Face ``datasets.Dataset``.

Its identity is the dataset's own fingerprint (every transform applied) and its length, and
the size and modification time of each arrow file it reads: ``load_from_disk`` takes the
fingerprint from the directory's ``state.json`` whatever the arrow files beside it hold, so a
resume over files replaced in place mixed two datasets without a word (trust round 11). Rows
are read a block at a
time with the dataset's slicing (arrow, memory-mapped when loaded from disk), and pickled
to workers as ``datasets`` pickles a dataset (the paths of its arrow files, not its rows,
when it was loaded from disk).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import xxhash

from ..errors import InputsError
from ..storage.local import local_version
from .base import Source

__all__ = ["HFSource", "hf"]

BLOCK_ROWS = 1024


class HFSource(Source):
    kind = "hf"

    def __init__(self, dataset: Any):
        super().__init__()
        self._dataset = dataset
        self._fingerprint = str(getattr(dataset, "_fingerprint", "") or "")
        self._version = self._fingerprint + _files_stamp(dataset)
        self._length = len(dataset)

    def _unit_rows(self) -> Sequence[int]:
        return [self._length]

    def _unit_identity(self, unit: int) -> tuple[str, str]:
        return f"hf:{self._fingerprint}", self._version

    def _read_block(self, unit: int, row: int) -> tuple[int, list]:
        first = row // BLOCK_ROWS * BLOCK_ROWS
        columns = self._dataset[first : first + BLOCK_ROWS]
        names = list(columns)
        count = len(columns[names[0]]) if names else 0
        return first, [{name: columns[name][k] for name in names} for k in range(count)]

    def describe(self) -> str:
        return f"hf source of {len(self):,} rows (dataset fingerprint {self._fingerprint})"


def _files_stamp(dataset: Any) -> str:
    """``+files:`` and a digest of the size and mtime of each arrow file the dataset reads
    (none for a dataset held in memory: its fingerprint hashes its rows)."""
    stamps = []
    for entry in getattr(dataset, "cache_files", None) or []:
        name = entry.get("filename") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            continue
        try:
            stamps.append(f"{os.path.abspath(name)}\0{local_version(os.stat(name))}")
        except OSError:
            stamps.append(f"{os.path.abspath(name)}\0missing")
    return "+files:" + xxhash.xxh3_64_hexdigest("\n".join(stamps).encode("utf-8", "surrogatepass")) if stamps else ""


def hf(dataset: object) -> HFSource:
    """The rows of ``dataset`` (a map-style ``datasets.Dataset``) as dicts, lazily."""
    kind = type(dataset).__name__
    if kind in ("IterableDataset", "IterableDatasetDict"):
        raise InputsError(
            f"sources.hf: got an {kind} (streaming=True); shardwright needs a map-style datasets.Dataset "
            "with len(): load it without streaming=True (or save_to_disk and load_from_disk)"
        )
    if kind == "DatasetDict":
        raise InputsError("sources.hf: got a DatasetDict; pass one split, e.g. sources.hf(dataset_dict['train'])")
    try:
        import datasets
    except ImportError:
        raise InputsError("sources.hf needs the `datasets` package: pip install datasets") from None
    if not isinstance(dataset, datasets.Dataset):
        raise InputsError(f"sources.hf: pass a datasets.Dataset, got {kind}")
    if not getattr(dataset, "_fingerprint", None):
        raise InputsError("sources.hf: this dataset has no fingerprint, so a resume could not recognise it")
    return HFSource(dataset)
