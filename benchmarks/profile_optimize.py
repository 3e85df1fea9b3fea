#!/usr/bin/env python
"""cProfile of one shardwright.optimize run: the main process, the worker's main thread and
its committer's two threads (chunk writer, sealer), each profiled separately (num_workers=1, start_method="fork").

    .venv/bin/python benchmarks/profile_optimize.py                 # workload 1: 200k small dicts
    .venv/bin/python benchmarks/profile_optimize.py --workload 4    # 200k items, chunk_size=100
    .venv/bin/python benchmarks/profile_optimize.py --workload 4 --no-checkpoint --top 30

The worker is profiled by wrapping ``shardwright.engine.worker.worker_main`` and
``ChunkCommitter._write_loop`` / ``_seal_loop`` before the pool forks (fork keeps the patched module), so this
uses shardwright's internals on purpose: it is a diagnostic, not a benchmark (cProfile
roughly doubles the cost of small Python calls).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_optimize as bench

WORKLOADS = {
    "1": dict(fn=bench.small_dict, n=200_000, kwargs={}),
    "2": dict(fn=bench.mib_array, n=500, kwargs={}),
    "3": dict(fn=bench.token_blocks, n=500, kwargs={}),
    "4": dict(fn=bench.small_dict, n=200_000, kwargs={"chunk_size": 100}),
    "5": dict(fn=bench.small_dict, n=10, kwargs={}),
}


def install_worker_profilers(prof_dir: str) -> None:
    import shardwright.engine.committer as committer
    import shardwright.engine.pool as pool

    original_main = pool.worker_main
    loops = {"committer": committer.ChunkCommitter._write_loop, "sealer": committer.ChunkCommitter._seal_loop}

    def profiled_main(wid, *args, **kwargs):
        prof = cProfile.Profile()
        prof.enable()
        try:
            return original_main(wid, *args, **kwargs)
        finally:
            prof.disable()
            prof.dump_stats(os.path.join(prof_dir, f"worker-{wid}-{os.getpid()}.prof"))

    def profiled(name: str, loop):
        def run(self):
            prof = cProfile.Profile()
            prof.enable()
            try:
                return loop(self)
            finally:
                prof.disable()
                prof.dump_stats(os.path.join(prof_dir, f"{name}-{os.getpid()}.prof"))

        return run

    pool.worker_main = profiled_main  # the name the pool starts
    committer.ChunkCommitter._write_loop = profiled("committer", loops["committer"])
    committer.ChunkCommitter._seal_loop = profiled("sealer", loops["sealer"])


def report(title: str, paths: list[str], top: int, sort: str) -> str:
    if not paths:
        return f"== {title}: no profile written\n"
    out = io.StringIO()
    stats = pstats.Stats(*paths, stream=out)
    stats.strip_dirs().sort_stats(sort).print_stats(top)
    return f"== {title} (sorted by {sort})\n{out.getvalue()}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", default="1", choices=sorted(WORKLOADS))
    parser.add_argument("--items", type=int, default=None, help="override the number of inputs")
    parser.add_argument("--no-checkpoint", action="store_true")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative, ...)")
    parser.add_argument("--save", default=None, help="keep the .prof files in this folder")
    args = parser.parse_args()

    import shardwright

    spec = WORKLOADS[args.workload]
    n = args.items or spec["n"]
    root = tempfile.mkdtemp(prefix="shardwright-profile-")
    prof_dir = args.save or os.path.join(root, "prof")
    os.makedirs(prof_dir, exist_ok=True)
    try:
        install_worker_profilers(prof_dir)
        main_prof = cProfile.Profile()
        started = time.perf_counter()
        main_prof.enable()
        result = shardwright.optimize(
            spec["fn"],
            list(range(n)),
            os.path.join(root, "out"),
            num_workers=1,
            start_method="fork",
            verbose=False,
            use_checkpoint=not args.no_checkpoint,
            **spec["kwargs"],
        )
        main_prof.disable()
        seconds = time.perf_counter() - started
        main_prof.dump_stats(os.path.join(prof_dir, "main.prof"))
        print(
            f"workload {args.workload}, {n:,} inputs, use_checkpoint={not args.no_checkpoint}, 1 worker "
            f"(profiled): {seconds:.2f} s; {result}\n"
        )
        files = sorted(os.listdir(prof_dir))
        print(report("main process", [os.path.join(prof_dir, "main.prof")], args.top, args.sort))
        print(
            report(
                "worker main thread",
                [os.path.join(prof_dir, f) for f in files if f.startswith("worker-")],
                args.top,
                args.sort,
            )
        )
        for prefix, title in (
            ("committer-", "worker committer (chunk writer) thread"),
            ("sealer-", "worker sealer thread"),
        ):
            print(
                report(title, [os.path.join(prof_dir, f) for f in files if f.startswith(prefix)], args.top, args.sort)
            )
        print(checkpoint_summary(prof_dir, files, seconds))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


# What use_checkpoint=True adds (issue 19 asks for it noise-free): the records read by the
# main process (the share's look before claiming, publish's check of every chain) and, per
# commit round, the lease and claim checks and the record files written by the committer.
CHECKPOINT_FUNCTIONS = {"load_progress", "check_still_held", "write_records"}


def checkpoint_summary(prof_dir: str, files: list[str], seconds: float) -> str:
    """Seconds spent in checkpoint code, per process and thread, against the run's seconds
    (an upper bound of its cost: the committer thread's part overlaps the worker's fn)."""
    lines, total = [], 0.0
    for title, names in (
        ("main process", ["main.prof"]),
        ("worker committer and sealer threads", [f for f in files if f.startswith(("committer-", "sealer-"))]),
        ("worker main threads", [f for f in files if f.startswith("worker-")]),
    ):
        spent, calls = 0.0, 0
        for name in names:
            stats = pstats.Stats(os.path.join(prof_dir, name)).stats  # type: ignore[attr-defined]
            for (_file, _line, func), (_cc, ncalls, _tt, cumtime, _callers) in stats.items():
                if func in CHECKPOINT_FUNCTIONS:
                    spent += cumtime
                    calls += ncalls
        total += spent
        lines.append(f"  {title}: {spent:.4f} s in {calls} calls")
    share = 100 * total / seconds if seconds else 0.0
    return (
        f"== checkpoint code ({', '.join(sorted(CHECKPOINT_FUNCTIONS))}), under cProfile: {total:.4f} s "
        f"of the run's {seconds:.2f} s ({share:.2f} %)\n" + "\n".join(lines) + "\n"
    )


if __name__ == "__main__":
    sys.exit(main())
