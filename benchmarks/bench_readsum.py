#!/usr/bin/env python
"""What checking chunk checksums costs a reader of arrays: checked vs unchecked, paired.

    .venv/bin/python benchmarks/bench_readsum.py --pairs 7 --ways inproc --passes 10
    .venv/bin/python benchmarks/bench_readsum.py --pairs 7 --ways shuffle --passes 3
    .venv/bin/python benchmarks/bench_readsum.py --src /work/main/src   # another checkout's code

The dataset is bench_read.py's ``arrays`` workload (400 x 256 KiB uint8 arrays, 8 a chunk: 50
chunks of 2 MiB), written once and read from the page cache. Each run is a fresh process that
reads it ``--passes`` times, a fresh dataset each time (each checks every chunk again):
``inproc`` iterates a StreamingDataset in that process and sums every array (a loop that
touches every byte it reads: issue 36's goal is on such a loop); ``shuffle`` iterates a
shuffled 2-worker StreamingDataLoader whose collate sums every array in the workers. Per run:
the wall seconds of the read, and the cpu seconds (user + sys) of the process, all its
threads, and its loader workers during it (steadier than wall on a loaded machine, and what a
background check costs shows there even when another core hides it from the wall).

Checked and unchecked runs alternate (the first of a pair swaps every pair, so neither side
always runs first); the ratio checked / unchecked is taken per pair and its median printed,
with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")

RUN = r"""
import os, resource, sys, time
import numpy as np
from shardwright import StreamingDataLoader, StreamingDataset

def summed(batch):
    total = 0
    for item in batch:
        total += int(item["x"].sum(dtype=np.uint64)) >= 0
    return total

def cpu():
    # user + sys seconds of this process (all its threads) and of its reaped loader workers
    own, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime

def main():
    src, check, way, passes = sys.argv[1], sys.argv[2] == "checked", sys.argv[3], int(sys.argv[4])
    np.ones(1 << 28, dtype=np.uint8)  # memory touched first: bench_optimize.touch_memory says why
    datasets = [StreamingDataset(src, shuffle=way == "shuffle", check_checksums=check) for _ in range(passes)]
    t, c = time.perf_counter(), cpu()
    got = 0
    for ds in datasets:  # a dataset of its own each pass: each checks every chunk again
        if way == "inproc":
            got += sum(int(x["x"].sum(dtype=np.uint64)) >= 0 for x in ds)
        else:
            got += sum(StreamingDataLoader(ds, batch_size=32, num_workers=2, collate_fn=summed))
    wall, used = time.perf_counter() - t, cpu() - c
    if got != passes * len(datasets[0]):
        raise SystemExit(f"read {got} items, expected {passes * len(datasets[0])}")
    print(wall, used)

if __name__ == "__main__":
    main()
"""


def write(root: str, items: int) -> str:
    sys.path.insert(0, SRC)
    import shardwright

    out = os.path.join(root, "arrays")
    shardwright.optimize(_array, list(range(items)), out, chunk_size=8, num_workers=2, verbose=False)
    return out


def _array(i: int) -> dict:
    import numpy as np

    return {"i": i, "x": np.full(256 << 10, i % 256, dtype=np.uint8)}


def run(script: str, src: str, mode: str, way: str, passes: int, code: str = SRC) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(code))
    done = subprocess.run(
        [sys.executable, script, src, mode, way, str(passes)], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"the {mode} {way} run failed:\n{done.stderr}")
    wall, cpu = (float(v) for v in done.stdout.split())
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument("--ways", default="inproc,shuffle")
    parser.add_argument("--passes", type=int, default=5, help="reads of the dataset per run (fresh dataset each)")
    parser.add_argument("--json", default="")
    parser.add_argument("--src", default=SRC, help="the shardwright source read with (another checkout's src/)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-readsum-")
    results = {}
    try:
        src = write(root, args.items)
        script = os.path.join(root, "run.py")
        with open(script, "w") as f:
            f.write(RUN)
        load_before = os.getloadavg()
        for way in args.ways.split(","):
            run(script, src, "checked", way, 1, args.src)  # warm: page cache, imports
            runs: dict[str, list[tuple[float, float]]] = {"checked": [], "unchecked": []}
            for k in range(args.pairs):
                order = ("checked", "unchecked") if k % 2 == 0 else ("unchecked", "checked")
                for mode in order:
                    runs[mode].append(run(script, src, mode, way, args.passes, args.src))
            ratios = {
                metric: [c[i] / u[i] for c, u in zip(runs["checked"], runs["unchecked"], strict=True)]
                for i, metric in enumerate(("wall", "cpu"))
            }
            results[way] = {"runs": runs, "ratios": ratios}
            for i, metric in enumerate(("wall", "cpu")):
                med_c = statistics.median(r[i] for r in runs["checked"])
                med_u = statistics.median(r[i] for r in runs["unchecked"])
                paired = statistics.median(ratios[metric])
                spread = " ".join(f"{r:.3f}" for r in sorted(ratios[metric]))
                print(
                    f"{way:7s} {metric:4s}: checked {med_c * 1000:7.1f} ms, unchecked {med_u * 1000:7.1f} ms "
                    f"(medians); checked/unchecked median of {args.pairs} paired ratios {paired:.3f} [{spread}]"
                )
        load_after = os.getloadavg()
        print(f"load average before {load_before[0]:.2f} / after {load_after[0]:.2f} (1 min)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"results": results, "load": [load_before, load_after]}, f)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
