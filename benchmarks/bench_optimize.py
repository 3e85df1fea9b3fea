#!/usr/bin/env python
"""shardwright.optimize vs litdata.optimize: same workloads, same num_workers, local disk.

    .venv/bin/python benchmarks/bench_optimize.py            # full: median of 3, a few minutes
    .venv/bin/python benchmarks/bench_optimize.py --quick    # smoke: small sizes, 1 repeat, litdata on 1 only, < 60 s
    .venv/bin/python benchmarks/bench_optimize.py --only 1,4 --repeats 5 --json out.json

Every run writes to a fresh directory under one temp root (removed at the end, litdata's
cache folders included), and is checked afterwards: both readers (shardwright's and
litdata's StreamingDataset) must count the expected number of items, and the first and last
items must be the expected values. A broken run fails the benchmark (exit 1) instead of
being timed. Timings cover the optimize() call only; both libraries are imported first.
Each library runs with its own default start method (shardwright: fork, litdata: spawn).
Output of the runs (progress bars, logs) goes to a log file, not the terminal.

Floors, measured in the same run after each repeat's variants: the fn-only floor (a fork
pool of num_workers processes calling fn over the same inputs, writing nothing, its own
start included) and the raw-I/O floor (the chunk sizes shardwright wrote, written with plain
file writes by num_workers processes, each file fsync-ed: the same durability, no
checksums), the fn + encode floor (the same pool, each sample also encoded to its item bytes by
the format's own encoder and the bytes joined: the least work that produces these items, no
checksum, file or bookkeeping), and shardwright's ratio to each. The driver's (this process's) peak RSS during
each run is reported too (Linux VmHWM, reset before each run).

Variants are interleaved and their order rotated between repeats, so a neighbour's load on
the machine spreads over all of them. The load average is printed: numbers taken on a
loaded machine are noisy (small differences, e.g. the checkpoint overhead, need --repeats 5+).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

NUM_WORKERS = 2
TOKENS = 2048
BLOCKS_PER_INPUT = 16


# --- fns: module top level, so litdata's spawned workers can import them ----------------------


def small_dict(i):
    return {"i": i, "x": i * i}


def mib_array(i):
    return np.full(1 << 20, i % 256, dtype=np.uint8)


def token_blocks(i):
    base = i * BLOCKS_PER_INPUT * TOKENS
    for j in range(BLOCKS_PER_INPUT):
        start = base + j * TOKENS
        yield np.arange(start, start + TOKENS, dtype=np.int32)


# expected item k of each workload's dataset, and which k an item is (to check the output;
# litdata does not keep the input order across workers, so its items are checked by content)
def expect_small_dict(k):
    return {"i": k, "x": k * k}


def key_small_dict(item):
    return int(item["i"])


def expect_mib_array(k):
    return mib_array(k)


def key_mib_array(item):
    return int(item[0])  # mib_array(k) == mib_array(k % 256): good enough to check content


def expect_token_block(k):
    return np.arange(k * TOKENS, (k + 1) * TOKENS, dtype=np.int32)


def key_token_block(item):
    return int(item[0]) // TOKENS


# --- runners ----------------------------------------------------------------------------------


def run_shardwright(fn, inputs, out, cache, **kwargs):
    import shardwright

    shardwright.optimize(fn, inputs, out, num_workers=NUM_WORKERS, verbose=False, **kwargs)


def run_litdata(fn, inputs, out, cache, **kwargs):
    import litdata

    # keep litdata's working folders (default $TMPDIR/chunks, $TMPDIR/data) inside our temp root
    os.environ["DATA_OPTIMIZER_CACHE_FOLDER"] = os.path.join(cache, "chunks")
    os.environ["DATA_OPTIMIZER_DATA_CACHE_FOLDER"] = os.path.join(cache, "data")
    if "chunk_size" not in kwargs and "chunk_bytes" not in kwargs:
        kwargs["chunk_bytes"] = "64MB"  # shardwright's default; litdata needs one of the two
    litdata.optimize(fn=fn, inputs=inputs, output_dir=out, num_workers=NUM_WORKERS, verbose=False, **kwargs)


@dataclass
class Variant:
    key: str
    label: str
    run: Callable
    kwargs: dict = field(default_factory=dict)


@dataclass
class Comparison:
    label: str
    numerator: str
    denominator: str
    kind: str = "ratio"  # "ratio": a/b (lower is better); "overhead": a/b - 1
    target: float | None = None  # ratio <= target, or overhead <= target


@dataclass
class Workload:
    wid: str
    title: str
    fn: Callable
    num_inputs: int
    items: int  # expected items in the dataset
    expect: Callable[[int], Any]
    key_of: Callable[[Any], int]
    variants: list[Variant]
    comparisons: list[Comparison] = field(default_factory=list)
    max_seconds: dict = field(default_factory=dict)  # variant key -> target seconds
    touch_bytes: int = 256 << 20  # memory touched before each timed run (see touch_memory)


def sw(key="sw", label="shardwright", **kw):
    return Variant(key, label, run_shardwright, kw)


def ld(key="ld", label="litdata", **kw):
    return Variant(key, label, run_litdata, kw)


def quick_variants(variants: list[Variant], keep_litdata: bool) -> list[Variant]:
    """--quick: litdata starts its workers with spawn (about 15 s a run on a loaded 2-core
    machine), so a smoke run compares with it on workload 1 only."""
    return [v for v in variants if keep_litdata or v.run is not run_litdata]


def workloads(quick: bool, arrays: int | None = None) -> list[Workload]:
    small = 20_000 if quick else 200_000
    arrays = arrays or (100 if quick else 2_000)
    gen_inputs = 50 if quick else 500
    chunk100 = 10_000 if quick else 200_000
    million = 200_000 if quick else 2_000_000
    return [
        Workload(
            "1",
            f"{small:,} small dicts",
            small_dict,
            small,
            small,
            expect_small_dict,
            key_small_dict,
            [sw(), sw("sw_nockpt", "shardwright use_checkpoint=False", use_checkpoint=False), ld()],
            [
                Comparison("shardwright / litdata", "sw", "ld"),
                Comparison("shardwright checkpoint overhead", "sw", "sw_nockpt", "overhead", 0.02),
            ],
        ),
        Workload(
            "2",
            f"{arrays:,} x 1 MiB uint8 arrays",
            mib_array,
            arrays,
            arrays,
            expect_mib_array,
            key_mib_array,
            [sw(), ld()],
            [Comparison("shardwright / litdata", "sw", "ld")],
            touch_bytes=(arrays * 3 // 2) << 20,
        ),
        Workload(
            "3",
            f"generator: {gen_inputs} inputs x {BLOCKS_PER_INPUT} int32[{TOKENS}] blocks",
            token_blocks,
            gen_inputs,
            gen_inputs * BLOCKS_PER_INPUT,
            expect_token_block,
            key_token_block,
            [sw(), ld()],
            [Comparison("shardwright / litdata", "sw", "ld")],
        ),
        Workload(
            "4",
            f"{chunk100:,} small dicts, chunk_size=100 ({chunk100 // 100:,} chunks)",
            small_dict,
            chunk100,
            chunk100,
            expect_small_dict,
            key_small_dict,
            [
                sw(chunk_size=100),
                sw("sw_nockpt", "shardwright use_checkpoint=False", chunk_size=100, use_checkpoint=False),
                ld(chunk_size=100),
                ld("ld_ckpt", "litdata use_checkpoint=True", chunk_size=100, use_checkpoint=True),
            ],
            [
                Comparison("shardwright / litdata", "sw", "ld"),
                Comparison("shardwright / litdata, both checkpointing", "sw", "ld_ckpt"),
                Comparison("litdata checkpoint overhead (reference)", "ld_ckpt", "ld", "overhead"),
                Comparison("shardwright checkpoint overhead", "sw", "sw_nockpt", "overhead", 0.02),
            ],
        ),
        Workload(
            "5",
            "10 inputs (fixed start-up cost)",
            small_dict,
            10,
            10,
            expect_small_dict,
            key_small_dict,
            [sw(), ld()],
            [Comparison("shardwright / litdata", "sw", "ld")],
            max_seconds={"sw": 1.0},
        ),
        Workload(
            "6",
            f"{million:,} small dicts (issue 19's throughput goal)",
            small_dict,
            million,
            million,
            expect_small_dict,
            key_small_dict,
            # litdata takes ~90 s here (workload 1 compares with it); the checkpoint overhead
            # on a run long enough to amortise start-up and publishing
            [sw(), sw("sw_nockpt", "shardwright use_checkpoint=False", use_checkpoint=False)],
            [Comparison("shardwright checkpoint overhead", "sw", "sw_nockpt", "overhead", 0.02)],
            # 1M items/s, start-up amortised (a quick run is too small to judge)
            max_seconds={} if quick else {"sw": million / 1_000_000},
        ),
    ]


# --- floors: what the machine can do, measured in the same run ---------------------------------
# fn-only: a fork pool of NUM_WORKERS processes calling fn over the same inputs (generators
# drained), writing nothing; the pool's start is included, like ours. raw I/O: the same chunk
# sizes as shardwright's output, written with plain file writes by NUM_WORKERS processes, every
# file fsync-ed and the directory once per process (shardwright's durability, fewest barriers).


def _call_range(args: tuple[Callable, int, int]) -> int:
    fn, start, end = args
    n = 0
    for i in range(start, end):
        out = fn(i)
        if inspect.isgenerator(out):
            n += sum(1 for _ in out)
        else:
            n += 1
    return n


def _encode_range(args: tuple[Callable, int, int]) -> int:
    """fn over the range and each sample encoded to its item bytes by the format's own
    encoder (its compiled flat encoder where it takes the sample), the bytes joined as a
    chunk body would be: what any writer of these bytes must do, with no checksum, no
    header, no file, no bookkeeping. Generators: each yielded sample encoded."""
    from shardwright.format import ItemEncoder

    fn, start, end = args
    encoder = ItemEncoder()
    encode, flat = encoder.encode, None
    body: list[bytes] = []
    n = 0
    for i in range(start, end):
        out = fn(i)
        for sample in out if inspect.isgenerator(out) else (out,):
            item = flat(sample) if flat is not None else None
            if item is None:
                item = encode(sample, i)
                flat = encoder.flat
            body.append(item)
            n += 1
        if len(body) >= 4096:
            b"".join(body)
            body.clear()
    b"".join(body)
    return n


def _pool_floor(task: Callable, fn: Callable, num_inputs: int) -> float:
    ctx = multiprocessing.get_context("fork")
    bounds = [(fn, k * num_inputs // NUM_WORKERS, (k + 1) * num_inputs // NUM_WORKERS) for k in range(NUM_WORKERS)]
    started = time.perf_counter()
    with ctx.Pool(NUM_WORKERS) as pool:
        pool.map(task, bounds, chunksize=1)
    return time.perf_counter() - started


def floor_fn_only(fn: Callable, num_inputs: int) -> float:
    return _pool_floor(_call_range, fn, num_inputs)


def floor_fn_encode(fn: Callable, num_inputs: int) -> float:
    return _pool_floor(_encode_range, fn, num_inputs)


def _write_files(args: tuple[str, list[tuple[str, int]]]) -> int:
    """Write every file, then fsync them all and the folder: each byte is on disk when this
    returns, with the fewest barriers (shardwright fsyncs once per commit round)."""
    folder, files = args
    buf = memoryview(bytes(max((size for _, size in files), default=0)))
    fds = []
    try:
        for name, size in files:
            fds.append(os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            view = buf[:size]
            while view:  # one buffer per chunk, as shardwright writes a committed chunk
                view = view[os.write(fds[-1], view) :]
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return len(files)


def floor_raw_io(sizes: list[int], folder: str) -> float:
    os.makedirs(folder, exist_ok=True)
    ctx = multiprocessing.get_context("fork")
    named = [(f"chunk-{k}.bin", s) for k, s in enumerate(sizes)]
    shares = [(folder, named[k::NUM_WORKERS]) for k in range(NUM_WORKERS)]
    try:
        started = time.perf_counter()
        with ctx.Pool(NUM_WORKERS) as pool:
            pool.map(_write_files, shares, chunksize=1)
        return time.perf_counter() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def reset_peak_rss() -> None:
    """Linux: make VmHWM (this process's peak RSS) start again from the current RSS."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_mb() -> float:
    """This process's peak RSS since reset_peak_rss() (VmHWM), else since it started."""
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


FLOORS = (
    ("floor_fn", "floor: fn only (fork pool, no writes)"),
    ("floor_io", "floor: raw I/O (same chunks, fsync)"),
    ("floor_sum", "floor: fn only + raw I/O"),
    ("floor_enc", "floor: fn + encode (fork pool, no writes)"),
    ("floor_enc_io", "floor: fn + encode + raw I/O"),
)


FLOOR_COMPARISONS = [
    Comparison("shardwright / fn-only floor", "sw", "floor_fn"),
    Comparison("shardwright / raw-I/O floor", "sw", "floor_io"),
    Comparison("shardwright / (fn-only + raw-I/O floors)", "sw", "floor_sum"),
    Comparison("shardwright / fn+encode floor", "sw", "floor_enc"),
    Comparison("shardwright / (fn+encode + raw-I/O floors)", "sw", "floor_enc_io"),
]


def touch_memory(nbytes: int) -> None:
    """Write to ``nbytes`` of fresh memory, then free it, before a timed run.

    On a VM whose host takes back the guest's free memory (this machine: a Firecracker guest
    with free-page reporting), the first write to a page the host reclaimed costs a fault on
    the host: 20 GiB touched once ran at 0.4 GB/s, then at memory speed. Without this, each run
    pays for the pages the run before it freed and the host took back, and a run that follows
    another closely (the floors right after shardwright) gets them cheap: a bias of up to 2x
    on the arrays workload. Touching first gives every run the same backed free memory."""
    if nbytes > 0:
        block = np.ones(nbytes, dtype=np.uint8)
        del block


def run_order(variants: list[Variant], rep: int) -> list[Variant]:
    """Each library's variants back to back, shardwright's first, the members of a pair
    swapping places every repeat: so both members of a paired comparison follow the same
    kind of run equally often. (Rotating all variants made ``use_checkpoint=True`` follow
    litdata in 3 of 5 repeats and ``False`` in none: a run right after litdata's 25 CPU
    seconds is slower, and workload 1 showed a checkpoint overhead of +11.6 % to +19 %
    where the runs without litdata showed +4 %.)"""
    ours = [v for v in variants if v.run is run_shardwright]
    theirs = [v for v in variants if v.run is not run_shardwright]
    if rep % 2:
        ours, theirs = ours[::-1], theirs[::-1]
    return ours + theirs


def cpu_idle_fraction(seconds: float) -> float:
    """The machine's idle share over ``seconds`` (/proc/stat; 1.0 where it cannot be read)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, all

    try:
        idle0, total0 = sample()
        time.sleep(seconds)
        idle1, total1 = sample()
    except OSError:
        return 1.0
    return (idle1 - idle0) / max(1, total1 - total0)


def settle(nbytes: int) -> None:
    """Before every timed run: flush what earlier runs left dirty (``os.sync``), wait (up to
    5 s) for the machine to go idle (a previous run's processes exiting, the kernel handing
    their freed memory back to the host), then ``touch_memory``."""
    os.sync()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and cpu_idle_fraction(0.1) < 0.9:
        pass
    touch_memory(nbytes)


def run_floors(w: Workload, rep: int, root: str, sizes: list[int], results: dict) -> None:
    """The fn-only and raw-I/O floors of ``w``, after its variants (the I/O floor writes the
    chunk sizes shardwright wrote in this repeat)."""
    gc.collect()
    settle(w.touch_bytes)
    reset_peak_rss()
    fn_s = floor_fn_only(w.fn, w.num_inputs)
    peak = peak_rss_mb()
    settle(w.touch_bytes)
    reset_peak_rss()
    io_s = floor_raw_io(sizes, os.path.join(root, f"w{w.wid}-floor-r{rep}"))
    peak = max(peak, peak_rss_mb())
    settle(w.touch_bytes)
    enc_s = floor_fn_encode(w.fn, w.num_inputs)
    floors = (
        ("floor_fn", fn_s),
        ("floor_io", io_s),
        ("floor_sum", fn_s + io_s),
        ("floor_enc", enc_s),
        ("floor_enc_io", enc_s + io_s),
    )
    for key, seconds in floors:
        result = results.setdefault((w.wid, key), Result())
        result.seconds.append(seconds)
        result.cpu.append(float("nan"))
        result.peak_rss_mb.append(peak)
        result.bytes = sum(sizes) if key not in ("floor_fn", "floor_enc") else 0
    print(
        f"  w{w.wid} floors{'':<30} repeat {rep}: fn {fn_s:.3f} s, fn + encode {enc_s:.3f} s, raw I/O {io_s:.3f} s",
        flush=True,
    )


# --- running and checking ---------------------------------------------------------------------


@contextlib.contextmanager
def redirected(log_path: str):
    """Send fd 1 and 2 (ours and the workers') to a log file while a run is timed."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def chunk_sizes(out: str) -> list[int]:
    return [e.stat().st_size for e in os.scandir(out) if e.is_file() and e.name.endswith(".bin")]


def same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if hasattr(a, "shape") or hasattr(b, "shape"):
        return np.array_equal(np.asarray(a), np.asarray(b))
    return a == b


def verify(w: Workload, v: Variant, out: str, cache: str) -> None:
    """Both readers count w.items; the first, middle and last items are valid (and, for
    shardwright, which promises the input order, the expected ones)."""
    import litdata

    import shardwright
    from shardwright.errors import UnsupportedFormatError

    theirs = litdata.StreamingDataset(out, cache_dir=os.path.join(cache, "reader"))
    if len(theirs) != w.items:
        raise AssertionError(f"litdata.StreamingDataset counts {len(theirs):,} items, expected {w.items:,}")
    ours = shardwright.StreamingDataset(out)
    if len(ours) != w.items:
        raise AssertionError(f"shardwright.StreamingDataset counts {len(ours):,} items, expected {w.items:,}")
    for k in (0, w.items // 2, w.items - 1):
        try:
            item = ours[k]
        except UnsupportedFormatError:
            # litdata 0.2.76 writes dicts of plain values in its Arrow layout when pyarrow is
            # installed, which shardwright does not read: check those items through litdata
            assert v.run is run_litdata
            item = theirs[k]
        if v.run is run_shardwright:
            if not same(item, w.expect(k)):
                raise AssertionError(f"item {k} is {item!r:.200}, expected {w.expect(k)!r:.200}")
        elif not 0 <= w.key_of(item) < w.items or not same(item, w.expect(w.key_of(item))):
            raise AssertionError(f"item {k} is {item!r:.200}, not a valid output")


@dataclass
class Result:
    seconds: list = field(default_factory=list)
    cpu: list = field(default_factory=list)
    bytes: int = 0
    peak_rss_mb: list = field(default_factory=list)  # the driver's (this process's), per run


def cpu_seconds() -> float:
    """user + system CPU of this process and of its reaped children (the workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_one(
    w: Workload, v: Variant, root: str, rep: int, log_path: str, show_output: bool
) -> tuple[float, float, list[int], float]:
    """seconds, cpu seconds, the sizes of the chunk files written, the driver's peak RSS (MB)."""
    out = os.path.join(root, f"w{w.wid}-{v.key}-r{rep}")
    cache = os.path.join(root, f"w{w.wid}-{v.key}-r{rep}-cache")
    inputs = list(range(w.num_inputs))
    gc.collect()
    try:
        ctx = contextlib.nullcontext() if show_output else redirected(log_path)
        settle(w.touch_bytes)
        with ctx:
            reset_peak_rss()
            cpu, started = cpu_seconds(), time.perf_counter()
            v.run(w.fn, inputs, out, cache, **v.kwargs)
            seconds, cpu = time.perf_counter() - started, cpu_seconds() - cpu
            peak = peak_rss_mb()
        verify(w, v, out, cache)
        return seconds, cpu, chunk_sizes(out), peak
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


def fmt_rate(value: float, unit: str) -> str:
    """260.7k items/s, 312.9 MB/s (decimal prefixes)."""
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            number, value_prefix = value / factor, prefix
            break
    else:
        number, value_prefix = value, ""
    if unit == "B/s":
        return f"{number:,.1f} {value_prefix}B/s"
    return f"{number:,.1f}{value_prefix} {unit}"


def print_table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = "  ".join(h.ljust(widths[i]) if i < 2 else h.rjust(widths[i]) for i, h in enumerate(header))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(widths[i]) if i < 2 else str(c).rjust(widths[i]) for i, c in enumerate(r)))


def median_interval(values: list[float]) -> tuple[float, float] | None:
    """A distribution-free 95 % confidence interval of the median (order statistics: the
    k-th smallest and largest, k from the binomial's normal approximation); None under 10
    values, too few for one."""
    n = len(values)
    if n < 10:
        return None
    k = max(0, int((n - 1.96 * n**0.5) / 2))
    ordered = sorted(values)
    return ordered[k], ordered[n - 1 - k]


def overhead_verdict(ratio: float, interval: tuple[float, float] | None, target: float) -> str:
    """ok / MISSED when the interval is on one side of the target; when it straddles it, the
    machine's noise hides the answer (the issue's rule: the profile then decides)."""
    if interval is None:
        return "ok" if ratio - 1 <= target else "MISSED"
    if interval[1] - 1 <= target:
        return "ok"
    if interval[0] - 1 > target:
        return "MISSED"
    return f"within noise (median {'ok' if ratio - 1 <= target else 'over'})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and 1 repeat (smoke test, < 60 s)")
    parser.add_argument(
        "--repeats", type=int, default=None, help="runs per variant, median reported (default 3; 1 with --quick)"
    )
    parser.add_argument("--only", default="", help="comma-separated workload numbers, e.g. 1,4")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument("--show-output", action="store_true", help="let the runs print to the terminal")
    parser.add_argument("--no-litdata", action="store_true", help="shardwright and the floors only")
    parser.add_argument(
        "--arrays", type=int, default=None, help="items of workload 2 (default 2,000; 100 with --quick)"
    )
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)

    # import both (torch included) before any timing
    import litdata

    import shardwright

    selected = [w for w in workloads(args.quick, args.arrays) if not args.only or w.wid in args.only.split(",")]
    if args.quick or args.no_litdata:
        for w in selected:
            w.variants = quick_variants(w.variants, keep_litdata=w.wid == "1" and not args.no_litdata)
    root = tempfile.mkdtemp(prefix="shardwright-bench-")
    log_path = os.path.join(tempfile.gettempdir(), f"shardwright-bench-{os.getpid()}.log")
    # Everything that lands in the temp folder (litdata's cache folders, its spawned workers'
    # files) goes under root, which is removed at the end.
    os.environ["TMPDIR"] = root
    tempfile.tempdir = None
    print(
        f"shardwright {shardwright.__version__}, litdata {litdata.__version__}, numpy {np.__version__}, "
        f"python {sys.version.split()[0]}; {os.cpu_count()} cpus, num_workers={NUM_WORKERS}, "
        f"repeats={repeats}{' (quick)' if args.quick else ''}; load average {os.getloadavg()[0]:.2f}"
    )
    print(f"output of the runs: {log_path}", flush=True)
    results: dict[tuple[str, str], Result] = {}
    failures: list[str] = []
    started = time.perf_counter()
    try:
        for w in selected:
            for rep in range(repeats):
                sw_sizes: list[int] = []
                order = run_order(w.variants, rep)
                for v in order:
                    result = results.setdefault((w.wid, v.key), Result())
                    try:
                        seconds, cpu, sizes, peak = run_one(w, v, root, rep, log_path, args.show_output)
                    except Exception as exc:
                        failures.append(f"workload {w.wid} {v.label} (repeat {rep}): {type(exc).__name__}: {exc}")
                        print(f"FAILED {failures[-1]}\n{traceback.format_exc()}", file=sys.stderr, flush=True)
                        continue
                    result.seconds.append(seconds)
                    result.cpu.append(cpu)
                    result.peak_rss_mb.append(peak)
                    result.bytes = sum(sizes)
                    if v.key == "sw":
                        sw_sizes = sizes
                    print(f"  w{w.wid} {v.label:<36} repeat {rep}: {seconds:7.2f} s  (cpu {cpu:6.2f} s)", flush=True)
                run_floors(w, rep, root, sw_sizes, results)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started

    rows, report = (
        [],
        {
            "repeats": repeats,
            "quick": args.quick,
            "num_workers": NUM_WORKERS,
            "load_average": os.getloadavg()[0],
            "workloads": [],
        },
    )
    for w in selected:
        wjson = {"workload": w.wid, "title": w.title, "items": w.items, "variants": {}, "comparisons": []}
        for key, label in [(v.key, v.label) for v in w.variants] + list(FLOORS):
            r = results.get((w.wid, key))
            if not r or not r.seconds:
                rows.append([f"{w.wid} {w.title}", label, "FAILED", "", "", "", "", "", ""])
                continue
            med = statistics.median(r.seconds)
            cpu = statistics.median(r.cpu)
            target = w.max_seconds.get(key)
            note = "" if target is None else f"target < {target:g} s: {'ok' if med < target else 'MISSED'}"
            if target is not None and args.quick:
                note += " (quick: noisy)"
            rows.append(
                [
                    f"{w.wid} {w.title}",
                    label,
                    f"{med:.3f}" if key.startswith("floor") else f"{med:.2f}",
                    f"{min(r.seconds):.2f}",
                    "" if cpu != cpu else f"{cpu:.2f}",  # nan: not measured (floors)
                    fmt_rate(w.items / med, "items/s"),
                    fmt_rate(r.bytes / med, "B/s") if r.bytes else "",
                    f"{max(r.peak_rss_mb):,.0f}",
                    note,
                ]
            )
            wjson["variants"][key] = {
                "label": label,
                "driver_peak_rss_mb": max(r.peak_rss_mb),
                "seconds": r.seconds,
                "median": med,
                "cpu_seconds": r.cpu,
                "bytes": r.bytes,
                "items_per_s": w.items / med,
                "bytes_per_s": r.bytes / med,
            }
        report["workloads"].append(wjson)
    print(
        f"\n{len(selected)} workload(s) in {elapsed:.0f} s; seconds are the median of {repeats} "
        f"(min beside it; cpu = user+sys of the whole process tree, median); "
        f"load average now {os.getloadavg()[0]:.2f}\n"
    )
    print_table(
        rows, ["workload", "variant", "median s", "min s", "cpu s", "items/s", "output/s", "driver peak MB", "note"]
    )

    rows = []
    for w, wjson in zip(selected, report["workloads"]):
        ran = {v.key for v in w.variants} | {key for key, _ in FLOORS}
        for c in w.comparisons + FLOOR_COMPARISONS:
            if c.numerator not in ran or c.denominator not in ran:
                continue  # a variant left out (--quick)
            a, b = results.get((w.wid, c.numerator)), results.get((w.wid, c.denominator))
            if not a or not a.seconds or not b or not b.seconds:
                rows.append([f"{w.wid} {w.title}", c.label, "n/a", "", ""])
                continue
            ratio = statistics.median(a.seconds) / statistics.median(b.seconds)
            ratio_min = min(a.seconds) / min(b.seconds)
            interval = None
            if c.kind == "overhead" and len(a.seconds) == len(b.seconds):
                # paired: the two variants ran one after the other in each repeat, so the
                # median of the per-repeat ratios cancels most of a loaded machine's drift
                paired = [x / y for x, y in zip(a.seconds, b.seconds)]
                ratio, interval = statistics.median(paired), median_interval(paired)
            if c.kind == "overhead":
                value, value_min = f"{ratio - 1:+.1%}", f"{ratio_min - 1:+.1%}"
                if interval is not None:
                    value += f" (95% CI {interval[0] - 1:+.1%}..{interval[1] - 1:+.1%})"
                verdict = (
                    ""
                    if c.target is None
                    else f"target <= {c.target:.0%}: {overhead_verdict(ratio, interval, c.target)}"
                )
            else:
                value, value_min = f"{ratio:.2f}x", f"{ratio_min:.2f}x"
                verdict = (
                    "" if c.target is None else f"target <= {c.target:g}: {'ok' if ratio <= c.target else 'MISSED'}"
                )
            if verdict and args.quick:
                verdict += " (quick: noisy)"
            rows.append([f"{w.wid} {w.title}", c.label, value, value_min, verdict])
            wjson["comparisons"].append(
                {
                    "label": c.label,
                    "kind": c.kind,
                    "ratio_of_medians": ratio,
                    "ratio_of_mins": ratio_min,
                    "paired_median_95ci": list(interval) if interval else None,
                    "target": c.target,
                }
            )
    print()
    print_table(rows, ["workload", "comparison (lower is better)", "medians (overhead: paired)", "mins", "target"])

    if args.json:
        report["failures"] = failures
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
    if failures:
        print(f"\n{len(failures)} run(s) FAILED (output in {log_path}):", file=sys.stderr)
        for line in failures:
            print(f"  {line}", file=sys.stderr)
        return 1
    with contextlib.suppress(OSError):
        os.unlink(log_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
