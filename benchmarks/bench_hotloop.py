#!/usr/bin/env python
"""CPU nanoseconds an item of workload 1 (``{"i": i, "x": i * i}``) costs in one process, step
by step from fn alone to the shape of the worker's hot loop, in one run (issue 36: why 1.5x
the fn-only floor is out of reach for 200k small dicts written in Python).

    .venv/bin/python benchmarks/bench_hotloop.py            # 1M items, best of 5
    .venv/bin/python benchmarks/bench_hotloop.py --items 200000 --repeats 9

Rows (process CPU time, not wall: the machine is shared):

- ``fn only``: the fn-only floor's loop (``bench_optimize.floor_fn_only`` without the pool).
- ``+ item bytes``: fn, then the litdata item bytes of its dict (``u32 sizes[2]`` + two
  int64) with one precompiled ``struct.pack``, the least any writer of this format does.
- ``+ loop bookkeeping``: that, plus what shardwright's loop does per input for its
  guarantees: the current input stored in shared memory (a worker dying inside fn is reported
  at its input), the batch the items are handed over in, its byte count, the stop look
  (a flag a ticker thread sets, engine.worker) and the generator/None checks.
- ``shardwright encoder``: the previous row with shardwright's own compiled flat encoder
  (format.flat) instead of the bare pack: the type and key checks that fall back to the
  general encoder for any sample not of the fixed shape (the worker's loop until issue 36's
  hotloop branch).
- ``compiled loop, bytes per item``: the same work with the encoder's statements inlined in
  a loop generated for the format (engine.hotloop), the current input stored through an int64
  memoryview of the pool's shared Array, the batch joined into one block at each flush.
- ``compiled loop, leaf columns``: the worker's loop today for leaves of fixed size: the
  leaves checked and appended to one list per leaf, the block built by numpy at each flush
  (format.packed.LeafColumns), no bytes object per item.

Nothing is written to disk; the chunk's assembly (join, offsets, checksum) comes on top.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import struct
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_optimize as bench

from shardwright.engine.hotloop import CompiledLoop, int64_view
from shardwright.format.packed import LeafColumns
from shardwright.format.sample import ItemEncoder

ITEM = struct.Struct("<2Iqq")


def fn_only(fn, inputs) -> None:
    for value in inputs:
        fn(value)


def item_bytes(fn, inputs) -> None:
    pack = ITEM.pack
    for value in inputs:
        d = fn(value)
        pack(8, 8, d["i"], d["x"])


def loop_shape(fn, inputs, flat=None) -> None:
    current = multiprocessing.get_context("fork").Array("q", [-1], lock=False)
    look = [False]
    batch: list[bytes] = []
    append = batch.append
    batch_bytes = 0
    generator = types.GeneratorType
    pack = ITEM.pack
    for i, value in enumerate(inputs):
        current[0] = i
        if look[0]:
            look[0] = False
        result = fn(value)
        if result is None or type(result) is generator:
            continue
        data = flat(result) if flat is not None else pack(8, 8, result["i"], result["x"])
        append(data)
        batch_bytes += len(data)
        if batch_bytes >= 1 << 20:
            batch.clear()
            batch_bytes = 0


def compiled_loop(fn, inputs, loop: CompiledLoop) -> None:
    current = int64_view(multiprocessing.get_context("fork").Array("q", [-1], lock=False))
    batch: list[bytes] = []
    cols = LeafColumns(loop.encoder.data_format) if loop.columns else None
    segment = loop.bind(fn, inputs, 0, current, 0, [False], cols.appenders if cols is not None else (batch.append,))
    step = (1 << 20) // (loop.itemsize or 1)
    i, end = 0, len(inputs)
    while i < end:
        i, _, outcome = segment(i, min(end, i + step), 0)
        assert outcome is None
        if cols is not None:
            cols.block()  # the block handed to the writer
        else:
            b"".join(batch)
            batch.clear()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    fn, inputs = bench.small_dict, list(range(args.items))
    encoder = ItemEncoder()
    encoder.encode(fn(0), 0)  # fixes the format: the compiled flat encoder exists from here
    flat = encoder.flat
    loop = CompiledLoop.build(encoder, rows=False)
    assert loop is not None and loop.columns
    source = encoder.flat_source("sample", ["append(data)", "continue"])
    assert source is not None
    bytes_loop = CompiledLoop(encoder, source, False, ["append"])  # the same loop making one bytes per item
    assert flat is not None and flat(fn(3)) == ITEM.pack(8, 8, 3, 9), "the flat encoder writes the same bytes"
    rows = [
        ("fn only", lambda: fn_only(fn, inputs)),
        ("+ item bytes (one struct.pack)", lambda: item_bytes(fn, inputs)),
        ("+ loop bookkeeping", lambda: loop_shape(fn, inputs)),
        ("shardwright encoder in that loop", lambda: loop_shape(fn, inputs, flat)),
        ("compiled loop, bytes per item", lambda: compiled_loop(fn, inputs, bytes_loop)),
        ("compiled loop, leaf columns", lambda: compiled_loop(fn, inputs, loop)),
    ]
    best = {name: float("inf") for name, _ in rows}
    for _ in range(args.repeats):
        for name, run in rows:  # interleaved: load changes hit every row alike
            started = time.process_time()
            run()
            best[name] = min(best[name], time.process_time() - started)
    print(f"{args.items:,} items, best of {args.repeats}, load average {os.getloadavg()[0]:.2f}")
    base = best["fn only"]
    for name, _ in rows:
        print(f"  {name:34s} {best[name] / args.items * 1e9:6.0f} ns/item  {best[name] / base:4.2f}x fn only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
