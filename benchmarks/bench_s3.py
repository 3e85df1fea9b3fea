#!/usr/bin/env python
"""optimize() writing to S3 vs to local disk, against a real S3 server (SeaweedFS) on loopback.

    .venv/bin/python benchmarks/bench_s3.py            # 2,000 x 1 MiB uint8 arrays, median of 3
    .venv/bin/python benchmarks/bench_s3.py --quick    # 200 items, 1 repeat, < 60 s
    .venv/bin/python benchmarks/bench_s3.py --items 1000 --repeats 5 --json out.json

Variants, interleaved and rotated between repeats (num_workers=2, chunk_bytes 64MB):

* shardwright -> local disk (a fresh directory under a temp root)
* shardwright -> S3         (a fresh bucket on the SeaweedFS started by this script)
* boto3 put_object          the same bytes as 64 MB objects from 2 threads: what the server
                            takes at best from one client machine (a reference, not a library)
* litdata -> S3             litdata.optimize(output_dir="s3://...", storage_options=...)

MB/s is payload (items x 1 MiB) per second of the optimize() call. Every run is checked
afterwards (a broken run fails the script): index.json counts the expected items, our reader
reads that many, and the first and last items hold the expected bytes.

litdata 0.2.76 takes ``storage_options`` (boto3 client arguments: endpoint_url, keys, region)
but uploads through obstore, whose store it builds without ``allow_http``: against a
plain-http endpoint such as this loopback server every upload fails with "builder error:
BadScheme". The script sets ``litdata.streaming.downloader._OBSTORE_CLIENT_OPTIONS
["allow_http"] = True`` and runs litdata with start_method="fork" so its workers inherit it.
An https endpoint needs neither.

On a small machine the S3 server shares the CPUs with the writer: the boto3 line shows the
server's ceiling, so compare "S3 / local" with "S3 / ceiling" before blaming the writer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from bench_optimize import redirected

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))  # the test support package (a real S3 server)

NUM_WORKERS = 2
MIB = 1 << 20
CHUNK_BYTES = "64MB"
TARGET = 0.80  # S3 throughput / local disk throughput


def mib_array(i: int) -> np.ndarray:
    return np.full(MIB, i % 256, dtype=np.uint8)


# --- variants -----------------------------------------------------------------------------------


class Bench:
    def __init__(self, items: int, root: str, log_path: str):
        from support.s3server import S3Server

        self.items = items
        self.root = root
        self.log_path = log_path
        self.server = S3Server(workdir=os.path.join(root, "s3")).start()
        self.options = dict(self.server.storage_options)
        self._n = 0

    def close(self) -> None:
        self.server.stop()

    def _bucket(self) -> str:
        return self.server.create_bucket()

    def _drop_bucket(self, bucket: str) -> None:
        with contextlib.suppress(Exception):
            self.server.delete_bucket(bucket)

    def _fresh_dir(self, name: str) -> str:
        self._n += 1
        return os.path.join(self.root, f"{name}-{self._n}")

    # each returns (seconds, check) where check() raises if the output is wrong

    def shardwright_local(self):
        from shardwright import optimize

        out = self._fresh_dir("local")
        started = time.perf_counter()
        optimize(
            mib_array, list(range(self.items)), out, chunk_bytes=CHUNK_BYTES, num_workers=NUM_WORKERS, verbose=False
        )
        seconds = time.perf_counter() - started
        try:
            self._check_ours(out, None)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        return seconds

    def shardwright_s3(self):
        from shardwright import optimize

        bucket = self._bucket()
        url = f"s3://{bucket}/sw"
        try:
            started = time.perf_counter()
            optimize(
                mib_array,
                list(range(self.items)),
                url,
                chunk_bytes=CHUNK_BYTES,
                num_workers=NUM_WORKERS,
                storage_options=self.options,
                verbose=False,
            )
            seconds = time.perf_counter() - started
            self._check_ours(url, self.options)
        finally:
            self._drop_bucket(bucket)
        return seconds

    def boto3_ceiling(self):
        import boto3
        from botocore.config import Config

        bucket = self._bucket()
        total = self.items * MIB
        size = 64_000_000
        sizes = [size] * (total // size) + ([total % size] if total % size else [])
        body = os.urandom(size)
        client = boto3.session.Session().client("s3", config=Config(max_pool_connections=NUM_WORKERS), **self.options)
        try:
            started = time.perf_counter()
            with ThreadPoolExecutor(NUM_WORKERS) as pool:
                list(
                    pool.map(
                        lambda k: client.put_object(Bucket=bucket, Key=f"obj-{k}", Body=body[: sizes[k]]),
                        range(len(sizes)),
                    )
                )
            seconds = time.perf_counter() - started
            listed = client.list_objects_v2(Bucket=bucket).get("KeyCount", 0)
            if listed != len(sizes):
                raise AssertionError(f"boto3: {listed} objects listed, {len(sizes)} written")
        finally:
            self._drop_bucket(bucket)
        return seconds

    def litdata_s3(self):
        import litdata
        from litdata.streaming import downloader

        downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True  # plain-http endpoint (see the docstring)
        cache = self._fresh_dir("litdata-cache")
        # keep litdata's staging folders (default $TMPDIR/chunks, $TMPDIR/data) inside our temp root
        os.environ["DATA_OPTIMIZER_CACHE_FOLDER"] = os.path.join(cache, "chunks")
        os.environ["DATA_OPTIMIZER_DATA_CACHE_FOLDER"] = os.path.join(cache, "data")
        bucket = self._bucket()
        url = f"s3://{bucket}/ld"
        try:
            started = time.perf_counter()
            litdata.optimize(
                fn=mib_array,
                inputs=list(range(self.items)),
                output_dir=url,
                chunk_bytes=CHUNK_BYTES,
                num_workers=NUM_WORKERS,
                storage_options=dict(self.options),
                start_method="fork",
                verbose=False,
            )
            seconds = time.perf_counter() - started
            self._check_litdata(url)
        finally:
            self._drop_bucket(bucket)
            shutil.rmtree(cache, ignore_errors=True)
        return seconds

    # -- checks ---------------------------------------------------------------------------------

    def _check_ours(self, out: str, options: dict | None) -> None:
        from shardwright import StreamingDataset
        from shardwright.storage import open_storage

        index = json.loads(open_storage(out, options).read_bytes("index.json"))
        counted = sum(c["chunk_size"] for c in index["chunks"])
        if counted != self.items:
            raise AssertionError(f"{out}: index.json counts {counted} items, expected {self.items}")
        cache = self._fresh_dir("reader-cache")
        try:
            ds = StreamingDataset(out, storage_options=options, cache_dir=cache, prefetch=False)
            if len(ds) != self.items:
                raise AssertionError(f"{out}: the reader counts {len(ds)} items, expected {self.items}")
            for k in (0, self.items - 1):  # in input order
                if not np.array_equal(ds[k], mib_array(k)):
                    raise AssertionError(f"{out}: item {k} holds the wrong bytes")
            del ds
        finally:
            shutil.rmtree(cache, ignore_errors=True)

    def _check_litdata(self, url: str) -> None:
        from shardwright import StreamingDataset
        from shardwright.storage import open_storage

        index = json.loads(open_storage(url, self.options).read_bytes("index.json"))
        counted = sum(c["chunk_size"] for c in index["chunks"])
        if counted != self.items:
            raise AssertionError(f"{url}: litdata's index.json counts {counted} items, expected {self.items}")
        cache = self._fresh_dir("reader-cache")
        try:
            ds = StreamingDataset(url, storage_options=self.options, cache_dir=cache, prefetch=False)
            if len(ds) != self.items:
                raise AssertionError(f"{url}: the reader counts {len(ds)} items, expected {self.items}")
            for k in (0, self.items - 1):  # litdata does not keep input order: check by content
                a = np.asarray(ds[k])
                if a.shape != (MIB,) or not (a == a[0]).all():
                    raise AssertionError(f"{url}: item {k} is not one of the inputs")
            del ds
        finally:
            shutil.rmtree(cache, ignore_errors=True)


VARIANTS = [
    ("sw_local", "shardwright -> local disk", "shardwright_local"),
    ("sw_s3", "shardwright -> S3", "shardwright_s3"),
    ("boto3", "boto3 put_object (server ceiling)", "boto3_ceiling"),
    ("ld_s3", "litdata -> S3", "litdata_s3"),
]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="200 items, 1 repeat (< 60 s)")
    ap.add_argument("--items", type=int, help="number of 1 MiB items (default 2000; 200 with --quick)")
    ap.add_argument("--repeats", type=int, help="repeats per variant (default 3; 1 with --quick)")
    ap.add_argument("--only", help="comma-separated variant keys: " + ",".join(v[0] for v in VARIANTS))
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    items = args.items or (200 if args.quick else 2000)
    repeats = args.repeats or (1 if args.quick else 3)
    variants = [v for v in VARIANTS if not args.only or v[0] in args.only.split(",")]

    import shardwright  # noqa: F401  (imports outside the timings)

    with contextlib.suppress(ImportError):
        import litdata  # noqa: F401

    root = tempfile.mkdtemp(prefix="shardwright-bench-s3-")
    log_path = os.path.join(tempfile.gettempdir(), f"bench_s3-{os.getpid()}.log")
    print(
        f"{items:,} x 1 MiB uint8 arrays, chunk_bytes {CHUNK_BYTES}, num_workers={NUM_WORKERS}, "
        f"{repeats} repeat(s); load average {os.getloadavg()[0]:.2f}; run output in {log_path}",
        flush=True,
    )
    started = time.monotonic()
    bench = Bench(items, root, log_path)
    print(f"SeaweedFS at {bench.server.endpoint} (started in {bench.server.startup_seconds:.1f} s)", flush=True)
    times: dict[str, list[float]] = {key: [] for key, _, _ in variants}
    failures: dict[str, str] = {}
    try:
        for r in range(repeats):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for key, label, method in order:
                if key in failures:
                    continue
                try:
                    with redirected(log_path):
                        seconds = getattr(bench, method)()
                except ImportError as exc:
                    failures[key] = f"skipped: {exc}"
                    continue
                except Exception as exc:
                    failures[key] = f"FAILED: {type(exc).__name__}: {str(exc)[:300]}"
                    with open(log_path, "a") as log:
                        traceback.print_exc(file=log)
                    continue
                times[key].append(seconds)
                print(
                    f"  [{r + 1}/{repeats}] {label:36s} {seconds:7.2f} s  {items * MIB / 1e6 / seconds:7.1f} MB/s",
                    flush=True,
                )
    finally:
        bench.close()
        shutil.rmtree(root, ignore_errors=True)

    payload_mb = items * MIB / 1e6
    results = {}
    print()
    print("| variant | median s | min s | MB/s (median) | vs shardwright local |")
    print("|---|---:|---:|---:|---:|")
    local = statistics.median(times["sw_local"]) if times.get("sw_local") else None
    for key, label, _ in variants:
        if key in failures:
            print(f"| {label} | {failures[key]} | | | |")
            results[key] = {"error": failures[key]}
            continue
        med, low = statistics.median(times[key]), min(times[key])
        mbs = payload_mb / med
        vs = f"{local / med:.0%}" if local else "-"
        print(f"| {label} | {med:.2f} | {low:.2f} | {mbs:.1f} | {vs} |")
        results[key] = {"seconds": times[key], "median_s": med, "mb_per_s": mbs}

    def ratio(a: str, b: str) -> float | None:
        if a in results and b in results and "median_s" in results[a] and "median_s" in results[b]:
            return results[b]["median_s"] / results[a]["median_s"]
        return None

    print()
    summary = {}
    for name, a, b, note in (
        ("S3 / local disk (shardwright)", "sw_s3", "sw_local", f"target >= {TARGET:.0%}"),
        ("shardwright S3 / server ceiling (boto3)", "sw_s3", "boto3", "how close the writer gets to the server"),
        ("shardwright S3 / litdata S3 (throughput)", "sw_s3", "ld_s3", "> 1: shardwright faster"),
    ):
        value = ratio(a, b)
        summary[name] = value
        if value is not None:
            print(f"{name}: {value:.0%}  ({note})")
    print(f"total {time.monotonic() - started:.0f} s; load average now {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"items": items, "repeats": repeats, "results": results, "ratios": summary}, f, indent=2)
    broken = [k for k, v in failures.items() if v.startswith("FAILED")]
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
