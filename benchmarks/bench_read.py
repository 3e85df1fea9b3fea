#!/usr/bin/env python
"""Reading for training: shardwright vs litdata 0.2.76 vs mosaicml-streaming, side by side.

    .venv/bin/python benchmarks/bench_read.py              # full: local + S3, median of 3
    .venv/bin/python benchmarks/bench_read.py --quick      # small sizes, 1 repeat
    .venv/bin/python benchmarks/bench_read.py --no-s3 --repeats 5 --json out.json

Each library reads data written by its own writer (shardwright.optimize, litdata.optimize,
streaming.MDSWriter), the same samples, in these ways:

* ``inproc``   iterate the dataset in this process, in order;
* ``seq``      a 2-worker loader, in order (shardwright/litdata: their StreamingDataLoader;
               mosaicml-streaming: torch DataLoader over its StreamingDataset);
* ``shuffle``  the same loader, shuffled (each library's own shuffle);
* ``random``   random access in this process: ``ds[i]`` for up to 20,000 ids in a seeded
               random order (the same ids for every library);

from local disk, and (unless --no-s3) from a real S3 server (SeaweedFS on loopback, started
here) with a cold cache each time. Workloads: 100k small dicts ``{"i", "x"}``, 400 x 256 KiB
uint8 arrays, and ``tokens``: 20,000 int32 documents of 1,024-3,071 tokens written with each
library's ``TokensLoader()`` and read as blocks of 2,049 tokens (litdata's blocks stop at a
chunk's end, ours run across chunks, so the two counts differ a little: each is checked
against its own ``len(ds)``; mosaicml-streaming has no token loader and is not run), about 50
chunks each. The loaders' collate returns the batch size only,
so what is timed is reading and decoding in the workers, not pickling items back.

``unchecked`` is shardwright with ``check_checksums=False``: the ``checksum cost`` column is
how much faster reading is without checking each chunk once (positive: checking costs that
much; ``--libs shardwright,unchecked`` runs only these two).

Reported: items/s and payload MB/s of each, the ratios shardwright / litdata and shardwright /
mosaicml-streaming (> 1: shardwright faster), and ``raw``: reading the shardwright chunk files
with no decoding (the read bandwidth ceiling; for S3, a boto3 GET of every chunk).

mosaicml-streaming imports torchvision when imported; the torchvision pip brings fails
against CPU torch, so a stand-in (benchmarks/stand_in/) goes first on sys.path. It is a
benchmark-only requirement (benchmarks/requirements.txt).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "stand_in"))  # torchvision stand-in, for mosaicml-streaming
sys.path.insert(0, os.path.join(HERE, "..", "tests", "support"))  # s3server.py
sys.path.insert(0, os.path.join(HERE, "..", "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_optimize import touch_memory  # noqa: E402

ARRAY_BYTES = 256 << 10
WORKERS = 2
BATCH = 256
BLOCK = 2049  # tokens per block: a 2,048-token context and its next-token target
RANDOM_IDS = 20_000  # ids read by the random-access way (all of them when the dataset is smaller)


def small(i: int) -> dict:
    return {"i": i, "x": i * i}


def array(i: int) -> dict:
    return {"i": i, "x": np.full(ARRAY_BYTES, i % 256, dtype=np.uint8)}


def document_length(i: int) -> int:
    return 1024 + (i * 7919) % 2048


def document(i: int) -> np.ndarray:
    """Document i's token ids: 1,024 to 3,071 of them, values that say where they came from."""
    return np.arange(document_length(i), dtype=np.int32) + i


def document_bytes(n: int) -> int:
    return sum(document_length(i) for i in range(n)) * 4


WORKLOADS = {
    "small": (small, 16),
    "arrays": (array, ARRAY_BYTES + 8),
    "tokens": (document, BLOCK * 4),
    "s3small": (small, 16),
}  # fn, payload bytes per item read
# Where and how each workload is read (default: everywhere, every way). s3small is issue 19's
# case: 500k small dicts from S3, cold cache, 2 workers, the loader in order.
PLACES = {"s3small": ("s3",)}
WAYS = {"s3small": ("seq",)}
ALL_WAYS = ("inproc", "seq", "shuffle", "random")
IN_PROCESS = ("inproc", "random")  # the ways whose floor is the raw read in-process


def mosaic_installed() -> bool:
    """mosaicml-streaming is optional: installing it downgrades numpy and cloud clients that
    the project's venv pins, so where it is absent its columns are skipped (and said so)."""
    try:
        import streaming  # noqa: F401
    except ImportError:
        return False
    return True


def count(batch) -> int:
    return len(batch)


# --- writing: each library its own writer ------------------------------------------------------


def write_all(workload: str, n: int, root: str, libs: set[str] | None = None) -> dict[str, str]:
    """Write the workload with each library's own writer (only those of ``libs``, when given)."""
    import shardwright

    fn, _ = WORKLOADS[workload]
    dirs = {lib: os.path.join(root, f"{workload}-{lib}") for lib in ("shardwright", "litdata", "mosaic")}
    # About 50 chunks (shards) for every library, so that shuffling has chunks to shuffle.
    per_chunk = max(1, n // 50)
    tokens = workload == "tokens"
    # Token documents vary in length: chunks are cut by bytes, the same for both libraries.
    size: dict = {"chunk_bytes": max(1, document_bytes(n) // 50)} if tokens else {"chunk_size": per_chunk}
    shardwright.optimize(
        fn,
        list(range(n)),
        dirs["shardwright"],
        num_workers=WORKERS,
        verbose=False,
        **size,
        **({"item_loader": shardwright.TokensLoader()} if tokens else {}),
    )
    if libs is not None and "litdata" not in libs and "mosaic" not in libs:
        return dirs
    import litdata

    litdata.optimize(
        fn=fn,
        inputs=list(range(n)),
        output_dir=dirs["litdata"],
        num_workers=WORKERS,
        start_method="fork",
        **size,
        **({"item_loader": litdata.TokensLoader()} if tokens else {}),
    )
    if tokens or not mosaic_installed() or (libs is not None and "mosaic" not in libs):
        return dirs
    from streaming import MDSWriter

    columns = {"i": "int64", "x": "int64"} if workload != "arrays" else {"i": "int64", "x": "ndarray:uint8"}
    sample_bytes = 24 if workload != "arrays" else ARRAY_BYTES + 64
    with MDSWriter(out=dirs["mosaic"], columns=columns, size_limit=per_chunk * sample_bytes) as writer:
        for i in range(n):
            writer.write(fn(i))
    return dirs


def upload_dir(client, bucket: str, local: str, prefix: str) -> str:
    for dirpath, _dirs, files in os.walk(local):
        for name in files:
            path = os.path.join(dirpath, name)
            key = f"{prefix}/{os.path.relpath(path, local)}"
            client.upload_file(path, bucket, key)
    return f"s3://{bucket}/{prefix}"


# --- reading -----------------------------------------------------------------------------------


def random_ids(length: int) -> list[int]:
    """The ids the random-access way reads: the same for every library (a seeded shuffle)."""
    import random

    ids = list(range(length))
    random.Random(19).shuffle(ids)
    return ids[:RANDOM_IDS]


TOUCH = [False]  # --touch: in-process loops sum every array's bytes (a loop that uses what it reads)


def used(item) -> int:
    """1 for an item; with --touch its arrays' bytes are summed first (every byte read by the CPU)."""
    if TOUCH[0] and isinstance(item, dict):
        for value in item.values():
            if isinstance(value, np.ndarray):
                value.sum(dtype=np.uint64)
    elif TOUCH[0] and isinstance(item, np.ndarray):
        item.sum(dtype=np.uint64)
    return 1


def read_random(ds) -> int:
    """``ds[i]`` for random_ids: what a map-style sampler asks of a dataset."""
    got = 0
    for i in random_ids(len(ds)):
        got += ds[i] is not None
    return got


def read_shardwright(src: str, workload: str, way: str, options: dict | None, cache: str, check: bool = True) -> int:
    import shardwright
    from shardwright import StreamingDataLoader, StreamingDataset

    kwargs: dict = {"storage_options": options, "cache_dir": cache} if options else {}
    kwargs["check_checksums"] = check
    if workload == "tokens":
        kwargs["item_loader"] = shardwright.TokensLoader(block_size=BLOCK)
    ds = StreamingDataset(src, shuffle=way == "shuffle", **kwargs)
    if way == "random":
        return read_random(ds)
    if way == "inproc":
        return sum(used(x) for x in ds)
    return sum(StreamingDataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=count))


def read_litdata(src: str, workload: str, way: str, options: dict | None, cache: str) -> int:
    import litdata

    kwargs: dict = {"storage_options": options, "cache_dir": cache} if options else {}
    if workload == "tokens":
        kwargs["item_loader"] = litdata.TokensLoader(block_size=BLOCK)
    ds = litdata.StreamingDataset(src, shuffle=way == "shuffle", **kwargs)
    if way == "random":
        return read_random(ds)
    if way == "inproc":
        return sum(used(x) for x in ds)
    return sum(litdata.StreamingDataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=count))


def read_mosaic(src: str, workload: str, way: str, options: dict | None, cache: str) -> int:
    import torch
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    if options:
        ds = StreamingDataset(remote=src, local=cache, shuffle=way == "shuffle", batch_size=BATCH)
    else:
        ds = StreamingDataset(local=src, shuffle=way == "shuffle", batch_size=BATCH)
    try:
        if way == "random":
            return read_random(ds)
        if way == "inproc":
            return sum(1 for _ in ds)
        return sum(torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, collate_fn=count))
    finally:
        del ds
        gc.collect()


def read_raw(src: str, options: dict | None, client=None) -> int:
    """Every chunk file's bytes, no decoding: the ceiling."""
    total = 0
    index = json.loads(open(os.path.join(src, "index.json")).read()) if not options else None
    if options:
        bucket, prefix = src[5:].split("/", 1)
        index = json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/index.json")["Body"].read())
        for c in index["chunks"]:
            total += len(client.get_object(Bucket=bucket, Key=f"{prefix}/{c['filename']}")["Body"].read())
        return sum(c["chunk_size"] for c in index["chunks"])
    for c in index["chunks"]:
        with open(os.path.join(src, c["filename"]), "rb") as f:
            data = f.read()
            total += len(data)
            if TOUCH[0]:
                np.frombuffer(data, dtype=np.uint8).sum(dtype=np.uint64)
    return sum(c["chunk_size"] for c in index["chunks"])


class RawChunks(torch.utils.data.IterableDataset):
    """The chunk files' bytes, no decoding, split over the loader's workers: the loader floor
    (one item per chunk: its item count, so the loop sums to the dataset's length)."""

    def __init__(self, src: str, options: dict | None, chunks: list[dict]):
        self.src, self.options, self.chunks = src, options, chunks

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        mine = self.chunks[info.id :: info.num_workers] if info else self.chunks
        if self.options:
            import boto3

            client = boto3.session.Session().client("s3", **self.options)
            bucket, prefix = self.src[5:].split("/", 1)
            for c in mine:
                client.get_object(Bucket=bucket, Key=f"{prefix}/{c['filename']}")["Body"].read()
                yield c["chunk_size"]
            return
        for c in mine:
            with open(os.path.join(self.src, c["filename"]), "rb") as f:
                f.read()
            yield c["chunk_size"]


def read_raw_loader(src: str, options: dict | None, client=None) -> int:
    """torch's DataLoader (2 workers) over the raw chunk bytes: the floor of the loader rows."""
    if options:
        bucket, prefix = src[5:].split("/", 1)
        index = json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/index.json")["Body"].read())
    else:
        index = json.loads(open(os.path.join(src, "index.json")).read())
    loader = torch.utils.data.DataLoader(RawChunks(src, options, index["chunks"]), batch_size=None, num_workers=WORKERS)
    return sum(loader)


def read_shardwright_unchecked(src: str, workload: str, way: str, options: dict | None, cache: str) -> int:
    """shardwright with check_checksums=False: the difference is what checking chunks costs."""
    return read_shardwright(src, workload, way, options, cache, check=False)


READERS = {
    "shardwright": read_shardwright,
    "unchecked": read_shardwright_unchecked,
    "litdata": read_litdata,
    "mosaic": read_mosaic,
}
SOURCE_OF = {"unchecked": "shardwright"}  # readers that read another library's copy
OURS = ("shardwright", "unchecked")  # a failure of these is a defect: the script exits 1


def reset_peak_rss() -> None:
    """Linux: make VmHWM (this process's peak RSS) start again from the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_mb() -> float:
    """This process's peak RSS (MB) since reset_peak_rss()."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


PEAKS: list[float] = []  # the driver's peak RSS of each timed() call, in order


# Memory touched before every timed read (bench_optimize.touch_memory says why): whichever
# reader ran right after another would get the pages it freed cheap.
TOUCH_BYTES = 1 << 30


def timed(run, args: tuple, expected: int) -> float:
    gc.collect()
    touch_memory(TOUCH_BYTES)
    reset_peak_rss()
    started = time.perf_counter()
    got = run(*args)
    seconds = time.perf_counter() - started
    PEAKS.append(peak_rss_mb())
    if got != expected:
        raise RuntimeError(f"read {got} items, expected {expected}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 1 repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-s3", action="store_true")
    parser.add_argument("--only", default="", help="workloads, e.g. small")
    parser.add_argument("--json", default="")
    parser.add_argument("--items", default="", help="sizes, e.g. small=200000,arrays=2000")
    parser.add_argument("--libs", default="", help="readers to run, e.g. shardwright,unchecked (checksum cost only)")
    parser.add_argument("--touch", action="store_true", help="in-process loops sum every array's bytes")
    args = parser.parse_args(argv)
    TOUCH[0] = args.touch
    repeats = 1 if args.quick else args.repeats
    places_of, ways_of = dict(PLACES), dict(WAYS)
    if args.quick:  # a smoke run, well under a minute: S3 only for s3small, no shuffled rows
        places_of.update(small=("local",), arrays=("local",), tokens=("local",))
        ways_of.update(small=("inproc", "seq", "random"), arrays=("inproc", "seq"), tokens=("inproc", "seq"))
    sizes = (
        {"small": 10_000, "arrays": 40, "tokens": 400, "s3small": 10_000}
        if args.quick
        else {"small": 100_000, "arrays": 400, "tokens": 20_000, "s3small": 500_000}
    )
    for pair in filter(None, args.items.split(",")):
        name, _, value = pair.partition("=")
        sizes[name] = int(value)
    workloads = [w for w in WORKLOADS if not args.only or w in args.only.split(",")]
    if args.no_s3:
        workloads = [w for w in workloads if "local" in places_of.get(w, ("local",))]
    if not mosaic_installed():
        print("mosaicml-streaming is not installed: its columns are skipped (benchmarks/requirements.txt)")
    import shardwright.reader  # noqa: F401 - imports (torch) are paid here, not by the first reader timed

    root = tempfile.mkdtemp(prefix="bench-read-")
    results: list[dict] = []
    failures = 0
    server = None
    try:
        if not args.no_s3:
            from s3server import S3Server

            server = S3Server(workdir=os.path.join(root, "s3")).start()
            import litdata.streaming.downloader as downloader

            downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True  # plain-http loopback endpoint
            os.environ.update(
                {
                    "S3_ENDPOINT_URL": server.endpoint,
                    "AWS_ACCESS_KEY_ID": server.access_key,
                    "AWS_SECRET_ACCESS_KEY": server.secret_key,
                    "AWS_DEFAULT_REGION": "us-east-1",
                }
            )
        log = open(os.path.join(root, "writers.log"), "w")
        for workload in workloads:
            n = sizes[workload]
            payload = WORKLOADS[workload][1]
            saved = os.dup(1), os.dup(2)
            os.dup2(log.fileno(), 1), os.dup2(log.fileno(), 2)
            try:
                wanted = {SOURCE_OF.get(lib, lib) for lib in args.libs.split(",")} if args.libs else None
                dirs = write_all(workload, n, root, wanted)
            finally:
                os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            lengths = dataset_lengths(workload, n, dirs)
            places = [("local", dirs, None)] if "local" in places_of.get(workload, ("local", "s3")) else []
            if server is not None and "s3" in places_of.get(workload, ("local", "s3")):
                client = server.client()
                bucket = server.create_bucket()
                remote = {lib: upload_dir(client, bucket, d, lib) for lib, d in dirs.items() if os.path.isdir(d)}
                places.append(("s3", remote, dict(server.storage_options)))
            ways = ways_of.get(workload, ALL_WAYS)
            for place, srcs, options in places:
                # the floors: raw bytes read in-process, and through torch's DataLoader
                loaders = any(way not in IN_PROCESS for way in ways)
                floors = [("raw", read_raw)] + ([("raw_loader", read_raw_loader)] if loaders else [])
                for floor, read in floors:
                    del PEAKS[:]
                    raw_s = statistics.median(
                        timed(read, (srcs["shardwright"], options, server.client() if options else None), n)
                        for _ in range(repeats)
                    )
                    results.append(
                        {
                            "workload": workload,
                            "place": place,
                            "way": floor,
                            "lib": floor,
                            "seconds": raw_s,
                            # items: those our reader reads (token blocks, not documents)
                            "items_per_s": lengths["shardwright"] / raw_s,
                            "mb_per_s": lengths["shardwright"] * payload / raw_s / 1e6,
                            "driver_peak_rss_mb": max(PEAKS),
                        }
                    )
                for way in ways:
                    for lib, reader in READERS.items():
                        if args.libs and lib not in args.libs.split(","):
                            continue
                        if SOURCE_OF.get(lib, lib) not in lengths:  # not written (mosaic: no tokens)
                            continue
                        seconds, paired = [], []
                        del PEAKS[:]
                        items = lengths[SOURCE_OF.get(lib, lib)]
                        if way == "random":
                            items = min(items, RANDOM_IDS)
                        for r in range(repeats):
                            cache = os.path.join(root, f"cache-{workload}-{place}-{way}-{lib}-{r}")
                            try:
                                src = srcs[SOURCE_OF.get(lib, lib)]
                                if way in IN_PROCESS:
                                    # the floor again, just before: the pair's ratio does not drift
                                    # with the machine (the floor's own median varies 10 % run to run)
                                    client = server.client() if options else None
                                    paired.append(timed(read_raw, (srcs["shardwright"], options, client), n))
                                    del PEAKS[-1]
                                seconds.append(timed(reader, (src, workload, way, options, cache), items))
                            except Exception:
                                # Ours failing is a defect (exit 1); another library's failure is
                                # its own (litdata 0.2.76's ds[i] on a remote token dataset raises
                                # KeyError): the table says "failed", the traceback goes to stderr.
                                failures += lib in OURS
                                print(
                                    f"FAILED {lib} {workload} {place} {way}:\n{traceback.format_exc()[-1500:]}",
                                    file=sys.stderr,
                                )
                                seconds = []
                                results.append(
                                    {"workload": workload, "place": place, "way": way, "lib": lib, "failed": True}
                                )
                                break
                            finally:
                                shutil.rmtree(cache, ignore_errors=True)
                        if seconds:
                            s = statistics.median(seconds)
                            results.append(
                                {
                                    "workload": workload,
                                    "place": place,
                                    "way": way,
                                    "lib": lib,
                                    "seconds": s,
                                    "items_per_s": items / s,
                                    "mb_per_s": items * payload / s / 1e6,
                                    "driver_peak_rss_mb": max(PEAKS),
                                    # median over the pairs (inproc) of floor s / ours s: our throughput over the floor's
                                    # (random access reads fewer items than the floor: throughputs, not times)
                                    "paired_floor_ratio": (
                                        statistics.median(f / t for f, t in zip(paired, seconds))
                                        * items
                                        / lengths["shardwright"]
                                        if paired
                                        else None
                                    ),
                                }
                            )
                    report(results, workload, place, way)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print_table(results)
    return 1 if failures else 0


def dataset_lengths(workload: str, n: int, dirs: dict[str, str]) -> dict[str, int]:
    """The items each written copy holds: ``n``, except token blocks (litdata's stop at a
    chunk's end, ours run across chunks)."""
    written = [lib for lib, d in dirs.items() if os.path.isdir(d)]
    if workload != "tokens":
        return dict.fromkeys(written, n)
    import litdata

    import shardwright

    lengths = {}
    for lib in written:
        mod = shardwright if lib == "shardwright" else litdata
        lengths[lib] = len(mod.StreamingDataset(dirs[lib], item_loader=mod.TokensLoader(block_size=BLOCK)))
    return lengths


def report(results: list[dict], workload: str, place: str, way: str) -> None:
    row = {r["lib"]: r for r in results if (r["workload"], r["place"], r["way"]) == (workload, place, way)}
    parts = [f"{lib} {_rate(row, lib)}" + ("" if r.get("failed") else "/s") for lib, r in row.items()]
    print(f"{workload:7} {place:5} {way:8} " + "  ".join(parts), flush=True)


def print_table(results: list[dict]) -> None:
    """One row per (workload, place, way). ``floor`` is the raw chunk bytes read with no
    decoding and no checksums: in-process for ``inproc``, through torch's DataLoader (2
    workers) for the loader rows; ``sw/floor`` is shardwright's (checked) throughput over it.
    In-process, the ratios to the floor are the medians of paired runs (the floor timed just
    before each of ours), not the ratio of two medians: the floor alone varies by 10 %.
    ``peak MB`` is the driver's (this process's) peak RSS during shardwright's runs."""
    print(
        "\n| workload | from | way | shardwright items/s (MB/s) | unchecked items/s | checksum cost | "
        "litdata items/s | mosaic items/s | floor items/s | sw/litdata | sw/mosaic | sw/floor | "
        "unchecked/floor | peak MB sw / litdata / floor |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    keys = sorted(
        {(r["workload"], r["place"], r["way"]) for r in results if r["way"] not in FLOOR_WAYS},
        key=lambda k: (k[0], k[1], ALL_WAYS.index(k[2])),
    )
    for key in keys:
        row = {r["lib"]: r for r in results if (r["workload"], r["place"], r["way"]) == key}
        floor_way = "raw" if key[2] in IN_PROCESS else "raw_loader"
        raw = next((r for r in results if (r["workload"], r["place"], r["way"]) == (key[0], key[1], floor_way)), None)
        timed_row = {lib: r for lib, r in row.items() if not r.get("failed")}  # the ratios' operands
        sw = timed_row.get("shardwright")
        first = f"{_rate(row, 'shardwright')} ({sw['mb_per_s']:,.0f})" if sw else _rate(row, "shardwright")
        unchecked = timed_row.get("unchecked")
        cost = f"{(unchecked['items_per_s'] / sw['items_per_s'] - 1) * 100:+.1f} %" if sw and unchecked else "-"
        peaks = " / ".join(f"{r['driver_peak_rss_mb']:,.0f}" if r else "-" for r in (sw, timed_row.get("litdata"), raw))
        floor_rate = f"{raw['items_per_s']:,.0f}" if raw else "-"
        print(
            f"| {key[0]} | {key[1]} | {key[2]} | {first} | {_rate(row, 'unchecked')} | {cost} | "
            f"{_rate(row, 'litdata')} | {_rate(row, 'mosaic')} | {floor_rate} | "
            f"{_ratio(sw, timed_row.get('litdata'))} | {_ratio(sw, timed_row.get('mosaic'))} | {_floor_ratio(sw, raw)} | "
            f"{_floor_ratio(unchecked, raw)} | {peaks} |"
        )


FLOOR_WAYS = ("raw", "raw_loader")


def _rate(row: dict, lib: str) -> str:
    if lib not in row:
        return "-"  # not run
    return "failed" if row[lib].get("failed") else f"{row[lib]['items_per_s']:,.0f}"  # failed: see stderr


def _floor_ratio(ours: dict | None, floor: dict | None) -> str:
    """Ours over the floor: the paired median where the pairs were timed, else of the medians."""
    if ours and ours.get("paired_floor_ratio"):
        return f"{ours['paired_floor_ratio']:.2f}"
    return _ratio(ours, floor)


def _ratio(ours: dict | None, other: dict | None) -> str:
    return f"{ours['items_per_s'] / other['items_per_s']:.2f}" if ours and other else "-"


if __name__ == "__main__":
    sys.exit(main())
