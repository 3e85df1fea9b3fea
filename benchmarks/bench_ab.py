#!/usr/bin/env python
"""Before and after a change: the same optimize() under two checkouts' ``src``, in fresh
processes, one after the other in interleaved pairs, printed as ratios (B / A).

    .venv/bin/python benchmarks/bench_ab.py /work/main/src src                # 200k dicts, 2,000 chunks
    .venv/bin/python benchmarks/bench_ab.py /work/main/src src --items 2000000 --chunk-size 100000

Each run writes ``--items`` small dicts in chunks of ``--chunk-size`` on 2 workers to a fresh
directory (benchmarks/paired.py, shared with bench_telemetry.py: the wall seconds of the call,
its caller's main-thread cpu, and the cpu of its process tree). The floor is fn alone over the
inputs, in this process.
"""

from __future__ import annotations

import argparse
import os
import tempfile

from paired import floor_seconds, paired_runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("a", help="the src directory of checkout A (before)")
    parser.add_argument("b", help="the src directory of checkout B (after)")
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--chunk-size", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=7)
    args = parser.parse_args()
    floor = floor_seconds(args.items)
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}, {os.cpu_count()} cpus")
    settings = [
        (name, dict(os.environ, PYTHONPATH=os.path.abspath(src))) for name, src in (("A", args.a), ("B", args.b))
    ]
    with tempfile.TemporaryDirectory() as root:
        runs = paired_runs(settings, args.items, args.chunk_size, args.pairs, root)
    print(f"{args.items:,} small dicts, chunks of {args.chunk_size:,}, 2 workers; floor (fn alone) {floor:.3f} s")
    for name, src in (("A", args.a), ("B", args.b)):
        wall = runs.median("wall", name)
        print(
            f"  {name} {src}: wall {wall:.3f} s (min {min(runs.wall[name]):.3f}, {wall / floor:.1f}x the floor), "
            f"caller cpu {runs.median('caller', name):.3f} s, cpu of the process tree {runs.median('tree', name):.3f} s"
        )
    print(f"  {runs.summary('A', 'B')}")
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
