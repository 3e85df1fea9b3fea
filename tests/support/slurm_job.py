"""The prepare.py of the Slurm tests: one optimize() call, run by every task of an array.

    python tests/support/slurm_job.py OUTPUT_DIR --inputs 240 --sleep 0.05 --chunk-size 4 \\
        --report-dir REPORTS [--on-error skip --fail 5,17 --fixed-if PATH] [--num-shards 8]

The node identity is NOT passed: optimize() reads SLURM_ARRAY_* (or DATA_OPTIMIZER_*) itself.
``fn(i)`` sleeps ``--sleep`` seconds and returns ``{"i": i, "x": i * i}``; it raises
``ValueError`` for the inputs in ``--fail`` unless the file ``--fixed-if`` exists (the "fix").

What the tests look at, written under ``--report-dir``:

* ``task{ID}-r{RESTART}-{PID}.json``: one per process: Slurm ids, node, start/end times,
  the inputs of this node's shards already committed when it started (``committed_before``),
  and optimize()'s result (items, published, pending_shards, failed) or the error.
* ``publish.log``: one line per call of ``protocol.publish.publish`` (writing index.json), so a
  test can assert the dataset was published exactly once.

Test hooks (all in the main process, where publishing happens, but the first):

* ``SW_TEST_GATE=PATH SW_TEST_HOLD_FROM=K`` in the environment: inputs from K on wait in fn
  until PATH exists.

* ``--barrier-dir D --barrier-count N``: every task waits at the start of
  ``publish_if_complete`` until N tasks got there, so they publish at the same moment.
* ``--delay-listing-rank R --delay-listing S``: on node R, while publishing, sleep S seconds
  between listing the other shards' commit records and reading them (a slow S3 listing).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path

from shardwright import optimize
from shardwright.engine import driver as engine_driver
from shardwright.engine.planning import node_identity
from shardwright.protocol import publish as publish_module
from shardwright.protocol import records
from shardwright.protocol.manifest import read_manifest
from shardwright.protocol.shards import shards_of_node
from shardwright.storage import open_storage

SLEEP = 0.0
FAIL: set[int] = set()
FIXED_IF: str | None = None


def _held(i: int) -> None:
    """With ``SW_TEST_GATE`` (a path) and ``SW_TEST_HOLD_FROM`` in the environment (not in fn's
    globals: fn stays the same call for a process started without them), input
    ``i >= SW_TEST_HOLD_FROM`` waits until that file exists (polled, 600 s at most): the
    process is certainly still running when a test acts on it, at any load."""
    gate = os.environ.get("SW_TEST_GATE")
    deadline = time.monotonic() + 600
    while gate and i >= int(os.environ["SW_TEST_HOLD_FROM"]) and not os.path.exists(gate):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)


def make_sample(i):
    _held(i)
    if SLEEP:
        time.sleep(SLEEP)
    if i in FAIL and not (FIXED_IF and os.path.exists(FIXED_IF)):
        raise ValueError(f"input {i} is bad (test failure)")
    return {"i": i, "x": i * i}


def _append_line(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def load_progress(storage, bounds: dict, manifest) -> dict:
    """records.load_progress, read-only."""
    return records.load_progress(storage, bounds, manifest.run_id)


def committed_inputs(output_dir: str, rank: int, count: int) -> int:
    """Inputs of node ``rank``'s shards committed so far (0 when there is no run yet)."""
    storage = open_storage(output_dir, create=True)
    manifest = read_manifest(storage)
    if manifest is None:
        return 0
    bounds = manifest.shard_bounds()
    mine = {s: bounds[s] for s in shards_of_node(manifest.num_shards, rank, count)}
    return sum(p.inputs_done for p in load_progress(storage, mine, manifest).values())


def _install_hooks(args, rank: int, report_dir: Path) -> None:
    original_publish = publish_module.publish

    def counting_publish(storage, manifest, progress):
        chunks = original_publish(storage, manifest, progress)
        _append_line(
            report_dir / "publish.log",
            json.dumps(
                {
                    "task": os.environ.get("SLURM_ARRAY_TASK_ID"),
                    "rank": rank,
                    "pid": os.getpid(),
                    "node": os.environ.get("SLURMD_NODENAME"),
                    "run_id": manifest.run_id,
                    "chunks": len(chunks),
                    "time": time.time(),
                }
            ),
        )
        return chunks

    publish_module.publish = counting_publish

    in_publish = {"on": False}
    original_pic = engine_driver.publish_if_complete

    def hooked_publish_if_complete(storage, manifest, known, *rest, **options):
        if args.barrier_dir:
            barrier = Path(args.barrier_dir)
            barrier.mkdir(parents=True, exist_ok=True)
            (barrier / f"ready-{rank}-{os.getpid()}").touch()
            deadline = time.monotonic() + 45
            while len(list(barrier.glob("ready-*"))) < args.barrier_count and time.monotonic() < deadline:
                time.sleep(0.01)
        in_publish["on"] = True
        return original_pic(storage, manifest, known, *rest, **options)

    engine_driver.publish_if_complete = hooked_publish_if_complete  # the name optimize() calls

    if args.delay_listing_rank is not None and args.delay_listing_rank == rank:
        original_listing = records.record_listing

        def slow_listing(storage):
            listed = original_listing(storage)
            if in_publish["on"]:
                time.sleep(args.delay_listing)
            return listed

        records.record_listing = slow_listing


def main(argv=None) -> int:
    global SLEEP, FAIL, FIXED_IF
    ap = argparse.ArgumentParser()
    ap.add_argument("output_dir")
    ap.add_argument("--inputs", type=int, required=True)
    ap.add_argument("--sleep", type=float, default=0.0)
    ap.add_argument("--chunk-size", type=int, default=4)
    # the tests compute shares with the layout of 64 shards (the default before issue 19); the
    # default rule (4 per worker of the run) is tested in tests/unit/test_decide.py and test_optimize.py
    ap.add_argument("--num-shards", type=int, default=64)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--on-error", default="raise")
    ap.add_argument("--max-retries", type=int, default=0)
    ap.add_argument("--fail", default="")
    ap.add_argument("--fixed-if")
    ap.add_argument("--report-dir", required=True)
    ap.add_argument("--barrier-dir")
    ap.add_argument("--barrier-count", type=int, default=0)
    ap.add_argument("--delay-listing-rank", type=int)
    ap.add_argument("--delay-listing", type=float, default=0.0)
    args = ap.parse_args(argv)
    SLEEP = args.sleep
    FAIL = {int(x) for x in args.fail.split(",") if x}
    FIXED_IF = args.fixed_if

    report_dir = Path(args.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    task = os.environ.get("SLURM_ARRAY_TASK_ID", "x")
    report = {
        "task": task,
        "job": os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID"),
        "restart": restart,
        "node": os.environ.get("SLURMD_NODENAME"),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "start": time.time(),
    }
    path = report_dir / f"task{task}-r{restart}-{os.getpid()}.json"
    try:
        node = node_identity(None, None)
        report.update(rank=node.rank, count=node.count, source=node.source)
        report["committed_before"] = committed_inputs(args.output_dir, node.rank, node.count)
        _install_hooks(args, node.rank, report_dir)
        print(
            f"[slurm_job] task {task} restart {restart}: node {node.rank} of {node.count} ({node.source}), "
            f"{report['committed_before']} of its inputs already committed",
            file=sys.stderr,
            flush=True,
        )
        result = optimize(
            make_sample,
            list(range(args.inputs)),
            args.output_dir,
            chunk_size=args.chunk_size,
            num_workers=args.workers,
            num_shards=args.num_shards,
            on_error=args.on_error,
            max_retries=args.max_retries,
            verbose=True,
        )
        report.update(
            ok=True,
            items=result.items,
            chunks=result.chunks,
            resumed=result.resumed,
            published=result.published,
            pending_shards=result.pending_shards,
            failed=result.failed,
        )
        return 0
    except BaseException as exc:
        report.update(
            ok=False, error=type(exc).__name__, message=str(exc)[:2000], traceback=traceback.format_exc()[-4000:]
        )
        raise
    finally:
        report["end"] = time.time()
        path.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
