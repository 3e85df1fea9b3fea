"""litdata's dataset helpers by its names: ``merge_datasets`` (exactly once) and ``walk``."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any

from ..errors import DatasetExistsError, DatasetNotFoundError, UsageError
from ..format import ChunkEntry, IndexConfig, render_index
from ..protocol.index import read_index, read_index_bytes
from ..protocol.layout import INDEX_KEY, STATE_DIR
from ..storage import open_storage, parse_location

__all__ = ["merge_datasets", "walk"]

MERGE_KEY = f"{STATE_DIR}/merge.json"  # which datasets a merge output was made of


def _read_index(storage: Any, where: str) -> tuple[list[ChunkEntry], IndexConfig] | None:
    if not storage.exists(INDEX_KEY):
        return None
    index = read_index(storage, where)
    return index.chunks, index.config


def _merged_name(n: int, config: IndexConfig) -> str:
    whole_file = config.compression is not None and config.compression_level is None
    return f"chunk-0-{n}.{config.compression}.bin" if whole_file else f"chunk-0-{n}.bin"


def merge_datasets(
    input_dirs: list[str],
    output_dir: str,
    max_workers: int | None = os.cpu_count(),
    storage_options: dict[str, Any] | None = None,
) -> None:
    """Merge finished datasets into one at ``output_dir``, their items in ``input_dirs`` order.

    Exactly once: the chunks are copied under names of their own, then ``index.json`` is
    created only if none exists (a conditional create), so a reader never sees a partial
    merge, a crashed merge is finished by running it again, and rerunning a finished merge is a
    no-op. Refused, before anything is written: fewer than two inputs, an input listed twice,
    the output among the inputs, an output that already holds another dataset, and inputs of
    different data formats or compression.
    """
    if not isinstance(input_dirs, (list, tuple)) or len(input_dirs) < 2:
        raise UsageError("merge_datasets needs a list of at least two input_dirs")
    urls = [parse_location(d).url for d in input_dirs]
    out_url = parse_location(output_dir).url
    if len(set(urls)) != len(urls):
        twice = next(u for u in urls if urls.count(u) > 1)
        raise UsageError(f"merge_datasets: {twice} is listed twice in input_dirs; each dataset is merged once")
    if out_url in urls:
        raise UsageError(f"merge_datasets: output_dir {out_url} is one of the input_dirs; merge into a new directory")
    options = dict(storage_options or {})
    inputs = []
    for directory, url in zip(input_dirs, urls):
        storage = open_storage(directory, options)
        index = _read_index(storage, url)
        if index is None:
            raise DatasetNotFoundError(f"merge_datasets: {url} has no index.json; finish its optimize run first")
        inputs.append((storage, url, *index))
    _, _, _, first = inputs[0]
    for _, url, _, config in inputs[1:]:
        if list(config.data_format) != list(first.data_format) or config.data_spec != first.data_spec:
            raise UsageError(
                f"merge_datasets: {url} holds items of another format ({config.data_format} vs {first.data_format})"
            )
        if (config.compression, config.compression_level, config.item_loader) != (
            first.compression,
            first.compression_level,
            first.item_loader,
        ):
            raise UsageError(f"merge_datasets: {url} uses another compression or item loader than {inputs[0][1]}")
    plan: list[tuple[Any, str, ChunkEntry]] = []
    for storage, _, chunks, _ in inputs:
        for entry in chunks:
            plan.append((storage, entry.filename, dataclasses.replace(entry, filename=_merged_name(len(plan), first))))
    merged = [entry for _, _, entry in plan]
    out = open_storage(output_dir, options, create=True)
    # The merge's identity (its inputs, as their indexes are now) is claimed before any chunk is
    # copied: a rerun of the same merge goes on or finds it done, any other merge is refused.
    identity = json.dumps(
        {"inputs": urls, "indexes": [hashlib.sha256(read_index_bytes(s)).hexdigest() for s, *_ in inputs]},
        sort_keys=True,
    ).encode()
    if not out.create_exclusive(MERGE_KEY, identity) and out.read_bytes(MERGE_KEY) != identity:
        raise DatasetExistsError(
            f"merge_datasets: {out_url} holds another merge (of other inputs or older versions of them); "
            "merge into an empty directory"
        )
    existing = _read_index(out, out_url)
    if existing is not None:
        if existing[0] == merged:
            return  # this merge finished before
        raise DatasetExistsError(f"merge_datasets: {out_url} already holds a dataset; merge into an empty directory")

    def copy(item: tuple[Any, str, ChunkEntry]) -> None:
        source, name, entry = item
        out.write_bytes(entry.filename, source.read_bytes(name))

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, max_workers or 1)) as pool:
        list(pool.map(copy, plan))
    out.barrier()
    if not out.create_exclusive(INDEX_KEY, render_index(merged, first)):
        existing = _read_index(out, out_url)
        if existing is None or existing[0] != merged:
            raise DatasetExistsError(f"merge_datasets: another writer published a dataset at {out_url} meanwhile")


def walk(folder: str, max_workers: int | None = os.cpu_count()) -> Iterator[tuple[str, list[str], list[str]]]:
    """``(folder, subfolders, files)`` of ``folder`` and every folder under it: the tuples of
    litdata's walk and ``os.walk``, each with ``os.walk``'s lists (names in the directory's own
    order, as litdata's), the folders breadth first (every folder of one depth before any
    deeper one; ``os.walk`` goes depth first, litdata in the order its threads finish).
    Directories are listed by a pool of ``max_workers`` threads. Symbolic links to folders
    are listed as files, not followed."""
    pending = [os.fspath(folder)]

    def listing(path: str) -> tuple[str, list[str], list[str]]:
        folders: list[str] = []
        files: list[str] = []
        with os.scandir(path) as entries:
            for entry in entries:
                (folders if entry.is_dir(follow_symlinks=False) else files).append(entry.name)
        return path, folders, files  # os.walk's (and litdata's) lists: the directory's order

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, max_workers or 1)) as pool:
        while pending:
            level, pending = list(pool.map(listing, pending)), []
            for path, folders, files in level:
                yield path, folders, files
                pending += [os.path.join(path, name) for name in folders]
