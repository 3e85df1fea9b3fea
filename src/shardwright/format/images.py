"""Image leaves, byte-compatible with litdata 0.2.76: ``pil``, ``jpeg``, ``jpeg_array``, ``image:EXT``.

=================  ==========================================================================
``pil``            ``u32 width, u32 height, u32 len(mode)`` (little-endian), the mode's ASCII
                   name, then ``Image.tobytes()``; read back as a ``PIL.Image``
``jpeg``           the JPEG file's bytes; read back as an RGB ``uint8`` tensor (C, H, W)
``jpeg_array``     ``u32 n, u32 size[n]`` then the n JPEGs; read back as a list of such tensors
``image:EXT``      an encoded image file (png, jpg, webp, ...); read back like ``jpeg``
=================  ==========================================================================

Which leaf a value becomes is litdata's rule: a PIL image opened from a JPEG file is ``jpeg``
(the file's own bytes when it still exists), any other PIL image is ``pil``; the wrappers of
``format.media`` pick the others. Decoding goes through Pillow, so its decompression-bomb limit
(``PIL.Image.MAX_IMAGE_PIXELS``) applies to every image read, ``pil`` leaves included.
"""

from __future__ import annotations

import io
import os
import struct
import sys
import warnings
from typing import Any

import numpy as np

from .media import Image, Jpeg, JpegArray, Pil
from .optional import require

__all__ = ["decode_image_tensor", "decode_jpeg_array", "decode_pil", "encode_image", "is_jpeg_file", "is_pil_image"]

_U32 = struct.Struct("<I")
_PIL_HEADER = struct.Struct("<III")


def is_pil_image(value: Any) -> bool:
    pil = sys.modules.get("PIL.Image")
    return pil is not None and isinstance(value, pil.Image)


def is_jpeg_file(value: Any) -> bool:
    plugin = sys.modules.get("PIL.JpegImagePlugin")
    return plugin is not None and isinstance(value, plugin.JpegImageFile)


# --- reading ----------------------------------------------------------------------------------


def _check_pixels(width: int, height: int) -> None:
    """Pillow's decompression-bomb rule, for pixels that do not go through ``Image.open``."""
    pil = require("PIL.Image", "pillow", "pil leaves")
    limit = pil.MAX_IMAGE_PIXELS
    if limit is None:
        return
    pixels = width * height
    if pixels > 2 * limit:
        raise pil.DecompressionBombError(
            f"a pil leaf of {width}x{height} = {pixels} pixels exceeds twice Pillow's limit of {limit} "
            "(PIL.Image.MAX_IMAGE_PIXELS): refused as a possible decompression bomb"
        )
    if pixels > limit:
        warnings.warn(
            f"a pil leaf of {pixels} pixels exceeds Pillow's limit of {limit}",
            pil.DecompressionBombWarning,
            stacklevel=3,
        )


def decode_pil(raw: memoryview) -> Any:
    pil = require("PIL.Image", "pillow", "pil leaves")
    if len(raw) < _PIL_HEADER.size:
        raise ValueError(f"a pil leaf of {len(raw)} bytes is shorter than its 12-byte header")
    width, height, mode_len = _PIL_HEADER.unpack_from(raw, 0)
    if mode_len > 16:
        raise ValueError(f"a pil leaf names a mode of {mode_len} bytes; Pillow's modes are at most 16")
    _check_pixels(width, height)
    mode = bytes(raw[12 : 12 + mode_len]).decode("ascii")
    return pil.frombytes(mode, (width, height), bytes(raw[12 + mode_len :]))


def _to_tensor(array: np.ndarray) -> Any:
    torch = require("torch", "torch", "jpeg and image leaves (read back as tensors)")
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def decode_image_tensor(raw: bytes | memoryview) -> Any:
    """An encoded image as an RGB ``uint8`` tensor of shape (3, H, W), as litdata reads it (a
    JPEG's EXIF orientation is applied)."""
    pil = require("PIL.Image", "pillow", "jpeg and image leaves")
    data = bytes(raw)
    with pil.open(io.BytesIO(data)) as image:  # Image.open applies the decompression-bomb limit
        image.load()
        if data[:2] == b"\xff\xd8":
            from PIL import ImageOps

            image = ImageOps.exif_transpose(image)
        rgb = np.asarray(image.convert("RGB"))
    return _to_tensor(rgb)


def decode_jpeg_array(raw: memoryview) -> list[Any]:
    if len(raw) < 4:
        raise ValueError("a jpeg_array leaf is shorter than its count")
    (n,) = _U32.unpack_from(raw, 0)
    if n == 0 or 4 + 4 * n > len(raw):
        raise ValueError(f"a jpeg_array leaf of {len(raw)} bytes cannot hold {n} images")
    sizes = struct.unpack_from(f"<{n}I", raw, 4)
    pos, images = 4 + 4 * n, []
    for size in sizes:
        if pos + size > len(raw):
            raise ValueError("a jpeg_array leaf is shorter than the sizes of its images")
        images.append(decode_image_tensor(raw[pos : pos + size]))
        pos += size
    return images


# --- writing ----------------------------------------------------------------------------------


def media_bytes(item: Any) -> tuple[bytes, str]:
    """(bytes, lower-case extension without the dot) of a wrapper's ``bytes=`` or ``path=``."""
    path, payload = getattr(item, "path", None), getattr(item, "bytes", None)
    ext = os.path.splitext(str(path).split("?", 1)[0])[1].lstrip(".").lower() if path else ""
    if payload is not None:
        return bytes(payload), ext
    if path:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{type(item).__name__}(path={path!r}): no such file")
        with open(path, "rb") as handle:
            return handle.read(), ext
    raise TypeError(f"{type(item).__name__} needs path=, bytes= or pixels (array=/image=)")


def _pil_from_array(array: Any) -> Any:
    pil = require("PIL.Image", "pillow", "images from arrays")
    if hasattr(array, "detach"):
        array = array.detach().cpu().numpy()
    array = np.asarray(array)
    if array.ndim >= 3:
        if np.issubdtype(array.dtype, np.floating) and float(np.nanmax(array)) <= 1.0:
            array = np.clip(array, 0.0, 1.0) * 255.0
        return pil.fromarray(array.astype(np.uint8))
    native = array.dtype.newbyteorder("=") if array.dtype.byteorder not in ("=", "|") else array.dtype
    allowed = {np.dtype(t) for t in ("b1", "u1", "u2", "i2", "u4", "i4", "f4", "f8")}
    if native not in allowed:
        size = array.dtype.itemsize
        while size >= 1 and np.dtype(f"{array.dtype.kind}{size}") not in allowed:
            size //= 2
        if size < 1:
            raise TypeError(f"an image cannot be made of an array of dtype {array.dtype}")
        array = array.astype(f"{array.dtype.kind}{size}")
    return pil.fromarray(array)


def _pil_layout(image: Any) -> bytes:
    mode = image.mode.encode("ascii")
    width, height = image.size
    return _PIL_HEADER.pack(width, height, len(mode)) + mode + image.tobytes()


def _save(image: Any, fmt: str, quality: int | None, mode: str | None) -> tuple[bytes, str]:
    if mode and image.mode != mode:
        image = image.convert(mode)
    fmt = "JPEG" if fmt.upper() in ("JPG", "JPEG") else fmt.upper()
    if fmt == "JPEG" and image.mode not in ("RGB", "L"):
        image = image.convert("RGB")
    options: dict[str, Any] = {"format": fmt}
    if quality is not None and fmt in ("JPEG", "WEBP"):
        options["quality"] = int(quality)
    buffer = io.BytesIO()
    image.save(buffer, **options)
    return buffer.getvalue(), "jpg" if fmt == "JPEG" else fmt.lower()


# The IJG base luminance table (JPEG standard, annex K), in natural order, and the zigzag order
# DQT segments store coefficients in: used to estimate the quality of existing JPEG bytes.
_LUMA_BASE = (
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
    14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99,
)  # fmt: skip
_ZIGZAG = (
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,
    7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59, 52, 45, 38, 31,
    39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
)  # fmt: skip


def _luma_table(quality: int) -> tuple[int, ...]:
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return tuple(min(255, max(1, (c * scale + 50) // 100)) for c in _LUMA_BASE)


_TABLES = [(_luma_table(q), q) for q in range(1, 101)]


def _first_luma_table(data: bytes) -> tuple[int, ...] | None:
    """The table-0 (else the first) luminance quantization table of a JPEG, in natural order."""
    if data[:2] != b"\xff\xd8":
        return None
    pos, first = 2, None
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xDA:
            break
        if marker in (0xD8, 0xD9) or 0xD0 <= marker <= 0xD7:
            pos += 2
            continue
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
        if length < 2 or pos + 2 + length > len(data):
            break
        if marker == 0xDB:
            body, k = data[pos + 4 : pos + 2 + length], 0
            while k < len(body):
                precision, table_id = body[k] >> 4, body[k] & 0x0F
                width = 128 if precision else 64
                raw = body[k + 1 : k + 1 + width]
                if len(raw) < width:
                    return first
                values = struct.unpack(">64H", raw) if precision else tuple(raw)
                natural = [0] * 64
                for zig, nat in enumerate(_ZIGZAG):
                    natural[nat] = values[zig]
                table = tuple(natural)
                first = first or table
                if table_id == 0:
                    return table
                k += 1 + width
        pos += 2 + length
    return first


def _keep_jpeg(data: bytes, max_quality: int) -> bool:
    """JPEG bytes whose estimated quality is at or under the cap (or unknown) are kept as they are."""
    if data[:2] != b"\xff\xd8":
        return False
    table = _first_luma_table(data)
    if table is None:
        return True
    exact = [q for t, q in _TABLES if t == table]
    quality = exact[0] if exact else min(_TABLES, key=lambda tq: sum(abs(a - b) for a, b in zip(table, tq[0])))[1]
    return quality <= max_quality


def _encode_ref(item: Any, default_format: str) -> tuple[bytes, str]:
    """Bytes and extension of an Image/Jpeg wrapper (pixels encoded, or a file kept/re-encoded)."""
    quality, max_quality = item.quality, item.max_quality
    mode, explicit = item.mode, getattr(item, "format", None)
    encode_quality = quality if quality is not None else max_quality

    def save(image: Any, fmt: str) -> tuple[bytes, str]:
        return _save(image, "JPEG" if max_quality is not None else fmt, encode_quality, mode)

    if item.image is not None or item.array is not None:
        if max_quality is not None and item.image is not None:
            name = getattr(item.image, "filename", None)
            if name and os.path.isfile(name) and str(name).lower().endswith((".jpg", ".jpeg")):
                with open(name, "rb") as handle:
                    original = handle.read()
                if _keep_jpeg(original, int(max_quality)):
                    return original, "jpg"
        if item.image is not None:
            native = item.image.format or ("PNG" if item.image.mode in ("1", "L", "LA", "RGB", "RGBA") else "TIFF")
            return save(item.image, explicit or native)
        return save(_pil_from_array(item.array), explicit or default_format)
    data, ext = media_bytes(item)
    if quality is None and max_quality is None and mode is None and explicit is None:
        return data, ext or default_format.lower()
    if max_quality is not None and _keep_jpeg(data, int(max_quality)):
        return data, ext or "jpg"
    pil = require("PIL.Image", "pillow", "re-encoding images")
    with pil.open(io.BytesIO(data)) as image:
        image.load()
        return save(image, explicit or ext or default_format)


def _jpeg_of_pil(image: Any) -> bytes:
    if is_jpeg_file(image):
        name = getattr(image, "filename", None)
        if name and os.path.isfile(name):
            with open(name, "rb") as handle:
                return handle.read()
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG")
        return buffer.getvalue()
    buffer = io.BytesIO()
    image.convert("RGB").save(buffer, quality=100, format="JPEG")
    return buffer.getvalue()


def _jpeg_bytes(item: Any) -> bytes:
    if isinstance(item, Jpeg):
        fields = (item.array, item.image, item.mode, item.quality, item.max_quality)
        if any(value is not None for value in fields):
            return _encode_ref(item, "JPEG")[0]
        return media_bytes(item)[0]
    if is_pil_image(item):
        return _jpeg_of_pil(item)
    raise TypeError(f"a jpeg leaf needs a PIL image or a Jpeg wrapper, got {type(item).__name__}")


def _jpeg_array_bytes(item: Any) -> bytes:
    images = item.images if isinstance(item, JpegArray) else item
    if not images:
        raise ValueError("JpegArray.images must be a non-empty list")
    blobs = []
    for image in images:
        if isinstance(image, Jpeg) and isinstance(item, JpegArray):
            if item.quality is not None and image.quality != item.quality:
                image = Jpeg(image.path, image.bytes, image.array, image.image, image.mode, item.quality, None)
            elif item.max_quality is not None and image.quality is None and image.max_quality != item.max_quality:
                image = Jpeg(image.path, image.bytes, image.array, image.image, image.mode, None, item.max_quality)
        if isinstance(image, Image):
            blobs.append(encode_image(image)[0])
        elif isinstance(image, (bytes, bytearray)):
            blobs.append(bytes(image))
        else:
            blobs.append(_jpeg_bytes(image))
    return struct.pack(f"<{len(blobs) + 1}I", len(blobs), *(len(b) for b in blobs)) + b"".join(blobs)


def _pil_bytes(item: Any) -> bytes:
    if isinstance(item, Pil):
        if item.image is not None:
            image = item.image
        elif item.array is not None:
            image = _pil_from_array(item.array)
        else:
            pil = require("PIL.Image", "pillow", "Pil leaves")
            image = pil.open(io.BytesIO(media_bytes(item)[0]))
        if item.mode and image.mode != item.mode:
            image = image.convert(item.mode)
        return _pil_layout(image)
    return _pil_layout(item)


def encode_image(item: Any) -> tuple[bytes, str]:
    """(bytes, data_format name) of an image value: a PIL image or an image wrapper."""
    if isinstance(item, Pil) or (is_pil_image(item) and not is_jpeg_file(item)):
        return _pil_bytes(item), "pil"
    if isinstance(item, Jpeg) or is_jpeg_file(item):
        return _jpeg_bytes(item), "jpeg"
    if isinstance(item, JpegArray):
        return _jpeg_array_bytes(item), "jpeg_array"
    if isinstance(item, Image):
        if any(
            getattr(item, name) is not None for name in ("array", "image", "quality", "max_quality", "mode", "format")
        ):
            data, ext = _encode_ref(item, item.format or "PNG")
        else:
            data, ext = media_bytes(item)
            ext = ext or "jpg"
        return data, f"image:{ext}"
    raise TypeError(f"{type(item).__name__} is not an image")


def encode_for(family: str, item: Any) -> bytes:
    """Bytes of ``item`` under an image family fixed by an earlier sample (litdata keeps the
    first sample's serializer per leaf: a later non-JPEG image at a ``jpeg`` leaf is encoded as
    a JPEG, a later JPEG at a ``pil`` leaf as raw pixels)."""
    if family == "pil":
        return _pil_bytes(item) if isinstance(item, Pil) or is_pil_image(item) else encode_image(item)[0]
    if family == "jpeg":
        return _jpeg_bytes(item)
    if family == "jpeg_array":
        return _jpeg_array_bytes(item)
    return encode_image(item)[0]
