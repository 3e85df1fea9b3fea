"""The core leaf formats (numbers, text, bytes, numpy arrays, tensors, pickle): bytes both ways.

See the package docstring for the byte layouts. ``format.serializers`` puts these together
with the media leaves (images, files, graphs, json) in one name table.
"""

from __future__ import annotations

import pickle
import struct
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import CorruptStateError
from .safe_pickle import load_data_only_pickle, load_trusted_pickle

__all__ = [
    "NUMPY_CODES",
    "TORCH_WRITE_CODES",
    "core_decoder",
    "view_decoder",
    "array_view_decoder",
    "core_encoder",
    "encode_core",
    "encode_tensor",
    "core_leaf_format",
    "decode_tensor",
    "is_tensor",
    "tensor_raw",
]

# --- constants of the format ------------------------------------------------------------------

_U32_MAX = 0xFFFFFFFF
_INT64 = struct.Struct("<q")
_FLOAT64 = struct.Struct("<d")
_U32 = struct.Struct("<I")
_TENSOR_HEADER = struct.Struct(">II")

# Index = dtype code. litdata's table goes on with object/bytes/str/void (14..17), but it
# writes those as raw memory (object arrays become pointers), so we never use them.
_NUMPY_DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(t)
    for t in (
        np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
        np.float16, np.float32, np.float64, np.complex64, np.complex128, np.bool_,
    )
)  # fmt: skip
NUMPY_CODES: dict[np.dtype, int] = {dtype: code for code, dtype in enumerate(_NUMPY_DTYPES)}

# torch dtype name per code, as litdata's table has it (several codes are aliases of one dtype).
_TORCH_DTYPE_NAMES: dict[int, str] = {
    0: "float32", 1: "float32", 2: "float64", 3: "float64", 4: "complex64", 5: "complex64",
    6: "complex128", 7: "complex128", 8: "float16", 9: "float16", 10: "bfloat16", 11: "uint8",
    12: "int8", 13: "int16", 14: "int16", 15: "int32", 16: "int32", 17: "int64", 18: "int64",
    19: "bool", 20: "uint16",
}  # fmt: skip
# litdata inverts its table, so the last code of each alias pair is the one it writes.
TORCH_WRITE_CODES: dict[str, int] = {name: code for code, name in _TORCH_DTYPE_NAMES.items()}

# Python types whose format name is fixed (checked by exact type first: the hot path).
_EXACT_FORMATS: dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}

# --- leaf formats -----------------------------------------------------------------------------


def _torch_code(tensor: Any) -> int | None:
    return TORCH_WRITE_CODES.get(str(tensor.dtype).removeprefix("torch."))


def is_tensor(leaf: Any) -> bool:
    # A torch tensor can only exist if torch is already imported: never import it here.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(leaf, torch.Tensor)


def _native(dtype: np.dtype) -> np.dtype:
    """The same dtype in this machine's byte order (">i4" -> "<i4" here): what is stored."""
    return dtype.newbyteorder("=") if dtype.byteorder not in ("=", "|") else dtype


def core_leaf_format(leaf: Any) -> str:
    """The ``data_format`` name litdata would pick for ``leaf`` (see module doc for deviations)."""
    name = _EXACT_FORMATS.get(type(leaf))
    if name is not None:
        return name
    # Subclasses keep their base's format, like litdata's isinstance checks (np.float64 is a
    # float, np.str_ a str, IntEnum an int). bool cannot be subclassed.
    if isinstance(leaf, str):
        return "str"
    if isinstance(leaf, int):
        return "int"
    if isinstance(leaf, float):
        return "float"
    if isinstance(leaf, bytes):
        return "bytes"
    if type(leaf) is np.ndarray:  # subclasses (masked arrays, ...) would lose data: pickle them
        code = NUMPY_CODES.get(_native(leaf.dtype))
        if code is not None and leaf.ndim == 1:
            return f"no_header_numpy:{code}"
        if code is not None:
            # ndim >= 2, and 0-d arrays (litdata pickles those; its reader reads them as "numpy"
            # too): a dataset of plain numbers must never need unpickling to be read.
            return "numpy"
        return "pickle"  # dtypes without a code (object, strings, datetimes)
    if isinstance(leaf, np.generic) and NUMPY_CODES.get(leaf.dtype) is not None:
        # numpy scalars, never pickled: read back as Python numbers (what .item() gives), or as
        # a 0-d array where a Python int/float would not hold the value (uint64, complex).
        if isinstance(leaf, np.bool_):
            return "bool"
        if isinstance(leaf, np.integer) and leaf.dtype != np.uint64:
            return "int"
        if isinstance(leaf, np.floating):
            return "float"
        return "numpy"
    if is_tensor(leaf):
        torch = sys.modules["torch"]
        if leaf.layout != torch.strided or leaf.is_quantized or getattr(leaf, "is_nested", False):
            return "pickle"
        code = _torch_code(leaf)
        if code is None:
            return "pickle"  # encoding refuses it: see _encode_leaf
        return f"no_header_tensor:{code}" if leaf.ndim == 1 else "tensor"
    return "pickle"


def encode_tensor(tensor: Any) -> bytes:
    """A tensor in the ``tensor`` layout (any rank; graph leaves pack their tensors this way)."""
    return encode_core("tensor", tensor)


def tensor_raw(tensor: Any) -> bytes:
    torch = sys.modules["torch"]
    tensor = tensor.detach().cpu().resolve_conj().resolve_neg().contiguous()
    # numpy has no bfloat16: reinterpret the memory as bytes, which works for every dtype.
    return tensor.reshape(-1).view(torch.uint8).numpy().tobytes()


def _shape_dims(shape: tuple, what: str) -> tuple:
    if any(dim > _U32_MAX for dim in shape):
        raise ValueError(f"{what} shape {shape} has a dimension above 2**32-1")
    return tuple(shape)


def core_encoder(fmt: str) -> Callable[[Any], bytes]:
    """The encoder of one core format, specialised for the common ones (the hot path)."""
    if fmt == "int":
        return _INT64.pack
    if fmt == "float":
        return _FLOAT64.pack
    if fmt == "str":
        return lambda leaf: leaf.encode("utf-8")
    if fmt.startswith("no_header_numpy:"):
        return array_bytes
    return lambda leaf: encode_core(fmt, leaf)


def array_bytes(leaf: Any) -> bytes:
    """An array's raw bytes (C order, native byte order) as a view where they already are,
    not a copy: the item's one join copies them (a 1 MiB array was copied twice before).
    Typed as bytes: every consumer (len, join, the checksum) takes any bytes-like object."""
    arr = np.ascontiguousarray(leaf, dtype=_native(leaf.dtype))
    return memoryview(arr.reshape(-1).view(np.uint8))  # type: ignore[arg-type,return-value]


def encode_core(fmt: str, leaf: Any) -> bytes:
    """Bytes of ``leaf`` under format ``fmt``; raises ValueError/TypeError/struct.error/PicklingError."""
    if fmt == "int":
        return _INT64.pack(leaf)
    if fmt == "float":
        return _FLOAT64.pack(leaf)
    if fmt == "bool":
        return b"\x01" if leaf else b"\x00"
    if fmt == "str":
        return leaf.encode("utf-8")
    if fmt == "bytes":
        return bytes(leaf)
    if fmt == "pickle":
        if is_tensor(leaf) and _torch_code(leaf) is None:
            # torch pickles these dtypes into bytes it cannot load back: refuse now, not at read time.
            raise ValueError(
                f"torch dtype {leaf.dtype} has no code in litdata's format and does not survive pickle; "
                "convert it in fn (e.g. tensor.to(torch.int64) or tensor.float())"
            )
        return pickle.dumps(leaf)
    if fmt == "numpy":
        leaf = np.asarray(leaf, dtype=_native(leaf.dtype))
        shape = _shape_dims(leaf.shape, "array")
        header = struct.pack(f"<{2 + len(shape)}I", NUMPY_CODES[leaf.dtype], len(shape), *shape)
        return b"".join((header, array_bytes(leaf)))
    if fmt == "tensor":
        shape = _shape_dims(tuple(leaf.shape), "tensor")
        header = _TENSOR_HEADER.pack(_torch_code(leaf), len(shape)) + struct.pack(f">{len(shape)}I", *shape)
        return header + tensor_raw(leaf)
    if fmt.startswith("no_header_numpy:"):
        return array_bytes(leaf)
    if fmt.startswith("no_header_tensor:"):
        return tensor_raw(leaf)
    raise ValueError(f"unknown leaf format {fmt!r}")


# --- item decoding ----------------------------------------------------------------------------


def _torch_dtype(code: int) -> Any:
    import torch  # lazy: only datasets with tensor leaves need it

    name = _TORCH_DTYPE_NAMES.get(code)
    if name is None:
        raise CorruptStateError(f"torch dtype code {code} is unknown (litdata's codes are 0-20)")
    return getattr(torch, name)


def _tensor_from(raw: memoryview, dtype: Any, shape: tuple) -> Any:
    import torch

    if len(raw) == 0:
        return torch.empty(shape, dtype=dtype)
    # bytearray: the tensor owns writable memory and never pins the chunk's buffer (mmap).
    return torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)


def _numpy_nd_view(raw: memoryview) -> np.ndarray:
    code, ndim = struct.unpack_from("<II", raw, 0)
    if code >= len(_NUMPY_DTYPES):
        raise CorruptStateError(f"numpy dtype code {code} is not supported")
    shape = struct.unpack_from(f"<{ndim}I", raw, 8)
    return np.frombuffer(raw[8 + 4 * ndim :], dtype=_NUMPY_DTYPES[code]).reshape(shape)


def _decode_numpy_nd(raw: memoryview) -> np.ndarray:
    return _numpy_nd_view(raw).copy()


def decode_tensor(raw: memoryview) -> Any:
    code, ndim = _TENSOR_HEADER.unpack_from(raw, 0)
    shape = struct.unpack_from(f">{ndim}I", raw, 8)
    return _tensor_from(raw[8 + 4 * ndim :], _torch_dtype(code), shape)


def view_decoder(fmt: str) -> Callable[[memoryview], Any] | None:
    """For an item read into a buffer of its own (no one else's bytes): the decoder of an
    array or tensor leaf that returns a view of those bytes instead of a copy (the copy is what
    ``core_decoder`` makes, so that items never pin a mapped chunk). None for any other
    format: its decoder makes a new object anyway. A leaf whose bytes are not aligned for its
    dtype is copied (numpy and torch want aligned data). The buffer must be writable: torch
    warns of (and numpy marks read-only) views of read-only memory."""
    name, _, arg = fmt.partition(":")
    if name == "no_header_numpy" and arg.isdigit() and int(arg) < len(_NUMPY_DTYPES):
        dtype = _NUMPY_DTYPES[int(arg)]
        if dtype.alignment == 1:  # bytes: any address will do
            return lambda raw: np.frombuffer(raw, dtype=dtype)
        return lambda raw: _aligned(np.frombuffer(raw, dtype=dtype))
    if fmt == "numpy":
        return lambda raw: _aligned(_numpy_nd_view(raw))
    if name == "no_header_tensor" and arg.isdigit() and int(arg) in _TORCH_DTYPE_NAMES:
        code = int(arg)
        return lambda raw: _tensor_view(raw, _torch_dtype(code), (-1,) if len(raw) else (0,))
    if fmt == "tensor":
        return _decode_tensor_view
    return None


def array_view_decoder(fmt: str) -> Callable[[Any], Any] | None:
    """:func:`view_decoder`'s counterpart for a leaf given as a slice of the uint8 array an
    item was read into (``item_decoder(owned=True)``): an array leaf is a view of the slice,
    with no buffer-protocol round trip (a third of the cost of decoding a 256 KiB array
    item). None for any format whose decoder must be given a memoryview."""
    name, _, arg = fmt.partition(":")
    if name == "no_header_numpy" and arg.isdigit() and int(arg) < len(_NUMPY_DTYPES):
        dtype = _NUMPY_DTYPES[int(arg)]
        if dtype == np.uint8:
            return lambda raw: raw
        size = dtype.itemsize

        def typed(raw: np.ndarray) -> np.ndarray:
            if len(raw) % size:  # frombuffer names the ragged size, as the memoryview path does
                return np.frombuffer(raw, dtype=dtype)
            return _aligned(raw.view(dtype))

        return typed
    if fmt in ("int", "float", "str", "bytes"):  # struct, str() and bytes() take any buffer
        return core_decoder(fmt)
    return None


def _tensor_view(raw: memoryview, dtype: Any, shape: tuple) -> Any:
    import torch

    itemsize = dtype.itemsize
    if len(raw) == 0 or len(raw) % itemsize or np.frombuffer(raw, dtype=np.uint8).ctypes.data % itemsize:
        return _tensor_from(raw, dtype, shape)  # empty, ragged or unaligned: the copying path decides
    return torch.frombuffer(raw, dtype=dtype).reshape(shape)


def _decode_tensor_view(raw: memoryview) -> Any:
    code, ndim = _TENSOR_HEADER.unpack_from(raw, 0)
    shape = struct.unpack_from(f">{ndim}I", raw, 8)
    return _tensor_view(raw[8 + 4 * ndim :], _torch_dtype(code), shape)


def _aligned(arr: np.ndarray) -> np.ndarray:
    return arr if arr.flags.aligned else arr.copy()


def core_decoder(fmt: str, allow_pickle: bool = True) -> Callable[[memoryview], Any] | None:
    """The decoder of one core leaf format, or None when ``fmt`` is not one.

    ``allow_pickle=False``: pickle leaves are read as plain data only (see
    :func:`load_data_only_pickle`)."""
    simple: dict[str, Callable[[memoryview], Any]] = {
        "int": lambda raw: _INT64.unpack(raw)[0],
        "float": lambda raw: _FLOAT64.unpack(raw)[0],
        "bool": lambda raw: raw[0] != 0,
        "str": lambda raw: str(raw, "utf-8"),
        "bytes": bytes,
        "pickle": load_trusted_pickle if allow_pickle else load_data_only_pickle,
        "numpy": _decode_numpy_nd,
        "tensor": decode_tensor,
    }
    if fmt in simple:
        return simple[fmt]
    name, _, arg = fmt.partition(":")
    if name == "no_header_numpy" and arg.isdigit() and int(arg) < len(_NUMPY_DTYPES):
        dtype = _NUMPY_DTYPES[int(arg)]
        return lambda raw: np.frombuffer(raw, dtype=dtype).copy()
    if name == "no_header_tensor" and arg.isdigit() and int(arg) in _TORCH_DTYPE_NAMES:
        code = int(arg)
        return lambda raw: _tensor_from(raw, _torch_dtype(code), (-1,) if len(raw) else (0,))
    return None
