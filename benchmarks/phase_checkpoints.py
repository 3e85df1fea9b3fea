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

The last line is the figure issue 19 decides by when the wall clock's noise hides 2 %: the
checkpoint code on a run's critical path, the median over the pairs of (the main process's
extra time in its checkpoint phases) + (the slowest worker's extra wait in its committer's
close) + (a worker's share of the CPU time of the lease and claim checks and record writes, which
hold the GIL its hot loop needs; likewise the CPU time of the main process's reads at each
claim, taken from a core the workers use), over the run's wall clock without checkpoints.
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
    ("shardwright.engine.committer", "ChunkCommitter.close", "committer close (its last round)"),
    ("shardwright.engine.share", "load_progress", "records read when shards are claimed"),
    ("shardwright.protocol.publish", "load_progress", "records read by publish"),
    # since issue 36 (records branch) publish reads through this one; a tree without it skips it
    ("shardwright.protocol.publish", "trusted_progress", "records read by publish"),
    ("shardwright.protocol.publish", "publish", "index.json written"),
    ("shardwright.protocol.publish", "cleanup_after_publish", "cleanup (run.json, records deleted)"),
]


CLOSE = "committer close (its last round)"
CPU = " (cpu)"  # the same phase's CPU time (time.thread_time) rather than its wall clock
# the claims' reads run beside the workers: their CPU is what they take from them; the rest, after
# the workers are done, is waited for whole
MAIN_PHASES = [
    "records read when shards are claimed" + CPU,
    "records read by publish",
    "cleanup (run.json, records deleted)",
]
WORKER_CODE = ["  of which lease and claim checks", "  of which records written"]


def install(log_path: str) -> None:
    for module_name, attribute, label in PHASES:
        owner = importlib.import_module(module_name)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name, None)
        if original is None:  # an older tree (--src of main): the phase does not exist there
            continue

        def timed(*args, _original=original, _label=label, **kwargs):
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return _original(*args, **kwargs)
            finally:
                wall, cpu = time.perf_counter() - started, time.thread_time() - cpu
                with open(log_path, "a") as log:  # O_APPEND: one line per call, from any process
                    log.write(f"{os.getpid()}\t{_label}\t{wall:.6f}\t{cpu:.6f}\n")

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
    slowest_close: dict[bool, list[float]] = collections.defaultdict(list)
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
                close_by_worker: dict[str, float] = collections.defaultdict(float)
                with open(log_path) as log:
                    for line in log:
                        pid, label, seconds, cpu = line.rstrip("\n").split("\t")
                        where = "main" if int(pid) == os.getpid() else "workers"
                        run[(where, label)] += float(seconds)
                        run[(where, label + CPU)] += float(cpu)
                        if label == CLOSE and int(pid) != os.getpid():
                            close_by_worker[pid] += float(seconds)
                for key in {(w, label + c) for w in ("main", "workers") for _, _, label in PHASES for c in ("", CPU)}:
                    sums[checkpoint][key].append(run.get(key, 0.0))
                slowest_close[checkpoint].append(max(close_by_worker.values(), default=0.0))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratios = [a / b for a, b in zip(walls[True], walls[False])]
    print(
        f"workload {args.workload}: {n:,} small dicts, {args.pairs} pairs, load average {os.getloadavg()[0]:.2f}; "
        f"wall medians {statistics.median(walls[True]) * 1e3:.1f} ms with checkpoints, "
        f"{statistics.median(walls[False]) * 1e3:.1f} ms without (paired median {statistics.median(ratios) - 1:+.1%})"
    )
    print(f"{'where':<9}{'phase':<40}{'with (ms)':>11}{'without':>10}{'extra':>9}{'cpu extra':>11}")
    for where in ("main", "workers"):
        for label in dict.fromkeys(label for _, _, label in PHASES):
            with_, without, cpu_with, cpu_without = (
                statistics.median(sums[c][(where, label + suffix)]) * 1e3 for suffix in ("", CPU) for c in (True, False)
            )
            if with_ or without:
                print(
                    f"{where:<9}{label:<40}{with_:>11.2f}{without:>10.2f}{with_ - without:>+9.2f}"
                    f"{cpu_with - cpu_without:>+11.2f}"
                )
    per_pair = []
    for k in range(args.pairs):
        main_extra = sum(sums[True][("main", label)][k] - sums[False][("main", label)][k] for label in MAIN_PHASES)
        worker_code = sum(sums[True][("workers", label + CPU)][k] for label in WORKER_CODE) / bench.NUM_WORKERS
        close_extra = slowest_close[True][k] - slowest_close[False][k]
        per_pair.append((main_extra, worker_code, close_extra))
    main_extra, worker_code, close_extra = (statistics.median(p[i] for p in per_pair) * 1e3 for i in range(3))
    total = statistics.median(sum(p) for p in per_pair) * 1e3
    base = statistics.median(walls[False]) * 1e3
    print(
        f"checkpoint code on the critical path (median per pair): main {main_extra:.2f} ms + a worker's checks and "
        f"records (CPU) {worker_code:.2f} ms + the slowest close's extra wait {close_extra:+.2f} ms = {total:.2f} ms, "
        f"{total / base:.1%} of the {base:.1f} ms run without checkpoints"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
