"""StreamingDataset's arguments, validated once into a frozen :class:`ReaderOptions` (each
mistake one line naming the argument), litdata's names included (see litdata_args)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ArgumentTypeError, UsageError, require_bool
from ..format import TokensLoader
from ..storage.options import check_storage_option_names
from .cache import DEFAULT_MAX_CACHE_BYTES
from .litdata_args import (
    cache_limit,
    check_r2_options,
    dir_cache_of,
    input_dir_of,
    item_loader_of,
    refuse_litdata_only,
    transforms_of,
)
from .parquet import ParquetLoader
from .subsample import check_fraction

__all__ = ["DEFAULT_PREFETCH_DEPTH", "ReaderOptions"]

DEFAULT_PREFETCH_DEPTH = 4


@dataclass(frozen=True)
class ReaderOptions:
    """StreamingDataset's arguments, validated. litdata's, besides those documented there:

    - ``max_cache_size``: litdata's name for ``max_cache_bytes``; it also takes a fraction of
      the cache disk's free space (``0.9``).
    - ``subsample``: read this fraction of the items (litdata's selection: whole chunks in
      order, permuted by ``seed`` when shuffling, the last one cut; above 1 repeats the
      dataset). Deterministic, so a resumed loader reads the same selection.
    - ``transform``: a callable or a list of callables applied to each item after decoding (in
      the process that reads it: DataLoader workers).
    - ``max_pre_download``: litdata's name for ``prefetch=N``. ``batch_decode``: accepted for
      litdata scripts; items are decoded one by one here, with the same values.
    """

    location: str
    shuffle: bool
    seed: int
    drop_last: bool | None
    pad: bool
    shuffle_window: int
    item_loader: TokensLoader | ParquetLoader | None
    allow_pickle: bool
    storage_options: dict
    cache_dir: str | os.PathLike | None
    cache_limit: int  # bytes
    prefetch_depth: int  # chunks
    subsample: float
    transforms: tuple[Callable[[Any], Any], ...]
    batch_decode: Any
    check_checksums: bool

    @classmethod
    def validate(
        cls,
        *,
        input_dir: Any,
        output_dir: Any,
        shuffle: Any,
        seed: Any,
        drop_last: Any,
        pad: Any,
        shuffle_window: Any,
        item_loader: Any,
        allow_pickle: Any,
        storage_options: Any,
        cache_dir: Any,
        max_cache_bytes: Any,
        prefetch: Any,
        iterable: Any,
        max_cache_size: Any,
        subsample: Any,
        transform: Any,
        max_pre_download: Any,
        batch_decode: Any,
        check_checksums: Any,
        litdata_only: dict[str, Any],
    ) -> ReaderOptions:
        refuse_litdata_only(litdata_only)
        require_bool("iterable", iterable, optional=True)
        if storage_options is not None and not isinstance(storage_options, dict):
            raise ArgumentTypeError(
                f"storage_options must be a dict (the storage backend's options) or None; got {type(storage_options).__name__}"
            )
        location = input_dir_of(input_dir, output_dir)
        check_r2_options(input_dir, storage_options or {})
        check_storage_option_names(storage_options or {}, location)
        cache_dir = dir_cache_of(input_dir, cache_dir)
        if cache_dir is not None and not os.fspath(cache_dir).strip():
            raise UsageError(
                "cache_dir is empty (it would mean the current directory); pass a directory of your own, or "
                "None for $SHARDWRIGHT_CACHE_DIR or ~/.cache/shardwright"
            )
        if max_pre_download is not None and prefetch is True:
            prefetch = max_pre_download  # litdata's name for the chunks fetched ahead
        if type(prefetch) is bool:
            depth = DEFAULT_PREFETCH_DEPTH if prefetch else 0
        elif type(prefetch) is int and prefetch >= 0:
            depth = prefetch
        else:
            raise UsageError(f"prefetch must be True, False or a number of chunks >= 0, got {prefetch!r}")
        pad = bool(require_bool("pad", pad))
        drop_last = require_bool("drop_last", drop_last, optional=True)
        if pad and drop_last:
            raise UsageError("drop_last=True and pad=True exclude each other: pad keeps every item")
        return cls(
            location=location,
            shuffle=bool(require_bool("shuffle", shuffle)),
            seed=seed,
            drop_last=drop_last,
            pad=pad,
            shuffle_window=shuffle_window,
            item_loader=item_loader_of(item_loader),
            allow_pickle=bool(require_bool("allow_pickle", allow_pickle)),
            storage_options=dict(storage_options or {}),
            cache_dir=cache_dir,
            cache_limit=cache_limit(max_cache_bytes, max_cache_size, cache_dir, DEFAULT_MAX_CACHE_BYTES),
            prefetch_depth=depth,
            subsample=check_fraction(subsample),
            transforms=transforms_of(transform),
            # litdata's decode batching: items decode one by one here, with the same values
            batch_decode=batch_decode,
            check_checksums=bool(require_bool("check_checksums", check_checksums)),
        )


def subclass_transform(dataset: Any) -> tuple[Callable[[Any], Any], ...]:
    """litdata's other way to transform: a subclass's ``transform(self, item)`` method, used
    when no ``transform=`` is given."""
    return (dataset.transform,) if callable(getattr(type(dataset), "transform", None)) else ()
