"""Unit tests of shardwright.format: leaf formats, byte layouts, treespecs, index.json, sizes."""

from __future__ import annotations

import enum
import json
import math
import pickle
import struct
import subprocess
import sys
import textwrap
from collections import OrderedDict, defaultdict, deque, namedtuple
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from shardwright.errors import CorruptStateError, SampleFormatError, UnsupportedFormatError
from shardwright.format import (
    ChunkEntry,
    IndexConfig,
    ItemEncoder,
    build_chunk,
    chunk_item,
    chunk_num_items,
    compress,
    decode_item,
    decompress,
    flatten_sample,
    leaf_format,
    parse_index,
    parse_size,
    render_index,
    unflatten_sample,
)
from shardwright.protocol.layout import chunk_filename

SRC = Path(__file__).resolve().parents[2] / "src"

NUMPY_CODES = {
    np.int8: 0, np.int16: 1, np.int32: 2, np.int64: 3, np.uint8: 4, np.uint16: 5, np.uint32: 6,
    np.uint64: 7, np.float16: 8, np.float32: 9, np.float64: 10, np.complex64: 11, np.complex128: 12,
    np.bool_: 13,
}  # fmt: skip


class Point:
    """An arbitrary class: stored with pickle."""

    def __init__(self, x: int, y: str):
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


Pair = namedtuple("Pair", "a b")


class Color(enum.IntEnum):
    RED = 1


def roundtrip(sample, data_format=None):
    """Encode one sample, check its format names if given, decode it back."""
    enc = ItemEncoder()
    item = enc.encode(sample, 0)
    if data_format is not None:
        assert enc.data_format == data_format
    return decode_item(item, enc.data_format, enc.data_spec)


def assert_same(a, b):
    """Deep equality that understands numpy arrays, tensors and NaN."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    elif type(a).__module__ == "torch" and type(a).__name__ == "Tensor":
        import torch

        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan()))
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


# --- scalars ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1, -1, 2**63 - 1, -(2**63), 123456789012345])
def test_int_roundtrip_and_bytes(value):
    enc = ItemEncoder()
    item = enc.encode(value, 0)
    assert enc.data_format == ["int"]
    assert item == struct.pack("<I", 8) + struct.pack("<q", value)
    out = decode_item(item, enc.data_format, enc.data_spec)
    assert out == value and type(out) is int


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30])
def test_int_outside_int64_is_a_clear_error(value):
    enc = ItemEncoder()
    with pytest.raises(SampleFormatError) as err:
        enc.encode({"v": value}, 7)
    assert str(value) in str(err.value) and "input 7" in str(err.value) and "int64" in str(err.value)
    # The failed first sample did not fix the format.
    assert enc.data_format is None
    enc.encode({"v": 1}, 8)
    with pytest.raises(SampleFormatError, match=r"input 9.*outside int64"):
        enc.encode({"v": value}, 9)


@pytest.mark.parametrize("value", [0.0, -0.0, 1.5, -1e300, 5e-324, math.inf, -math.inf, math.nan])
def test_float_roundtrip(value):
    enc = ItemEncoder()
    item = enc.encode(value, 0)
    assert item[4:] == struct.pack("<d", value)
    out = decode_item(item, enc.data_format, enc.data_spec)
    assert type(out) is float
    assert (math.isnan(out) and math.isnan(value)) or (
        out == value and math.copysign(1, out) == math.copysign(1, value)
    )


@pytest.mark.parametrize("value", [True, False])
def test_bool_is_one_byte_not_int(value):
    enc = ItemEncoder()
    item = enc.encode(value, 0)
    assert enc.data_format == ["bool"]
    assert item == struct.pack("<I", 1) + (b"\x01" if value else b"\x00")
    assert decode_item(item, ["bool"], enc.data_spec) is value


@pytest.mark.parametrize("value", ["", "ascii", "héllo wörld", "日本語テキスト", "emoji 🎉", "nul\x00inside"])
def test_str_roundtrip_utf8(value):
    enc = ItemEncoder()
    item = enc.encode(value, 0)
    assert enc.data_format == ["str"]
    assert item[4:] == value.encode("utf-8")
    assert decode_item(item, ["str"], enc.data_spec) == value


def test_str_that_is_not_utf8_encodable_is_a_clear_error():
    with pytest.raises(SampleFormatError, match="UTF-8"):
        ItemEncoder().encode({"s": "bad \ud800"}, 3)


@pytest.mark.parametrize("value", [b"", b"\x00\xff" * 100, bytes(range(256))])
def test_bytes_roundtrip(value):
    out = roundtrip(value, ["bytes"])
    assert out == value and type(out) is bytes


def test_none_and_arbitrary_objects_are_pickled():
    sample = {"none": None, "point": Point(3, "é"), "dec": Decimal("1.25"), "set": {1, 2}, "ba": bytearray(b"xy")}
    out = roundtrip(sample, ["pickle"] * 5)
    assert out == sample and type(out["ba"]) is bytearray


def test_unpicklable_leaf_is_a_clear_error():
    with pytest.raises(SampleFormatError, match=r"input 4.*cannot be pickled"):
        ItemEncoder().encode({"f": lambda: 1}, 4)


# --- leaf_format choices (what litdata picks) -------------------------------------------------


@pytest.mark.parametrize(
    ("leaf", "expected"),
    [
        (1, "int"),
        (True, "bool"),
        (Color.RED, "int"),  # int subclass, like litdata's isinstance check
        (1.0, "float"),
        (np.float64(1.0), "float"),  # np.float64 subclasses float
        (np.float32(1.0), "float"),  # numpy scalars are never pickled
        (np.int64(1), "int"),
        (np.bool_(True), "bool"),
        (np.str_("x"), "str"),
        (np.bytes_(b"x"), "bytes"),
        ("x", "str"),
        (b"x", "bytes"),
        (bytearray(b"x"), "pickle"),
        (None, "pickle"),
        (Point(1, "a"), "pickle"),
        (np.array(5), "numpy"),  # 0-d array: litdata reads it as "numpy" too
        (np.uint64(2**64 - 1), "numpy"),  # does not fit an int64: a 0-d array
        (np.complex64(1j), "numpy"),
        (np.zeros(3, dtype=np.float32), "no_header_numpy:9"),
        (np.zeros((2, 3)), "numpy"),
        (np.zeros((2, 3, 4), dtype=np.uint8), "numpy"),
        (np.array(["a", "b"]), "pickle"),  # unicode dtype has no safe code
        (np.array([object(), 1], dtype=object), "pickle"),
        (np.zeros(3, dtype=">i4"), "no_header_numpy:2"),  # stored in native byte order
        (np.ma.masked_array([1, 2], mask=[0, 1]), "pickle"),  # subclass: keep the mask
    ],
)
def test_leaf_format(leaf, expected):
    assert leaf_format(leaf) == expected


@pytest.mark.parametrize("dtype", list(NUMPY_CODES))
def test_numpy_dtype_codes(dtype):
    assert leaf_format(np.zeros(2, dtype=dtype)) == f"no_header_numpy:{NUMPY_CODES[dtype]}"


def test_numpy_platform_aliases_share_codes():
    # longlong/intc/intp are the same dtypes as int64/int32 on this platform: same codes.
    assert leaf_format(np.zeros(2, dtype=np.longlong)) == "no_header_numpy:3"
    assert leaf_format(np.zeros(2, dtype=np.intc)) == "no_header_numpy:2"
    assert leaf_format(np.zeros(2, dtype=np.intp)) == "no_header_numpy:3"


# --- numpy ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(NUMPY_CODES))
def test_numpy_1d_roundtrip_every_dtype(dtype):
    rng = np.random.default_rng(0)
    arr = (rng.random(17) * 100).astype(dtype)
    enc = ItemEncoder()
    item = enc.encode({"a": arr}, 0)
    assert enc.data_format == [f"no_header_numpy:{NUMPY_CODES[dtype]}"]
    assert item == struct.pack("<I", arr.nbytes) + arr.tobytes()
    out = decode_item(item, enc.data_format, enc.data_spec)["a"]
    assert out.dtype == np.dtype(dtype) and np.array_equal(out, arr)
    assert out.flags.writeable and out.flags.owndata  # a copy: never pins the chunk buffer


def test_numpy_empty_and_noncontiguous():
    assert_same(roundtrip(np.zeros(0, dtype=np.float32)), np.zeros(0, dtype=np.float32))
    base = np.arange(20, dtype=np.int32).reshape(4, 5)
    assert_same(roundtrip(base[:, ::2]), np.ascontiguousarray(base[:, ::2]))
    assert_same(roundtrip(base[::3, 1]), base[::3, 1].copy())


@pytest.mark.parametrize("shape", [(2, 3), (1, 1), (0, 4), (2, 3, 4), (2, 1, 2, 1, 3)])
@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.float32, np.float64, np.complex64, np.bool_])
def test_numpy_nd_roundtrip(shape, dtype):
    arr = np.arange(math.prod(shape)).reshape(shape).astype(dtype)
    assert_same(roundtrip({"m": arr}, ["numpy"]), {"m": arr})


def test_numpy_nd_byte_layout():
    arr = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int16)
    enc = ItemEncoder()
    item = enc.encode(arr, 0)
    # little-endian u32 dtype code, ndim, shape, then the raw data
    leaf = struct.pack("<4I", 1, 2, 2, 3) + arr.tobytes()
    assert item == struct.pack("<I", len(leaf)) + leaf


def test_numpy_scalars_roundtrip():
    sample = [np.int64(-3), np.float32(1.5), np.bool_(True), np.uint8(200), np.float64(2.5), np.array(7.0)]
    # Never pickle (reading pickle needs allow_pickle=True): numbers come back as Python numbers
    # (what .item() gives), 0-d arrays as 0-d arrays.
    out = roundtrip(sample, ["int", "float", "bool", "int", "float", "numpy"])
    assert out[:5] == [-3, 1.5, True, 200, 2.5] and [type(x) for x in out[:5]] == [int, float, bool, int, float]
    assert_same(out[5], sample[5])
    big = roundtrip([np.uint64(2**64 - 1), np.complex64(1 + 2j)], ["numpy", "numpy"])
    assert big[0] == np.uint64(2**64 - 1) and big[0].dtype == np.uint64 and big[1] == np.complex64(1 + 2j)


# --- torch ------------------------------------------------------------------------------------

TORCH_CODES = {
    "float32": 1, "float64": 3, "complex64": 5, "complex128": 7, "float16": 9, "bfloat16": 10,
    "uint8": 11, "int8": 12, "int16": 14, "int32": 16, "int64": 18, "bool": 19, "uint16": 20,
}  # fmt: skip


@pytest.mark.parametrize("name", list(TORCH_CODES))
def test_tensor_1d_roundtrip(name):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, name)
    tensor = (torch.arange(11) * 3).to(dtype)
    enc = ItemEncoder()
    item = enc.encode({"t": tensor}, 0)
    assert enc.data_format == [f"no_header_tensor:{TORCH_CODES[name]}"]
    raw = tensor.view(torch.uint8).numpy().tobytes()  # raw bytes, no header
    assert item == struct.pack("<I", len(raw)) + raw
    assert_same(decode_item(item, enc.data_format, enc.data_spec), {"t": tensor})


@pytest.mark.parametrize("name", ["float32", "float64", "float16", "bfloat16", "int64", "uint8", "bool", "int16"])
@pytest.mark.parametrize("shape", [(), (2, 3), (0, 2), (2, 3, 4)])
def test_tensor_nd_roundtrip(name, shape):
    torch = pytest.importorskip("torch")
    tensor = torch.arange(math.prod(shape)).reshape(shape).to(getattr(torch, name))
    assert_same(roundtrip([tensor], ["tensor"]), [tensor])


def test_tensor_nd_byte_layout_is_big_endian_header():
    torch = pytest.importorskip("torch")
    tensor = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=torch.float32)
    item = ItemEncoder().encode(tensor, 0)
    leaf = struct.pack(">II", 1, 2) + struct.pack(">2I", 2, 3) + tensor.numpy().tobytes()
    assert item == struct.pack("<I", len(leaf)) + leaf


def test_tensor_variants():
    torch = pytest.importorskip("torch")
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    assert_same(roundtrip(base.t()), base.t().contiguous())  # non-contiguous
    grad = torch.ones(3, requires_grad=True)
    assert_same(roundtrip(grad), torch.ones(3))
    assert_same(roundtrip(torch.zeros(0, dtype=torch.int32)), torch.zeros(0, dtype=torch.int32))
    out = roundtrip(torch.arange(3))
    out += 1  # decoded tensors are writable
    # No litdata code, and torch cannot unpickle what it pickles for these dtypes: refused.
    odd = torch.tensor([1, 2, 3], dtype=torch.uint32)
    assert leaf_format(odd) == "pickle"
    with pytest.raises(SampleFormatError, match=r"input 0: leaf 0: torch dtype torch.uint32 .*convert it"):
        ItemEncoder().encode(odd, 0)


# --- structures and treespecs -----------------------------------------------------------------

STRUCTURES = [
    5,
    "leaf",
    None,
    {"i": 1, "x": 2.0},
    {"b": 1, "a": 2},  # insertion order is kept, not sorted
    {"outer": {"inner": [1, 2, (3, "x")]}, "t": (1.0,)},
    [1, [2, [3, [4]]]],
    (1, 2),
    (),
    [],
    {},
    {1: "int key", "s": 2, None: 3, True: 4, 2.5: 5},  # noqa: F601 - True is the key 1: its value wins, as in Python
    OrderedDict([("z", 1), ("a", [2, 3])]),
    {"ключ": "non-ascii key"},
    [{"a": 1}, {"a": 2}],
]


@pytest.mark.parametrize("sample", STRUCTURES, ids=range(len(STRUCTURES)))
def test_treespec_equals_torch(sample):
    pytree = pytest.importorskip("torch.utils._pytree")
    leaves, spec = flatten_sample(sample)
    torch_leaves, torch_spec = pytree.tree_flatten(sample)
    assert leaves == torch_leaves
    assert spec == pytree.treespec_dumps(torch_spec)


@pytest.mark.parametrize("sample", STRUCTURES, ids=range(len(STRUCTURES)))
def test_flatten_unflatten_roundtrip(sample):
    leaves, spec = flatten_sample(sample)
    rebuilt = unflatten_sample(leaves, spec)
    assert rebuilt == sample and type(rebuilt) is type(sample)
    assert_same(roundtrip(sample), sample)


def test_data_spec_text_for_a_dict():
    _, spec = flatten_sample({"i": 1, "x": 2})
    leaf = '{"type": null, "context": null, "children_spec": []}'
    assert (
        spec == f'[1, {{"type": "builtins.dict", "context": "[\\"i\\", \\"x\\"]", "children_spec": [{leaf}, {leaf}]}}]'
    )


def test_unsupported_dict_keys_are_a_clear_error():
    with pytest.raises(SampleFormatError, match=r"input 2.*key \(1, 2\).*str"):
        ItemEncoder().encode({(1, 2): "tuple key"}, 2)


def test_other_containers_are_single_pickled_leaves():
    sample = {"nt": Pair(1, 2), "dq": deque([1, 2]), "dd": defaultdict(int, a=1)}
    assert flatten_sample(sample)[0] == list(sample.values())
    assert roundtrip(sample, ["pickle", "pickle", "pickle"]) == sample


def test_nested_mixed_roundtrip():
    sample = {
        "id": 42,
        "meta": {"name": "é", "tags": ["a", "b"], "score": 0.5, "ok": True},
        "arrays": (np.arange(4, dtype=np.uint16), np.ones((2, 2), dtype=np.float32)),
        "raw": b"\x00\x01",
        "none": None,
    }
    assert_same(roundtrip(sample), sample)


def test_dict_key_order_of_later_samples_follows_the_first():
    enc = ItemEncoder()
    enc.encode({"a": 1, "b": "x"}, 0)
    item = enc.encode({"b": "y", "a": 2}, 1)
    out = decode_item(item, enc.data_format, enc.data_spec)
    assert out == {"a": 2, "b": "y"} and list(out) == ["a", "b"]


def test_pickle_position_accepts_any_later_value():
    enc = ItemEncoder()
    enc.encode({"maybe": None, "n": 1}, 0)
    for i, value in enumerate([3, "s", {"nested": [1]}, None]):
        out = decode_item(enc.encode({"maybe": value, "n": i}, i + 1), enc.data_format, enc.data_spec)
        assert out == {"maybe": value, "n": i}


# --- format mismatch errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("later", "fragment"),
    [
        ({"i": 1.0, "a": np.zeros(2, np.float32)}, "at ['i']: expected int, got float"),
        ({"i": True, "a": np.zeros(2, np.float32)}, "at ['i']: expected int, got bool"),
        ({"i": None, "a": np.zeros(2, np.float32)}, "at ['i']: expected int, got pickle (NoneType)"),
        ({"i": 1, "a": np.zeros(2, np.float64)}, "expected no_header_numpy:9, got no_header_numpy:10"),
        ({"i": 1, "a": np.zeros((2, 2), np.float32)}, "expected no_header_numpy:9, got numpy"),
        ({"i": 1}, "missing ['a']"),
        ({"i": 1, "a": np.zeros(2, np.float32), "extra": 1}, "extra ['extra']"),
        ([1, np.zeros(2, np.float32)], "expected dict with keys ['i', 'a'], got list of length 2"),
        ({"i": [1], "a": np.zeros(2, np.float32)}, "at ['i']: expected int, got list of length 1"),
    ],
)
def test_mismatch_names_both_inputs(later, fragment):
    enc = ItemEncoder()
    enc.encode({"i": 1, "a": np.zeros(2, np.float32)}, 3)
    assert enc.format_input_index == 3
    with pytest.raises(SampleFormatError) as err:
        enc.encode(later, 11)
    message = str(err.value)
    assert message.startswith("input 11 at ")
    assert "fixed by input 3" in message
    assert fragment in message
    assert "expected {'i': 'int', 'a': 'no_header_numpy:9'}" in message  # the whole expected structure
    assert "Convert values in fn" in message  # how to fix


def test_mismatch_for_list_length_and_tuple_vs_list():
    enc = ItemEncoder()
    enc.encode([1, (2, 3)], 0)
    with pytest.raises(SampleFormatError, match=r"at \[1\]: expected tuple of length 2, got tuple of length 3"):
        enc.encode([1, (2, 3, 4)], 1)
    with pytest.raises(SampleFormatError, match=r"at \[1\]: expected tuple of length 2, got list of length 2"):
        enc.encode([1, [2, 3]], 2)


def test_seeded_encoder_keeps_format_and_settable_origin():
    first = ItemEncoder()
    first.encode({"i": 1, "s": "a"}, 0)
    resumed = ItemEncoder(first.data_format, first.data_spec)
    resumed.format_input_index = 1234
    assert resumed.encode({"i": 2, "s": "b"}, 5000) == first.encode({"i": 2, "s": "b"}, 1)
    with pytest.raises(SampleFormatError, match=r"input 5001 .*fixed by input 1234"):
        resumed.encode({"i": "2", "s": "b"}, 5001)
    with pytest.raises(CorruptStateError):
        ItemEncoder(["int"], first.data_spec)  # 1 name for 2 leaves
    with pytest.raises(ValueError):
        ItemEncoder(["int"], None)


# --- chunks -----------------------------------------------------------------------------------


def test_chunk_byte_layout_by_hand():
    enc = ItemEncoder()
    items = [enc.encode({"a": 1, "b": "hi"}, 0), enc.encode({"a": -2, "b": ""}, 1)]
    chunk = build_chunk(items)
    expected = bytes.fromhex(
        "02000000"  # N = 2
        "10000000"
        "22000000"
        "32000000"  # offsets 16, 34, 50 (absolute)
        "08000000"
        "02000000"
        "0100000000000000"
        "6869"  # sizes (8, 2), int 1, "hi"
        "08000000"
        "00000000"
        "feffffffffffffff"  # sizes (8, 0), int -2, ""
    )
    assert chunk == expected
    assert chunk_num_items(chunk) == 2
    assert bytes(chunk_item(chunk, 1)) == expected[34:]
    assert decode_item(chunk_item(chunk, 0), enc.data_format, enc.data_spec) == {"a": 1, "b": "hi"}
    assert decode_item(chunk_item(chunk, 1), enc.data_format, enc.data_spec) == {"a": -2, "b": ""}
    with pytest.raises(IndexError):
        chunk_item(chunk, 2)


def test_chunk_item_is_zero_copy_and_empty_chunk():
    chunk = build_chunk([b"abc", b"", b"de"])
    view = chunk_item(chunk, 2)
    assert isinstance(view, memoryview) and view.obj is chunk and bytes(view) == b"de"
    assert bytes(chunk_item(chunk, 1)) == b""
    assert build_chunk([]) == struct.pack("<2I", 0, 8) and chunk_num_items(build_chunk([])) == 0


def test_corrupt_item_and_chunk_are_clear_errors():
    enc = ItemEncoder()
    item = enc.encode({"a": 1, "b": "hi"}, 0)
    with pytest.raises(CorruptStateError):
        decode_item(item[:-1], enc.data_format, enc.data_spec)
    with pytest.raises(CorruptStateError):
        decode_item(b"", enc.data_format, enc.data_spec)
    with pytest.raises(CorruptStateError):
        chunk_item(build_chunk([item])[:-3], 0)
    with pytest.raises(CorruptStateError):
        chunk_num_items(b"\x01")


def test_unknown_leaf_format_is_unsupported():
    assert decode_item(struct.pack("<I", 2) + b"[]", ["json"], flatten_sample(1)[1]) == []
    with pytest.raises(UnsupportedFormatError, match="'custom'"):
        decode_item(struct.pack("<I", 2) + b"[]", ["custom"], flatten_sample(1)[1])


# --- compression and names --------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd", "zstd:9"])
def test_compress_roundtrip(compression):
    data = build_chunk([b"x" * 1000, bytes(range(256))])
    stored = compress(data, compression)
    if compression:
        assert stored[:4] == b"\x28\xb5\x2f\xfd" and len(stored) < len(data)  # one zstd frame
    assert decompress(stored, compression) == data
    assert decompress(memoryview(stored), compression) == data


def test_zstd_frame_has_content_size_for_python_zstd():
    import zstandard

    data = b"abc" * 10000
    params = zstandard.get_frame_parameters(compress(data, "zstd"))
    assert params.content_size == len(data)
    zstd = pytest.importorskip("zstd")  # the module litdata's reader decompresses with
    assert zstd.decompress(compress(data, "zstd")) == data


def test_decompress_streamed_frame_without_content_size():
    import zstandard

    data = b"hello" * 999
    streamed = zstandard.ZstdCompressor(write_content_size=False).compressobj()
    frame = streamed.compress(data) + streamed.flush()
    assert decompress(frame, "zstd") == data
    with pytest.raises(CorruptStateError):
        decompress(b"not zstd at all", "zstd")


def test_unknown_compression_is_refused():
    with pytest.raises(ValueError):
        compress(b"x", "lz4")


def test_chunk_filename():
    assert chunk_filename(3, 7, 12, None) == "chunk-3-00007-000012.bin"
    assert chunk_filename(0, 0, 0, "zstd") == "chunk-0-00000-000000.zstd.bin"
    assert chunk_filename(1, 123456, 1234567, None) == "chunk-1-123456-1234567.bin"


# --- index.json -------------------------------------------------------------------------------


def make_config(**overrides):
    enc = ItemEncoder()
    enc.encode({"i": 1, "x": np.zeros(2, np.float32)}, 0)
    values = dict(
        chunk_bytes=None, chunk_size=10, compression=None, data_format=enc.data_format, data_spec=enc.data_spec
    )
    values.update(overrides)
    return IndexConfig(**values)


def test_render_and_parse_index_roundtrip():
    chunks = [ChunkEntry("chunk-0-00000-000000.bin", 10, 1234), ChunkEntry("chunk-0-00001-000000.bin", 3, 99, dim=None)]
    config = make_config(compression="zstd", chunk_bytes=64_000_000, chunk_size=None)
    data = render_index(chunks, config, updated_at="1700000000.5")
    document = json.loads(data)
    assert list(document) == ["chunks", "config", "updated_at"]
    assert document["updated_at"] == "1700000000.5"
    assert document["chunks"][0] == {
        "chunk_bytes": 1234,
        "chunk_size": 10,
        "dim": None,
        "filename": "chunk-0-00000-000000.bin",
    }
    assert document["config"] == {
        "chunk_bytes": 64_000_000,
        "chunk_size": None,
        "compression": "zstd",
        "compression_batch_size": None,
        "compression_level": None,
        "data_format": ["int", "no_header_numpy:9"],
        "data_spec": config.data_spec,
        "encryption": None,
        "ipc_compression": None,
        "item_loader": "PyTreeLoader",
        "types": None,
    }
    assert parse_index(data, "mem") == (chunks, config)
    assert isinstance(json.loads(render_index([], config))["updated_at"], str)


def test_parse_index_strict_minimum():
    spec = flatten_sample(1)[1]
    data = json.dumps(
        {"chunks": [{"filename": "a.bin", "chunk_size": 2, "chunk_bytes": 30}],
         "config": {"data_format": ["int"], "data_spec": spec, "compression": None}}
    ).encode()  # fmt: skip
    chunks, config = parse_index(data, "x")
    assert chunks == [ChunkEntry("a.bin", 2, 30)]
    assert config == IndexConfig(None, None, None, ["int"], spec)


def test_entry_and_config_json_helpers():
    entry = ChunkEntry("c.bin", 1, 2, 3)
    assert ChunkEntry.from_json(entry.to_json()) == entry
    config = make_config()
    assert IndexConfig.from_json(config.to_json()) == config


def test_parse_index_reads_litdata_compression_levels():
    config = make_config(compression="zstd").to_json()
    for level in ("batch", "sample"):
        config["compression_level"] = level
        assert parse_index(json.dumps({"chunks": [], "config": config}).encode(), "lit")[1].compression_level == level
    config["compression_level"] = "frame"
    with pytest.raises(CorruptStateError, match="compression_level"):
        parse_index(json.dumps({"chunks": [], "config": config}).encode(), "lit")


def _index(chunks=None, config=None, drop=()):
    document = {
        "chunks": chunks if chunks is not None else [{"filename": "a.bin", "chunk_size": 1, "chunk_bytes": 20}],
        "config": config if config is not None else make_config().to_json(),
    }
    for key in drop:
        document.pop(key)
    return document


GARBAGE = [
    b"",
    b"\xff\xfe\x00garbage",
    b"{not json",
    b"[]",
    b"null",
    b'"a string"',
    json.dumps(_index(drop=["chunks"])).encode(),
    json.dumps(_index(drop=["config"])).encode(),
    json.dumps({**_index(), "chunks": {"a": 1}}).encode(),
    json.dumps(_index(chunks=["chunk.bin"])).encode(),
    json.dumps(_index(chunks=[{"chunk_size": 1, "chunk_bytes": 1}])).encode(),
    json.dumps(_index(chunks=[{"filename": "a.bin", "chunk_bytes": 1}])).encode(),
    json.dumps(_index(chunks=[{"filename": "a.bin", "chunk_size": 1}])).encode(),
    json.dumps(_index(chunks=[{"filename": "a.bin", "chunk_size": "1", "chunk_bytes": 1}])).encode(),
    json.dumps(_index(chunks=[{"filename": "a.bin", "chunk_size": -1, "chunk_bytes": 1}])).encode(),
    json.dumps(_index(chunks=[{"filename": "a.bin", "chunk_size": True, "chunk_bytes": 1}])).encode(),
    json.dumps(_index(chunks=[{"filename": "../escape.bin", "chunk_size": 1, "chunk_bytes": 1}])).encode(),
    json.dumps(_index(chunks=[{"filename": "/abs.bin", "chunk_size": 1, "chunk_bytes": 1}])).encode(),
    json.dumps(_index(chunks=[{"filename": 5, "chunk_size": 1, "chunk_bytes": 1}])).encode(),
    json.dumps(_index(config=[])).encode(),
    json.dumps(_index(config={k: v for k, v in make_config().to_json().items() if k != "data_format"})).encode(),
    json.dumps(_index(config={k: v for k, v in make_config().to_json().items() if k != "data_spec"})).encode(),
    json.dumps(_index(config={k: v for k, v in make_config().to_json().items() if k != "compression"})).encode(),
    json.dumps(_index(config={**make_config().to_json(), "data_format": "int"})).encode(),
    json.dumps(_index(config={**make_config().to_json(), "data_format": ["int"]})).encode(),  # 1 name, 2 leaves
    json.dumps(_index(config={**make_config().to_json(), "data_spec": "[1, {broken"})).encode(),
    json.dumps(
        _index(
            config={**make_config().to_json(), "data_spec": '[2, {"type": null, "context": null, "children_spec": []}]'}
        )
    ).encode(),
    json.dumps(
        _index(
            config={
                **make_config().to_json(),
                "data_spec": '[1, {"type": "weird.type", "context": "null", "children_spec": []}]',
            }
        )
    ).encode(),
    json.dumps(_index(config={**make_config().to_json(), "data_spec": None})).encode(),
    json.dumps(_index(config={**make_config().to_json(), "chunk_size": "ten"})).encode(),
    json.dumps(_index(config={**make_config().to_json(), "compression": 5})).encode(),
    b"[" * 100000,
]


@pytest.mark.parametrize("data", GARBAGE, ids=range(len(GARBAGE)))
def test_parse_index_garbage_is_corrupt_state(data):
    with pytest.raises(CorruptStateError) as err:
        parse_index(data, "/data/out/index.json")
    message = str(err.value)
    assert message.startswith("index.json at /data/out/index.json is not valid ")
    assert message.endswith("restore it or rerun optimize with mode='overwrite'")


# --- sizes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1000, 1000),
        (0, 0),
        ("64MB", 64_000_000),
        ("64mb", 64_000_000),
        ("1GB", 1_000_000_000),
        ("512KB", 512_000),
        ("1.5GB", 1_500_000_000),
        ("100G", 100_000_000_000),
        ("2TB", 2 * 1000**4),
        ("10B", 10),
        ("123", 123),
        (" 64 MB ", 64_000_000),
        ("1MiB", 1024**2),
        ("2GiB", 2 * 1024**3),
        ("4KiB", 4096),
    ],
)
def test_parse_size(value, expected):
    assert parse_size(value) == expected


@pytest.mark.parametrize("value", ["", "MB", "abc", "12XB", "-1MB", -5, None, 1.5, True, "nanMB"])
def test_parse_size_rejects(value):
    with pytest.raises(ValueError):
        parse_size(value)


def test_parse_size_matches_litdata_units():
    fmt = pytest.importorskip("litdata.utilities.format")
    for text in ["64MB", "1GB", "512KB", "100G", "3kb", "7b"]:
        assert parse_size(text) == fmt._convert_bytes_to_int(text)


# --- no torch at import -----------------------------------------------------------------------


def test_format_module_does_not_import_torch():
    # Load format.py without the package __init__ (which imports the torch-aware reader).
    code = textwrap.dedent(
        f"""
        import sys, types
        pkg = types.ModuleType("shardwright")
        pkg.__path__ = [{str(SRC / "shardwright")!r}]
        sys.modules["shardwright"] = pkg
        import numpy as np
        from shardwright.format import ItemEncoder, decode_item
        enc = ItemEncoder()
        item = enc.encode({{"i": 1, "a": np.arange(3), "m": np.ones((2, 2)), "n": None}}, 0)
        out = decode_item(item, enc.data_format, enc.data_spec)
        assert out["i"] == 1 and out["a"].tolist() == [0, 1, 2]
        assert "torch" not in sys.modules, "format imported torch"
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_encoder_is_picklable_for_workers():
    enc = ItemEncoder()
    enc.encode({"a": 1}, 0)
    clone = pickle.loads(pickle.dumps(enc))
    assert clone.encode({"a": 2}, 1) == enc.encode({"a": 2}, 1)


# --- TokensLoader: a value class of the format layer -------------------------------------------


def test_tokens_loader_lives_in_format_and_the_old_names_still_work():
    import shardwright
    from shardwright.format import TokensLoader, is_tokens_loader

    assert shardwright.TokensLoader is TokensLoader
    assert is_tokens_loader(TokensLoader()) and not is_tokens_loader(None)

    class TokensLoader2:  # a look-alike of another name, or of the same name elsewhere, is not one
        pass

    assert not is_tokens_loader(TokensLoader2())
    assert not is_tokens_loader(type("TokensLoader", (), {})())
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        TokensLoader(block_size=0)
    tokens = pytest.importorskip("shardwright.reader.tokens")  # the reader needs torch's base classes
    assert tokens.TokensLoader is TokensLoader


def test_litdatas_tokens_loader_is_accepted_by_the_writer():
    ld = pytest.importorskip("litdata")
    from shardwright.format import is_tokens_loader

    assert is_tokens_loader(ld.TokensLoader())


# --- chunk offsets, checked once per chunk -------------------------------------------------


def _chunk_of(sizes: list[int]) -> bytes:
    from shardwright.format import build_chunk

    return build_chunk([bytes([i % 256]) * size for i, size in enumerate(sizes)])


@pytest.mark.parametrize("sizes", [[], [0], [3, 0, 5], [1] * 65, [2] * 300])  # both sides of the vectorised check
def test_chunk_spans_give_every_items_bytes(sizes):
    from shardwright.format import chunk_spans

    raw = _chunk_of(sizes)
    view, offsets = chunk_spans(raw)
    assert len(offsets) == len(sizes) + 1
    for j in range(len(sizes)):
        assert bytes(view[offsets[j] : offsets[j + 1]]) == bytes(chunk_item(raw, j))


@pytest.mark.parametrize("n", [3, 100])
@pytest.mark.parametrize(
    "damage, match",
    [
        ("swap", "item 1 spans"),  # offsets out of order
        ("beyond", "spans bytes"),  # the last item runs past the end
        ("count", "too short for the offsets"),  # a count the file cannot hold
    ],
)
def test_chunk_offsets_name_the_damage(n, damage, match):
    from shardwright.format import chunk_offsets

    raw = bytearray(_chunk_of([4] * n))
    if damage == "swap":
        a, b = struct.unpack_from("<2I", raw, 8)
        struct.pack_into("<2I", raw, 8, b, a)
    elif damage == "beyond":
        struct.pack_into("<I", raw, 4 + 4 * n, len(raw) + 1)
    else:
        struct.pack_into("<I", raw, 0, 10**6)
    with pytest.raises(CorruptStateError, match=match):
        chunk_offsets(bytes(raw), len(raw))
    with pytest.raises(CorruptStateError):
        chunk_offsets(b"\x01\x00", 2)  # shorter than any header


def test_a_sample_unlike_the_existing_dataset_uses_litdatas_words():
    first = ItemEncoder()
    first.encode((1, 2), 0)
    appended = ItemEncoder(first.data_format, first.data_spec)
    appended.format_input_index = -1  # fixed by the existing dataset: an append
    with pytest.raises(SampleFormatError, match="input 3 .*The config isn't consistent between chunks: the format was"):
        appended.encode((1, 2, 3), 3)
    with pytest.raises(SampleFormatError, match=r"input 3 .*\. The format was fixed by input 0"):
        first.encode((1, 2, 3), 3)
