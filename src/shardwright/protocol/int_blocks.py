"""A call's inputs that are all Python ints, as one int64 array, and the fingerprint's block
pickles built from it with numpy instead of the pickler (issue 36: the serial CPU before the
pool starts). Both are fast paths: the bytes they give are the pickler's own, and every value
or block they cannot build exactly is left to the general path.

The pickle of a block of ``n`` ints (2 <= n <= 1000: one batch of APPENDS, one frame) by
:class:`~.fingerprint.StablePickler` (protocol 4, no memo) is::

    80 04  95 <frame length, 8 bytes LE>  5d 28  <n items>  65 2e

and each int is ``K`` + 1 byte (0..255), ``M`` + 2 bytes (256..65535), ``J`` + 4 bytes (the
rest of int32), else ``LONG1`` ``8a`` + its length k (5..8 in int64) + its k low bytes in
two's complement, little-endian (the shortest k that holds the value). A block whose values
all lie in one of those ranges (:data:`_EDGES`) is a row of equal width, so all such blocks of
one kind are built at once; the others (values of several kinds) are pickled.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

MAX_BLOCK = 1000  # the pickler's batch: a longer list is several MARK ... APPENDS runs
MAX_ROWS = 2048  # blocks built at once: 512k values of 256, at most 5 MB of pickles

# the value ranges of one encoding, in order: range r is [_EDGES[r - 1], _EDGES[r])
_EDGES = np.array([-(2**55), -(2**47), -(2**39), -(2**31), 0, 256, 65_536, 2**31, 2**39, 2**47, 2**55], dtype=np.int64)
# (opcode, LONG1's length or 0, value bytes) of each range
_KINDS = [
    (0x8A, 8, 8),
    (0x8A, 7, 7),
    (0x8A, 6, 6),
    (0x8A, 5, 5),
    (0x4A, 0, 4),  # J: a negative int32
    (0x4B, 0, 1),  # K
    (0x4D, 0, 2),  # M
    (0x4A, 0, 4),  # J
    (0x8A, 5, 5),
    (0x8A, 6, 6),
    (0x8A, 7, 7),
    (0x8A, 8, 8),
]


def int64_values(inputs: Sequence, types: frozenset[type] | None) -> np.ndarray | None:
    """The values of a list or range of Python ints (``types``: exactly ``{int}``, from
    ``fingerprint.value_types``; a bool or an int subclass pickles otherwise) as int64, or
    None: another sequence or type, empty, or a value past int64."""
    if type(inputs) is range:
        if not len(inputs) or not (-(2**63) <= min(inputs[0], inputs[-1]) <= max(inputs[0], inputs[-1]) < 2**63):
            return None
        return np.arange(inputs.start, inputs.stop, inputs.step, dtype=np.int64)
    if type(inputs) is not list or types != {int} or not inputs:
        return None
    try:
        return np.fromiter(inputs, dtype=np.int64, count=len(inputs))
    except OverflowError:
        return None


def uniform_blocks(values: np.ndarray, block_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(block numbers, their pickles as rows of one width) of the whole blocks of ``values``
    whose values are all of one encoding, one kind at a time; the blocks not yielded (values
    of several kinds, the last block if partial) are the caller's to pickle."""
    whole = len(values) // block_size
    if whole == 0 or not 2 <= block_size <= MAX_BLOCK:
        return
    blocks = values[: whole * block_size].reshape(whole, block_size)
    low = np.searchsorted(_EDGES, blocks.min(axis=1), side="right")
    high = np.searchsorted(_EDGES, blocks.max(axis=1), side="right")
    for kind in sorted(set(low[low == high].tolist())):  # (not np.unique: it imports numpy.ma, 11 ms)
        chosen = np.flatnonzero((low == kind) & (high == kind))
        for start in range(0, len(chosen), MAX_ROWS):  # a bounded buffer of pickles at a time
            numbers = chosen[start : start + MAX_ROWS]
            first, last = int(numbers[0]), int(numbers[-1])
            # blocks of one kind are usually consecutive (sorted ids, a range): a view, no copy
            these = blocks[first : last + 1] if last - first + 1 == len(numbers) else blocks[numbers]
            yield numbers, _rows(these, *_KINDS[kind])


def _rows(blocks: np.ndarray, opcode: int, long_length: int, width: int) -> np.ndarray:
    """The pickles of ``blocks`` (each a row of values of one encoding) as rows of bytes."""
    count, size = blocks.shape
    head = [("op", "u1")] + ([("n", "u1")] if long_length else [])
    native = {1: "u1", 2: "<u2", 4: "<i4", 8: "<i8"}.get(width)
    item = np.dtype(head + [("v", native if native else ("u1", width))])
    body = size * item.itemsize + 4  # ]( items e.
    rows = np.empty((count, 11 + body), dtype=np.uint8)
    rows[:, :3] = (0x80, 0x04, 0x95)
    rows[:, 3:11] = np.frombuffer(body.to_bytes(8, "little"), dtype=np.uint8)
    rows[:, 11:13] = (0x5D, 0x28)
    rows[:, -2:] = (0x65, 0x2E)
    items = rows[:, 13:-2].view(item)
    items["op"] = opcode
    if long_length:
        items["n"] = long_length
    if native:  # a field of its width: one cast (the values fit it)
        items["v"] = blocks
    else:  # 5..7 bytes: the low bytes of each value
        little = blocks.astype("<i8", copy=False)
        items["v"] = little.view(np.uint8).reshape(count, size, 8)[:, :, :width]
    return rows
