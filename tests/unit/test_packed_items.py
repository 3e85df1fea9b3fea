"""Items of one size handed over as blocks (format/packed.py, issue 36) write the chunks that
one bytes per item writes, byte for byte: the header computed from the one size, the cuts of
ShardWriter.add_block, and whole runs of optimize() over samples that take the block path and
samples that must not (bytes, text, arrays) or only after their sizes are checked (numpy
scalars in an int leaf, nested containers)."""

from __future__ import annotations

import enum
import json
import os
import random
from collections import OrderedDict

import numpy as np
import pytest

import shardwright
from shardwright.engine.shard_writer import ShardWriter
from shardwright.format import ItemEncoder, PackedItems, build_chunk, chunk_header
from shardwright.format.flat import fixed_item_size
from shardwright.protocol.commit import PendingChunk
from support.shard_writers import LIMITS, summary, writer_for


def packed(items: list[bytes]) -> PackedItems:
    out = PackedItems(len(items[0]))
    for k in range(0, len(items), 3):  # a few blocks, as the hot loop's flushes make them
        out.add(b"".join(items[k : k + 3]))
    return out


@pytest.mark.parametrize("itemsize", [1, 9, 24])
@pytest.mark.parametrize("count", [1, 2, 7, 1000])
def test_a_packed_chunk_is_the_chunk_of_its_items(itemsize, count):
    rng = random.Random(count * 31 + itemsize)
    items = [rng.randbytes(itemsize) for _ in range(count)]
    blocks = packed(items)
    assert len(blocks) == count and blocks.nbytes == count * itemsize and list(blocks) == items
    assert chunk_header(blocks) == chunk_header(items)
    assert build_chunk(blocks) == build_chunk(items)
    job = PendingChunk(0, 0, blocks, 0, count, 0, False)
    assert job.nbytes == sum(map(len, items))


def test_a_block_that_is_not_whole_items_is_refused():
    with pytest.raises(ValueError, match="whole number of 8-byte items"):
        PackedItems(8).add(b"x" * 12)
    writer, _ = writer_for(chunk_bytes=None, chunk_size=None)
    with pytest.raises(ValueError, match="whole number of 8-byte items"):
        writer.add_block(b"x" * 12, 8, 5)


def test_fixed_item_size_is_the_size_of_every_item():
    encoder = ItemEncoder()
    encoder.encode({"i": 1, "x": 2.5, "b": True}, 0)
    assert encoder.fixed_size == fixed_item_size(["int", "float", "bool"]) == 12 + 8 + 8 + 1
    assert len(encoder.encode({"i": -(2**63), "x": float("nan"), "b": False}, 1)) == encoder.fixed_size
    assert fixed_item_size(["int", "str"]) is None and fixed_item_size(["numpy"]) is None
    assert fixed_item_size([]) is None


@pytest.mark.parametrize("chunk_bytes, chunk_size", LIMITS)
@pytest.mark.parametrize("seed", range(4))
def test_add_block_cuts_the_chunks_add_run_cuts(chunk_bytes, chunk_size, seed):
    rng = random.Random(seed)
    size = rng.choice([1, 4, 9])
    items = [bytes([k % 256]) * size for k in range(200)]
    runs, run_chunks = writer_for(chunk_bytes, chunk_size)
    blocks, block_chunks = writer_for(chunk_bytes, chunk_size)
    k = 0
    while k < len(items):  # the same batches both ways
        n = rng.choice([1, 2, 5, 17, 64, 200])
        runs.add_run(items[k : k + n], 5 + k)
        blocks.add_block(b"".join(items[k : k + n]), size, 5 + k)
        assert blocks.position == runs.position == (5 + min(k + n, len(items)), 0)
        k += n
    runs.commit(done=True)
    blocks.commit(done=True)
    assert summary(block_chunks.chunks) == summary(run_chunks.chunks)
    assert [build_chunk(c.items) for c in block_chunks.chunks if c.items] == [
        build_chunk(c.items) for c in run_chunks.chunks if c.items
    ]
    assert any(type(c.items) is PackedItems for c in block_chunks.chunks)


def test_add_block_after_items_added_one_by_one():
    """A tail taken up, or inputs that took the general path, before a block: the same chunks."""
    for tail in ([b"a" * 4, b"b" * 4], [b"a" * 3, b"b" * 4]):  # the second: sizes differ
        one, one_chunks = writer_for(chunk_bytes=20, chunk_size=None)
        blocks, block_chunks = writer_for(chunk_bytes=20, chunk_size=None)
        for writer in (one, blocks):
            for k, data in enumerate(tail):
                writer.add(data, 5 + k, after=(6 + k, 0))
        for k in range(7):
            one.add(b"%04d" % k, 7 + k, after=(8 + k, 0))
        blocks.add_block(b"".join(b"%04d" % k for k in range(7)), 4, 7)
        one.commit(done=True)
        blocks.commit(done=True)
        assert summary(block_chunks.chunks) == summary(one_chunks.chunks)


def test_a_snapshot_sees_the_items_one_by_one():
    writer, _ = writer_for(chunk_bytes=None, chunk_size=None)
    writer.add_block(b"aaaabbbbcccc", 4, 5)
    writer.add_block(b"ddddeeee", 4, 8)
    assert writer.snapshot().buffer.items == [b"aaaa", b"bbbb", b"cccc", b"dddd", b"eeee"]


@pytest.mark.parametrize("keep", [0, 1, 3, 4, 5])
def test_a_rollback_keeps_the_blocks(keep):
    """fn failing on an input (a retry, on_error="skip") forgets its items without making the
    chunk's items one by one (that would cost the whole chunk at every failure)."""
    writer, _ = writer_for(chunk_bytes=None, chunk_size=None)
    writer.add_block(b"aaaabbbbcccc", 4, 5)
    writer.add_block(b"ddddeeee", 4, 8)
    mark = (writer.seq, keep, (5 + keep, 0))
    writer.add(b"ffff", 10, after=(11, 0))  # a generator's sample of the same size joins the blocks
    assert type(writer.items) is PackedItems and len(writer.items) == 6
    writer.rollback(mark)
    assert type(writer.items) is PackedItems
    assert list(writer.items) == [b"aaaa", b"bbbb", b"cccc", b"dddd", b"eeee"][:keep]
    assert writer.items_bytes == 4 * keep and writer.position == (5 + keep, 0)


def test_an_item_of_another_size_makes_the_items_one_by_one():
    writer, recorder = writer_for(chunk_bytes=None, chunk_size=None)
    writer.add_block(b"aaaabbbb", 4, 5)
    writer.add(b"ccc", 7, after=(8, 0))
    writer.add_block(b"dddd", 4, 8)
    writer.commit(done=True)
    assert list(recorder.chunks[0].items) == [b"aaaa", b"bbbb", b"ccc", b"dddd"]


# --- whole runs: the chunks on disk against chunks of per-item-encoded samples ---------------


class Color(enum.IntEnum):
    RED = 1


def fixed_dict(i):
    return {"i": i, "x": i * i}


def key_order_varies(i):  # the same keys, in another order every other sample; an OrderedDict too
    if i % 3 == 0:
        return OrderedDict([("x", i * 0.5), ("i", i)])
    return {"x": i * 0.5, "i": i} if i % 2 else {"i": i, "x": i * 0.5}


def triple(i):
    return (i, i / 7, i % 2 == 0)


def scalar(i):
    return -i * 1_000_003


def leaf_types_vary(i):  # numpy and enum scalars in an int leaf: the general encoder takes them
    return [np.int64(i) if i % 5 == 0 else Color.RED if i % 11 == 0 else i, np.float64(i) if i % 3 else float(i)]


def nested(i):  # fixed-size leaves, but no compiled encoder: every item by the general path
    return {"a": {"b": i, "c": [i % 2 == 1, i * 2.0]}}


def with_bytes(i):  # a variable-size leaf: no blocks
    return {"i": i, "b": b"x" * (i % 5)}


def with_text(i):
    return {"i": i, "s": "é" * (i % 4)}


def with_array(i):
    return {"i": i, "a": np.arange(i % 4, dtype=np.int32)}


SHAPES = [fixed_dict, key_order_varies, triple, scalar, leaf_types_vary, nested, with_bytes, with_text, with_array]
BLOCKS = {fixed_dict, key_order_varies, triple, scalar, leaf_types_vary, nested}


def reference_item(encoder: ItemEncoder, sample) -> bytes:
    """The sample's item bytes from the general encoder, one sample at a time."""
    data = encoder.encode(sample, 0)
    encoder.flat = None  # the compiled encoder is not asked again
    return data


@pytest.mark.parametrize("limits", [{"chunk_bytes": 700}, {"chunk_bytes": "64MB"}])  # chunk_size: the writer tests
@pytest.mark.parametrize("fn", SHAPES, ids=lambda fn: fn.__name__)
def test_chunks_on_disk_equal_the_per_item_encoded_chunks(tmp_path, monkeypatch, fn, limits):
    calls = tmp_path / "add_block-calls"
    original = ShardWriter.add_block

    def counted(self, block, itemsize, first_input):
        fd = os.open(calls, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # in any (forked) worker
        try:
            os.write(fd, b"%d\n" % first_input)
        finally:
            os.close(fd)
        return original(self, block, itemsize, first_input)

    monkeypatch.setattr(ShardWriter, "add_block", counted)
    count = 1_500
    out = tmp_path / "out"
    shardwright.optimize(fn, list(range(count)), str(out), num_workers=2, verbose=False, **limits)

    encoder = ItemEncoder()
    expected = [reference_item(encoder, fn(i)) for i in range(count)]
    index = json.loads((out / "index.json").read_text())
    assert index["config"]["data_format"] == encoder.data_format
    start = 0
    for entry in index["chunks"]:
        items = expected[start : start + entry["chunk_size"]]
        assert (out / entry["filename"]).read_bytes() == build_chunk(items), entry["filename"]
        start += entry["chunk_size"]
    assert start == count
    assert calls.exists() == (fn in BLOCKS)  # the block path was taken exactly where it may be
    assert shardwright.StreamingDataset(str(out))[count - 1] is not None


def sometimes_more_sometimes_none(i):
    """Dicts, a generator of two every 50 inputs, a failure every 37 (skipped): the hot loop
    hands the writer blocks between inputs of the general path, and rollbacks inside blocks."""
    if i % 37 == 5:
        raise ValueError(f"input {i} fails")
    if i % 50 == 0:
        return (x for x in ({"i": i, "x": -1}, {"i": i, "x": -2}))
    return {"i": i, "x": i * i}


def expected_samples(count: int) -> list:
    out: list = []
    for i in range(count):
        try:
            result = sometimes_more_sometimes_none(i)
        except ValueError:
            continue
        out.extend([result] if isinstance(result, dict) else result)
    return out


@pytest.mark.parametrize("limits", [{"chunk_bytes": 500}, {"chunk_size": 9}, {"chunk_bytes": "64MB"}])
def test_generators_and_failures_between_blocks_write_the_same_chunks(tmp_path, limits):
    count = 2_000
    out = tmp_path / "out"
    shardwright.optimize(
        sometimes_more_sometimes_none,
        list(range(count)),
        str(out),
        num_workers=2,
        verbose=False,
        on_error="skip",
        max_retries=1,
        **limits,
    )
    encoder = ItemEncoder()
    expected = [reference_item(encoder, sample) for sample in expected_samples(count)]
    index = json.loads((out / "index.json").read_text())
    start = 0
    for entry in index["chunks"]:
        items = expected[start : start + entry["chunk_size"]]
        assert (out / entry["filename"]).read_bytes() == build_chunk(items), entry["filename"]
        start += entry["chunk_size"]
    assert start == len(expected)
