#!/usr/bin/env python
"""Where the CPU time of one ``shardwright.optimize`` goes, by process, thread and phase, beside
the fn-only floor's, in one run (issue 36: the 200k small dicts row).

    .venv/bin/python benchmarks/cpu_optimize.py                    # workload 1: 200k small dicts, 7 runs
    .venv/bin/python benchmarks/cpu_optimize.py --runs 9 --no-checkpoint

CPU time, not wall: the machine is shared, and a process's CPU seconds hardly move with the
load while its wall clock doubles. Each figure is the median over the runs (floor and ours
alternated), in ms and in ns per item; a phase's CPU is its thread's (``time.thread_time``),
summed over the processes that ran it. Like timeline_optimize.py this wraps shardwright's
internals before the pool forks: a diagnostic, not a benchmark.

Rows: ``main`` is the calling process (all its threads, ``RUSAGE_SELF``), with the phases its
main thread runs before, during and after the pool; ``workers`` are both worker processes
(``RUSAGE_CHILDREN`` once reaped), with their hot loop (``run_shard``: fn, encoding, the hand-off
to the writer), its parts that are not the per-item loop, the committer thread (chunk assembly,
checksum, the chunk file's write) and the sealer thread (barriers, lease and claim checks,
records). ``fn-only floor`` is ``bench_optimize.floor_fn_only`` (a fork pool calling fn).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_optimize as bench

# (module, attribute path, where, label): thread CPU of each call, summed per label
PHASES = [
    ("shardwright.engine.inputs", "PlainInputs.check_before_writing", "main", "inputs fingerprinted"),
    ("shardwright.engine.driver", "open_call", "main", "run opened (observe, decide, manifest)"),
    ("shardwright.engine.pool", "WorkerPool.run", "main", "pool (fork, claims, records read)"),
    ("shardwright.engine.driver", "_finish", "main", "finish (confirm, publish, cleanup)"),
    ("shardwright.engine.worker", "Worker.__init__", "workers", "worker set up"),
    ("shardwright.engine.worker", "Worker.run_shard", "workers", "hot loop (run_shard)"),
    ("shardwright.engine.shard_writer", "FormatGate.encode", "workers", "  of which the format gate"),
    ("shardwright.engine.shard_writer", "ShardWriter.add_run", "workers", "  of which add_run/add_block (chunk cuts)"),
    (
        "shardwright.engine.shard_writer",
        "ShardWriter.add_block",
        "workers",
        "  of which add_run/add_block (chunk cuts)",
    ),
    ("shardwright.engine.committer", "ChunkCommitter.submit", "workers", "  of which chunks submitted"),
    ("shardwright.engine.committer", "ChunkCommitter._write_loop", "workers", "committer thread (build, hash, write)"),
    ("shardwright.engine.committer", "ChunkCommitter._seal_loop", "workers", "sealer thread (barriers, records)"),
]

ACC: dict[str, float] = {}


def _timed(fn: Callable, label: str) -> Callable:
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            ACC[label] = ACC.get(label, 0.0) + time.thread_time() - started

    return run


def install(dump_dir: str) -> None:
    for module, path, _where, label in PHASES:
        owner: Any = importlib.import_module(module)
        *parents, name = path.split(".")
        for part in parents:
            owner = getattr(owner, part)
        if hasattr(owner, name):  # (add_block: not in trees before 2026-12-06's smalldicts branch)
            setattr(owner, name, _timed(getattr(owner, name), label))
    import shardwright.engine.pool as pool

    worker_main = pool.worker_main

    def counted_main(*args: Any, **kwargs: Any) -> None:
        ACC.clear()  # the worker's own figures, not the parent's inherited ones
        try:
            worker_main(*args, **kwargs)
        finally:
            with open(os.path.join(dump_dir, f"{os.getpid()}.json"), "w") as f:
                json.dump(ACC, f)

    pool.worker_main = counted_main


def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--no-checkpoint", action="store_true")
    args = parser.parse_args(argv)
    import shardwright

    fn, inputs = bench.small_dict, list(range(args.items))
    root = tempfile.mkdtemp(prefix="sw-cpu-")
    dumps = os.path.join(root, "cpu")
    os.makedirs(dumps)
    rows: dict[str, list[float]] = {}
    loads = [os.getloadavg()[0]]

    def add(label: str, seconds: float) -> None:
        rows.setdefault(label, []).append(seconds)

    try:
        install(dumps)
        shardwright.optimize(fn, inputs, os.path.join(root, "warm"), num_workers=2, verbose=False)
        for run in range(args.runs + 1):
            for name in os.listdir(dumps):
                os.unlink(os.path.join(dumps, name))
            ACC.clear()
            me, kids = _cpu()
            bench.floor_fn_only(fn, args.items)
            me2, kids2 = _cpu()
            out = os.path.join(root, f"out{run}")
            shardwright.optimize(fn, inputs, out, num_workers=2, verbose=False, use_checkpoint=not args.no_checkpoint)
            me3, kids3 = _cpu()
            shutil.rmtree(out)
            if run == 0:
                continue  # the first pair after the warm-up is not counted
            add("fn-only floor (both processes)", me2 - me + kids2 - kids)
            add("shardwright, all processes", me3 - me2 + kids3 - kids2)
            add("main process (all threads)", me3 - me2)
            for _module, _path, where, label in PHASES:
                if where == "main":
                    add(label, ACC.get(label, 0.0))
            add("worker processes (all threads)", kids3 - kids2)
            summed: dict[str, float] = {}
            for name in os.listdir(dumps):
                with open(os.path.join(dumps, name)) as f:
                    for label, seconds in json.load(f).items():
                        summed[label] = summed.get(label, 0.0) + seconds
            for label in dict.fromkeys(label for _module, _path, where, label in PHASES if where == "workers"):
                add(label, summed.get(label, 0.0))  # (two methods may share a label)
        loads.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"{args.items:,} small dicts, 2 workers, use_checkpoint={not args.no_checkpoint}, median of "
        f"{args.runs} runs; load average {min(loads):.2f}-{max(loads):.2f}"
    )
    print(f"{'':44s} {'ms':>7} {'ns/item':>8}")
    for label, values in rows.items():
        seconds = statistics.median(values)
        print(f"{label:44s} {seconds * 1e3:7.1f} {seconds / args.items * 1e9:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
