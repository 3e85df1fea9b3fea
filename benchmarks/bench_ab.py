#!/usr/bin/env python
"""Before and after a change: the same optimize() under two checkouts' ``src``, in fresh
processes, one after the other in interleaved pairs, printed as ratios (B / A).

    .venv/bin/python benchmarks/bench_ab.py /work/main/src src                # 200k dicts, 2,000 chunks
    .venv/bin/python benchmarks/bench_ab.py /work/main/src src --items 2000000 --chunk-size 100000

Each run writes ``--items`` small dicts ``{"i": i, "x": i * i}`` in chunks of ``--chunk-size``
on 2 workers to a fresh directory; its wall seconds (the call) and the cpu seconds of its
process tree (getrusage of the children: steadier than wall time on a shared machine) are
kept. The floor is fn alone over the inputs, in this process.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

RUN = """
import sys, time
from shardwright import optimize
def fn(i):
    return {"i": i, "x": i * i}
if __name__ == "__main__":
    t = time.perf_counter()
    optimize(fn, list(range(int(sys.argv[2]))), sys.argv[1], chunk_size=int(sys.argv[3]), num_workers=2, verbose=False)
    sys.stderr.write(f"{time.perf_counter() - t}\\n")
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("a", help="the src directory of checkout A (before)")
    parser.add_argument("b", help="the src directory of checkout B (after)")
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--chunk-size", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=7)
    args = parser.parse_args()
    t = time.perf_counter()
    for i in range(args.items):
        {"i": i, "x": i * i}  # the floor: fn's work alone
    floor = time.perf_counter() - t
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}, {os.cpu_count()} cpus")
    walls: dict[str, list[float]] = {"A": [], "B": []}
    cpus: dict[str, list[float]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as root:
        script = os.path.join(root, "run.py")
        with open(script, "w") as f:
            f.write(RUN)
        for k in range(args.pairs):
            for name, src in (("A", args.a), ("B", args.b)):
                env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
                out = os.path.join(root, f"{name}-{k}")
                before = _children_cpu()
                done = subprocess.run(
                    [sys.executable, script, out, str(args.items), str(args.chunk_size)],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                if done.returncode:
                    raise SystemExit(f"run {name} failed:\n{done.stderr}")
                cpus[name].append(_children_cpu() - before)
                walls[name].append(float(done.stderr.strip().splitlines()[-1]))
    wall_ratios = [b / a for a, b in zip(walls["A"], walls["B"], strict=True)]
    cpu_ratios = [b / a for a, b in zip(cpus["A"], cpus["B"], strict=True)]
    print(f"{args.items:,} small dicts, chunks of {args.chunk_size:,}, 2 workers; floor (fn alone) {floor:.3f} s")
    for name, src in (("A", args.a), ("B", args.b)):
        print(
            f"  {name} {src}: wall {statistics.median(walls[name]):.3f} s (min {min(walls[name]):.3f}, "
            f"{statistics.median(walls[name]) / floor:.1f}x the floor), cpu of the process tree "
            f"{statistics.median(cpus[name]):.3f} s"
        )
    print(
        f"  B / A, median of {args.pairs} pairs: wall {statistics.median(wall_ratios):.3f}, "
        f"cpu {statistics.median(cpu_ratios):.3f} (cpu pairs {' '.join(f'{r:.3f}' for r in cpu_ratios)})"
    )
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
