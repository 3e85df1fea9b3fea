#!/usr/bin/env python
"""Where an Azure ``optimize()`` spends its CPU, against the SDK upload loop of bench_clouds.py
(issue 36: "Azure optimize vs an SDK upload loop"): the same 96 x 1 MiB run to local disk (the
data alone), 2-item runs to local disk and to Azurite (the protocol's fixed part), the 96-item
run to Azurite, and the SDK uploading the chunks that run wrote. CPU seconds of the process
tree (workers and Azurite included), which hardly move with the machine's load.

    .venv/bin/python benchmarks/decompose_azure_write.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
os.environ.setdefault("NO_GCE_CHECK", "true")

import bench_clouds as bench  # noqa: E402
from benchsteps import tree_cpu_seconds  # noqa: E402


def measured(fn) -> tuple[float, float]:
    """(CPU seconds of the process tree, wall seconds) of ``fn()``."""
    cpu, wall = tree_cpu_seconds(), time.perf_counter()
    fn()
    return tree_cpu_seconds() - cpu, time.perf_counter() - wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from shardwright import optimize
    from shardwright.storage import open_storage

    items = list(range(96))
    big = dict(chunk_bytes=bench.CHUNK_BYTES, num_shards=bench.SHARDS, num_workers=bench.NUM_WORKERS, verbose=False)
    small = dict(num_workers=bench.NUM_WORKERS, verbose=False)
    rows: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="sw-decompose-") as root:
        cloud = bench.Cloud("azure", root)
        try:
            for _ in range(args.repeats):
                out = tempfile.mkdtemp(dir=root)
                rows.setdefault("optimize 96 items, local disk", []).append(
                    measured(lambda o=out: optimize(bench.mib_array, items, f"{o}/a", **big))
                )
                rows.setdefault("optimize 2 items, local disk", []).append(
                    measured(lambda o=out: optimize(bench.mib_array, [0, 1], f"{o}/b", **small))
                )
                _, url = cloud.fresh()
                rows.setdefault("optimize 2 items, Azurite", []).append(
                    measured(lambda u=url: optimize(bench.mib_array, [0, 1], u, storage_options=cloud.options, **small))
                )
                _, url = cloud.fresh()
                rows.setdefault("optimize 96 items, Azurite", []).append(
                    measured(lambda u=url: optimize(bench.mib_array, items, u, storage_options=cloud.options, **big))
                )
                chunks = open_storage(url, cloud.options).list_info("")
                sizes = [info.size for info in chunks if info.key.startswith("chunk-")]
                container, _ = cloud.fresh()
                rows.setdefault("SDK upload loop, the same chunks", []).append(
                    measured(lambda c=container, s=sizes: cloud.sdk_put(c, s))
                )
        finally:
            cloud.close()
    print(f"| run (median of {args.repeats}) | CPU s | wall s |\n|---|---:|---:|")
    for name, got in rows.items():
        print(f"| {name} | {statistics.median(c for c, _ in got):.2f} | {statistics.median(w for _, w in got):.2f} |")
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
