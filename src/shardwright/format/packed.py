"""A chunk's items when every one has the same size: a few blocks of whole items, no object
per item (issue 36: the 200k small dicts row).

A sample of fixed-size leaves only (``{"i": int, "x": int}``: ``int``, ``float``, ``bool``)
always encodes to the same number of bytes (the ``u32`` size header and the leaves). The
worker's hot loop still encodes each sample as it comes (``flat.flat_encoder``: the sample is
checked and turned into bytes before fn runs again, so a sample fn mutates afterwards is
written as it was), but it hands the writer one block per batch (``b"".join`` of the
batch's items) instead of the items themselves. The writer cuts blocks at item boundaries
(``engine.shard_writer.ShardWriter.add_block``) and the chunk's header is computed, not
summed: offset ``k`` is ``4 + 4 * (N + 1) + k * itemsize``. Measured per item, compared
with a list of one ``bytes`` per item: no sizes summed for the chunk cuts (~20 ns), no
offsets accumulated and packed one by one (~30 ns), no second sum for the committer's
backpressure, and the items freed in the worker a batch at a time.

The chunk's bytes are the same either way (``tests/unit/test_packed_items.py`` compares them
byte for byte, over samples that take this path and ones that must not).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["PackedItems", "items_nbytes", "packed_header"]


class PackedItems:
    """``count`` items of ``itemsize`` bytes each, in order, held as ``blocks`` (bytes of whole
    items). Reads like the ``list[bytes]`` of the same items where a chunk's items are read
    (``len``, iteration, truthiness, ``clear``); :meth:`tolist` makes that list."""

    __slots__ = ("blocks", "count", "itemsize")

    def __init__(self, itemsize: int):
        if itemsize <= 0:
            raise ValueError(f"itemsize must be positive, got {itemsize}")
        self.itemsize = itemsize
        self.blocks: list[bytes] = []
        self.count = 0

    def add(self, block: bytes) -> None:
        """Append the items of ``block`` (a whole number of items)."""
        count, rest = divmod(len(block), self.itemsize)
        if rest:
            raise ValueError(f"a block of {len(block)} bytes is not a whole number of {self.itemsize}-byte items")
        if count:
            self.blocks.append(block)
            self.count += count

    @property
    def nbytes(self) -> int:
        return self.count * self.itemsize

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[bytes]:
        size = self.itemsize
        for block in self.blocks:
            for start in range(0, len(block), size):
                yield block[start : start + size]

    def truncate(self, count: int) -> None:
        """Keep the first ``count`` items (a rollback), without making the items one by one."""
        if count >= self.count:
            return
        keep, size = max(0, count), self.itemsize
        blocks, held = [], 0
        for block in self.blocks:
            if held >= keep:
                break
            take = min(len(block) // size, keep - held)
            blocks.append(block if take * size == len(block) else block[: take * size])
            held += take
        self.blocks, self.count = blocks, held

    def clear(self) -> None:
        self.blocks.clear()
        self.count = 0

    def tolist(self) -> list[bytes]:
        return list(self)


def items_nbytes(items: list[bytes] | PackedItems) -> int:
    """The bytes of a chunk's items, however they are held (no per-item sum for blocks)."""
    return items.nbytes if type(items) is PackedItems else sum(map(len, items))


def packed_header(items: PackedItems) -> bytes:
    """``u32 N | u32 offsets[N+1]`` of a chunk of ``items``: the bytes ``chunk_header`` packs
    from the items' sizes, computed from the one size. The caller checks the chunk's size
    against the u32 offsets first."""
    n, size = items.count, items.itemsize
    head = np.empty(n + 2, dtype="<u4")
    head[0] = n
    head[1:] = np.arange(4 + 4 * (n + 1), 4 + 4 * (n + 1) + size * (n + 1), size, dtype=np.int64)
    return head.tobytes()
