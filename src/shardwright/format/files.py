"""File-like leaves, byte-compatible with litdata 0.2.76: ``text``, ``file:EXT``, ``video:EXT``,
``audio:EXT``, ``tifffile``/``tiff``, ``pdf``, ``nifti:EXT``, ``mesh:EXT``.

Each stores a file's bytes as they are (or bytes an optional library produced from the value)
and reads them back through that library: tifffile -> numpy array, pdfplumber -> ``PDF``,
nibabel -> ``Nifti1Image``, trimesh -> ``Trimesh``/``Scene``, torchcodec -> a decoder. Without
the library a read raises one line naming the package, except audio and video: their bytes are
returned as they are, with a warning, until torchcodec loads (its wheel needs FFmpeg).
"""

from __future__ import annotations

import gzip
import io
import math
import os
import warnings
import wave
from typing import Any

import numpy as np

from .limits import check_pixels, decoded_limit, refuse_decoded
from .media import Audio, File, Mesh, Nifti, Pdf, Text, Tiff, Video, media_bytes
from .optional import available, require

__all__ = ["decoder_for_file_leaf", "encode_file_leaf"]

_MESH_TYPES = ("glb", "ply", "stl")


def _as_numpy(array: Any) -> np.ndarray:
    if hasattr(array, "detach"):
        return array.detach().cpu().numpy()
    return np.asarray(array)


# --- writing ----------------------------------------------------------------------------------


def _wav(array: Any, rate: int) -> bytes:
    """16-bit PCM WAV of float samples in [-1, 1] (channels first), as litdata writes without torchcodec."""
    pcm = np.clip(np.asarray(_as_numpy(array), dtype=np.float32), -1.0, 1.0)
    if pcm.ndim == 1:
        pcm = pcm[None, :]
    frames = (pcm.T.reshape(-1) * 32767.0).astype(np.int16)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as handle:
        handle.setnchannels(int(pcm.shape[0]))
        handle.setsampwidth(2)
        handle.setframerate(int(rate))
        handle.writeframes(frames.tobytes())
    return buffer.getvalue()


def _audio(item: Audio) -> tuple[bytes, str]:
    if item.array is not None:
        if item.sampling_rate is None:
            raise ValueError("Audio(array=...) needs sampling_rate=")
        return _wav(item.array, item.sampling_rate), "audio:wav"
    if item.path and str(item.path).lower().endswith(".pcm"):
        if item.sampling_rate is None:
            raise ValueError("Audio(path='*.pcm') needs sampling_rate=")
        data = item.bytes if item.bytes is not None else media_bytes(item)[0]
        return _wav(np.frombuffer(data, dtype=np.int16).astype(np.float32) / 32767.0, item.sampling_rate), "audio:wav"
    data, ext = media_bytes(item)
    return data, f"audio:{ext or 'wav'}"


def _video(item: Video) -> tuple[bytes, str]:
    if item.array is not None:
        raise ValueError(
            "Video(array=...) needs a video encoder (torchvision's write_video or torchcodec), which does not "
            "load here; encode the frames to a file in fn and pass Video(path=...) or Video(bytes=...)"
        )
    data, ext = media_bytes(item)
    return data, f"video:{ext or 'mp4'}"


def _tiff(item: Tiff) -> tuple[bytes, str]:
    if item.array is not None or item.image is not None:
        tifffile = require("tifffile", "tifffile", "Tiff(array=...) leaves")
        buffer = io.BytesIO()
        tifffile.imwrite(buffer, _as_numpy(item.array if item.array is not None else np.asarray(item.image)))
        return buffer.getvalue(), "tifffile"
    # litdata names these "tiff", which its own reader cannot read (no serializer has that name):
    # "tifffile" is the name it reads.
    return media_bytes(item)[0], "tifffile"


def _pdf(item: Pdf) -> tuple[bytes, str]:
    if item.pdf is not None:
        stream = getattr(item.pdf, "stream", None)
        name = getattr(stream, "name", None)
        if isinstance(name, str) and os.path.isfile(name):
            with open(name, "rb") as handle:
                return handle.read(), "pdf"
        if stream is None:
            raise TypeError("Pdf(pdf=...): the PDF object has no stream to read its bytes from")
        stream.seek(0)
        return stream.read(), "pdf"
    return media_bytes(item)[0], "pdf"


def _nifti_image(image: Any) -> tuple[bytes, str]:
    file_map = getattr(image, "file_map", None)
    if file_map is not None and "image" in file_map:
        name = getattr(file_map["image"], "filename", None)
        if name and os.path.isfile(name):
            with open(name, "rb") as handle:
                return handle.read(), "nifti:nii.gz" if str(name).lower().endswith(".nii.gz") else "nifti:nii"
    return image.to_bytes(), "nifti:nii"


def _nifti(item: Nifti) -> tuple[bytes, str]:
    if item.image is not None:
        return _nifti_image(item.image)
    if item.array is not None:
        nib = require("nibabel", "nibabel", "Nifti(array=...) leaves")
        affine = item.affine if item.affine is not None else np.eye(4)
        return nib.Nifti1Image(_as_numpy(item.array), affine).to_bytes(), "nifti:nii"
    data, ext = media_bytes(item)  # "x.nii.gz" gives "gz": litdata names it "nifti:gz" too
    return data, f"nifti:{ext or 'nii'}"


def _mesh(item: Any) -> tuple[bytes, str]:
    mesh = item.mesh if isinstance(item, Mesh) else item
    file_type = item.file_type if isinstance(item, Mesh) else "glb"
    if mesh is not None and _is_trimesh(mesh):
        metadata = getattr(mesh, "metadata", None) or {}
        path = (metadata.get("file_path") or metadata.get("file_name")) if isinstance(metadata, dict) else None
        if path and os.path.isfile(path):
            with open(path, "rb") as handle:
                ext = os.path.splitext(path)[1].lstrip(".").lower()
                return handle.read(), f"mesh:{ext or 'glb'}"
        return bytes(mesh.export(file_type=file_type)), f"mesh:{file_type}"
    data, ext = media_bytes(item)
    if ext not in _MESH_TYPES:
        raise ValueError(f"Mesh(path=...) must end with .glb, .ply or .stl, got {item.path!r}")
    return data, f"mesh:{ext}"


def _is_trimesh(value: Any) -> bool:
    return getattr(type(value), "__module__", "").startswith("trimesh")


def is_nibabel_image(value: Any) -> bool:
    return getattr(type(value), "__module__", "").startswith("nibabel") and hasattr(value, "to_bytes")


def encode_file_leaf(item: Any) -> tuple[bytes, str]:
    """(bytes, data_format name) of a file-like wrapper (or a trimesh/nibabel object)."""
    if isinstance(item, Text):
        if item.text is not None:
            return item.text.encode("utf-8"), "text"
        return media_bytes(item)[0], "text"
    if isinstance(item, File):
        data, ext = media_bytes(item)
        return data, f"file:{ext}" if ext else "file"
    if isinstance(item, Video):
        return _video(item)
    if isinstance(item, Audio):
        return _audio(item)
    if isinstance(item, Tiff):
        return _tiff(item)
    if isinstance(item, Pdf):
        return _pdf(item)
    if isinstance(item, Nifti):
        return _nifti(item)
    if is_nibabel_image(item):
        return _nifti_image(item)
    if isinstance(item, Mesh) or _is_trimesh(item):
        return _mesh(item)
    raise TypeError(f"{type(item).__name__} is not a file-like leaf")


# --- reading ----------------------------------------------------------------------------------

_warned: set[str] = set()


def _torchcodec_decoder(kind: str) -> Any | None:
    """torchcodec's decoder class when it loads (it needs FFmpeg's libraries), else None."""
    if not available("torchcodec.decoders"):
        return None
    import torchcodec.decoders as decoders

    return decoders.VideoDecoder if kind == "video" else decoders.AudioDecoder


def _media_decoder(kind: str) -> Any:
    decoder_class = _torchcodec_decoder(kind)

    def decode(raw: memoryview) -> Any:
        if decoder_class is not None:
            return decoder_class(bytes(raw))
        if kind not in _warned:
            _warned.add(kind)
            warnings.warn(
                f"{kind} leaves are returned as their encoded bytes: decoding them needs torchcodec, which is not "
                "installed or does not load here (pip install torchcodec, with FFmpeg)",
                stacklevel=2,
            )
        return bytes(raw)

    return decode


def _tiff_decode(raw: memoryview) -> Any:
    tifffile = require("tifffile", "tifffile", "tifffile leaves")
    with tifffile.TiffFile(io.BytesIO(bytes(raw))) as tiff:
        # the pages' shapes are read from their headers before any pixel is decoded
        series = tiff.series[0] if tiff.series else None
        if series is not None:
            shape = tuple(int(d) for d in series.shape)
            pixels = math.prod(shape[:-1]) if len(shape) > 2 and shape[-1] <= 4 else math.prod(shape)
            what = f"a tifffile leaf of shape {shape}"
            check_pixels(pixels, what)
            limit, why = decoded_limit()
            if int(series.size) * series.dtype.itemsize > limit:
                raise refuse_decoded(what, limit, why)
        return tiff.asarray()


def _pdf_decode(raw: memoryview) -> Any:
    pdfplumber = require("pdfplumber", "pdfplumber", "pdf leaves")
    return pdfplumber.open(io.BytesIO(bytes(raw)))


def _nifti_decode(raw: memoryview) -> Any:
    nib = require("nibabel", "nibabel", "nifti leaves")
    data = bytes(raw)
    if data[:2] == b"\x1f\x8b":  # a gzip bomb stops at shardwright's limit of decoded bytes
        limit, why = decoded_limit()
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            data = _read_bounded(stream, limit)
        if len(data) > limit:
            raise refuse_decoded("a nifti leaf", limit, why)
    return nib.Nifti1Image.from_bytes(data)


def _read_bounded(stream: Any, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``stream``, read in pieces (memory follows the real size)."""
    parts, total = [], 0
    while total <= limit:
        piece = stream.read(min(4 << 20, limit + 1 - total))
        if not piece:
            break
        parts.append(piece)
        total += len(piece)
    return b"".join(parts)


def _mesh_decoder(fmt: str) -> Any:
    file_type = fmt.partition(":")[2] or "glb"

    def decode(raw: memoryview) -> Any:
        trimesh = require("trimesh", "trimesh", "mesh leaves")
        return trimesh.load(io.BytesIO(bytes(raw)), file_type=file_type)

    return decode


def decoder_for_file_leaf(family: str, fmt: str) -> Any:
    """The decoder of a file-like leaf format, or None when ``family`` is not one."""
    if family == "text":
        return lambda raw: str(raw, "utf-8")
    if family == "file":
        return bytes
    if family in ("video", "audio"):
        return _media_decoder(family)
    if family in ("tifffile", "tiff"):
        return _tiff_decode
    if family == "pdf":
        return _pdf_decode
    if family == "nifti":
        return _nifti_decode
    if family == "mesh":
        return _mesh_decoder(fmt)
    return None
