"""The compiled encoder of flat samples (format/flat.py) gives the general encoder's bytes,
and hands every sample it does not take exactly back to it (which encodes or explains)."""

from __future__ import annotations

import enum
import struct
from collections import OrderedDict

import numpy as np
import pytest

from shardwright.errors import CorruptStateError, SampleFormatError
from shardwright.format import ItemEncoder, flatten_sample, parse_spec
from shardwright.format.decode import item_decoder
from shardwright.format.flat import flat_decoder, flat_encoder
from shardwright.format.layouts import DecodedItem


class Level(enum.IntEnum):
    LOW = 1


def item_bytes(*leaves: bytes) -> bytes:
    """litdata's item layout, built by hand: u32 sizes, then the leaves."""
    return struct.pack(f"<{len(leaves)}I", *map(len, leaves)) + b"".join(leaves)


def q(v: int) -> bytes:
    return struct.pack("<q", v)


def d(v: float) -> bytes:
    return struct.pack("<d", v)


def compiled_for(first):
    leaves, spec = flatten_sample(first)
    enc = ItemEncoder()
    enc.encode(first, 0)
    return flat_encoder(parse_spec(spec), enc.data_format)


@pytest.mark.parametrize(
    "first, later, expected",
    [
        ({"i": 1, "x": 2}, {"i": 3, "x": 9}, item_bytes(q(3), q(9))),
        ({"i": 1, "x": 2}, {"x": 9, "i": 3}, item_bytes(q(3), q(9))),  # taken by key, in the spec's order
        ({"i": 1}, {"i": -(2**63)}, item_bytes(q(-(2**63)))),
        ({"f": 0.5, "b": True}, {"f": -1.25, "b": False}, item_bytes(d(-1.25), b"\x00")),
        ({"t": "a", "n": 1}, {"t": "héllo", "n": 2}, item_bytes("héllo".encode(), q(2))),
        ({"t": "a", "raw": b"x"}, {"t": "", "raw": b"\x00\xff"}, item_bytes(b"", b"\x00\xff")),
        ((1, "a"), (2, "bc"), item_bytes(q(2), b"bc")),
        ([1.0, 2.0], [3.0, 4.0], item_bytes(d(3.0), d(4.0))),
        (7, 8, item_bytes(q(8))),
        ("s", "tü", item_bytes("tü".encode())),
        (OrderedDict(a=1), {"a": 2}, item_bytes(q(2))),  # dict and OrderedDict are interchangeable
        ({"a": 1}, OrderedDict(a=2), item_bytes(q(2))),
        (np.int64(1), 2, item_bytes(q(2))),  # a numpy int fixed the format "int"
    ],
)
def test_compiled_encoder_gives_the_layout_bytes(first, later, expected):
    fast = compiled_for(first)
    assert fast is not None
    assert fast(later) == expected
    enc = ItemEncoder()
    enc.encode(first, 0)
    assert enc.encode(later, 1) == expected


@pytest.mark.parametrize(
    "first",
    [
        {"a": np.zeros(3)},
        {"a": {"nested": 1}},
        {"a": [1, 2]},
        {"a": None},
        [],
        {},
    ],
)
def test_no_compiled_encoder_for_other_shapes(first):
    assert compiled_for(first) is None


@pytest.mark.parametrize(
    "later",
    [
        {"i": np.int64(3), "x": 4},  # a subclass-like scalar: the general path decides
        {"i": Level.LOW, "x": 4},
        {"i": 2**63, "x": 4},  # outside int64
        {"i": 1},  # missing key
        {"i": 1, "x": 2, "y": 3},  # extra key
        {"i": 1, "y": 2},  # other key, same length
        [1, 2],
        (1, 2),
        None,
        {"i": True, "x": 2},  # bool where int was fixed
        {"i": 1.0, "x": 2},
    ],
)
def test_compiled_encoder_declines_what_it_does_not_take_exactly(later):
    fast = compiled_for({"i": 1, "x": 2})
    assert fast is not None and fast(later) is None


def test_declined_samples_get_the_general_paths_bytes_or_error():
    enc = ItemEncoder()
    enc.encode({"i": 1, "x": 2}, 0)
    assert enc.encode({"i": np.int64(3), "x": 4}, 1) == item_bytes(q(3), q(4))
    assert enc.encode(OrderedDict(x=4, i=3), 2) == item_bytes(q(3), q(4))
    with pytest.raises(SampleFormatError, match=r"input 3: int 9223372036854775808 .* outside int64"):
        enc.encode({"i": 2**63, "x": 4}, 3)
    with pytest.raises(SampleFormatError, match=r"input 4 at the top level: expected dict with keys \['i', 'x'\]"):
        enc.encode({"i": 1}, 4)
    with pytest.raises(SampleFormatError, match=r"input 5 at \['i'\]: expected int, got bool"):
        enc.encode({"i": True, "x": 2}, 5)


def test_text_that_is_not_utf8_is_explained_by_the_general_path():
    enc = ItemEncoder()
    enc.encode({"t": "a"}, 0)
    with pytest.raises(SampleFormatError, match="input 1: str leaf 0 cannot be encoded as UTF-8"):
        enc.encode({"t": "\ud800"}, 1)


def test_sequences_must_keep_their_type_and_length():
    fast = compiled_for((1, 2))
    assert fast is not None
    assert fast([1, 2]) is None and fast((1, 2, 3)) is None and fast((1,)) is None
    assert fast((5, 6)) == item_bytes(q(5), q(6))


# --- the compiled decoder ---------------------------------------------------------------------


def general_decoder(data_format, data_spec):
    """The general decoder alone (what the compiled one falls back to)."""
    calls = []

    def general(buf):
        calls.append(bytes(buf) if not isinstance(buf, DecodedItem) else buf)
        return "general"

    return general, calls


@pytest.mark.parametrize(
    "sample",
    [{"i": 3, "x": -(2**63), "f": 1.5, "b": True}, (1, 2.0), [False, True], 7, 2.25, {"only": 0}],
)
def test_compiled_decoder_reads_what_the_encoder_wrote(sample):
    enc = ItemEncoder()
    data = enc.encode(sample, 0)
    decode = item_decoder(enc.data_format, enc.data_spec)
    general, calls = general_decoder(enc.data_format, enc.data_spec)
    fast = flat_decoder(parse_spec(enc.data_spec), enc.data_format, general)
    assert fast is not None
    assert decode(data) == sample and type(decode(data)) is type(sample)
    assert fast(data) == sample and fast(memoryview(data)) == sample and calls == []


def test_compiled_decoder_hands_odd_items_to_the_general_decoder():
    enc = ItemEncoder()
    data = enc.encode({"i": 1, "x": 2}, 0)
    general, calls = general_decoder(enc.data_format, enc.data_spec)
    fast = flat_decoder(parse_spec(enc.data_spec), enc.data_format, general)
    assert fast is not None
    assert fast(data[:-1]) == "general"  # another length
    wrong_sizes = struct.pack("<2I", 4, 12) + data[8:]  # the right length, another size header
    assert fast(wrong_sizes) == "general"
    assert fast(DecodedItem({"i": 1})) == "general"
    assert len(calls) == 3
    with pytest.raises(CorruptStateError):  # and the general decoder names the damage
        item_decoder(enc.data_format, enc.data_spec)(data[:-1])


@pytest.mark.parametrize("first", [{"t": "text"}, {"a": b"x"}, {"a": np.zeros(2)}, OrderedDict(a=1), {"a": {"b": 1}}])
def test_no_compiled_decoder_for_variable_or_nested_samples(first):
    enc = ItemEncoder()
    enc.encode(first, 0)
    assert flat_decoder(parse_spec(enc.data_spec), enc.data_format, lambda buf: None) is None


def _general_loop(data_format, data_spec):
    """The general decoder alone (no compiled path): the reference the compiled ones must match."""
    from shardwright.format.pytree import unflattener
    from shardwright.format.sample import decode_plan

    sizes, decoders, build = decode_plan(tuple(data_format), data_spec)
    _n, _build = unflattener(data_spec)

    def decode(buf):
        view = memoryview(buf)
        lengths = sizes.unpack_from(view, 0)
        pos, leaves = sizes.size, []
        for size, leaf in zip(lengths, decoders):
            leaves.append(leaf(view[pos : pos + size]))
            pos += size
        return build(iter(leaves))

    return decode


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    if isinstance(a, (dict, OrderedDict)):
        return type(a) is type(b) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


SPLIT_SAMPLES = [
    {"i": 3, "x": np.arange(5, dtype=np.float32)},
    {"t": "text", "b": b"\x00raw", "n": 7},
    [np.ones((2, 3), dtype=np.int16), "a"],
    ("only text",),
    np.arange(4, dtype=np.uint8),
    {"p": {1, 2}, "q": 0.5},  # a pickle leaf
]


@pytest.mark.parametrize("sample", SPLIT_SAMPLES)
def test_split_decoder_reads_what_the_general_loop_reads(sample):
    enc = ItemEncoder()
    data = enc.encode(sample, 0)
    general, calls = general_decoder(enc.data_format, enc.data_spec)
    from shardwright.format.flat import flat_split_decoder
    from shardwright.format.sample import decode_plan

    _sizes, decoders, _build = decode_plan(tuple(enc.data_format), enc.data_spec)
    fast = flat_split_decoder(parse_spec(enc.data_spec), decoders, general)
    assert fast is not None
    expected = _general_loop(enc.data_format, enc.data_spec)(data)
    assert _same(fast(memoryview(data)), expected) and calls == []
    assert _same(item_decoder(enc.data_format, enc.data_spec)(memoryview(data)), expected)


def test_split_decoder_hands_odd_items_to_the_general_decoder():
    enc = ItemEncoder()
    data = enc.encode({"t": "text", "x": np.arange(3)}, 0)
    general, calls = general_decoder(enc.data_format, enc.data_spec)
    from shardwright.format.flat import flat_split_decoder
    from shardwright.format.sample import decode_plan

    fast = flat_split_decoder(parse_spec(enc.data_spec), decode_plan(tuple(enc.data_format), enc.data_spec)[1], general)
    assert fast is not None
    assert fast(memoryview(data)[:-1]) == "general"  # sizes that do not add up
    assert fast(memoryview(data)[:5]) == "general"  # shorter than the size header
    assert fast(data) == "general"  # not a memoryview: the general path converts
    assert len(calls) == 3
    decode = item_decoder(enc.data_format, enc.data_spec)
    with pytest.raises(CorruptStateError, match="header announces"):
        decode(memoryview(data)[:-1])
    with pytest.raises(CorruptStateError, match="shorter than its"):
        decode(memoryview(data)[:5])


def test_nested_samples_get_no_split_decoder():
    enc = ItemEncoder()
    enc.encode({"a": {"b": np.zeros(2)}}, 0)
    from shardwright.format.flat import flat_split_decoder
    from shardwright.format.sample import decode_plan

    decoders = decode_plan(tuple(enc.data_format), enc.data_spec)[1]
    assert flat_split_decoder(parse_spec(enc.data_spec), decoders, lambda buf: None) is None


def test_owned_items_decode_to_views_of_their_own_buffer_and_copies_otherwise():
    enc = ItemEncoder()
    sample = {"t": "abc", "x": np.arange(6, dtype=np.float32), "y": np.arange(4, dtype=np.uint8)}
    data = enc.encode(sample, 0)
    owned = np.frombuffer(bytearray(data), dtype=np.uint8)  # writable, the item's alone
    got = item_decoder(enc.data_format, enc.data_spec, owned=True)(memoryview(owned))
    assert _same(got, sample)
    # "t" is 3 bytes, so "x" starts unaligned for float32: copied (aligned); "y" is a view
    assert got["x"].flags.aligned and not np.shares_memory(got["x"], owned)
    assert np.shares_memory(got["y"], owned) and got["y"].flags.writeable
    shared = item_decoder(enc.data_format, enc.data_spec)(memoryview(owned))  # not owned: copies
    assert not np.shares_memory(shared["y"], owned)


def test_owned_tensor_leaves_are_views_unless_unaligned():
    torch = pytest.importorskip("torch")
    enc = ItemEncoder()
    sample = {"a": torch.arange(6, dtype=torch.int32), "t": "x", "b": torch.arange(4, dtype=torch.float64)}
    data = enc.encode(sample, 0)
    owned = np.frombuffer(bytearray(data), dtype=np.uint8)
    got = item_decoder(enc.data_format, enc.data_spec, owned=True)(memoryview(owned))
    assert torch.equal(got["a"], sample["a"]) and torch.equal(got["b"], sample["b"])
    base = owned.ctypes.data
    inside = [base <= t.data_ptr() < base + len(owned) for t in (got["a"], got["b"])]
    aligned = [t.data_ptr() % t.element_size() == 0 for t in (got["a"], got["b"])]
    assert all(aligned)
    assert inside == [True, False]  # "a" sits at byte 12 (aligned): a view; "b" after the 1-byte str: copied
    # a leaf is a view exactly when its bytes sat aligned in the buffer
    for tensor, view in zip((got["a"], got["b"]), inside):
        offset = bytes(owned).find(tensor.numpy().tobytes())
        assert view == ((base + offset) % tensor.element_size() == 0)


@pytest.mark.parametrize("as_array", [True, False], ids=["uint8 array", "memoryview"])
def test_owned_items_given_as_their_uint8_array_decode_as_from_a_memoryview(as_array):
    # The reader hands an item file's item over as the np.empty array it was read into; the
    # decoder must give the same values as from a memoryview, for every kind of leaf.
    enc = ItemEncoder()
    sample = {
        "i": 7,
        "f": 2.5,
        "s": "héllo",
        "b": b"\x00\x01",
        "flag": True,
        "u8": np.arange(5, dtype=np.uint8),
        "f32": np.arange(6, dtype=np.float32),
        "i16": np.arange(3, dtype=np.int16),
        "nd": np.arange(6, dtype=np.int64).reshape(2, 3),
    }
    data = enc.encode(sample, 0)
    owned = np.frombuffer(bytearray(data), dtype=np.uint8)
    decode = item_decoder(enc.data_format, enc.data_spec, owned=True)
    assert "(arrays)" in decode.__code__.co_filename  # the compiled decoder of array items, not the general one
    got = decode(owned if as_array else memoryview(owned))
    assert _same(got, sample)
    assert type(got["i"]) is int and type(got["flag"]) is bool and type(got["s"]) is str and type(got["b"]) is bytes
    assert np.shares_memory(got["u8"], owned) and got["u8"].flags.writeable
    for key in ("f32", "i16", "nd"):
        assert got[key].flags.aligned and got[key].dtype == sample[key].dtype


def test_owned_array_input_with_a_ragged_typed_leaf_raises_as_the_memoryview_path():
    enc = ItemEncoder()
    data = bytearray(enc.encode({"a": "x", "v": np.arange(3, dtype=np.float32)}, 0))
    # make the float32 leaf 11 bytes: shrink its size in the header and drop a byte at the end
    sizes = np.frombuffer(data[:8], dtype="<u4").copy()
    sizes[1] -= 1
    data[:8] = sizes.tobytes()
    owned = np.frombuffer(bytes(data[:-1]), dtype=np.uint8).copy()
    decode = item_decoder(enc.data_format, enc.data_spec, owned=True)
    assert "(arrays)" in decode.__code__.co_filename
    with pytest.raises(ValueError, match="multiple of element size"):
        decode(owned)
    with pytest.raises(ValueError, match="multiple of element size"):
        decode(memoryview(owned))
