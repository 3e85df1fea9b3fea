"""The leaf formats by name: which format a value gets, its bytes, and the decoder of a name.

One table, in litdata 0.2.76's order (the first family that takes a value names its format)::

    str text bool int float video audio image nifti mesh pdf graph tifffile file
    pil jpeg jpeg_array bytes no_header_numpy numpy no_header_tensor tensor json pickle

A ``data_format`` name is a family, optionally with a subtype after a colon (``image:png``,
``no_header_numpy:3``, ``graph:pickle``). As in litdata, a subtype that is itself a family name
selects that family's decoder (``graph:pickle`` reads as ``pickle``, ``file:json`` as ``json``);
otherwise the family before the colon decodes. Later samples are encoded with the family the
first sample fixed at that position (litdata keeps the first sample's serializer too), and must
be values that family takes (``pil`` and ``jpeg`` take each other's images, as in litdata).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import UnsupportedFormatError
from . import jsonleaf
from .files import decoder_for_file_leaf, encode_file_leaf, is_nibabel_image
from .graph import encode_graph, graph_decoder, is_pyg_data
from .images import (
    decode_image_tensor,
    decode_jpeg_array,
    decode_pil,
    encode_for,
    encode_image,
    is_jpeg_file,
    is_pil_image,
    media_bytes,
)
from .leaves import core_decoder, core_encoder, core_leaf_format, encode_core
from .media import (
    Audio,
    File,
    Graph,
    Image,
    Jpeg,
    JpegArray,
    MediaRef,
    Mesh,
    Nifti,
    Pdf,
    Pil,
    Tensor,
    Text,
    Tiff,
    Video,
)

__all__ = ["unwrap_tensor", "FAMILIES", "encode_first", "encoder_for", "leaf_decoder", "leaf_format", "leaf_matches"]

FAMILIES = (
    "str", "text", "bool", "int", "float", "video", "audio", "image", "nifti", "mesh", "pdf", "graph",
    "tifffile", "file", "pil", "jpeg", "jpeg_array", "bytes", "no_header_numpy", "numpy",
    "no_header_tensor", "tensor", "json", "pickle",
)  # fmt: skip

_EXACT: dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}
_IMAGES = frozenset({"pil", "jpeg", "jpeg_array", "image"})
# Wrappers by exact class: the family (the name written may add a subtype, e.g. image:png).
_WRAPPERS: dict[type, str] = {
    Text: "text", File: "file", Video: "video", Audio: "audio", Image: "image", Nifti: "nifti",
    Mesh: "mesh", Pdf: "pdf", Graph: "graph", Tiff: "tifffile", Pil: "pil", Jpeg: "jpeg",
    JpegArray: "jpeg_array", jsonleaf.JsonLeaf: "json",
}  # fmt: skip


# litdata routes a wrapper with a path by the path's extension when a family earlier in its
# table claims that extension: Jpeg(path="a.jpg") is an image:jpg leaf, File(path="a.mp4") a
# video:mp4 leaf, Audio(path="a.mp4") a video too. Their bytes are the file's, as they are.
_EXTENSIONS = (
    ("video", ("mp4", "ogv", "mjpeg", "avi", "mov", "h264", "mpg", "mpeg", "webm", "wmv", "mkv")),
    ("audio", ("wav", "mp3", "flac", "ogg", "opus", "m4a", "aac", "wma", "pcm")),
    ("image", ("jpg", "jpeg", "png", "webp", "bmp", "gif")),
    ("mesh", ("glb", "ply", "stl")),
    ("pdf", ("pdf",)),
)


def _routed(value: Any, family: str) -> str:
    path = getattr(value, "path", None)
    if not path or not isinstance(value, MediaRef):
        return family
    ext = os.path.splitext(str(path).split("?", 1)[0])[1].lstrip(".").lower()
    rank = FAMILIES.index(family) if family in FAMILIES else len(FAMILIES)
    for candidate, extensions in _EXTENSIONS:
        if FAMILIES.index(candidate) >= rank:
            break
        if ext in extensions:
            return candidate
    return family


def _as_file_of(family: str, value: Any) -> tuple[bytes, str]:
    """A wrapper routed to another family by its path: the file's bytes under that family."""
    data, ext = media_bytes(value)
    if family == "pdf":
        return data, "pdf"
    if family == "image":
        return data, f"image:{ext or 'jpg'}"
    if family == "audio" and isinstance(value, Audio):
        return encode_file_leaf(value)
    return data, f"{family}:{ext}"


def _foreign(value: Any, family: str) -> bool:
    """A wrapper of another family that litdata's table gives to ``family`` by its path."""
    own = _WRAPPERS.get(type(value)) or ("tensor" if type(value) is Tensor else None)
    return own is not None and own != family and family in _ROUTED


_ROUTED = frozenset(family for family, _ in _EXTENSIONS)


def unwrap_tensor(value: Any) -> Any:
    """The torch tensor of a :class:`Tensor` wrapper; any other value as it is."""
    return _tensor_of(value) if type(value) is Tensor else value


def _tensor_of(wrapper: Tensor) -> Any:
    """The torch tensor a :class:`Tensor` wrapper stands for."""
    import torch

    if wrapper.array is not None:
        tensor = wrapper.array if isinstance(wrapper.array, torch.Tensor) else torch.as_tensor(wrapper.array)
        return tensor.to(wrapper.dtype) if wrapper.dtype is not None else tensor
    if wrapper.dtype is None:
        raise TypeError("Tensor(path=...)/Tensor(bytes=...) needs dtype=")
    from .images import media_bytes

    return torch.frombuffer(bytearray(media_bytes(wrapper)[0]), dtype=wrapper.dtype)


def leaf_format(value: Any) -> str:
    """The format name of a fresh value: the full name for core formats (``no_header_numpy:3``),
    the family for media (``image``; :func:`encode_first` gives the full name)."""
    name = _EXACT.get(type(value))
    if name is not None:
        return name
    if type(value) is np.ndarray:
        return core_leaf_format(value)
    family = _WRAPPERS.get(type(value))
    if family is not None:
        return _routed(value, family)
    if type(value) is Tensor:
        routed = _routed(value, "tensor")
        return routed if routed != "tensor" else core_leaf_format(_tensor_of(value))
    if is_pil_image(value):
        return "jpeg" if is_jpeg_file(value) else "pil"
    if is_pyg_data(value):
        return "graph"
    if is_nibabel_image(value):
        return "nifti"
    if getattr(type(value), "__module__", "").startswith("trimesh"):
        return "mesh"
    return core_leaf_format(value)


def family_of(fmt: str) -> str:
    """The family that reads a format name (litdata's rule: a subtype naming a family wins)."""
    name, _, sub = fmt.partition(":")
    if sub in FAMILIES:
        return sub
    return "tifffile" if name == "tiff" else name


def _writer_family(fmt: str) -> str:
    name = fmt.partition(":")[0]
    return "tifffile" if name == "tiff" else name


def leaf_matches(fmt: str, value: Any) -> bool:
    """Whether a later sample's value fits the position the first sample fixed as ``fmt``."""
    got = leaf_format(value)
    if got == fmt:
        return True
    family = _writer_family(fmt)
    if family in ("pil", "jpeg") and got in ("pil", "jpeg"):
        return True
    return got == family and family not in ("no_header_numpy", "no_header_tensor")


def encode_first(value: Any) -> tuple[bytes, str]:
    """(bytes, format name) of the value that fixes a position's format."""
    family = leaf_format(value)
    if _foreign(value, family):
        return _as_file_of(family, value)
    if family in _IMAGES:
        return encode_image(value)
    if family == "graph":
        return encode_graph(value)
    if family == "json":
        return jsonleaf.dumps(value.value), "json"
    if family in ("text", "file", "video", "audio", "tifffile", "pdf", "nifti", "mesh"):
        return encode_file_leaf(value)
    if type(value) is Tensor:
        value = _tensor_of(value)
    return encode_core(family, value), family


def encoder_for(fmt: str) -> Callable[[Any], bytes]:
    """The encoder of later values at a position of format ``fmt`` (see :func:`leaf_matches`)."""
    family = _writer_family(fmt)
    if family in _ROUTED:
        plain = _plain_encoder(fmt, family)
        return lambda value: _as_file_of(family, value)[0] if _foreign(value, family) else plain(value)
    return _plain_encoder(fmt, family)


def _plain_encoder(fmt: str, family: str) -> Callable[[Any], bytes]:
    if family in _IMAGES:
        return lambda value: encode_for(family, value)
    if fmt == "graph:pickle":
        return lambda value: pickle.dumps(value.data if isinstance(value, Graph) and value.data is not None else value)
    if family == "graph":
        return lambda value: encode_graph(value)[0]
    if family == "json":
        return lambda value: jsonleaf.dumps(value.value)
    if family in ("text", "file", "video", "audio", "tifffile", "pdf", "nifti", "mesh"):
        return lambda value: encode_file_leaf(value)[0]
    if fmt == "tensor" or fmt.startswith("no_header_tensor:"):
        return lambda value: encode_core(fmt, _tensor_of(value) if type(value) is Tensor else value)
    return core_encoder(fmt)


def leaf_decoder(fmt: str, allow_pickle: bool) -> Callable[[memoryview], Any]:
    """The decoder of a format name; raises UnsupportedFormatError for names litdata does not write."""
    family = family_of(fmt)
    core = core_decoder(fmt if family == fmt.partition(":")[0] else family, allow_pickle)
    if core is not None:
        return core
    if family == "pil":
        return decode_pil
    if family in ("jpeg", "image"):
        return decode_image_tensor
    if family == "jpeg_array":
        return decode_jpeg_array
    if family == "graph":
        return graph_decoder(allow_pickle)
    if family == "json":
        return jsonleaf.loads
    decoder = decoder_for_file_leaf(family, fmt)
    if decoder is not None:
        return decoder
    raise UnsupportedFormatError(
        f"leaf format {fmt!r} is not one of litdata 0.2.76's formats ({', '.join(FAMILIES)}); the dataset was "
        "written with a custom serializer: read it with the library that wrote it"
    )
