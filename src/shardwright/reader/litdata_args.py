"""StreamingDataset's arguments by litdata's names: what each becomes here, or one line saying
why it is refused and what to use instead (docs/litdata-compat.md has the whole table)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from ..format import TokensLoader, is_tokens_loader, parse_size
from .cache import default_cache_root
from .parquet import ParquetLoader, as_parquet_loader

__all__ = [
    "cache_limit",
    "check_r2_options",
    "dir_cache_of",
    "input_dir_of",
    "item_loader_of",
    "refuse_litdata_only",
    "transforms_of",
]

# litdata arguments with no meaning here, and why.
_REFUSED: dict[str, str] = {
    "serializers": "custom serializers: shardwright reads litdata's 24 built-in leaf formats only",
    "encryption": "encrypted datasets are not read by shardwright; decrypt with litdata",
    "session_options": "boto3 session options: pass credentials in storage_options or the AWS chain",
    "index_path": "an index.json elsewhere than the dataset: copy it into the dataset directory",
    "force_override_state_dict": "a resume state is checked against its dataset; start a new loader to ignore one",
    "num_canonical_nodes": "the order does not depend on nodes here: the same seed gives the same epoch order",
    "item_shuffle_window": "items are shuffled within shuffle_window chunks: pass shuffle_window=",
    "window_direct_io": "O_DIRECT windows over NFS are a litdata feature; read normally",
}


def refuse_litdata_only(kwargs: dict[str, Any]) -> None:
    for name in kwargs:
        reason = _REFUSED.get(name)
        if reason is None:
            raise TypeError(f"StreamingDataset() got an unexpected keyword argument {name!r}")
        raise UsageError(f"StreamingDataset({name}=...) is refused: {reason}")


def _is_dir_object(where: Any) -> bool:
    """litdata's ``resolver.Dir(path=, url=)`` (or any object shaped like it)."""
    return not isinstance(where, (str, os.PathLike)) and hasattr(where, "path") and hasattr(where, "url")


def input_dir_of(input_dir: Any, output_dir: Any) -> str:
    """litdata's ``input_dir`` (first argument), or shardwright's older ``output_dir=`` keyword,
    in litdata's forms too: a ``Dir(path=, url=)`` is read from its ``url`` (its ``path`` is the
    local copy: see :func:`dir_cache_of`), ``local:/mnt/drive`` (litdata's network drive) is
    read in place, ``r2://bucket/prefix`` is Cloudflare R2 through its S3 API."""
    if input_dir is not None and output_dir is not None:
        raise UsageError("give the dataset once: StreamingDataset(input_dir) (output_dir= is its older name)")
    where = input_dir if input_dir is not None else output_dir
    if where is None:
        raise UsageError("StreamingDataset needs the dataset: StreamingDataset(input_dir)")
    if _is_dir_object(where):
        url, path = where.url, where.path
        where = url if url is not None else path
        if where is None:
            raise UsageError("input_dir is a Dir with neither url nor path: give Dir(path=...) or Dir(url=...)")
    if not isinstance(where, (str, os.PathLike)):
        raise UsageError(f"input_dir must be a path or URL string (or litdata's Dir), got {type(where).__name__}")
    location = os.fspath(where)
    if location.startswith("local:"):
        return location[len("local:") :]
    if location.startswith("r2://"):
        return "s3://" + location[len("r2://") :]
    return location


def dir_cache_of(input_dir: Any, cache_dir: Any) -> Any:
    """The cache directory: ``cache_dir`` when given, else a ``Dir(path=, url=)``'s ``path``
    (litdata keeps the local copy of ``url`` there), else None (the default cache)."""
    if cache_dir is None and _is_dir_object(input_dir) and input_dir.url is not None and input_dir.path is not None:
        return input_dir.path
    return cache_dir


def check_r2_options(input_dir: Any, storage_options: dict[str, Any]) -> None:
    """An ``r2://`` dataset needs its account's S3 endpoint: one line saying so."""
    where = input_dir.url if _is_dir_object(input_dir) else input_dir
    if isinstance(where, str) and where.startswith("r2://") and not storage_options.get("endpoint_url"):
        raise UsageError(
            f"{where!r:.100}: Cloudflare R2 is read through its S3 API: pass storage_options="
            "{'endpoint_url': 'https://<account id>.r2.cloudflarestorage.com', 'aws_access_key_id': ..., "
            "'aws_secret_access_key': ...} (an R2 API token's keys)"
        )


def cache_limit(max_cache_bytes: Any, max_cache_size: Any, cache_dir: Any, default: int) -> int:
    """Bytes the chunk cache may hold: ``max_cache_bytes`` or litdata's ``max_cache_size`` (a size
    such as "50GB", or a fraction of the cache disk's free space such as 0.9)."""
    if max_cache_bytes is not None and max_cache_size is not None:
        raise UsageError("give max_cache_bytes or max_cache_size (its litdata name), not both")
    if max_cache_size is None:
        value = default if max_cache_bytes is None else max_cache_bytes
        try:
            return parse_size(value)
        except ValueError as exc:
            raise UsageError(f"max_cache_bytes: {exc}") from None
    if type(max_cache_size) is float:
        if not 0 < max_cache_size <= 1:
            raise UsageError(f"max_cache_size {max_cache_size!r}: a fraction of free disk must be in (0, 1]")
        place = default_cache_root(cache_dir)
        while not os.path.exists(place):
            place = os.path.dirname(place)
        return int(shutil.disk_usage(place).free * max_cache_size)
    try:
        return parse_size(max_cache_size)
    except ValueError as exc:
        raise UsageError(f"max_cache_size: {exc}") from None


def transforms_of(transform: Any) -> tuple[Callable[[Any], Any], ...]:
    if transform is None:
        return ()
    chain = transform if isinstance(transform, (list, tuple)) else [transform]
    for step in chain:
        if not callable(step):
            raise UsageError(f"transform must be a callable or a list of callables, got {step!r}")
    return tuple(chain)


def item_loader_of(item_loader: Any) -> TokensLoader | ParquetLoader | None:
    """Ours or litdata's TokensLoader or ParquetLoader (as ours, same block size or columns);
    litdata's PyTreeLoader is the default (None); other litdata loaders are refused by name."""
    if item_loader is None or isinstance(item_loader, TokensLoader):
        return item_loader
    parquet = as_parquet_loader(item_loader)
    if parquet is not None:
        return parquet
    name = type(item_loader).__name__
    if is_tokens_loader(item_loader):
        block_size = getattr(item_loader, "_block_size", None) or getattr(item_loader, "block_size", None)
        return TokensLoader(block_size=block_size)
    if name == "PyTreeLoader":
        return None
    raise UsageError(
        f"item_loader={name}(...) is not read by shardwright: it reads ordinary (PyTreeLoader) datasets, "
        "token datasets (item_loader=TokensLoader(block_size=...)) and parquet folders (item_loader=ParquetLoader()); "
        "read this one with litdata"
    )
