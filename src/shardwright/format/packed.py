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

:class:`LeafColumns` goes one step further for the worker's compiled hot loop
(engine/hotloop.py): the samples' leaves are kept as one list per leaf and the block is built
from them by numpy, so no bytes object is made per item at all.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .flat import fixed_item_size

__all__ = ["LeafColumns", "PackedItems", "items_nbytes", "packed_header"]

# a fixed-size leaf's format -> (its numpy dtype, a value of its exact type that stands for an
# item given as bytes, see LeafColumns.add_item); the struct codes of format.flat: q, d, ?
_COLUMNS = {"int": ("<i8", 0), "float": ("<f8", 0.0), "bool": ("?", False)}


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


class LeafColumns:
    """A batch of samples of fixed-size leaves only (``int``, ``float``, ``bool``) held as one
    list per leaf, made into the block of their items at once (issue 36): the worker's compiled
    hot loop appends each sample's leaves as fn returns it (checked for their exact types, so
    a sample fn mutates afterwards is written as it was), and :meth:`block` converts each list
    with numpy and lays the items out as ``u32 sizes[L]`` + the leaves, little-endian: the bytes
    ``struct.pack`` of each item makes (format.flat), with no bytes object per item.

    ``appenders``: the lists' ``append`` methods, leaf by leaf. :meth:`block` raises
    OverflowError when an ``int`` leaf is outside int64 (numpy's conversion checks each value),
    and keeps the batch: :meth:`samples` then gives the leaves item by item."""

    __slots__ = ("_placeholders", "appenders", "dtype", "itemsize", "lists", "patches", "sizes")

    # numpy 2 raises OverflowError for every Python int outside int64 it converts; with older
    # ones the loop keeps making one item's bytes at a time (struct checks each value)
    available = np.lib.NumpyVersion(np.__version__) >= "2.0.0"

    def __init__(self, data_format: list[str]):
        itemsize = fixed_item_size(data_format)
        if itemsize is None or any(fmt not in _COLUMNS for fmt in data_format):
            raise ValueError(f"not a format of fixed-size leaves: {data_format}")
        fields = [("sizes", "<u4", (len(data_format),))]
        fields += [(f"f{k}", _COLUMNS[fmt][0]) for k, fmt in enumerate(data_format)]  # type: ignore[misc]
        self.dtype = np.dtype(fields)  # packed, no alignment: the layout of struct's "<"
        if self.dtype.itemsize != itemsize:
            raise AssertionError(f"{self.dtype} is not {itemsize} bytes")
        self.itemsize = itemsize
        self.sizes = tuple(self.dtype[f"f{k}"].itemsize for k in range(len(data_format)))
        self.lists: list[list] = [[] for _ in data_format]
        self.appenders = tuple(column.append for column in self.lists)
        self.patches: dict[int, bytes] = {}  # item -> its bytes, for items given as bytes
        self._placeholders = tuple(_COLUMNS[fmt][1] for fmt in data_format)

    def __len__(self) -> int:
        return len(self.lists[0])

    def add_item(self, data: bytes) -> None:
        """An item already encoded (by the general encoder: a numpy scalar in a leaf): its
        bytes are written as they are."""
        if len(data) != self.itemsize:
            raise ValueError(f"an item of {len(data)} bytes in a batch of {self.itemsize}-byte items")
        self.patches[len(self)] = data
        for append, value in zip(self.appenders, self._placeholders):
            append(value)

    def block(self) -> bytes:
        """The batch's items as one block, and the batch emptied; OverflowError (the batch
        kept) when an int leaf is outside int64."""
        count = len(self)
        if not count:
            return b""
        table = np.empty(count, dtype=self.dtype)
        table["sizes"] = self.sizes
        for k, column in enumerate(self.lists):
            field = f"f{k}"
            table[field] = np.fromiter(column, dtype=self.dtype[field], count=count)
        if self.patches:
            rows = table.view(np.uint8).reshape(count, self.itemsize)
            for item, data in self.patches.items():
                rows[item] = np.frombuffer(data, dtype=np.uint8)
        self.clear()
        return table.tobytes()

    def samples(self) -> Iterator[tuple[tuple, bytes | None]]:
        """Each item's leaves, in order, with its bytes when it was given as bytes."""
        for item, leaves in enumerate(zip(*self.lists)):
            yield leaves, self.patches.get(item)

    def clear(self) -> None:
        for column in self.lists:
            column.clear()
        self.patches.clear()
