"""Reading a stream's items one after another: the reader's hot loop.

Every item a dataset yields goes through ``read(i)``, so it is built once per epoch with
everything it needs bound: the decoder, the chunks' first item ids, and the chunks of the
current window held with their item offsets, checked once per chunk
(:func:`~shardwright.format.chunk_spans`) instead of once per item.

Read in order (no mixing inside windows), a stream never comes back to a chunk it has left,
so the chunk is released as soon as the next one is entered: its map closes at once, and
(remote) its cached file is unpinned. Keeping a few 2 MiB chunks mapped a little longer
(the LRU's bound) made reading 256 KiB arrays in-process 4 % slower.

Chunks of large items are not mapped at all when the source allows it: each item is read
into a buffer of its own (:mod:`.itemfile`) and decoded with views of it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ..format import chunk_item, chunk_spans
from .itemfile import ItemFile
from .source import ChunkSource

__all__ = ["item_reader"]


def item_reader(
    source: ChunkSource,
    starts: Sequence[int],
    decode: Callable[[Any], Any],
    steps: Sequence[Callable[[Any], Any]],
    *,
    base: Callable[[int], int] | None,
    in_order: bool,
    decode_owned: Callable[[Any], Any] | None = None,
) -> Callable[[np.ndarray], Iterator[Any]]:
    """``read_items(ids)``: the items ``ids`` (a window's, in stream order), one after
    another, each decoded and transformed by ``steps``.

    A run of consecutive ids inside one chunk that is read item by item (:class:`ItemFile`)
    goes through one loop: ``ItemFile.read_run`` and a decode per item, with no lookup of its
    chunk per item.

    Args:
        source: the dataset's chunks.
        starts: the first item id of each chunk.
        decode: the dataset's item decoder.
        steps: transforms applied to each item, in order.
        base: maps a subsample's item id to the dataset's (None: not subsampled).
        in_order: the stream reads each chunk's items in one run (release a chunk once left).
        decode_owned: the decoder of items read into buffers of their own
            (``item_decoder(owned=True)``); None: chunks are always loaded whole.
    """
    # chunk -> (its bytes, its item offsets: chunk_spans, None), (a RowChunk, None, None),
    # or (None, None, the chunk's ItemFile: items read one by one)
    held: dict[int, tuple[Any, tuple[int, ...] | None, ItemFile | None]] = {}
    last = [-1]  # the chunk the previous item came from (in order: the one to release)
    find = bisect.bisect_right

    def load(k: int) -> tuple[Any, tuple[int, ...] | None, ItemFile | None]:
        entry: tuple[Any, tuple[int, ...] | None, ItemFile | None]
        file = source.item_file(k) if decode_owned is not None else None
        if file is not None:
            held[k] = entry = (None, None, file)
            return entry
        buf = source.chunk(k, sequential_hint=False)
        spans = chunk_spans(buf)
        held[k] = entry = (buf, None, None) if spans is None else (*spans, None)
        return entry

    def forget(k: int) -> None:
        entry = held.pop(k, None)
        if entry is not None and entry[2] is not None:
            entry[2].close()

    def enter(k: int) -> tuple[Any, tuple[int, ...] | None, ItemFile | None]:
        """Chunk ``k`` held (loaded if it is not), the chunk left behind released."""
        entry = held.get(k)
        if entry is None:
            previous = last[0]
            if in_order and previous >= 0:  # passed for good: out of the LRU too
                forget(previous)
                source.release(previous)
            if len(held) > source.keep_chunks:  # the LRU keeps what it keeps
                for old in list(held):
                    forget(old)
            entry = load(k)
            last[0] = k
        return entry

    def read(i: int) -> Any:
        if base is not None:
            i = base(i)
        k = find(starts, i) - 1
        buf, offsets, file = enter(k)
        j = i - starts[k]
        if file is not None:
            item = decode_owned(file.read(j))  # type: ignore[misc]
        else:
            try:
                view = buf[offsets[j] : offsets[j + 1]] if offsets is not None else chunk_item(buf, j)
            except ValueError:  # released: another thread of this process pushed it out of the LRU
                buf, offsets, _ = load(k)
                view = buf[offsets[j] : offsets[j + 1]] if offsets is not None else chunk_item(buf, j)
            item = decode(view)
        for step in steps:
            item = step(item)
        return item

    def read_items(ids: np.ndarray) -> Iterator[Any]:
        if base is not None or decode_owned is None or len(ids) < 2:
            for i in ids.tolist():
                yield read(i)
            return
        # runs of consecutive ids: (first id, end id), cut where an id does not follow the last
        cuts = (np.flatnonzero(ids[1:] != ids[:-1] + 1) + 1).tolist()
        firsts = ids[[0, *cuts]].tolist()
        ends = (ids[[c - 1 for c in cuts] + [len(ids) - 1]] + 1).tolist()
        for i, end in zip(firsts, ends):
            while i < end:
                k = find(starts, i) - 1
                stop = min(end, starts[k + 1]) if k + 1 < len(starts) else end
                file = enter(k)[2]
                if file is None:  # a mapped chunk: item by item
                    for x in range(i, stop):
                        yield read(x)
                    i = stop
                    continue
                first = starts[k]
                if not steps:
                    for buf in file.read_run(i - first, stop - first):
                        yield decode_owned(buf)
                else:
                    for buf in file.read_run(i - first, stop - first):
                        item = decode_owned(buf)
                        for step in steps:
                            item = step(item)
                        yield item
                i = stop

    return read_items
