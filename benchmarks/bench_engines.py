#!/usr/bin/env python
"""optimize(executor="ray") against executor="local" on the same cores, and 1 vs 3 Ray nodes.

    .venv/bin/python benchmarks/bench_engines.py            # median of 3, about 2-3 minutes
    .venv/bin/python benchmarks/bench_engines.py --quick    # small sizes, 1 repeat, ~1 minute
    .venv/bin/python benchmarks/bench_engines.py --inputs 3000 --repeats 5 --json out.json
    .venv/bin/python benchmarks/bench_engines.py --repeats 8 --no-nodes   # parts 0 and 1 only

Part 1, Ray's overhead. One workload (``fn``: a numpy sort sized so one input costs ~2 ms of
CPU, BLAS/OpenMP pinned to one thread) run with ``executor="local", num_workers=2`` and with
``executor="ray"`` on a one-node Ray cluster of 2 CPUs (one task, ``num_workers=2``): the
same 2 cores. Timed from the optimize() call to its return: the cluster's start is excluded,
task scheduling, the object store and the driver's own work are included. Goal: <= 10 %.

Part 2, nodes. The same workload on a Ray cluster of 1 node and of 3 nodes (1 CPU each,
``num_workers=1`` per task). The emulated nodes share the machine's real cores, so 3 nodes
cannot beat ``os.cpu_count()`` times 1 node (2x on the dev VM).

Part 0, Ray's own fixed costs, measured apart from the work (issue 36): the first task on a
fresh cluster (a worker process starts), a warm empty task's round trip, ``ray.put`` of the
inputs, the CPU Ray's daemons burn per second while idle (paid by local runs too while the
cluster is up), and ``optimize`` of 10 inputs with each executor (the executor's fixed cost
per call: task dispatch, the share task's set-up, the driver's reads of the records).

Ray starts its worker processes at niceness 15 (``RAY_worker_niceness``, so that its own
daemons stay responsive), and the pools a share task forks inherit it: on a machine shared
with other work they get a small fraction of a core whenever anything at niceness 0 wants it,
which a quiet machine never shows. ``--ray-worker-niceness 0`` runs the same comparison with
Ray's workers at the local engine's priority.

Part 1 runs local and Ray in pairs (order alternating: ABBA), so load changes hit both alike,
and prints the median of the paired ratios beside the ratio of the medians, and the CPU
seconds of the whole process tree (this process, its pools, Ray's daemons and workers) per
run: CPU time hardly moves with load, so the CPU difference is the figure to trust on a
shared machine.

Every run is checked: the dataset holds every input once, in order. Clusters are
``ray.cluster_utils.Cluster`` on 127.0.0.1 with usage stats off, in a temp dir removed after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
os.environ["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")  # Ray's workers
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep Ray on loopback (read at import)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402
from benchsteps import cpu_seconds_between, tree_cpu_by_pid, tree_cpu_seconds  # noqa: E402

SORT_SIZE = 20000


def work(i: int) -> dict:
    rng = np.random.default_rng(i)
    values = np.sort(rng.random(SORT_SIZE))
    return {"i": i, "median": float(values[SORT_SIZE // 2])}


def calibrate(target_ms: float = 2.0) -> int:
    global SORT_SIZE
    for _ in range(3):
        started = time.perf_counter()
        for i in range(50):
            work(i)
        per = (time.perf_counter() - started) / 50 * 1000
        SORT_SIZE = max(1000, int(SORT_SIZE * target_ms / per))
    return SORT_SIZE


def check(out: str, n: int) -> None:
    from shardwright import StreamingDataset

    got = [item["i"] for item in StreamingDataset(out)]
    if got != list(range(n)):
        raise SystemExit(f"broken run in {out}: {len(got)} items, expected {n} in order")


def timed_run(out_root: str, n: int, cpu: list | None = None, **kwargs) -> float:
    from shardwright import optimize

    size = SORT_SIZE

    def fn(i: int) -> dict:  # a closure over the calibrated size: Ray pickles it by value
        rng = np.random.default_rng(i)
        values = np.sort(rng.random(size))
        return {"i": i, "median": float(values[size // 2])}

    out = tempfile.mkdtemp(dir=out_root)
    shutil.rmtree(out)
    cpu_before = tree_cpu_seconds() if cpu is not None else 0.0
    started = time.perf_counter()
    result = optimize(fn, list(range(n)), out, chunk_size=100, verbose=False, **kwargs)
    seconds = time.perf_counter() - started
    if cpu is not None:
        cpu.append(tree_cpu_seconds() - cpu_before)
    assert result.published
    check(out, n)
    shutil.rmtree(out, ignore_errors=True)
    return seconds


class Cluster:
    def __init__(self, temp: str, head_cpus: int, nodes: int):
        import ray
        from ray.cluster_utils import Cluster as RayCluster

        os.makedirs(os.path.join(temp, "ray"), exist_ok=True)
        os.environ["RAY_TMPDIR"] = temp
        self.cluster = RayCluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": head_cpus,
                "node_ip_address": "127.0.0.1",
                "temp_dir": os.path.join(temp, "ray"),
                "include_dashboard": False,
            },
        )
        for _ in range(nodes - 1):
            self.cluster.add_node(num_cpus=head_cpus, node_ip_address="127.0.0.1")
        self.cluster.wait_for_nodes()
        ray.init(address=self.cluster.address, log_to_driver=False)

    def close(self) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()


def median(values: list[float]) -> float:
    return statistics.median(values)


RAY_ARGS = dict(executor="ray", shared_output=True, num_workers=2, ray_remote_args={"num_cpus": 2})


def ray_fixed_costs(temp: str, fixed_repeats: int) -> dict:
    """Part 0 (see the module docstring), on the cluster of part 1, before its first task."""
    import ray

    @ray.remote(num_cpus=2)
    def empty() -> int:
        return os.nice(0)  # the niceness Ray's workers run at (and the pools they fork)

    started = time.perf_counter()
    niceness = ray.get(empty.remote())
    first_task = time.perf_counter() - started
    warm = []
    for _ in range(30):
        started = time.perf_counter()
        ray.get(empty.remote())
        warm.append(time.perf_counter() - started)
    puts = []
    for _ in range(30):
        started = time.perf_counter()
        ray.put(list(range(3000)))
        puts.append(time.perf_counter() - started)
    cpu_before, started = tree_cpu_by_pid(), time.perf_counter()
    time.sleep(3.0)
    idle_share = cpu_seconds_between(cpu_before, tree_cpu_by_pid()) / (time.perf_counter() - started)
    timed_run(temp, 50, **RAY_ARGS)  # the share task's imports in the warm worker
    small_local, small_ray = [], []
    for i in range(fixed_repeats):
        order = [("local", {"num_workers": 2}), ("ray", RAY_ARGS)]
        for name, kwargs in order if i % 2 == 0 else order[::-1]:
            (small_local if name == "local" else small_ray).append(timed_run(temp, 10, **kwargs))
    found = {
        "first_task_s": first_task,
        "worker_niceness": niceness,
        "warm_empty_task_ms": median(warm) * 1000,
        "put_3000_ints_ms": median(puts) * 1000,
        "idle_cpu_share": idle_share,
        "optimize_10_local_s": median(small_local),
        "optimize_10_ray_s": median(small_ray),
    }
    print(
        f"part 0, Ray's workers run at niceness {niceness} (this process at {os.nice(0)}); "
        f"Ray's fixed costs: first task on a fresh cluster {first_task:.2f} s (a worker starts; warmed "
        f"before part 1), a warm empty task {found['warm_empty_task_ms']:.1f} ms, ray.put of 3,000 ints "
        f"{found['put_3000_ints_ms']:.2f} ms, Ray's daemons idle {idle_share * 100:.1f} % of a core; "
        f"optimize of 10 inputs: local {found['optimize_10_local_s']:.3f} s, ray {found['optimize_10_ray_s']:.3f} s "
        f"(the executor's fixed cost per call {found['optimize_10_ray_s'] - found['optimize_10_local_s']:+.3f} s)"
    )
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--inputs", type=int)
    ap.add_argument("--repeats", type=int, help="pairs of runs in part 1 (and runs per node count in part 2)")
    ap.add_argument("--no-nodes", action="store_true", help="skip part 2")
    ap.add_argument(
        "--ray-worker-niceness",
        type=int,
        help="start the clusters with RAY_worker_niceness=N (Ray's default is 15: its workers, and the pools "
        "they fork, yield to every process at niceness 0, which on a shared machine is the whole difference)",
    )
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.ray_worker_niceness is not None:
        os.environ["RAY_worker_niceness"] = str(args.ray_worker_niceness)  # read by the raylet at start
    n = args.inputs or (600 if args.quick else 2000)
    repeats = args.repeats or (1 if args.quick else 3)
    print(f"calibrated sort size {calibrate()} (~2 ms per input); {n} inputs; median of {repeats}")
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")
    temp = tempfile.mkdtemp(prefix="swbench-", dir="/tmp")
    results: dict = {"inputs": n, "repeats": repeats, "sort_size": SORT_SIZE, "load_start": os.getloadavg()[0]}
    try:
        local, ray_2cpu, cpu_local, cpu_ray = [], [], [], []
        cluster = Cluster(temp + "/a", head_cpus=2, nodes=1)
        try:
            results["part0"] = ray_fixed_costs(temp, 3 if args.quick else 7)
            for i in range(repeats):  # pairs, order alternating (ABBA): drift in load hits both alike
                order = ["local", "ray"] if i % 2 == 0 else ["ray", "local"]
                for name in order:
                    if name == "local":
                        local.append(timed_run(temp, n, cpu_local, num_workers=2))
                    else:
                        ray_2cpu.append(timed_run(temp, n, cpu_ray, **RAY_ARGS))
        finally:
            cluster.close()
        overhead = median(ray_2cpu) / median(local) - 1
        paired = median([r / x for r, x in zip(ray_2cpu, local)]) - 1
        results["part1"] = {
            "local_s": local,
            "ray_s": ray_2cpu,
            "overhead": overhead,
            "paired_overhead": paired,
            "local_cpu_s": cpu_local,
            "ray_cpu_s": cpu_ray,
        }
        print(
            f"part 1, same 2 cores: local {median(local):.2f} s, ray {median(ray_2cpu):.2f} s "
            f"(min {min(local):.2f} / {min(ray_2cpu):.2f}); Ray's overhead {overhead * 100:+.1f} % by medians, "
            f"{paired * 100:+.1f} % median of {repeats} paired ratios (goal <= 10 %); CPU seconds of the process tree "
            f"per run: local {median(cpu_local):.2f}, ray {median(cpu_ray):.2f} "
            f"({(median(cpu_ray) / median(cpu_local) - 1) * 100:+.1f} %)"
        )
        print(
            f"  local runs: {', '.join(f'{x:.2f}' for x in local)}; ray runs: {', '.join(f'{x:.2f}' for x in ray_2cpu)}"
        )
        if not args.no_nodes:
            by_nodes: dict[int, list[float]] = {}
            for nodes in (1, 3):
                cluster = Cluster(f"{temp}/n{nodes}", head_cpus=1, nodes=nodes)
                try:
                    timed_run(temp, 50, executor="ray", shared_output=True, num_workers=1)
                    by_nodes[nodes] = [
                        timed_run(temp, n, executor="ray", shared_output=True, num_workers=1) for _ in range(repeats)
                    ]
                finally:
                    cluster.close()
            speedup = median(by_nodes[1]) / median(by_nodes[3])
            results["part2"] = {"1_node_s": by_nodes[1], "3_nodes_s": by_nodes[3], "speedup": speedup}
            print(
                f"part 2, Ray nodes of 1 CPU: 1 node {median(by_nodes[1]):.2f} s, 3 nodes "
                f"{median(by_nodes[3]):.2f} s; speed-up {speedup:.2f}x (capped at {os.cpu_count()}x by the cores)"
            )
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    results["load_end"] = os.getloadavg()[0]
    print(f"load average at the end {results['load_end']:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
