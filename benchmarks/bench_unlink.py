#!/usr/bin/env python
"""What deleting small state files costs, fsynced or not: why record files became record logs.

    .venv/bin/python benchmarks/bench_unlink.py            # 80 files of 400 bytes, under /tmp
    .venv/bin/python benchmarks/bench_unlink.py --files 80 --dir /path/on/the/output/disk

A record file is fsynced (it is a commit point), and an unlink of a file whose blocks are on
disk frees them (on ext4 mounted with ``discard``, ~0.1 ms each here); one still only in the page
cache costs microseconds. Prints the wall time of unlinking ``--files`` files of each kind.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time


def make(base: str, files: int, fsync: bool) -> str:
    directory = tempfile.mkdtemp(dir=base)
    for i in range(files):
        fd = os.open(os.path.join(directory, f"r{i}.json"), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
        os.write(fd, b"x" * 400)
        if fsync:
            os.fsync(fd)
        os.close(fd)
    if fsync:
        fd = os.open(directory, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=80)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    base = tempfile.mkdtemp(dir=args.dir)
    try:
        for fsync in (True, False):
            for _ in range(args.repeats):
                directory = make(base, args.files, fsync)
                time.sleep(0.2)  # let the journal commit settle
                started = time.perf_counter()
                for name in os.listdir(directory):
                    os.unlink(os.path.join(directory, name))
                took = time.perf_counter() - started
                kind = "fsynced" if fsync else "not fsynced"
                print(f"{args.files} unlinks, {kind}: {took * 1e3:.2f} ms")
    finally:
        shutil.rmtree(base)


if __name__ == "__main__":
    main()
