"""The worker's hot loop compiled per format, with the format's encoder inlined (engine.hotloop,
issue 36): it writes the bytes the encoder writes, hands back every input it does not finish
(a look, fn's exception, a sample for the general encoder, a source's bad row) before calling
fn on the next one, stores each input's position in shared memory before fn runs, and a run
takes it for every sample after the first."""

from __future__ import annotations

import multiprocessing
import os
from collections import OrderedDict

import numpy as np
import pytest

import shardwright
from shardwright.engine.hotloop import FLUSH_BYTES, LOOK, CompiledLoop, Raised, Returned, int64_view, replay
from shardwright.errors import SampleFormatError, WorkerDiedError
from shardwright.format import sample as sample_module
from shardwright.format.packed import LeafColumns
from shardwright.format.sample import ItemEncoder
from shardwright.sources import BadRow

WID = 1


def loop_for(first_sample, rows: bool = False) -> tuple[ItemEncoder, CompiledLoop]:
    encoder = ItemEncoder()
    encoder.encode(first_sample, 0)  # fixes the format, as the format gate does
    loop = CompiledLoop.build(encoder, rows)
    assert loop is not None, "a flat format has a compiled loop"
    return encoder, loop


def run(loop: CompiledLoop, fn, inputs, start: int = 0, stop: int | None = None, look=None, current=None):
    """One segment over ``inputs``: (its result, the batch's items, the shared slots)."""
    batch: list[bytes] = []
    current = [-1, -1] if current is None else current
    cols = LeafColumns(loop.encoder.data_format) if loop.columns else None
    sinks = cols.appenders if cols is not None else (batch.append,)
    segment = loop.bind(fn, inputs, 0, current, WID, [False] if look is None else look, sinks)
    result = segment(start, len(inputs) if stop is None else stop, 0)
    if cols is not None:  # the block, cut into its items
        block, size = cols.block(), cols.itemsize
        batch = [block[k : k + size] for k in range(0, len(block), size)]
    return result, batch, current


# Each shape: (the sample of input i, samples the inlined statements must leave to the encoder)
SHAPES = {
    "fixed dict": (lambda i: {"i": i, "x": i * i}, [{"i": 1}, {"i": 1, "x": 2, "y": 3}, {"i": 1, "y": 2}]),
    "key order and OrderedDict": (
        lambda i: OrderedDict([("x", i * 0.5), ("i", i)]) if i % 3 == 0 else {"x": i * 0.5, "i": i},
        [{"i": 1, "x": 2}, {"i": True, "x": 0.5}, {"i": np.int64(3), "x": 0.5}],  # an int in a float leaf
    ),
    "tuple": (lambda i: (i, i / 7, i % 2 == 0), [(1, 2.0), [1, 2.0, True], (1, 2.0, 1)]),
    "list": (lambda i: [i, -i], [(1, 2), [1, 2, 3]]),
    "int": (lambda i: -i * 1_000_003, [True, 1.5, np.int64(4)]),
    "float": (lambda i: i / 3, [1, np.float64(2.0)]),
    "text": (lambda i: {"i": i, "s": "é" * (i % 4)}, [{"i": 1, "s": "\ud800"}, {"i": 1, "s": b"x"}]),
    "bytes": (lambda i: {"b": b"x" * (i % 5), "n": i % 2 == 0}, [{"b": bytearray(b"x"), "n": True}]),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_loop_writes_the_encoders_bytes_and_leaves_it_the_rest(name):
    make, others = SHAPES[name]
    encoder, loop = loop_for(make(0))
    inputs = list(range(200))
    (i, _, outcome), batch, _ = run(loop, make, inputs)
    assert (i, outcome) == (200, None)
    assert batch == [encoder.encode(make(k), k) for k in inputs]  # the same bytes as the compiled encoder's

    for other in others:  # each handed back, not written: the general encoder encodes it or names the problem
        (i, _, outcome), batch, _ = run(loop, lambda k, other=other: other if k == 3 else make(k), inputs)
        assert i == 3 and type(outcome) is Returned and outcome.value is other, other
        assert batch == [encoder.encode(make(k), k) for k in range(3)]


@pytest.mark.parametrize("first", [{"i": 0, "x": 0.5, "b": True}, (0, 1), 7])
def test_leaves_of_fixed_size_go_to_columns_and_ints_outside_int64_are_found_there(first):
    """Fixed-size leaves are appended to one list per leaf (no bytes per item); numpy's
    conversion finds an int outside int64, and the batch replayed item by item keeps the
    items before it and raises the general encoder's error naming its input."""
    encoder, loop = loop_for(first)
    assert loop.columns
    big = {dict: lambda: {**first, "i": 2**63}, tuple: lambda: (-(2**63) - 1, 1), int: lambda: 2**70}[type(first)]()

    def make(k):
        return big if k == 30 else first

    cols = LeafColumns(encoder.data_format)
    segment = loop.bind(make, list(range(40)), 0, [-1, -1], WID, [False], cols.appenders)
    assert segment(0, 40, 0) == (40, 0, None)  # taken: the range is checked at the block
    with pytest.raises(OverflowError):
        cols.block()
    assert len(cols) == 40  # kept for the replay
    done: list[bytes] = []
    with pytest.raises(SampleFormatError, match="input 130: int .* is outside int64"):
        replay(cols, encoder.encode, encoder.data_spec, 100, done)
    assert done == [encoder.encode(first, k) for k in range(30)]


def test_an_int_outside_int64_fails_the_run_at_its_input_and_keeps_the_ones_before(tmp_path):
    fixed, calls = tmp_path / "fixed", tmp_path / "calls"

    def fn(i):
        if fixed.exists():  # the rerun: every call counted
            with open(calls, "a") as f:
                f.write(f"{i}\n")
        return {"i": 2**63 if i == 1_234 and not fixed.exists() else i, "x": 0.5}

    out, args = tmp_path / "out", {"num_workers": 1, "verbose": False, "chunk_size": 100}
    with pytest.raises(SampleFormatError, match="input 1234: int 9223372036854775808 .* outside int64"):
        shardwright.optimize(fn, list(range(3_000)), str(out), **args)
    fixed.touch()
    shardwright.optimize(fn, list(range(3_000)), str(out), **args)  # resumes
    again = [int(line) for line in calls.read_text().split()]
    assert 1_234 in again and min(again) >= 1_200  # the chunks before the failing input were kept
    ds = shardwright.StreamingDataset(str(out))
    assert len(ds) == 3_000 and [ds[k]["i"] for k in (0, 1_199, 1_234, 2_999)] == [0, 1_199, 1_234, 2_999]


def test_the_loop_hands_back_none_generators_and_fns_exceptions():
    _, loop = loop_for({"i": 0})
    for value in (None, (x for x in [1])):
        (i, _, outcome), batch, _ = run(loop, lambda k, value=value: value if k == 5 else {"i": k}, list(range(9)))
        assert (i, type(outcome), len(batch)) == (5, Returned, 5) and outcome.value is value
    error = ValueError("boom")

    def fails(k):
        if k == 7:
            raise error
        return {"i": k}

    (i, _, outcome), batch, _ = run(loop, fails, list(range(9)))
    assert (i, type(outcome), len(batch)) == (7, Raised, 7) and outcome.exc is error


def test_an_exception_that_is_not_an_exception_leaves_with_its_input_stored():
    _, loop = loop_for({"i": 0})

    def interrupted(k):
        if k == 6:
            raise KeyboardInterrupt
        return {"i": k}

    with pytest.raises(KeyboardInterrupt):
        run(loop, interrupted, list(range(9)), current=(current := [-1, -1]))
    assert current[WID] == 6  # what the worker reports, and reads back for its progress


def test_each_inputs_position_is_stored_before_fn_runs():
    _, loop = loop_for({"i": 0})
    shared = multiprocessing.get_context("fork").Array("q", [-1, -1], lock=False)
    view = int64_view(shared)
    assert type(view) is memoryview
    seen = []

    def fn(k):
        seen.append(shared[WID])  # the pool's own Array: the view's stores are in its memory
        return {"i": k}

    (i, _, outcome), _, _ = run(loop, fn, list(range(100, 140)), start=10, stop=30, current=view)
    assert (i, outcome) == (30, None)
    assert seen == list(range(10, 30))  # input ids, not values: inputs[i - base] with base 0
    assert int64_view([-1, -1]) == [-1, -1]  # no shared buffer: the slots themselves


def test_a_look_stops_before_its_input_and_fn_is_not_called():
    _, loop = loop_for({"i": 0})
    look = [False]
    calls = []

    def fn(k):
        calls.append(k)
        if k == 4:
            look[0] = True  # the ticker thread's flag
        return {"i": k}

    (i, _, outcome), batch, current = run(loop, fn, list(range(9)), look=look)
    assert (i, outcome, len(batch), calls) == (5, LOOK, 5, [0, 1, 2, 3, 4])
    assert current[WID] == 5  # the input the look is before


def test_a_sources_bad_row_is_handed_back_before_fn():
    _, loop = loop_for({"i": 0}, rows=True)
    bad = BadRow("rows.jsonl:3", "not JSON")
    inputs: list = [0, 1, 2, bad, 4]
    calls = []
    (i, _, outcome), batch, _ = run(loop, lambda k: calls.append(k) or {"i": k}, inputs)
    assert (i, outcome, len(batch), calls) == (3, bad, 3, [0, 1, 2])


def test_items_of_any_size_leave_the_loop_when_the_batch_is_full():
    _, loop = loop_for({"s": ""})
    big = "x" * (FLUSH_BYTES // 4)
    (i, nbytes, outcome), batch, _ = run(loop, lambda k: {"s": big}, list(range(10)))
    assert (i, outcome, len(batch)) == (4, None, 4)
    assert nbytes == sum(map(len, batch)) >= FLUSH_BYTES


def test_a_sample_fn_mutates_afterwards_is_written_as_it_was_returned():
    encoder, loop = loop_for({"i": 0, "x": 0})
    one = {"i": 0, "x": 0}

    def reuses(k):  # the same dict every call, changed after it was returned
        one["i"], one["x"] = k, -k
        return one

    (_, _, _), batch, _ = run(loop, reuses, list(range(50)))
    assert batch == [encoder.encode({"i": k, "x": -k}, k) for k in range(50)]


def test_formats_without_a_compiled_encoder_have_no_compiled_loop():
    for first in ({"a": {"b": 1}}, {"a": np.arange(3)}, [1, [2]]):
        encoder = ItemEncoder()
        encoder.encode(first, 0)
        assert CompiledLoop.build(encoder, False) is None


def test_a_run_calls_the_compiled_encoder_for_no_sample(tmp_path, monkeypatch):
    """Before: the hot loop called the compiled encoder once per sample (a call and a second
    round of type checks, ~50-90 ns an item); now its statements are the loop's own."""
    calls = tmp_path / "flat-calls"
    original = sample_module.flat_encoder

    def counting_flat_encoder(root, data_format):
        encode = original(root, data_format)

        def counted(sample):
            fd = os.open(calls, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # in any (forked) worker
            try:
                os.write(fd, b"x\n")
            finally:
                os.close(fd)
            return encode(sample)

        return None if encode is None else counted

    monkeypatch.setattr(sample_module, "flat_encoder", counting_flat_encoder)
    out = tmp_path / "out"
    shardwright.optimize(lambda i: {"i": i, "x": i * i}, list(range(3_000)), str(out), num_workers=2, verbose=False)
    # at most each worker's first sample, through the format gate (a worker that finds the
    # format fixed by the other encodes its first sample with the encoder); before: all 3,000
    assert len(calls.read_text().split() if calls.exists() else []) <= 2
    ds = shardwright.StreamingDataset(str(out))
    assert len(ds) == 3_000 and ds[2_999] == {"i": 2_999, "x": 2_999 * 2_999}


def test_a_block_of_leaf_columns_is_the_items_struct_packs():
    """numpy's conversion and layout against struct.pack of each item (format.flat's
    encoder), over the values where they could differ: int64's ends, signed zeros,
    infinities, NaNs with payloads, both bools; and items given as bytes in between."""
    import random
    import struct

    encoder, _ = loop_for({"i": 0, "f": 0.0, "b": False, "j": 0})
    item = struct.Struct("<4Iqd?q")
    nan_payload = struct.unpack("<d", struct.pack("<Q", 0x7FF0_0000_0000_0ABC))[0]
    ints = [0, 1, -1, 2**63 - 1, -(2**63), 2**31, -(2**31) - 1]
    floats = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), nan_payload, 5e-324, 1.7976931348623157e308]
    rng = random.Random(36)
    cols = LeafColumns(encoder.data_format)
    expected = []
    for k in range(2_000):
        leaves = (rng.choice(ints), rng.choice(floats), rng.random() < 0.5, rng.randrange(-(2**63), 2**63))
        data = item.pack(8, 8, 1, 8, *leaves)
        assert encoder.flat is not None and encoder.flat(dict(zip("ifbj", leaves))) == data
        if k % 97 == 0:
            cols.add_item(data)
        else:
            for append, value in zip(cols.appenders, leaves):
                append(value)
        expected.append(data)
    assert cols.block() == b"".join(expected)
    assert len(cols) == 0 and cols.block() == b""


def test_a_worker_dying_inside_fn_is_reported_at_its_input(tmp_path):
    """The position stored before each fn call reaches the main process through the pool's
    shared Array (here for leaves in columns: test_crash.py's die-at-123 has a str leaf)."""

    def fn(i):
        if i == 777:
            os._exit(3)
        return {"i": i, "x": i * 0.5}

    with pytest.raises(WorkerDiedError, match=r"while processing input 777 "):
        shardwright.optimize(fn, list(range(2_000)), str(tmp_path / "out"), num_workers=2, verbose=False)
