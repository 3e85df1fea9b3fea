#!/usr/bin/env python
"""The wall-clock timeline of one shardwright.optimize run across its processes: when each
phase of the main process (fingerprint, lease, manifest, pool, shard claims, publish) and of
each worker (fork, set-up, each shard, the committer's close) starts and ends.

    .venv/bin/python benchmarks/timeline_optimize.py               # workload 1: 200k small dicts
    .venv/bin/python benchmarks/timeline_optimize.py --workload 2  # 2,000 x 1 MiB arrays
    .venv/bin/python benchmarks/timeline_optimize.py --no-checkpoint

A diagnostic, not a benchmark: it wraps shardwright's internals (before the pool forks, so
the workers keep the wrappers) and prints one line per call, milliseconds from the start of
the timed call (a warm-up run first). Issue 36's finding came from it: the run's critical
path is the main process's serial work (each shard's claim, two fsyncs, while a worker waits
for its next task), not the workers' hot loop.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_optimize as bench

# (module, attribute path, label): the phases timed
PHASES = [
    ("shardwright.engine.inputs", "PlainInputs.check_before_writing", "inputs fingerprinted"),
    ("shardwright.protocol.lease", "Lease.acquire", "node lease acquired"),
    ("shardwright.engine.driver", "open_call", "run opened (observe, decide, manifest)"),
    ("shardwright.engine.pool", "_Watch.run", "pool runs"),
    ("shardwright.protocol.claims", "ShardClaims.claim", "shard claimed"),
    ("shardwright.protocol.lease", "Lease.release", "lease released"),
    ("shardwright.engine.driver", "_finish", "finish (confirm, publish, cleanup)"),
    ("shardwright.protocol.publish", "publish", "index.json written"),
    ("shardwright.protocol.publish", "cleanup_after_publish", "run state cleaned up"),
    ("shardwright.engine.attempts", "AttemptLog.close", "attempt closed"),
    ("shardwright.engine.worker", "Worker.__init__", "worker set up"),
    ("shardwright.engine.worker", "Worker.run_shard", "shard run"),
    ("shardwright.engine.committer", "ChunkCommitter.submit", "chunk submitted (waits when full)"),
    ("shardwright.engine.committer", "ChunkCommitter.close", "committer closed (last barrier)"),
]
WORKLOADS = {"1": (bench.small_dict, 200_000), "2": (bench.mib_array, 2_000)}

Event = tuple[int, str, str, float, float]  # pid, thread, label, start, end (time.time())
EVENTS: list[Event] = []


def timed(fn: Callable, label: str) -> Callable:
    def run(*args: Any, **kwargs: Any) -> Any:
        started = time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            EVENTS.append((os.getpid(), threading.current_thread().name, label, started, time.time()))

    return run


def install(dump_dir: str) -> None:
    for module, path, label in PHASES:
        owner: Any = importlib.import_module(module)
        *parents, name = path.split(".")
        for part in parents:
            owner = getattr(owner, part)
        setattr(owner, name, timed(getattr(owner, name), label))
    import shardwright.engine.pool as pool

    worker_main = pool.worker_main

    def traced_main(*args: Any, **kwargs: Any) -> None:
        EVENTS.append((os.getpid(), "MainThread", "forked", time.time(), time.time()))
        try:
            worker_main(*args, **kwargs)
        finally:
            with open(os.path.join(dump_dir, f"{os.getpid()}.json"), "w") as f:
                json.dump(EVENTS, f)

    pool.worker_main = traced_main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="1", choices=sorted(WORKLOADS))
    parser.add_argument("--no-checkpoint", action="store_true")
    args = parser.parse_args(argv)
    import shardwright

    fn, count = WORKLOADS[args.workload]
    root = tempfile.mkdtemp(prefix="sw-timeline-")
    dumps = os.path.join(root, "events")
    try:
        install(dumps)
        os.makedirs(dumps)  # before the warm-up too: its workers write their events on exit
        shardwright.optimize(fn, list(range(count)), os.path.join(root, "warm"), num_workers=2, verbose=False)
        for name in os.listdir(dumps):
            os.unlink(os.path.join(dumps, name))
        EVENTS.clear()
        inputs = list(range(count))
        started = time.time()
        shardwright.optimize(
            fn, inputs, os.path.join(root, "out"), num_workers=2, verbose=False, use_checkpoint=not args.no_checkpoint
        )
        ended = time.time()
        events = list(EVENTS)
        for name in os.listdir(dumps):
            with open(os.path.join(dumps, name)) as f:
                events += [tuple(e) for e in json.load(f)]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f}; the call took {(ended - started) * 1e3:.1f} ms")
    print(f"{'start ms':>8} {'end ms':>8} {'ms':>6}  process  thread          phase")
    names: dict[int, str] = {os.getpid(): "main"}
    for pid, thread, label, t0, t1 in sorted(events, key=lambda e: e[3]):
        if t0 < started:
            continue
        who = names.setdefault(pid, f"worker{len(names) - 1}")
        print(
            f"{(t0 - started) * 1e3:8.1f} {(t1 - started) * 1e3:8.1f} {(t1 - t0) * 1e3:6.1f}  {who:8} {thread[:15]:15} {label}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
