#!/usr/bin/env python
"""Before and after in one run: ``bench_optimize.py`` on two source trees, alternated round by
round (fresh processes, one repeat a round), so both see the same load; prints each tree's
median and min seconds, the median CPU seconds of the process tree, and the ratios to the
floors measured in the same rounds.

    git archive <before> src | tar -x -C /tmp/before
    .venv/bin/python benchmarks/ab_trees.py --tree before=/tmp/before/src --tree after=src \\
        --only 1,2 --rounds 7

Arguments after ``--`` go to bench_optimize.py (``-- --arrays 1000``). Floors are the
median over both trees' rounds (they do not depend on the tree).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_round(src: str, only: str, extra: list[str], out: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    cmd = [sys.executable, os.path.join(HERE, "bench_optimize.py"), "--only", only, "--repeats", "1"]
    cmd += ["--no-litdata", "--json", out, *extra]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="name=path of a src folder (twice)")
    parser.add_argument("--only", default="1,2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("extra", nargs="*", help="after --: passed to bench_optimize.py")
    args = parser.parse_args()
    trees = [tuple(t.split("=", 1)) for t in args.tree]
    loads = [os.getloadavg()[0]]
    # workload -> tree -> variant -> [(seconds, cpu)]
    runs: dict[str, dict[str, dict[str, list[tuple[float, float]]]]] = {}
    titles: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]  # neither tree always runs first
            for name, src in order:
                result = run_round(src, args.only, args.extra, os.path.join(tmp, "r.json"))
                for w in result["workloads"]:
                    titles[w["workload"]] = w["title"]
                    for key, v in w["variants"].items():
                        cell = runs.setdefault(w["workload"], {}).setdefault(name, {}).setdefault(key, [])
                        cell.extend(zip(v["seconds"], v["cpu_seconds"]))
            loads.append(os.getloadavg()[0])
            print(f"round {r + 1}/{args.rounds} done, load average {loads[-1]:.2f}", file=sys.stderr)
    print(f"{args.rounds} rounds, load average {min(loads):.2f}-{max(loads):.2f} (1-minute, at each round's end)")
    for wid, by_tree in runs.items():
        floors: dict[str, list[float]] = {}
        for variants in by_tree.values():
            for key in ("floor_fn", "floor_io"):
                floors.setdefault(key, []).extend(s for s, _ in variants.get(key, []))
        fn_floor, io_floor = (statistics.median(floors[k]) for k in ("floor_fn", "floor_io"))
        print(
            f"\nworkload {wid}: {titles[wid]}; floors (median of all rounds): fn only {fn_floor:.3f} s, "
            f"raw I/O {io_floor:.3f} s, fn + raw I/O {fn_floor + io_floor:.3f} s"
        )
        print(
            f"  {'tree':10s} {'variant':8s} {'median s':>9s} {'min s':>7s} {'cpu s':>7s} "
            f"{'/ fn floor':>10s} {'/ fn+I/O':>9s}"
        )
        for name, variants in by_tree.items():
            for key, cells in variants.items():
                if key.startswith("floor"):
                    continue
                secs = [s for s, _ in cells]
                cpus = [c for _, c in cells if not math.isnan(c)]
                med = statistics.median(secs)
                cpu = statistics.median(cpus) if cpus else float("nan")
                print(
                    f"  {name:10s} {key:8s} {med:9.3f} {min(secs):7.3f} {cpu:7.3f} "
                    f"{med / fn_floor:9.2f}x {med / (fn_floor + io_floor):8.2f}x"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
