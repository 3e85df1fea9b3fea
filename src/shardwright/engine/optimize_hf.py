"""``optimize_hf``: a Hugging Face Hub dataset turned into a dataset of chunks (litdata's name).

The dataset's parquet files come through ``huggingface_hub`` into its own cache
(:mod:`shardwright.sources.hub`); their rows are the inputs of an ordinary :func:`optimize`
run (``sources.parquet``), so the run is exactly once and resumable like any other.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from ..sources import parquet
from ..sources.hub import hf_folder, split_files
from ..storage import open_storage, parse_location
from .run import optimize

__all__ = ["optimize_hf"]


def _row_as_is(row: dict) -> dict:
    return row


def _has_index(output_dir: str, storage_options: dict) -> bool:
    location = parse_location(output_dir)
    if location.is_local:
        return os.path.isfile(os.path.join(os.path.expanduser(location.path), "index.json"))
    try:
        open_storage(location.url, storage_options).read_bytes("index.json")
    except FileNotFoundError:
        return False
    return True


def optimize_hf(
    name: str,
    output_dir: str,
    revision: str | None = None,
    split: str | None = None,
    config: str | None = None,
    chunk_size: int | None = None,
    chunk_bytes: int | str | None = None,
    fn: Callable[[dict[str, Any]], Any] | None = None,
    num_workers: int | None = None,
    columns: list[str] | None = None,
    overwrite: bool = False,
    cache_dir: str | None = None,
    storage_options: dict | None = None,
    **optimize_kwargs: Any,
) -> str:
    """Optimize Hub dataset ``name`` (``org/name`` or ``hf://datasets/org/name[/folder]``) into
    ``output_dir``; returns ``output_dir``.

    ``split`` / ``config`` pick its files (all when None); ``fn(row) -> sample`` (default: the
    row as it is); ``columns`` reads those only; ``chunk_bytes`` defaults to 256MB unless
    ``chunk_size`` is given (litdata's default); ``overwrite`` rebuilds an existing output,
    which is otherwise returned as it is. ``storage_options``: the Hub's (``token``).
    ``cache_dir`` is accepted (the files go to Hugging Face's cache, ``HF_HUB_CACHE``).
    Other keyword arguments go to :func:`optimize`.

    Raises:
        UsageError: a name that is not a Hub dataset, or no parquet file of that split/config.
    """
    del cache_dir
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"optimize_hf: name must be a Hub dataset id such as 'org/name', got {name!r}")
    hub_options = dict(storage_options or {})
    if revision is not None:
        hub_options["revision"] = revision
    if not overwrite and _has_index(os.fspath(output_dir), {}):
        return output_dir
    url = name if name.startswith("hf://") else f"hf://datasets/{name.removeprefix('datasets/')}"
    folder = hf_folder(url, hub_options)
    files = split_files(folder, config, split)
    if not files:
        raise UsageError(
            f"optimize_hf: {name!r} has no parquet file of config={config!r} split={split!r} "
            f"(looked in {folder}); check the names on the dataset's page"
        )
    kwargs = dict(optimize_kwargs)
    kwargs.setdefault("mode", "overwrite" if overwrite else None)
    if chunk_size is not None:
        kwargs["chunk_size"] = chunk_size
    else:
        kwargs["chunk_bytes"] = chunk_bytes if chunk_bytes is not None else "256MB"
    workers = num_workers if num_workers is not None else min(len(files), os.cpu_count() or 4)
    optimize(fn or _row_as_is, parquet(files, columns), output_dir, num_workers=workers, **kwargs)
    return output_dir
