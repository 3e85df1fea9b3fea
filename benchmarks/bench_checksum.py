#!/usr/bin/env python
"""Chunk checksum candidates: GB/s of each over a chunk-sized buffer (best of N), on this machine.

    .venv/bin/python benchmarks/bench_checksum.py            # 64 MB, best of 5
    .venv/bin/python benchmarks/bench_checksum.py --mb 8 --repeats 9

The writer hashes every chunk's stored bytes once (format/checksum.py) and the reader checks
each chunk once; the fastest candidate measured here is the one used (xxh3_64).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
import zlib


def candidates() -> dict:
    found = {"zlib.crc32": zlib.crc32, "blake2b": lambda d: hashlib.blake2b(d).digest()}
    try:
        import crc32c

        found["crc32c"] = crc32c.crc32c
    except ImportError:
        pass
    try:
        import xxhash

        found.update(
            {
                "xxh3_64": xxhash.xxh3_64_intdigest,
                "xxh3_128": xxhash.xxh3_128_intdigest,
                "xxh64": xxhash.xxh64_intdigest,
            }
        )
    except ImportError:
        pass
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    data = os.urandom(args.mb * 1000 * 1000)
    rows = []
    for name, fn in candidates().items():
        fn(data[:1000])
        best = min(_time(fn, data) for _ in range(args.repeats))
        rows.append((len(data) / best / 1e9, name))
    print(f"| hash ({args.mb} MB, best of {args.repeats}) | GB/s |\n|---|---:|")
    for speed, name in sorted(rows, reverse=True):
        print(f"| {name} | {speed:.2f} |")


def _time(fn, data: bytes) -> float:
    started = time.perf_counter()
    fn(data)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
