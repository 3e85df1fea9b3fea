#!/usr/bin/env python
"""Tokenized text at scale, written and read back: shardwright vs litdata 0.2.76 vs a raw
``np.memmap`` floor, side by side (issue 36's token workload).

    .venv/bin/python benchmarks/bench_tokens.py                      # 200M tokens, median of 3
    .venv/bin/python benchmarks/bench_tokens.py --tokens 1000000000  # the issue's 1B (4 GB each)
    .venv/bin/python benchmarks/bench_tokens.py --quick              # 4M tokens, 1 repeat

The inputs are token generators: fn(i) yields 256 int32 documents of 1,024-3,071 tokens
(~0.5M tokens per input, the values say where they came from). Each step runs in a fresh
process (the time is the call; the interpreter's start and imports excluded), the variants
interleaved in every repeat:

* ``write``: ``shardwright.optimize`` and ``litdata.optimize`` with ``item_loader=
  TokensLoader()``, 2 workers, 64 MB chunks. Floor: **raw write**, 2 processes running the
  same generators and writing the tokens to one flat file each (fsync-ed), no index.
* ``read``: each library's dataset with ``TokensLoader(block_size=2049)`` (a 2,048-token
  context and its next-token target) through its ``StreamingDataLoader``, 2 workers, batch
  64 (the collate returns the batch's size, so what is timed is reading the blocks in the
  workers). Floor: **raw memmap**, torch's ``DataLoader`` (2 workers) over the flat files
  opened with ``np.memmap``, the same blocks of 2,049 tokens copied out.

Printed: tokens/s (median, min beside it), shardwright / litdata and shardwright / floor.
Every read is checked against that library's own ``len(ds)`` (litdata's blocks stop at a
chunk's end, ours run across chunks, so the two counts differ a little; tokens/s counts the
blocks read x 2,049). mosaicml-streaming has no token loader and is not run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, HERE)

from benchsteps import cell, fresh_step, load_average, median_rate, ratio  # noqa: E402

WORKERS = 2
BATCH = 64
BLOCK = 2049
DOCS = 256  # documents per input


def doc_length(j: int) -> int:
    return 1024 + (j * 7919) % 2048


TOKENS_PER_INPUT = sum(doc_length(j) for j in range(DOCS))


def documents(i: int):
    """Input i's documents: a generator of int32 token arrays."""
    import numpy as np

    for j in range(DOCS):
        yield np.arange(doc_length(j), dtype=np.int32) + i


def count(batch) -> int:
    return len(batch)


def write_raw_part(args: tuple[list[int], str]) -> int:
    inputs, path = args
    written = 0
    with open(path, "wb") as f:
        for i in inputs:
            for doc in documents(i):
                f.write(doc.tobytes())
                written += doc.size
        f.flush()
        os.fsync(f.fileno())
    return written


def write_raw(inputs: list[int], out: str) -> int:
    import multiprocessing

    os.makedirs(out, exist_ok=True)
    parts = [(inputs[w::WORKERS], os.path.join(out, f"part-{w}.bin")) for w in range(WORKERS)]
    with multiprocessing.get_context("fork").Pool(WORKERS) as pool:
        tokens = pool.map(write_raw_part, parts)
    fd = os.open(out, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    return sum(t // BLOCK for t in tokens)  # the blocks the floor reads: whole blocks of each file


def write_shardwright(inputs: list[int], out: str) -> int:
    import shardwright

    shardwright.optimize(
        documents,
        inputs,
        out,
        chunk_bytes="64MB",
        num_workers=WORKERS,
        item_loader=shardwright.TokensLoader(),
        verbose=False,
    )
    return len(shardwright.StreamingDataset(out, item_loader=shardwright.TokensLoader(block_size=BLOCK)))


def write_litdata(inputs: list[int], out: str) -> int:
    import litdata

    litdata.optimize(
        fn=documents,
        inputs=inputs,
        output_dir=out,
        chunk_bytes="64MB",
        num_workers=WORKERS,
        item_loader=litdata.TokensLoader(),
    )
    return len(litdata.StreamingDataset(out, item_loader=litdata.TokensLoader(block_size=BLOCK)))


def read_shardwright(out: str) -> int:
    import shardwright

    ds = shardwright.StreamingDataset(out, item_loader=shardwright.TokensLoader(block_size=BLOCK))
    return sum(shardwright.StreamingDataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=count))


def read_litdata(out: str) -> int:
    import litdata

    ds = litdata.StreamingDataset(out, item_loader=litdata.TokensLoader(block_size=BLOCK))
    return sum(litdata.StreamingDataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=count))


def read_raw(out: str) -> int:
    """The floor: blocks of 2,049 tokens copied out of the flat files' np.memmap, 2 workers."""
    import numpy as np
    import torch

    class Blocks(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            w = info.id if info else 0
            tokens = np.memmap(os.path.join(out, f"part-{w}.bin"), dtype=np.int32, mode="r")
            for start in range(0, tokens.size - BLOCK + 1, BLOCK):
                yield torch.from_numpy(np.array(tokens[start : start + BLOCK]))

    return sum(torch.utils.data.DataLoader(Blocks(), batch_size=BATCH, num_workers=WORKERS, collate_fn=count))


WRITERS = {"shardwright": write_shardwright, "litdata": write_litdata, "raw": write_raw}
READERS = {"shardwright": read_shardwright, "litdata": read_litdata, "raw": read_raw}


def run_step(step: str, n_inputs: int, out: str) -> dict:
    phase, _, lib = step.partition(":")
    if lib != "raw":
        __import__(lib)
    import numpy  # noqa: F401
    import torch  # noqa: F401

    started = time.perf_counter()
    if phase == "write":
        blocks = WRITERS[lib](list(range(n_inputs)), out)
    else:
        blocks = READERS[lib](out)
    return {"seconds": time.perf_counter() - started, "blocks": blocks}


def fresh(step: str, n_inputs: int, out: str, log) -> dict:
    return fresh_step(__file__, ["--step", step, "--inputs", str(n_inputs), "--out", out], log)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=200_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="4M tokens, 1 repeat")
    parser.add_argument("--root", default="", help="work folder (default: a temp dir, removed)")
    parser.add_argument("--step", default="", help=argparse.SUPPRESS)
    parser.add_argument("--inputs", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step:
        print(json.dumps(run_step(args.step, args.inputs, args.out)))
        return 0
    tokens, repeats = (4_000_000, 1) if args.quick else (args.tokens, args.repeats)
    n_inputs = max(WORKERS, round(tokens / TOKENS_PER_INPUT))
    total = n_inputs * TOKENS_PER_INPUT
    root = args.root or tempfile.mkdtemp(prefix="bench-tokens-")
    os.makedirs(root, exist_ok=True)
    free = shutil.disk_usage(root).free
    if free < 3.5 * total * 4:
        print(
            f"{free / 1e9:.1f} GB free under {root}: {total * 4 * 3 / 1e9:.1f} GB needed; use --tokens", file=sys.stderr
        )
        return 2
    print(f"load average {load_average()}", flush=True)
    print(f"{total:,} tokens ({total * 4 / 1e9:.2f} GB of int32 per copy), {n_inputs} inputs", flush=True)
    libs = ["shardwright", "litdata", "raw"]
    times: dict[str, list[float]] = {}
    tokens_read: dict[str, int] = {}
    failures = 0
    log = open(os.path.join(root, "steps.log"), "w")
    try:
        for r in range(repeats):
            for step in [f"write:{lib}" for lib in libs] + [f"read:{lib}" for lib in libs]:
                lib = step.partition(":")[2]
                out = os.path.join(root, f"out-{lib}")
                if step.startswith("write:"):
                    shutil.rmtree(out, ignore_errors=True)
                if step in times and not times[step]:
                    continue  # failed before
                got = fresh(step, n_inputs, out, log)
                written = tokens_read.get(f"write:{lib}")
                if got.get("failed") or (step.startswith("read:") and got["blocks"] != written):
                    failures += lib == "shardwright"
                    print(
                        f"FAILED {step} repeat {r}: {got}, expected {written} blocks (see {log.name})", file=sys.stderr
                    )
                    times[step] = []
                    continue
                tokens_read[step] = got["blocks"]
                times.setdefault(step, []).append(got["seconds"])
                rate = (total if step.startswith("write:") else got["blocks"] * BLOCK) / got["seconds"]
                print(f"repeat {r} {step:18} {got['seconds']:7.2f} s  {rate / 1e6:8.1f} M tokens/s", flush=True)
    finally:
        log.close()
        if not args.root:
            shutil.rmtree(root, ignore_errors=True)
    print_table(times, tokens_read, total)
    print(f"load average after {load_average()}")
    return 1 if failures else 0


def print_table(times: dict[str, list[float]], blocks: dict[str, int], total: int) -> None:
    def rate(step: str) -> float | None:
        return median_rate(times, step, total if step.startswith("write:") else blocks.get(step, 0) * BLOCK)

    def cell_of(step: str) -> str:
        found = rate(step)
        return cell(times, step, found / 1e6 if found else None, "{:,.1f}M")

    print("\n| step | shardwright tokens/s | litdata tokens/s | raw floor tokens/s | sw/litdata | sw/floor |")
    print("|---|---|---|---|---|---|")
    for phase in ("write", "read"):
        sw, ld, raw = (rate(f"{phase}:{lib}") for lib in ("shardwright", "litdata", "raw"))
        print(
            f"| {phase} | {cell_of(f'{phase}:shardwright')} | {cell_of(f'{phase}:litdata')} | {cell_of(f'{phase}:raw')} | "
            f"{ratio(sw, ld)} | {ratio(sw, raw)} |"
        )


if __name__ == "__main__":
    sys.exit(main())
