"""Reader telemetry (shardwright.telemetry): where a reader process is (rank, loader worker),
and the loader's batches timed. Every hook first asks ``telemetry.get().enabled``, so a
reader with telemetry off pays one attribute read per batch or per chunk, nothing per item."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from .. import telemetry
from .state import distributed_env

__all__ = ["batch_length", "cache_outcome", "chunk_loaded", "timed_batches", "where"]


def where() -> tuple[int, int]:
    """(rank, loader worker) of this process; worker 0 when the loader has no workers."""
    try:
        rank = distributed_env()[0]
    except ValueError:
        rank = 0
    try:
        from torch.utils.data import get_worker_info
    except ImportError:
        return rank, 0
    info = get_worker_info()
    return rank, info.id if info is not None else 0


def batch_length(batch: Any) -> int:
    """Items in a collated batch: the first dimension of its first leaf (0 when unknown)."""
    while isinstance(batch, dict) and batch:
        batch = next(iter(batch.values()))
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else 1
    if isinstance(batch, (list, tuple)):
        return len(batch)
    return 0


def timed_batches(batches: Iterable[Any], counters: telemetry.Telemetry, num_workers: int) -> Iterator[Any]:
    """``batches``, each counted with the time the caller waited for it. The worker of the
    i-th batch is i mod num_workers: torch hands out an iterable dataset's batches from its
    workers in turn."""
    rank = where()[0]
    workers = max(1, num_workers)
    iterator = iter(batches)
    i = 0
    while True:
        started = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        counters.batch(rank, i % workers, batch_length(batch), time.perf_counter() - started)
        i += 1
        yield batch


def chunk_loaded(nbytes: int) -> None:
    """A reader process loaded a chunk of ``nbytes`` (decoded) bytes."""
    counters = telemetry.get()
    if counters.enabled:
        rank, worker = where()
        counters.bytes_read(rank, worker, nbytes)


def cache_outcome(downloaded: bool, nbytes: int) -> None:
    """The cache answered a chunk: downloaded it (``nbytes``) or had it."""
    counters = telemetry.get()
    if counters.enabled:
        rank, worker = where()
        if downloaded:
            counters.chunk_download(rank, worker, nbytes)
        else:
            counters.cache_hit(rank, worker)
