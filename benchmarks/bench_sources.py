"""Sources and incremental runs, measured.

1. A parquet corpus -> dataset: shardwright (``sources.parquet``, fn gets one row) against
   litdata 0.2.76's way (inputs = the list of parquet files, fn yields the rows of one file),
   same machine, same run: wall time and the *main process's* peak RSS above its baseline
   (``VmHWM`` minus ``VmRSS`` before the call), each call in its own fresh process; plus the
   time to build and fingerprint the source (its footers only).
2. Incremental: a listing of N small files made into a dataset, then 1 % new files added;
   the incremental run's time against the full run's and against the listing alone.

Full sizes: 10M rows in 100 files; 100k files (run in the last half hour: the machine is
shared). ``--quick``: 1M rows in 20 files; 10k files.

    .venv/bin/python benchmarks/bench_sources.py --quick
    .venv/bin/python benchmarks/bench_sources.py --json results.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


# --- children: one call each, in a fresh process ---------------------------------------------


def sw_row(row):
    return {"id": row["id"], "text": row["text"]}


def lit_file(path):
    import pyarrow.parquet as pq

    f = pq.ParquetFile(path)
    for group in range(f.num_row_groups):
        for row in f.read_row_group(group).to_pylist():
            yield {"id": row["id"], "text": row["text"]}


def file_fn(ref):
    return {"name": ref.path.rsplit("/", 1)[-1], "data": ref.read()}


def child(kind: str, data: str, out: str, workers: int, mode: str | None) -> None:
    baseline = rss_kb("VmRSS")
    started = time.perf_counter()
    if kind == "shardwright":
        from shardwright import optimize, sources

        optimize(sw_row, sources.parquet(data), out, num_workers=workers, chunk_bytes="64MB", verbose=False)
    elif kind == "litdata":
        from litdata import optimize as lit_optimize

        files = sorted(os.path.join(data, f) for f in os.listdir(data) if f.endswith(".parquet"))
        lit_optimize(fn=lit_file, inputs=files, output_dir=out, num_workers=workers, chunk_bytes="64MB")
    elif kind == "files":
        from shardwright import optimize, sources

        optimize(file_fn, sources.files(data), out, num_workers=workers, chunk_bytes="64MB", mode=mode, verbose=False)
    elif kind == "listing":
        from shardwright import sources

        sources.files(data)
    seconds = time.perf_counter() - started
    print(
        json.dumps({"seconds": seconds, "peak_mb": (rss_kb("VmHWM") - baseline) / 1024, "baseline_mb": baseline / 1024})
    )


def run_child(*args: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the corpus -------------------------------------------------------------------------------


def make_parquet(root: str, rows: int, files: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    per = rows // files
    for f in range(files):
        ids = np.arange(f * per, (f + 1) * per, dtype=np.int64)
        text = pa.array([f"document {i} " * 3 for i in range(f * per, (f + 1) * per)])
        pq.write_table(
            pa.table({"id": ids, "text": text}), os.path.join(root, f"part-{f:05d}.parquet"), row_group_size=100_000
        )


def make_files(root: str, first: int, count: int) -> None:
    for i in range(first, first + count):
        sub = os.path.join(root, f"{i // 1000:04d}")
        os.makedirs(sub, exist_ok=True)
        with open(os.path.join(sub, f"{i:08d}.bin"), "wb") as f:
            f.write(i.to_bytes(8, "little") * 4)


def bench_parquet(tmp: str, rows: int, files: int, workers: int) -> dict:
    data = os.path.join(tmp, "parquet")
    os.makedirs(data)
    t = time.perf_counter()
    make_parquet(data, rows, files)
    print(f"corpus: {rows:,} rows in {files} files ({time.perf_counter() - t:.0f} s to write)", flush=True)
    from shardwright import sources
    from shardwright.engine.inputs import fingerprint

    t = time.perf_counter()
    source = sources.parquet(data)
    fp = fingerprint(source)
    fingerprint_s = time.perf_counter() - t
    assert fp.count == rows
    results = {"rows": rows, "files": files, "fingerprint_s": fingerprint_s}
    for kind in ("shardwright", "litdata"):
        out = os.path.join(tmp, f"out-{kind}")
        results[kind] = run_child(kind, data, out, str(workers), "")
        shutil.rmtree(out, ignore_errors=True)
    sw, lit = results["shardwright"], results["litdata"]
    print(f"fingerprint (list + footers + hash): {fingerprint_s:.2f} s")
    print(f"shardwright: {sw['seconds']:.1f} s, main-process peak +{sw['peak_mb']:.0f} MB")
    print(f"litdata:     {lit['seconds']:.1f} s, main-process peak +{lit['peak_mb']:.0f} MB")
    print(f"ratio shardwright/litdata: time {sw['seconds'] / lit['seconds']:.2f}", flush=True)
    return results


def bench_incremental(tmp: str, count: int, workers: int) -> dict:
    data = os.path.join(tmp, "files")
    make_files(data, 0, count)
    out = os.path.join(tmp, "out-files")
    full = run_child("files", data, out, str(workers), "")
    added = max(1, count // 100)
    make_files(data, count, added)
    listing = run_child("listing", data, "", "1", "")
    incremental = run_child("files", data, out, str(workers), "incremental")
    noop = run_child("files", data, out, str(workers), "incremental")
    results = {
        "files": count,
        "added": added,
        "full": full,
        "listing": listing,
        "incremental": incremental,
        "noop": noop,
    }
    print(f"{count:,} files: full run {full['seconds']:.1f} s; listing {listing['seconds']:.2f} s")
    print(
        f"+{added:,} files (1 %): incremental {incremental['seconds']:.2f} s = "
        f"{100 * incremental['seconds'] / full['seconds']:.1f} % of the full run; nothing new: {noop['seconds']:.2f} s"
    )
    return results


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, data, out, workers, mode = sys.argv[2:7]
        child(kind, data, out, int(workers), mode or None)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1M rows in 20 files; 10k files")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", choices=["parquet", "incremental"])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    rows, files, listing = (1_000_000, 20, 10_000) if args.quick else (10_000_000, 100, 100_000)
    tmp = tempfile.mkdtemp(prefix="bench-sources-")
    results: dict = {"quick": args.quick, "load": os.getloadavg()}
    try:
        if args.only in (None, "parquet"):
            results["parquet"] = bench_parquet(tmp, rows, files, args.workers)
        if args.only in (None, "incremental"):
            results["incremental"] = bench_incremental(tmp, listing, args.workers)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
