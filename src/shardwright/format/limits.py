"""Bounds on what a dataset's bytes may make a reader allocate, like Pillow's ``MAX_IMAGE_PIXELS``.

A dataset is untrusted data: a 64 KB zstd chunk can inflate to gigabytes, a TIFF header can
announce a billion pixels, a gzipped NIfTI volume can be a gzip bomb. Where index.json states
a size (a whole-file compressed chunk's ``chunk_bytes``), nothing decodes past it; everywhere
else (litdata's per-item and framed zstd, Arrow footers, media leaves) these limits apply:

- :data:`MAX_DECODED_BYTES` (1 GiB): the bytes one chunk whose decoded size index.json does
  not state (litdata's framed and per-item zstd), one Arrow footer, or one leaf (a gzipped
  NIfTI volume, a TIFF's pixels) may decode to.
- :data:`MAX_IMAGE_PIXELS` (Pillow's default, 89,478,485): the pixels of one ``tifffile``
  leaf, read from its header before any pixel is decoded. As in Pillow, a leaf over the limit
  warns and one over twice the limit is refused. Images Pillow decodes (``jpeg``, ``image``,
  ``pil`` leaves) keep Pillow's own limit, ``PIL.Image.MAX_IMAGE_PIXELS``.

A breach is a :class:`~shardwright.errors.CorruptStateError` naming the chunk or leaf,
raised before the allocation. Raise (or lower) them for one process with :func:`set_limits`,
or for every process (DataLoader workers, jobs) with the environment variables
``SHARDWRIGHT_MAX_DECODED_BYTES`` (bytes, or a size like ``"16GiB"``; the chunks themselves
still stop at 4 GiB: litdata's offsets are uint32) and
``SHARDWRIGHT_MAX_IMAGE_PIXELS``; :func:`set_limits` wins over the environment.
"""

from __future__ import annotations

import os
import warnings

from ..errors import CorruptStateError, UsageError

__all__ = [
    "DECODED_BYTES_ENV",
    "IMAGE_PIXELS_ENV",
    "MAX_DECODED_BYTES",
    "MAX_IMAGE_PIXELS",
    "check_pixels",
    "decoded_limit",
    "max_decoded_bytes",
    "max_image_pixels",
    "refuse_decoded",
    "reset_limits",
    "set_limits",
]

MAX_DECODED_BYTES = 1 << 30
MAX_IMAGE_PIXELS = 1024 * 1024 * 1024 // 4 // 3  # Pillow's default
DECODED_BYTES_ENV = "SHARDWRIGHT_MAX_DECODED_BYTES"
IMAGE_PIXELS_ENV = "SHARDWRIGHT_MAX_IMAGE_PIXELS"

_set: dict[str, int] = {}  # what set_limits chose in this process


def set_limits(*, max_decoded_bytes: int | None = None, max_image_pixels: int | None = None) -> None:
    """Set this process's limits (a positive int each; None leaves one as it is)."""
    for key, value in (("max_decoded_bytes", max_decoded_bytes), ("max_image_pixels", max_image_pixels)):
        if value is None:
            continue
        if type(value) is not int or value <= 0:
            raise UsageError(f"set_limits({key}={value!r}): pass a positive int")
        _set[key] = value


def reset_limits() -> None:
    """Forget what :func:`set_limits` chose: the environment, or the defaults, apply again."""
    _set.clear()


def _from_env(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    from .index import parse_size  # sizes spelled as chunk_bytes is ("16GiB")

    try:
        value = parse_size(raw) if name == DECODED_BYTES_ENV else int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageError(f"environment variable {name}={raw!r} is not a positive number: unset it or fix it")
    return value


def max_decoded_bytes() -> int:
    """The bytes one chunk or one leaf may decode to in this process."""
    return _set.get("max_decoded_bytes") or _from_env(DECODED_BYTES_ENV, MAX_DECODED_BYTES)


def max_image_pixels() -> int:
    """The pixels one image leaf may have in this process (refused above twice this)."""
    return _set.get("max_image_pixels") or _from_env(IMAGE_PIXELS_ENV, MAX_IMAGE_PIXELS)


def _fix(env: str) -> str:
    return f"if the data is trusted, raise the limit (shardwright.format.limits.set_limits or {env})"


def decoded_limit(bound: int | None = None, stated: str = "") -> tuple[int, str]:
    """The most bytes a decode may produce, and why: ``bound``, a size index.json states (said by
    ``stated``), when there is one (never decode more than it says), else :func:`max_decoded_bytes`."""
    if bound is not None:
        return bound, stated
    return max_decoded_bytes(), f"shardwright's limit; {_fix(DECODED_BYTES_ENV)}"


def refuse_decoded(what: str, limit: int, why: str) -> CorruptStateError:
    """The error for ``what`` decoding past ``limit`` (see :func:`decoded_limit`)."""
    return CorruptStateError(
        f"{what} decodes to more than {limit:,} bytes ({why}): refused before allocating it, as damaged "
        "data or a decompression bomb"
    )


def check_pixels(pixels: int, what: str) -> None:
    """Pillow's decompression-bomb rule with shardwright's limit: warn over it, refuse over twice
    (``what`` names the leaf and its size)."""
    limit = max_image_pixels()
    if pixels > 2 * limit:
        raise CorruptStateError(
            f"{what} has {pixels:,} pixels, more than twice shardwright's limit of {limit:,}: refused as "
            f"a possible decompression bomb; {_fix(IMAGE_PIXELS_ENV)}"
        )
    if pixels > limit:
        warnings.warn(f"{what} has {pixels:,} pixels, more than shardwright's limit of {limit:,}", stacklevel=3)
