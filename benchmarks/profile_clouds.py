#!/usr/bin/env python
"""Requests per run on GCS, Azure and S3 (fake-gcs-server, Azurite and SeaweedFS on loopback, started here):
``optimize()`` against the SDK upload loop of bench_clouds.py moving the same chunks, and the
cold reader against the SDK GET loop, counted by kind (issue 36: "count them").

    .venv/bin/python benchmarks/profile_clouds.py               # every store, 96 x 1 MiB items
    .venv/bin/python benchmarks/profile_clouds.py --only azure --items 480 --timeline

A diagnostic, not a benchmark: every HTTP request of this process and of its forked workers
is logged by wrapping ``http.client.HTTPConnection`` (both SDKs send through it, via urllib3)
before anything is imported, so the figures it prints are counts, and the time to each
response's headers (not its body). Keys are shown with the bucket, run ids and numbers
folded, so that "one per chunk" and "one per shard" rows stand out.
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
os.environ.setdefault("NO_GCE_CHECK", "true")
LOG = os.path.join(tempfile.mkdtemp(prefix="sw-profile-clouds-"), "requests.jsonl")

_putrequest = http.client.HTTPConnection.putrequest
_getresponse = http.client.HTTPConnection.getresponse


def _logged_putrequest(self, method, url, *args, **kwargs):
    self._sw_request = (method, url, time.perf_counter())
    return _putrequest(self, method, url, *args, **kwargs)


def _logged_getresponse(self, *args, **kwargs):
    response = _getresponse(self, *args, **kwargs)
    method, url, started = getattr(self, "_sw_request", ("?", "?", time.perf_counter()))
    with open(LOG, "a") as f:  # one line per write: forked workers append to the same file
        f.write(json.dumps([os.getpid(), time.time(), method, url, time.perf_counter() - started, response.status]))
        f.write("\n")
    return response


http.client.HTTPConnection.putrequest = _logged_putrequest  # type: ignore[method-assign]
http.client.HTTPConnection.getresponse = _logged_getresponse  # type: ignore[method-assign]


def mark(label: str) -> None:
    with open(LOG, "a") as f:
        f.write(json.dumps([os.getpid(), time.time(), "MARK", label, 0.0, 0]) + "\n")


def folded(url: str) -> str:
    """``url`` with what varies between runs folded: the bucket, run ids, numbers."""
    path, _, query = url.partition("?")
    path = re.sub(r"sw-[0-9a-f]{20}", "B", path)
    path = re.sub(r"chunk-[^/?]*?\.bin", "chunk-*.bin", path)
    path = re.sub(r"\d{5,}|(?<=[-_])[0-9a-f]{12}\b", "N", path)  # shards, sequence numbers, epochs, run ids
    path = re.sub(r"raw(%2F|/)\d+", r"raw\1N", path)
    names = sorted(part.split("=")[0] for part in query.split("&") if part)
    keep = [
        f"{n}={v}" for n, v in (p.split("=", 1) for p in query.split("&") if "=" in p) if n in ("uploadType", "comp")
    ]
    return path + (f"?{'&'.join(keep) or ','.join(names)}" if query else "")


class S3Store:
    """SeaweedFS (tests/support/s3server.py) behind the same few calls as bench_clouds.Cloud."""

    def __init__(self) -> None:
        from support.s3server import S3Server

        self.server = S3Server().start()
        self.options = dict(self.server.storage_options)

    def fresh(self) -> tuple[str, str]:
        bucket = self.server.create_bucket()
        return bucket, f"s3://{bucket}/data"

    def sdk_put(self, bucket: str, sizes: list[int]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        client, payload = self.server.client(), os.urandom(max(sizes))
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda item: client.put_object(Bucket=bucket, Key=f"raw/{item[0]}",
                                                         Body=payload[: item[1]]), enumerate(sizes)))  # fmt: skip

    def sdk_get(self, bucket: str, names: list[str]) -> int:
        client = self.server.client()
        return sum(len(client.get_object(Bucket=bucket, Key=n)["Body"].read()) for n in names)

    def close(self) -> None:
        self.server.stop()


def report(timeline: bool) -> None:
    rows = [json.loads(line) for line in open(LOG)]
    phases: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    phase, started = "", 0.0
    for pid, at, method, url, _seconds, status in rows:
        if method == "MARK":
            phase, started = url, at
            if timeline and not url.startswith("end"):
                print(f"\n-- {url}")
            continue
        if not phase or phase.startswith("end"):
            continue
        phases[phase][(method, folded(url), status)] += 1
        if timeline:
            print(f"  {at - started:7.3f} s  pid {pid}  {method} {folded(url)} {status}")
    for name, counts in phases.items():
        print(f"\n== {name}: {sum(counts.values())} requests")
        for (method, url, status), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {n:4d}  {method:6s} {status}  {url}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=96)
    ap.add_argument("--only", choices=["gcs", "azure", "s3"])
    ap.add_argument("--timeline", action="store_true", help="every request, on one clock per phase")
    args = ap.parse_args()
    import bench_clouds as bench

    from shardwright import StreamingDataset, optimize
    from shardwright.storage import open_storage

    for name in ("gcs", "azure", "s3"):
        if args.only and name != args.only:
            continue
        open(LOG, "w").close()
        with tempfile.TemporaryDirectory(prefix="sw-profile-clouds-") as root:
            cloud = S3Store() if name == "s3" else bench.Cloud(name, root)
            try:
                container, url = cloud.fresh()
                mark(f"{name}: optimize, {args.items} x 1 MiB")
                optimize(bench.mib_array, list(range(args.items)), url, chunk_bytes=bench.CHUNK_BYTES,
                         num_shards=bench.SHARDS, num_workers=bench.NUM_WORKERS, storage_options=cloud.options,
                         verbose=False)  # fmt: skip
                mark("end")
                chunks = [i for i in open_storage(url, cloud.options).list_info("") if i.key.startswith("chunk-")]
                mark(f"{name}: SDK upload loop, the same {len(chunks)} chunk sizes")
                cloud.sdk_put(container, [info.size for info in chunks])
                mark("end")
                mark(f"{name}: StreamingDataset, cold cache")
                ds = StreamingDataset(url, storage_options=cloud.options, cache_dir=tempfile.mkdtemp(dir=root))
                assert sum(1 for _ in ds) == args.items
                mark("end")
                mark(f"{name}: SDK GET loop, the same {len(chunks)} chunks")
                cloud.sdk_get(container, [f"{url.split('/', 3)[3]}/{info.key}" for info in chunks])
                mark("end")
            finally:
                cloud.close()
        report(args.timeline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
