"""Decoding many items of one dataset fast: the decode plan bound once."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from ..errors import CorruptStateError
from .flat import flat_decoder, flat_split_decoder
from .layouts import DecodedItem
from .leaves import array_view_decoder, view_decoder
from .pytree import spec_or_corrupt
from .sample import decode_plan

__all__ = ["decode_item", "item_decoder"]


def item_decoder(
    data_format: list[str], data_spec: str, *, allow_pickle: bool = True, owned: bool = False
) -> Callable[[Any], Any]:
    """A decoder of items of one format: the plan (struct, leaf decoders, builder) is bound
    once, so readers decoding many items pay for it once. Decoders are pure, so one is kept
    per format (compiling one took 0.13 ms, a dataset opened, per DataLoader worker).

    ``allow_pickle=False`` (what readers of untrusted datasets pass): pickle leaves holding
    anything but plain data raise UnsupportedFormatError instead of running code.

    ``owned=True``: for items each read into a writable buffer of its own (never a view of a
    chunk other items share), given as that 1-D uint8 array (or a memoryview of it): array
    leaves are views of that buffer, not copies."""
    return _item_decoder(tuple(data_format), data_spec, allow_pickle, owned)


@lru_cache(maxsize=64)
def _item_decoder(
    data_format: tuple[str, ...], data_spec: str, allow_pickle: bool, owned: bool
) -> Callable[[Any], Any]:
    sizes_struct, decoders, build = decode_plan(data_format, data_spec, allow_pickle)
    if owned:
        decoders = [view_decoder(fmt) or leaf for fmt, leaf in zip(data_format, decoders)]
    header, unpack = sizes_struct.size, sizes_struct.unpack_from

    def decode(buf: bytes | memoryview | DecodedItem) -> Any:
        if type(buf) is DecodedItem:  # a row of litdata's Arrow footer: already a value
            return buf.value
        view = memoryview(buf)  # type: ignore[arg-type]
        if len(view) < header:
            raise CorruptStateError(f"item is {len(view)} bytes, shorter than its {header}-byte size header")
        sizes = unpack(view, 0)
        pos = header
        if pos + sum(sizes) != len(view):
            raise CorruptStateError(f"item is {len(view)} bytes but its header announces {pos + sum(sizes)}")
        leaves = []
        for size, leaf in zip(sizes, decoders):
            leaves.append(leaf(view[pos : pos + size]))
            pos += size
        return build(iter(leaves))

    # one container of leaves (the general decode above is the fallback that names any
    # damage): fixed-size scalars are one unpack per item; any other leaves, one unpack of
    # the sizes and straight-line slicing
    root = spec_or_corrupt(data_spec)
    if owned:  # the item's own uint8 array: leaves are slices of it, given as memoryviews where they need one
        leaves = [array_view_decoder(fmt) or _as_memoryview(leaf) for fmt, leaf in zip(data_format, decoders)]
        split = flat_split_decoder(root, leaves, decode, array_input=True)
    else:
        split = flat_split_decoder(root, decoders, decode)
    return flat_decoder(root, list(data_format), decode) or split or decode


def _as_memoryview(leaf: Callable[[memoryview], Any]) -> Callable[[Any], Any]:
    return lambda raw: leaf(memoryview(raw))


def decode_item(
    buf: bytes | memoryview | DecodedItem, data_format: list[str], data_spec: str, *, allow_pickle: bool = True
) -> Any:
    """Inverse of :meth:`ItemEncoder.encode` for one item (see :func:`item_decoder`). torch is
    imported only for tensor leaves."""
    return item_decoder(data_format, data_spec, allow_pickle=allow_pickle)(buf)
