"""litdata's on-disk format: samples -> item bytes -> chunk bytes -> index.json, and back.

Pure functions only (no processes, no file I/O), so every byte can be unit-tested. torch is
imported lazily: only when a leaf is a torch tensor (then it is already imported) or when a
tensor leaf has to be decoded.

Modules: ``pytree`` (sample <-> leaves + data_spec), ``sample`` (leaf formats, item bytes),
``decode`` (many items of one dataset), ``chunk`` (chunk bytes, zstd), ``index`` (index.json),
``tokens`` (TokensLoader datasets), ``safe_pickle`` (plain-data pickles of untrusted data).

Byte layout (all integers little-endian unless said otherwise)
----------------------------------------------------------------
Sample -> leaves. A sample is flattened like a torch pytree: ``dict``, ``OrderedDict``, ``list``
and ``tuple`` (exact types) are containers, everything else is a leaf. Dict keys stay in
insertion order (torch and litdata do not sort them). The structure is stored once per
dataset as ``data_spec``, the JSON text torch's ``treespec_dumps`` produces, e.g.::

    [1, {"type": "builtins.dict", "context": "[\\"i\\", \\"x\\"]", "children_spec": [LEAF, LEAF]}]
    LEAF = {"type": null, "context": null, "children_spec": []}

Lists and tuples have context ``"null"``. A bare leaf sample is ``[1, LEAF]``.

Leaf -> bytes, named by ``data_format`` (one name per leaf, fixed by the first sample):

=========================  =====================================================================
``int``                    int64 ``<q`` (8 bytes)
``float``                  float64 ``<d`` (8 bytes)
``bool``                   1 byte, 0 or 1
``str``                    UTF-8
``bytes``                  raw
``no_header_numpy:{k}``    1-D ``np.ndarray``, raw C-order bytes, numpy dtype code k
``numpy``                  ndim >= 2 or 0-d: ``u32 k, u32 ndim, u32 shape[ndim]`` (little-endian) + raw
``no_header_tensor:{k}``   1-D ``torch.Tensor``, raw bytes, torch dtype code k
``tensor``                 other ranks: BIG-endian ``u32 k, u32 ndim, u32 shape[ndim]`` + raw
``pickle``                 ``pickle.dumps`` (None, sets, objects: anything without a format above)
=========================  =====================================================================

litdata 0.2.76's other leaves are read and written too, with the same bytes: images (``pil``,
``jpeg``, ``jpeg_array``, ``image:EXT``; module ``images``), files (``text``, ``file:EXT``,
``video:EXT``, ``audio:EXT``, ``tifffile``, ``pdf``, ``nifti:EXT``, ``mesh:EXT``; ``files``),
``graph`` (``graph``) and ``json`` (``jsonleaf``); ``serializers`` is the name table and
``media`` the wrapper classes (``Image(path=...)`` ...) that pick them. Chunk layouts other than
the classic one (framed and per-item zstd, Arrow-footer rows) are in ``layouts``.

numpy dtype codes: int8 0, int16 1, int32 2, int64 3, uint8 4, uint16 5, uint32 6, uint64 7,
float16 8, float32 9, float64 10, complex64 11, complex128 12, bool 13.
torch dtype codes (what litdata writes; it reads the aliases in brackets too): float32 1 [0],
float64 3 [2], complex64 5 [4], complex128 7 [6], float16 9 [8], bfloat16 10, uint8 11,
int8 12, int16 14 [13], int32 16 [15], int64 18 [17], bool 19, uint16 20.

Item = ``u32 size[L]`` (L = len(data_format)) followed by the L leaves' bytes in order.

Chunk file = ``u32 N | u32 offsets[N+1] | items``; offsets are absolute from the start of the
file: ``offsets[0] = 4 + 4 * (N + 1)`` and item j is ``offsets[j]:offsets[j+1]``. With
``compression="zstd"`` the whole file is one zstd frame (content size in the frame header,
which python-zstd's one-shot ``decompress`` needs) stored as ``*.zstd.bin``; ``chunk_bytes``
in index.json is always the uncompressed size.

index.json = ``{"chunks": [ChunkEntry...], "config": IndexConfig, "updated_at": str}``, keys
sorted like litdata writes them.

Where we choose differently from litdata's writer (the bytes stay readable by litdata)
--------------------------------------------------------------------------------------
- A ``str`` leaf is always ``str``: litdata pickles a string that names an existing file, or
  reads the file for media extensions, so its format would depend on the working directory.
  Wrap the path instead (``Image(path=p)``, ``File(path=p)``): the same leaf in both libraries.
- ``bytes`` starting with ``%PDF`` stay ``bytes`` (litdata: ``pdf``).
- numpy scalars and 0-d arrays are never pickled (litdata pickles them): int/float/bool
  scalars are ``int``/``float``/``bool`` (read back as Python numbers, as ``.item()`` gives),
  uint64 and complex scalars and 0-d arrays are 0-d ``numpy`` leaves; non-native-endian arrays
  are stored in native order. So plain datasets never need unpickling, which readers refuse
  for untrusted data (``decode_item(..., allow_pickle=False)`` reads plain-data pickles only).
- numpy arrays with object/str/void dtypes, and ndarray subclasses (masked arrays), are
  pickled: litdata crashes on them, writes pointers, or drops the mask.
- bfloat16 tensors are written (litdata's writer goes through numpy and crashes); tensors of
  dtypes without a code (uint32, uint64, float8, ...) are refused: torch cannot unpickle them.
- namedtuple, deque and defaultdict are single pickled leaves; a list of JPEG images is a list
  of ``jpeg`` leaves (as litdata does; ``JpegArray`` makes one ``jpeg_array`` leaf).
- ``Tiff`` leaves are named ``tifffile`` (litdata names them ``tiff``, which its reader cannot read).
- litdata 0.2.76 turns a list inside a dict sample into one ``json`` leaf of its own binary
  format; we keep lists as pytree containers (as torch and litdata 0.2.58 do).
- Later samples are checked against the first (litdata does not check and can silently
  misread); a position whose first value was pickled accepts any value, as in litdata; dict
  keys may come in another order and are stored in the first sample's order.
"""

from .checksum import (
    CHECKSUM_ALGORITHM,
    ChecksumMismatch,
    can_check,
    check_checksum,
    chunk_checksum,
    parts_checksum,
)
from .chunk import (
    build_chunk,
    chunk_header,
    chunk_item,
    chunk_num_items,
    chunk_offsets,
    chunk_spans,
    compress,
    decompress,
)
from .decode import decode_item, item_decoder
from .digest import dataset_digest, differing_chunks
from .index import ChunkEntry, IndexConfig, index_digest, parse_index, parse_size, render_index
from .jsonleaf import JsonLeaf
from .layouts import FRAMED_MAGIC, DecodedItem, RowChunk, pack_framed, pack_sample, unpack_chunk
from .media import Audio, File, Graph, Image, Jpeg, JpegArray, Mesh, Nifti, Pdf, Pil, Tensor, Text, Tiff, Video
from .packed import PackedItems, items_nbytes
from .pytree import flatten_sample, parse_spec, unflatten_sample
from .safe_pickle import load_data_only_pickle
from .sample import ItemEncoder, decode_plan, leaf_format
from .tokens import TOKENS_LOADER, TokenEncoder, TokensLoader, is_tokens_loader

# litdata's top-level media wrapper names (``from litdata import Image``).
MEDIA_WRAPPERS = (
    "Pil",
    "Jpeg",
    "JpegArray",
    "Image",
    "Text",
    "File",
    "Tensor",
    "Audio",
    "Video",
    "Tiff",
    "Pdf",
    "Nifti",
    "Mesh",
    "Graph",
)

__all__ = [
    "MEDIA_WRAPPERS",
    "Audio",
    "DecodedItem",
    "FRAMED_MAGIC",
    "File",
    "Graph",
    "Image",
    "Jpeg",
    "JpegArray",
    "JsonLeaf",
    "Mesh",
    "Nifti",
    "Pdf",
    "Pil",
    "RowChunk",
    "Tensor",
    "Text",
    "Tiff",
    "Video",
    "pack_framed",
    "pack_sample",
    "unpack_chunk",
    "CHECKSUM_ALGORITHM",
    "TOKENS_LOADER",
    "ChecksumMismatch",
    "ChunkEntry",
    "IndexConfig",
    "ItemEncoder",
    "TokenEncoder",
    "TokensLoader",
    "PackedItems",
    "items_nbytes",
    "build_chunk",
    "chunk_header",
    "can_check",
    "check_checksum",
    "chunk_checksum",
    "parts_checksum",
    "chunk_item",
    "chunk_offsets",
    "chunk_spans",
    "chunk_num_items",
    "compress",
    "decode_item",
    "decode_plan",
    "decompress",
    "flatten_sample",
    "is_tokens_loader",
    "item_decoder",
    "leaf_format",
    "load_data_only_pickle",
    "dataset_digest",
    "differing_chunks",
    "index_digest",
    "parse_index",
    "parse_size",
    "parse_spec",
    "render_index",
    "unflatten_sample",
]
