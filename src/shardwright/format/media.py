"""Media wrappers: litdata's sample classes by the same names and fields.

A wrapper says how a value is stored when its type alone does not: ``Image(path=p)`` stores
the file's bytes as an ``image`` leaf where a bare path would be a string. The classes have
litdata 0.2.76's names and fields, so ``optimize(lambda p: Image(path=p), ...)`` writes the
same ``data_format`` with either library. Encoding happens in ``format.images`` and
``format.files``; these are plain records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "GRAPH_FIELDS",
    "Audio",
    "File",
    "Graph",
    "Image",
    "Jpeg",
    "JpegArray",
    "Mesh",
    "Nifti",
    "Pdf",
    "Pil",
    "Tensor",
    "Text",
    "Tiff",
    "Video",
]


class _Unset:
    """The default of ``max_quality`` on Jpeg/JpegArray: 95 unless ``quality`` is given."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<UNSET>"


_UNSET: Any = _Unset()


def _one_quality(owner: str, quality: int | None, max_quality: int | None) -> None:
    if quality is not None and max_quality is not None:
        raise ValueError(
            f"{owner}: give quality= (re-encode at that JPEG quality) or max_quality= (a cap that keeps "
            "JPEG bytes already at or below it), not both"
        )


@dataclass
class MediaRef:
    path: str | None = None
    bytes: bytes | None = None

    def __post_init__(self) -> None:
        if self.path is not None:
            self.path = str(self.path)
        if self.bytes is not None:
            if not isinstance(self.bytes, (bytes, bytearray, memoryview)):
                raise TypeError(f"{type(self).__name__}.bytes must be bytes, got {type(self.bytes).__name__}")
            self.bytes = bytes(self.bytes)


@dataclass
class Audio(MediaRef):
    """Audio: a file's bytes (``path=``/``bytes=``), or ``array=`` with ``sampling_rate=`` (stored as WAV)."""

    array: Any = None
    sampling_rate: int | None = None
    num_channels: int | None = None
    stream_index: int | None = None


@dataclass
class Video(MediaRef):
    """Video: a file's bytes (``path=``/``bytes=``); ``array=`` frames need an encoder (torchcodec)."""

    array: Any = None
    fps: float = 25.0
    stream_index: int | None = None
    dimension_order: str = "NCHW"
    num_ffmpeg_threads: int = 1
    seek_mode: str = "approximate"
    device: str = "cpu"


@dataclass
class Image(MediaRef):
    """An encoded image (``image:EXT`` leaf): a file's bytes as they are, or pixels (``array=``, a
    PIL ``image=``) encoded as ``format`` (default PNG) or JPEG at ``quality``/``max_quality``."""

    array: Any = None
    image: Any = None
    mode: str | None = None
    format: str | None = None
    quality: int | None = None
    max_quality: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_quality("Image", self.quality, self.max_quality)


@dataclass
class Jpeg(MediaRef):
    """A JPEG (``jpeg`` leaf). ``max_quality`` defaults to 95: JPEG bytes estimated at or below
    it are kept, anything else is encoded at it; ``quality=`` always re-encodes."""

    array: Any = None
    image: Any = None
    mode: str | None = None
    quality: int | None = None
    max_quality: Any = _UNSET

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_quality is _UNSET:
            self.max_quality = None if self.quality is not None else 95
        _one_quality("Jpeg", self.quality, self.max_quality)


@dataclass
class JpegArray:
    """A list of JPEGs stored as one ``jpeg_array`` leaf (same quality rules as :class:`Jpeg`)."""

    images: list[Any] = field(default_factory=list)
    quality: int | None = None
    max_quality: Any = _UNSET

    def __post_init__(self) -> None:
        if self.max_quality is _UNSET:
            self.max_quality = None if self.quality is not None else 95
        _one_quality("JpegArray", self.quality, self.max_quality)


@dataclass
class Pil(MediaRef):
    """Raw pixels (``pil`` leaf) of a PIL ``image=``, an ``array=`` or a file; ``mode=`` converts."""

    array: Any = None
    image: Any = None
    mode: str | None = None


@dataclass
class Tiff(MediaRef):
    """A TIFF file's bytes, or ``array=``/``image=`` written with tifffile."""

    array: Any = None
    image: Any = None


@dataclass
class Text(MediaRef):
    """UTF-8 text (``text`` leaf) from ``text=``, a file or bytes; read back as ``str``."""

    text: str | None = None


@dataclass
class File(MediaRef):
    """A file's bytes as they are (``file:EXT`` leaf); read back as ``bytes``."""


@dataclass
class Mesh(MediaRef):
    """A 3-D mesh file (glb, ply, stl), or a trimesh ``mesh=`` exported as ``file_type``."""

    mesh: Any = None
    file_type: str = "glb"


@dataclass
class Pdf(MediaRef):
    """A PDF file's bytes, or a pdfplumber ``pdf=``; read back with pdfplumber when installed."""

    pdf: Any = None


@dataclass
class Nifti(MediaRef):
    """A NIfTI volume (.nii/.nii.gz), a nibabel ``image=``, or ``array=`` with ``affine=``."""

    image: Any = None
    array: Any = None
    affine: Any = None


GRAPH_FIELDS = ("x", "edge_index", "edge_attr", "y", "pos", "batch")


@dataclass
class Graph:
    """A graph stored as packed tensors (``graph`` leaf): PyG-style fields, or ``data=`` a PyG
    ``Data``/``HeteroData`` or a dict of tensors. Read back as PyG ``Data`` when torch_geometric
    is installed, else as a ``Graph``."""

    x: Any = None
    edge_index: Any = None
    edge_attr: Any = None
    y: Any = None
    pos: Any = None
    batch: Any = None
    data: Any = None

    def to_mapping(self) -> dict[str, Any]:
        """Field name -> value; the fields given override those of ``data``."""
        mapping: dict[str, Any] = {}
        if self.data is not None and hasattr(self.data, "to_dict") and _is_pyg(self.data):
            mapping.update(self.data.to_dict())
        elif isinstance(self.data, dict):
            mapping.update(self.data)
        elif self.data is not None:
            if any(getattr(self, name) is not None for name in GRAPH_FIELDS):
                raise TypeError("Graph: data= must be a PyG Data, a dict or omitted when tensor fields are given")
            return mapping
        for name in GRAPH_FIELDS:
            value = getattr(self, name)
            if value is not None:
                mapping[name] = value
        return mapping


def _is_pyg(value: Any) -> bool:
    return getattr(type(value), "__module__", "").startswith("torch_geometric.data") and hasattr(value, "to_dict")


@dataclass
class Tensor(MediaRef):
    """A tensor: ``array=`` (torch or numpy; 1-D arrays use the no-header layout), or raw
    ``path=``/``bytes=`` with ``dtype=``."""

    array: Any = None
    dtype: Any = None

    @property
    def shape(self) -> tuple[int, ...]:
        if self.array is None:
            raise AttributeError("Tensor.shape needs array=")
        return tuple(self.array.shape)
