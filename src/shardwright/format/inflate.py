"""zstd decompression that never produces more than a stated bound (format.limits).

A frame that records its content size is checked against the bound before anything is
allocated, then read in one piece of that size. Frames without one (streaming writers), and
any frames after the first, are read in bounded pieces and refused as soon as they pass the
bound: memory grows with the real output, at most to the bound, never to what the frames
would inflate to.
"""

from __future__ import annotations

from typing import Any

from ..errors import CorruptStateError
from .limits import refuse_decoded

__all__ = ["inflate"]

_PIECE = 4 << 20  # bytes read at a time from a frame without a content size
_FRAME_HEADER_MAX = 18  # zstd's largest frame header


def inflate(data: Any, what: str, limit: int, why: str) -> bytes:
    """The zstd frames of ``data`` (any buffer) decompressed; CorruptStateError naming ``what``
    when they are not zstd or decompress to more than ``limit`` bytes (``why``: the source of
    the bound), raised before the output is allocated."""
    import zstandard

    view = memoryview(data)
    try:
        size = zstandard.frame_content_size(bytes(view[:_FRAME_HEADER_MAX]))
    except zstandard.ZstdError as exc:
        raise CorruptStateError(f"{what} cannot be decompressed (not zstd data: {exc})") from None
    if size > limit:
        raise refuse_decoded(f"{what} (its zstd frame announces {size:,} bytes)", limit, why)
    parts, total = [], 0
    # a frame announcing its size is read in one piece of that size (one allocation, as fast
    # as a one-shot decompress); later frames, and frames without a size, in bounded pieces
    want = size if size > 0 else _PIECE
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(view, read_across_frames=True)
        while True:
            piece = reader.read(min(want, limit - total + 1))
            if not piece:
                break
            total += len(piece)
            if total > limit:
                raise refuse_decoded(what, limit, why)
            parts.append(piece)
            want = _PIECE
    except zstandard.ZstdError as exc:
        raise CorruptStateError(f"{what} cannot be decompressed: {exc}") from None
    return parts[0] if len(parts) == 1 else b"".join(parts)
