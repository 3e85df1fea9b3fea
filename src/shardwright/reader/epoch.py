"""One epoch of a StreamingDataset's iteration: the ids a stream reads, window by window, and
the loop that reads them (the next window's chunks fetched while this one is read, progress
counted for ``state_dict``, secrets kept out of errors). The functions take what the dataset
holds as arguments; which stream and plan a DataLoader worker gets is state.py's."""

from __future__ import annotations

import multiprocessing
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ..secrets import without_secrets
from .order import EpochSequence, iter_segment, mixes_items, segment_ids
from .partition import Layout
from .plan import StreamPlan

__all__ = ["IDS_PER_CALL", "read_windows", "shared_epoch_counter", "warn_if_empty", "windows"]

IDS_PER_CALL = 65536  # item ids handed to the reader at a time, unmixed local reads (8 bytes each)

Window = tuple[list[int], Any]  # (the window's chunk groups, to fetch ahead; its item ids)


def shared_epoch_counter():
    """The epoch number shared with DataLoader workers, persistent ones included (None where
    there is no shared memory: workers then see the epoch of their start)."""
    try:
        return multiprocessing.RawValue("q", 0)
    except (OSError, ImportError):
        return None


def warn_if_empty(output_dir: str, layout: Layout, total: int, worker: int) -> None:
    """Warn once per rank (its worker 0) when drop_last leaves every rank an empty epoch."""
    if worker == 0 and layout.drop_last and 0 < total < layout.world_size:
        warnings.warn(
            f"{output_dir}: the epoch is empty: drop_last with {total} items on {layout.world_size} ranks "
            "leaves every rank 0 items (each yields 0 batches); pass pad=True to repeat a few items instead, "
            "or read with fewer ranks",
            stacklevel=3,  # StreamingDataset.__iter__, as before the epoch code moved here
        )


def windows(seq: EpochSequence, plan: StreamPlan, ahead: bool) -> Iterator[Window]:
    """The windows of ``plan``: with their chunks named when they are fetched ahead (``ahead``:
    a remote dataset) or items are mixed; else the ids in long runs with no chunks named."""
    if ahead or mixes_items(seq.spec):
        return ((groups, items) for seg, _repeat in plan for groups, items in iter_segment(seq, seg))
    # Unmixed items from local files: no window's chunks to fetch ahead, so the ids come in
    # long runs, not window by window (issue 19: callgrind counts 3.4 % fewer instructions for
    # an epoch of 400 arrays of 256 KiB in 14 windows).
    return (([], ids) for seg, _repeat in plan for ids in segment_ids(seq, seg, IDS_PER_CALL))


def read_windows(
    stream: Iterator[Window],
    reader: Callable[[], Callable[[Any], Iterator[Any]]],
    progress: dict,
    prefetch: Callable[[list[int]], None] | None,
    storage_options: dict | None,
) -> Iterator[Any]:
    """The items of ``stream``'s windows, read by ``reader()(ids)`` (made at the first next(),
    so that nothing is prepared before iteration starts); ``prefetch(groups)`` (remote
    datasets) starts the next window's downloads while this window is read;
    ``progress["yielded"]`` counts items."""
    read_items = reader()
    current = next(stream, None)
    while current is not None:
        _groups, items = current
        following = next(stream, None)
        try:
            if prefetch is not None and following is not None:
                prefetch(following[0])
            for item in read_items(items):
                progress["yielded"] += 1
                yield item
        except Exception as exc:  # not GeneratorExit: a consumer closing us is no error
            clean = without_secrets(exc, storage_options)
            if clean is exc:
                raise
            raise clean from None
        current = following
