"""Decoding many items of one dataset fast: the decode plan bound once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import CorruptStateError
from .flat import flat_decoder
from .layouts import DecodedItem
from .pytree import spec_or_corrupt
from .sample import decode_plan

__all__ = ["decode_item", "item_decoder"]


def item_decoder(data_format: list[str], data_spec: str, *, allow_pickle: bool = True) -> Callable[[Any], Any]:
    """A decoder of items of one format: the plan (struct, leaf decoders, builder) is bound
    once, so readers decoding many items pay for it once.

    ``allow_pickle=False`` (what readers of untrusted datasets pass): pickle leaves holding
    anything but plain data raise UnsupportedFormatError instead of running code."""
    sizes_struct, decoders, build = decode_plan(tuple(data_format), data_spec, allow_pickle)
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

    # samples of fixed-size scalars: one unpack per item (the general decode above is the
    # fallback that names any damage)
    return flat_decoder(spec_or_corrupt(data_spec), list(data_format), decode) or decode


def decode_item(
    buf: bytes | memoryview | DecodedItem, data_format: list[str], data_spec: str, *, allow_pickle: bool = True
) -> Any:
    """Inverse of :meth:`ItemEncoder.encode` for one item (see :func:`item_decoder`). torch is
    imported only for tensor leaves."""
    return item_decoder(data_format, data_spec, allow_pickle=allow_pickle)(buf)
