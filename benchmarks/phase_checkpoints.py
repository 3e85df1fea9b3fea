#!/usr/bin/env python
"""Where checkpoints cost time: the commit and publish phases of paired optimize runs
(``use_checkpoint=True`` / ``False``), timed by wrapping them, in every process.

    .venv/bin/python benchmarks/phase_checkpoints.py               # workload 1: 200k small dicts, 20 pairs
    .venv/bin/python benchmarks/phase_checkpoints.py --workload 6 --pairs 10

The wall clock of a 150 ms run moves by more than the 2 % the issue allows from one run to
the next; the per-phase sums do not. Each row is the median over the pairs of a phase's time
summed over the processes that ran it (main, or both workers: the workers' sum is over two
processes running in parallel, and their sealers run beside the hot loop, so only part of it
is on the critical path). Like profile_optimize.py this wraps shardwright's internals before
the pool forks: a diagnostic, not a benchmark.
"""

from __future__ import annotations

import argparse
import collections
import functools
import gc
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_optimize as bench

WORKLOADS = {"1": (bench.small_dict, 200_000), "6": (bench.small_dict, 2_000_000)}

# (module, attribute, label): each phase where it is looked up at call time
PHASES = [
    ("shardwright.engine.committer", "write_chunks", "chunk files written (step 1)"),
    ("shardwright.engine.committer", "seal_round", "rounds sealed (steps 2-4)"),
    ("shardwright.storage.local", "LocalStorage.barrier", "  of which barriers (fsync)"),
    ("shardwright.protocol.commit", "check_still_held", "  of which lease and claim checks"),
    ("shardwright.protocol.commit", "write_records", "  of which records written"),
    ("shardwright.engine.committer", "ChunkCommitter.close", "committer close (the last barrier)"),
    ("shardwright.engine.share", "load_progress", "records read when shards are claimed"),
    ("shardwright.protocol.publish", "load_progress", "records read by publish"),
    ("shardwright.protocol.publish", "publish", "index.json written"),
    ("shardwright.protocol.publish", "cleanup_after_publish", "cleanup (run.json, records deleted)"),
]


def install(log_path: str) -> None:
    for module_name, attribute, label in PHASES:
        owner = importlib.import_module(module_name)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)

        def timed(*args, _original=original, _label=label, **kwargs):
            started = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                with open(log_path, "a") as log:  # O_APPEND: one line per call, from any process
                    log.write(f"{os.getpid()}\t{_label}\t{time.perf_counter() - started:.6f}\n")

        setattr(owner, name, functools.wraps(original)(timed))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="1")
    parser.add_argument("--pairs", type=int, default=20)
    args = parser.parse_args(argv)
    fn, n = WORKLOADS[args.workload]
    import shardwright

    root = tempfile.mkdtemp(prefix="sw-phases-")
    log_path = os.path.join(root, "phases.log")
    install(log_path)
    walls: dict[bool, list[float]] = collections.defaultdict(list)
    sums: dict[bool, dict[tuple[str, str], list[float]]] = {
        True: collections.defaultdict(list),
        False: collections.defaultdict(list),
    }
    try:
        for pair in range(args.pairs):
            for checkpoint in (True, False) if pair % 2 == 0 else (False, True):
                out = os.path.join(root, "out")
                shutil.rmtree(out, ignore_errors=True)
                if os.path.exists(log_path):
                    os.remove(log_path)
                gc.collect()
                bench.settle(256 << 20)
                started = time.perf_counter()
                shardwright.optimize(
                    fn, list(range(n)), out, num_workers=bench.NUM_WORKERS, use_checkpoint=checkpoint, verbose=False
                )
                walls[checkpoint].append(time.perf_counter() - started)
                run: dict[tuple[str, str], float] = collections.defaultdict(float)
                with open(log_path) as log:
                    for line in log:
                        pid, label, seconds = line.rstrip("\n").split("\t")
                        run[("main" if int(pid) == os.getpid() else "workers", label)] += float(seconds)
                for key in {(w, label) for w in ("main", "workers") for _, _, label in PHASES}:
                    sums[checkpoint][key].append(run.get(key, 0.0))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratios = [a / b for a, b in zip(walls[True], walls[False])]
    print(
        f"workload {args.workload}: {n:,} small dicts, {args.pairs} pairs, load average {os.getloadavg()[0]:.2f}; "
        f"wall medians {statistics.median(walls[True]) * 1e3:.1f} ms with checkpoints, "
        f"{statistics.median(walls[False]) * 1e3:.1f} ms without (paired median {statistics.median(ratios) - 1:+.1%})"
    )
    print(f"{'where':<9}{'phase':<40}{'with (ms)':>11}{'without':>10}{'extra':>9}")
    for where in ("main", "workers"):
        for _, _, label in PHASES:
            with_ = statistics.median(sums[True][(where, label)]) * 1e3
            without = statistics.median(sums[False][(where, label)]) * 1e3
            if with_ or without:
                print(f"{where:<9}{label:<40}{with_:>11.2f}{without:>10.2f}{with_ - without:>+9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
