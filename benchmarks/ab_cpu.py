#!/usr/bin/env python
"""Before and after a change on workload 1 (200k small dicts ``{"i": i, "x": i * i}``,
chunk_bytes 64MB, 2 workers, checkpoints on): the wall clock *and the CPU (user + sys) of the
``optimize()`` call*, caller and workers, beside the fn-only floor's, measured in the same
fresh process, in interleaved pairs (issue 36's 200k row).

    .venv/bin/python benchmarks/ab_cpu.py /work/main/src src --pairs 9

Each pair runs both checkouts, in an order that alternates from pair to pair (A B, B A, ...).
Each run is a fresh interpreter with that checkout's ``src`` on PYTHONPATH that times the
fn-only floor (``bench_optimize.floor_fn_only``: a fork pool of 2 calling fn, nothing
written), then ``optimize()``; CPU is ``getrusage`` of the process and its reaped children
(the pool's workers) around each. Printed: per checkout the medians, and per pair the ratios
B / A of wall and CPU and each run's ratio to its own floor, as medians of paired ratios, with
the load average of each pair. Interpreter start and imports are outside both timers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from benchsteps import json_run_under

RUN = r"""
import json, os, resource, shutil, sys, tempfile, time
sys.path.insert(0, sys.argv[2])  # benchmarks/: floor_fn_only
from bench_optimize import floor_fn_only
import shardwright
def fn(i):
    return {"i": i, "x": i * i}
def cpu():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
if __name__ == "__main__":
    items = int(sys.argv[1])
    root = tempfile.mkdtemp()
    try:
        inputs = list(range(items))
        c0, t0 = cpu(), time.perf_counter()
        floor_fn_only(fn, items)
        c1, t1 = cpu(), time.perf_counter()
        shardwright.optimize(fn, inputs, os.path.join(root, "out"), chunk_bytes="64MB", num_workers=2, verbose=False)
        c2, t2 = cpu(), time.perf_counter()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"floor_wall": t1 - t0, "floor_cpu": c1 - c0, "wall": t2 - t1, "cpu": c2 - c1}))
"""


def run_once(src: str, items: int) -> dict[str, float]:
    return json_run_under(src, RUN, [str(items), os.path.dirname(os.path.abspath(__file__))])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the src directory of checkout A (before)")
    parser.add_argument("b", help="the src directory of checkout B (after)")
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--pairs", type=int, default=9)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    loads: list[float] = []
    for pair in range(args.pairs):
        order = ("A", "B") if pair % 2 == 0 else ("B", "A")
        for name in order:
            runs[name].append(run_once(args.a if name == "A" else args.b, args.items))
        loads.append(os.getloadavg()[0])
        a, b = runs["A"][-1], runs["B"][-1]
        print(
            f"pair {pair + 1} ({order[0]} first, load {loads[-1]:.2f}): "
            f"A wall {a['wall']:.3f} cpu {a['cpu']:.3f} (floor {a['floor_wall']:.3f}/{a['floor_cpu']:.3f}) | "
            f"B wall {b['wall']:.3f} cpu {b['cpu']:.3f} (floor {b['floor_wall']:.3f}/{b['floor_cpu']:.3f})",
            flush=True,
        )

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    def paired(key: str) -> float:
        return statistics.median(b[key] / a[key] for a, b in zip(runs["A"], runs["B"]))

    def to_floor(name: str, key: str) -> float:
        return statistics.median(r[key] / r[f"floor_{key}"] for r in runs[name])

    print(
        f"{args.items:,} small dicts, chunk_bytes 64MB, 2 workers, {args.pairs} pairs, load {min(loads):.2f}-{max(loads):.2f}"
    )
    for name, src in (("A", args.a), ("B", args.b)):
        print(
            f"  {name} {src}: wall {med(name, 'wall'):.3f} s (min {min(r['wall'] for r in runs[name]):.3f}), "
            f"cpu {med(name, 'cpu'):.3f} s (min {min(r['cpu'] for r in runs[name]):.3f}); floor wall "
            f"{med(name, 'floor_wall'):.3f} s, cpu {med(name, 'floor_cpu'):.3f} s; / floor (median of per-run "
            f"ratios): wall {to_floor(name, 'wall'):.2f}x, cpu {to_floor(name, 'cpu'):.2f}x"
        )
    print(f"  B / A, median of paired ratios: wall {paired('wall'):.3f}, cpu {paired('cpu'):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
