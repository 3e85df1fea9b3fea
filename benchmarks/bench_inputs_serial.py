#!/usr/bin/env python
"""The main process's serial CPU over a call's inputs before the pool starts (issue 36, the
200k small dicts row): their types and fingerprint (``check_before_writing``), then their
file stats and identities (``make_request``, ``open_call``), each in a fresh interpreter as in
a real call (first uses of numpy functions included), two checkouts alternated.

    .venv/bin/python benchmarks/bench_inputs_serial.py /work/main/src src --pairs 11
    .venv/bin/python benchmarks/bench_inputs_serial.py /work/main/src src --kind strs

Thread CPU (``time.thread_time``), medians over the pairs, in ms; the inputs are built before
the timer (``list(range(N))``, or ``f"item-{i}"`` strs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from benchsteps import json_run_under

RUN = r"""
import json, sys, time
from shardwright.engine.inputs import PlainInputs
n, kind = int(sys.argv[1]), sys.argv[2]
values = list(range(n)) if kind == "ints" else [f"item-{i}" for i in range(n)]
inputs = PlainInputs(values)
t0 = time.thread_time()
inputs.check_before_writing()
t1 = time.thread_time()
inputs.input_files()
inputs.identities()
t2 = time.thread_time()
print(json.dumps({"fingerprint": t1 - t0, "identities": t2 - t1, "total": t2 - t0}))
"""


def run_once(src: str, items: int, kind: str) -> dict[str, float]:
    return json_run_under(src, RUN, [str(items), kind])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="the src directory of checkout A (before)")
    parser.add_argument("b", help="the src directory of checkout B (after)")
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--kind", choices=["ints", "strs"], default="ints")
    parser.add_argument("--pairs", type=int, default=11)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    loads = []
    for pair in range(args.pairs):
        for name in ("A", "B") if pair % 2 == 0 else ("B", "A"):
            runs[name].append(run_once(args.a if name == "A" else args.b, args.items, args.kind))
        loads.append(os.getloadavg()[0])
    print(f"{args.items:,} {args.kind}, {args.pairs} pairs, load {min(loads):.2f}-{max(loads):.2f}; CPU ms, medians")
    for name, src in (("A", args.a), ("B", args.b)):
        row = {
            key: statistics.median(r[key] for r in runs[name]) * 1e3 for key in ("fingerprint", "identities", "total")
        }
        print(f"  {name} {src}: " + ", ".join(f"{key} {value:.2f}" for key, value in row.items()))
    ratios = [b["total"] / a["total"] for a, b in zip(runs["A"], runs["B"])]
    print(f"  B / A total, median of paired ratios: {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
