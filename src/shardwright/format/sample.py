"""Samples: leaf formats, and encoding/decoding one item (see the package docstring); the pytree
structure of a sample (flatten, data_spec, unflatten) is :mod:`.pytree`."""

from __future__ import annotations

import pickle
import struct
import sys
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import numpy as np

from ..errors import CorruptStateError, SampleFormatError, UnsupportedFormatError
from .pytree import (
    CONTAINER_NAMES,
    MAPPINGS,
    SpecNode,
    flatten_sample,
    parse_spec,
    spec_or_corrupt,
    unflatten_sample,
    unflattener,
)
from .safe_pickle import load_data_only_pickle

__all__ = [
    "ItemEncoder",
    "decode_plan",
    "flatten_sample",
    "leaf_format",
    "parse_spec",
    "unflatten_sample",
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
_NUMPY_CODES: dict[np.dtype, int] = {dtype: code for code, dtype in enumerate(_NUMPY_DTYPES)}

# torch dtype name per code, as litdata's table has it (several codes are aliases of one dtype).
_TORCH_DTYPE_NAMES: dict[int, str] = {
    0: "float32", 1: "float32", 2: "float64", 3: "float64", 4: "complex64", 5: "complex64",
    6: "complex128", 7: "complex128", 8: "float16", 9: "float16", 10: "bfloat16", 11: "uint8",
    12: "int8", 13: "int16", 14: "int16", 15: "int32", 16: "int32", 17: "int64", 18: "int64",
    19: "bool", 20: "uint16",
}  # fmt: skip
# litdata inverts its table, so the last code of each alias pair is the one it writes.
_TORCH_WRITE_CODES: dict[str, int] = {name: code for code, name in _TORCH_DTYPE_NAMES.items()}

# Python types whose format name is fixed (checked by exact type first: the hot path).
_EXACT_FORMATS: dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str", bytes: "bytes"}

_FIX_HINT = (
    "Every sample must have the same structure (same dict keys, same list/tuple lengths) and the "
    "same leaf types as the first one. Convert values in fn (e.g. int(x), float(x), "
    "np.asarray(x, dtype=np.float32)), give optional fields a value of one type, store a "
    "variable-length list as one 1-D numpy array (any length is one leaf), or store other "
    "variable parts as one leaf (e.g. pickle.dumps(part) as bytes). To change the structure of "
    "a dataset that has committed samples, start over with mode='overwrite'."
)


# --- leaf formats -----------------------------------------------------------------------------


def _torch_code(tensor: Any) -> int | None:
    return _TORCH_WRITE_CODES.get(str(tensor.dtype).removeprefix("torch."))


def _is_tensor(leaf: Any) -> bool:
    # A torch tensor can only exist if torch is already imported: never import it here.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(leaf, torch.Tensor)


def _native(dtype: np.dtype) -> np.dtype:
    """The same dtype in this machine's byte order (">i4" -> "<i4" here): what is stored."""
    return dtype.newbyteorder("=") if dtype.byteorder not in ("=", "|") else dtype


def leaf_format(leaf: Any) -> str:
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
        code = _NUMPY_CODES.get(_native(leaf.dtype))
        if code is not None and leaf.ndim == 1:
            return f"no_header_numpy:{code}"
        if code is not None:
            # ndim >= 2, and 0-d arrays (litdata pickles those; its reader reads them as "numpy"
            # too): a dataset of plain numbers must never need unpickling to be read.
            return "numpy"
        return "pickle"  # dtypes without a code (object, strings, datetimes)
    if isinstance(leaf, np.generic) and _NUMPY_CODES.get(leaf.dtype) is not None:
        # numpy scalars, never pickled: read back as Python numbers (what .item() gives), or as
        # a 0-d array where a Python int/float would not hold the value (uint64, complex).
        if isinstance(leaf, np.bool_):
            return "bool"
        if isinstance(leaf, np.integer) and leaf.dtype != np.uint64:
            return "int"
        if isinstance(leaf, np.floating):
            return "float"
        return "numpy"
    if _is_tensor(leaf):
        torch = sys.modules["torch"]
        if leaf.layout != torch.strided or leaf.is_quantized or getattr(leaf, "is_nested", False):
            return "pickle"
        code = _torch_code(leaf)
        if code is None:
            return "pickle"  # encoding refuses it: see _encode_leaf
        return f"no_header_tensor:{code}" if leaf.ndim == 1 else "tensor"
    return "pickle"


def _tensor_raw(tensor: Any) -> bytes:
    torch = sys.modules["torch"]
    tensor = tensor.detach().cpu().resolve_conj().resolve_neg().contiguous()
    # numpy has no bfloat16: reinterpret the memory as bytes, which works for every dtype.
    return tensor.reshape(-1).view(torch.uint8).numpy().tobytes()


def _shape_dims(shape: tuple, what: str) -> tuple:
    if any(dim > _U32_MAX for dim in shape):
        raise ValueError(f"{what} shape {shape} has a dimension above 2**32-1")
    return tuple(shape)


def _encode_leaf(fmt: str, leaf: Any) -> bytes:
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
        if _is_tensor(leaf) and _torch_code(leaf) is None:
            # torch pickles these dtypes into bytes it cannot load back: refuse now, not at read time.
            raise ValueError(
                f"torch dtype {leaf.dtype} has no code in litdata's format and does not survive pickle; "
                "convert it in fn (e.g. tensor.to(torch.int64) or tensor.float())"
            )
        return pickle.dumps(leaf)
    if fmt == "numpy":
        leaf = np.asarray(leaf, dtype=_native(leaf.dtype))
        shape = _shape_dims(leaf.shape, "array")
        header = struct.pack(f"<{2 + len(shape)}I", _NUMPY_CODES[leaf.dtype], len(shape), *shape)
        return header + leaf.tobytes(order="C")
    if fmt == "tensor":
        shape = _shape_dims(tuple(leaf.shape), "tensor")
        header = _TENSOR_HEADER.pack(_torch_code(leaf), len(shape)) + struct.pack(f">{len(shape)}I", *shape)
        return header + _tensor_raw(leaf)
    if fmt.startswith("no_header_numpy:"):
        return np.asarray(leaf, dtype=_native(leaf.dtype)).tobytes(order="C")
    if fmt.startswith("no_header_tensor:"):
        return _tensor_raw(leaf)
    raise ValueError(f"unknown leaf format {fmt!r}")


# --- item encoding ----------------------------------------------------------------------------


class _Mismatch(Exception):
    def __init__(self, path: str, expected: str, got: str):
        super().__init__(path, expected, got)
        self.path, self.expected, self.got = path, expected, got


def _describe(value: Any) -> str:
    kind = CONTAINER_NAMES.get(type(value))
    if kind is None:
        fmt, name = leaf_format(value), type(value).__name__
        return fmt if fmt == name else f"{fmt} ({name})"
    if type(value) in MAPPINGS:
        return f"{type(value).__name__} with keys {list(value.keys())!r}"
    return f"{type(value).__name__} of length {len(value)}"


def _describe_node(node: SpecNode) -> str:
    if node.kind in MAPPINGS:
        return f"{node.kind.__name__} with keys {list(node.keys)!r}"
    return f"{node.kind.__name__} of length {len(node.children)}"  # type: ignore[union-attr]


def _collect(node: SpecNode, value: Any, formats: list[str], out: list, path: str) -> None:
    """Leaves of ``value`` in the order of ``node``; raises _Mismatch at the first difference."""
    if node.kind is None:
        fmt = formats[len(out)]
        # A position whose first value was pickled takes anything (litdata pickles it too).
        if fmt != "pickle":
            if type(value) in CONTAINER_NAMES:
                raise _Mismatch(path, fmt, _describe(value))
            got = leaf_format(value)
            if got != fmt:
                raise _Mismatch(path, fmt, _describe(value))
        out.append(value)
        return
    if node.kind in MAPPINGS:
        # dict and OrderedDict are interchangeable (as in torch); key order may differ: values
        # are taken by key, in the first sample's order.
        if type(value) not in MAPPINGS:
            raise _Mismatch(path, _describe_node(node), _describe(value))
        if len(value) != len(node.keys) or not all(key in value for key in node.keys):
            missing = [key for key in node.keys if key not in value]
            extra = [key for key in value if key not in node.keys]
            raise _Mismatch(path, _describe_node(node), f"{_describe(value)} (missing {missing!r}, extra {extra!r})")
        for key, child in zip(node.keys, node.children):
            _collect(child, value[key], formats, out, f"{path}[{key!r}]")
        return
    if type(value) is not node.kind or len(value) != len(node.children):  # type: ignore[arg-type]
        raise _Mismatch(path, _describe_node(node), _describe(value))
    for i, (child, item) in enumerate(zip(node.children, value)):  # type: ignore[call-overload]
        _collect(child, item, formats, out, f"{path}[{i}]")


def _short(value: Any, limit: int = 400) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ItemEncoder:
    """Turns samples into item bytes. One per writer: the first sample fixes the format.

    ``data_format``/``data_spec`` may be given to continue a dataset (resume, append); then
    every sample must match them. ``format_input_index`` is the input that fixed the format
    (named in error messages); it is set by the first :meth:`encode` when unknown.
    """

    def __init__(self, data_format: list[str] | None = None, data_spec: str | None = None):
        if (data_format is None) != (data_spec is None):
            raise ValueError("give both data_format and data_spec, or neither")
        self.data_format: list[str] | None = None
        self.data_spec: str | None = None
        self.format_input_index: int | None = None
        self._root: SpecNode | None = None
        self._sizes: struct.Struct | None = None
        if data_format is not None and data_spec is not None:
            self._fix(list(data_format), data_spec)

    def _fix(self, data_format: list[str], data_spec: str) -> None:
        root = spec_or_corrupt(data_spec)
        if root.num_leaves != len(data_format):
            raise CorruptStateError(
                f"data_format has {len(data_format)} names but data_spec has {root.num_leaves} leaves"
            )
        self.data_format, self.data_spec, self._root = data_format, data_spec, root
        self._sizes = struct.Struct(f"<{len(data_format)}I")

    def __getstate__(self) -> dict[str, Any]:
        # struct.Struct cannot be pickled: workers rebuild the parsed form from the strings.
        return {
            "data_format": self.data_format,
            "data_spec": self.data_spec,
            "format_input_index": self.format_input_index,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["data_format"], state["data_spec"])  # type: ignore[misc]
        self.format_input_index = state["format_input_index"]

    def _origin(self) -> str:
        if self.format_input_index is None:
            return "the first sample written"
        if self.format_input_index < 0:
            return "the existing dataset (its index.json)"
        return f"input {self.format_input_index}"

    def _where(self, input_index: int, path: str) -> str:
        return f"input {input_index} at {path or 'the top level'}"

    def encode(self, sample: Any, input_index: int) -> bytes:
        """Item bytes of ``sample`` (``u32 sizes[L]`` + leaves). Raises SampleFormatError."""
        if self._root is None:
            try:
                leaves, spec = flatten_sample(sample)
            except SampleFormatError as exc:
                raise SampleFormatError(f"input {input_index}: {exc}") from None
            except RecursionError:
                raise SampleFormatError(f"input {input_index}: the sample is nested too deeply") from None
            formats = [leaf_format(leaf) for leaf in leaves]
            data = self._pack(leaves, formats, input_index, struct.Struct(f"<{len(leaves)}I"))
            # Fix the format only once the first sample encoded cleanly.
            self._fix(formats, spec)
            if self.format_input_index is None:
                self.format_input_index = input_index
            return data
        assert self.data_format is not None and self._sizes is not None
        leaves = []
        try:
            _collect(self._root, sample, self.data_format, leaves, "")
        except _Mismatch as mis:
            raise SampleFormatError(self._mismatch_message(sample, input_index, mis)) from None
        return self._pack(leaves, self.data_format, input_index, self._sizes)

    def _mismatch_message(self, sample: Any, input_index: int, mis: _Mismatch) -> str:
        assert self.data_format is not None and self.data_spec is not None
        expected = unflatten_sample(list(self.data_format), self.data_spec)
        try:
            got_leaves, got_spec = flatten_sample(sample)
            got = unflatten_sample([leaf_format(leaf) for leaf in got_leaves], got_spec)
        except (SampleFormatError, CorruptStateError, RecursionError):
            got = type(sample).__name__
        return (
            f"{self._where(input_index, mis.path)}: expected {mis.expected}, got {mis.got}. "
            f"The format was fixed by {self._origin()}: expected {_short(expected)}, got {_short(got)}. {_FIX_HINT}"
        )

    def _pack(self, leaves: list, formats: list[str], input_index: int, sizes: struct.Struct) -> bytes:
        parts: list[bytes] = [b""]
        lengths: list[int] = []
        for position, (fmt, leaf) in enumerate(zip(formats, leaves)):
            try:
                blob = _encode_leaf(fmt, leaf)
            except Exception as exc:
                raise SampleFormatError(self._leaf_error(fmt, leaf, position, input_index, exc)) from exc
            if len(blob) > _U32_MAX:
                raise SampleFormatError(
                    f"input {input_index}: leaf {position} is {len(blob)} bytes; litdata's format stores "
                    "each leaf's size as uint32, so a leaf must stay under 4 GiB. Split it across samples."
                )
            parts.append(blob)
            lengths.append(len(blob))
        parts[0] = sizes.pack(*lengths)
        return b"".join(parts)

    def _leaf_error(self, fmt: str, leaf: Any, position: int, input_index: int, exc: Exception) -> str:
        if fmt == "int" and isinstance(exc, struct.error):
            return (
                f"input {input_index}: int {leaf} (leaf {position}) is outside int64 "
                f"[{-(2**63)}, {2**63 - 1}], the only int litdata's format stores. Store it as "
                "str(value) or bytes, or as a float if precision loss is fine."
            )
        if fmt == "str":
            return (
                f"input {input_index}: str leaf {position} cannot be encoded as UTF-8 ({exc}). "
                "Fix the text (e.g. s.encode('utf-8', 'replace').decode()) or store bytes."
            )
        if fmt == "pickle" and _is_tensor(leaf):
            return f"input {input_index}: leaf {position}: {exc}"
        if fmt == "pickle":
            return (
                f"input {input_index}: leaf {position} of type {type(leaf).__name__} is stored with "
                f"pickle but cannot be pickled ({type(exc).__name__}: {exc}). Convert it in fn to "
                "numbers, str, bytes, numpy arrays or tensors."
            )
        return f"input {input_index}: leaf {position} ({fmt}, {type(leaf).__name__}) cannot be encoded: {exc}"


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


def _decode_numpy_nd(raw: memoryview) -> np.ndarray:
    code, ndim = struct.unpack_from("<II", raw, 0)
    if code >= len(_NUMPY_DTYPES):
        raise CorruptStateError(f"numpy dtype code {code} is not supported")
    shape = struct.unpack_from(f"<{ndim}I", raw, 8)
    return np.frombuffer(raw[8 + 4 * ndim :], dtype=_NUMPY_DTYPES[code]).reshape(shape).copy()


def _decode_tensor(raw: memoryview) -> Any:
    code, ndim = _TENSOR_HEADER.unpack_from(raw, 0)
    shape = struct.unpack_from(f">{ndim}I", raw, 8)
    return _tensor_from(raw[8 + 4 * ndim :], _torch_dtype(code), shape)


def _leaf_decoder(fmt: str, allow_pickle: bool = True) -> Callable[[memoryview], Any]:
    """The decoder of one leaf format; raises UnsupportedFormatError for unknown names.

    ``allow_pickle=False``: pickle leaves are read as plain data only (see
    :func:`load_data_only_pickle`)."""
    simple: dict[str, Callable[[memoryview], Any]] = {
        "int": lambda raw: _INT64.unpack(raw)[0],
        "float": lambda raw: _FLOAT64.unpack(raw)[0],
        "bool": lambda raw: raw[0] != 0,
        "str": lambda raw: str(raw, "utf-8"),
        "text": lambda raw: str(raw, "utf-8"),  # litdata's Text leaves are plain UTF-8 too
        "bytes": bytes,
        "pickle": pickle.loads if allow_pickle else load_data_only_pickle,
        "numpy": _decode_numpy_nd,
        "tensor": _decode_tensor,
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
    raise UnsupportedFormatError(
        f"leaf format {fmt!r} is not one shardwright reads (it reads int, float, bool, str, bytes, "
        "numpy, tensor and pickle leaves); it comes from one of litdata's own serializers "
        "(json lists, images, audio, ...). Read this dataset with litdata.StreamingDataset."
    )


@lru_cache(maxsize=64)
def decode_plan(
    data_format: tuple[str, ...], data_spec: str, allow_pickle: bool = True
) -> tuple[struct.Struct, list, Callable]:
    """(size header struct, leaf decoders, unflattener) of a dataset; building it checks that
    every leaf format is readable (UnsupportedFormatError) and the spec is sound (CorruptStateError)."""
    num_leaves, build = unflattener(data_spec)
    if num_leaves != len(data_format):
        raise CorruptStateError(f"data_format has {len(data_format)} names but data_spec has {num_leaves} leaves")
    return struct.Struct(f"<{len(data_format)}I"), [_leaf_decoder(fmt, allow_pickle) for fmt in data_format], build
