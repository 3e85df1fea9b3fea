#!/usr/bin/env python
"""Hash first, or copy first? The order of a checked chunk's hash and its items' copies, measured.

    .venv/bin/python benchmarks/bench_hashorder.py --rounds 9 --passes 20

A reader that checks a chunk's checksum must hash every byte of the chunk before it hands out
any of its items. The reader (reader.checked_map, reader.itemfile) maps the chunk, hashes the
mapping in one call (the bytes come from memory: xxh3 at ~15 GB/s here), then copies each
item out of the mapping into a buffer of its own (``memmove``, its source still warm from the
hash). The other order copies each item into its own buffer first, in file order, and feeds
the hash from that buffer right after each copy (at most 256 KiB at a time), while those bytes
are in L2 (xxh3 at 40-58 GB/s): the hash gets cheaper, but every item of the chunk is then
copied, and allocated, before the first one is used. This benchmark runs each order over the
same chunk files (bench_readsum's dataset: 400 x 256 KiB arrays, 50 chunks of 2 MiB), the
items handed to a loop that sums each one (every byte touched) and drops it before the next:

- ``unchecked``: ``preadv`` of each item into its own buffer, nothing hashed (the reader's
  unchecked path; the reference every ratio is taken to);
- ``hash_then_copy``: the reader's checked path (the mapping hashed whole, items copied out);
- ``copy_then_hash``: ``preadv`` of each item into its own buffer, each piece hashed as it
  lands, all items first;
- ``copy_then_hash_mapped``: the same, the items copied out of a mapping instead;
- ``hash_pieces_copy``: the mapping hashed ``--piece-kib`` at a time, each piece copied into
  the buffers of the items it holds right after (while it is in L2), all items first (the
  hashpieces branch's experiment: it did not pay).

Every checked order compares its digest with the checksum index.json records (the incremental
hash covers the header, every item and any tail: exactly the file), so a wrong order fails.
Each run is a fresh process that reads all chunks ``--passes`` times; the orders alternate,
the first rotating every round. Printed: cpu ms a pass (user + sys), page faults a pass, and
the median of each order's per-round ratio to ``unchecked``. ``--memory kept`` runs them with
glibc keeping freed memory, as a DataLoader worker does: allocating a whole chunk's items at
once then costs no page faults, which separates the faults from the cache effects.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")
ORDERS = ("unchecked", "hash_then_copy", "copy_then_hash", "copy_then_hash_mapped", "hash_pieces_copy")

RUN = r"""
import json, mmap, os, resource, sys
import numpy as np, xxhash
from shardwright.format import chunk_offsets

PIECE = int(os.environ.get("HASHORDER_PIECE_KIB", "256")) << 10  # hashed as soon as copied: inside L2 (2 MiB a core)

def opened(path):
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    n = int.from_bytes(os.pread(fd, 4, 0), "little")
    head = os.pread(fd, 4 + 4 * (n + 1), 0)
    return fd, size, head, chunk_offsets(head, size)

def unchecked(path, expected):
    fd, size, head, offsets = opened(path)
    for j in range(len(offsets) - 1):
        buf = np.empty(offsets[j + 1] - offsets[j], dtype=np.uint8)
        if os.preadv(fd, [buf], offsets[j]) != len(buf):
            raise SystemExit("short read")
        yield buf
        del buf
    os.close(fd)

def hash_then_copy(path, expected):
    fd, size, head, offsets = opened(path)
    mapped = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    if xxhash.xxh3_128_hexdigest(mapped) != expected:
        raise SystemExit(f"{path}: digest differs")
    whole = np.frombuffer(mapped, dtype=np.uint8)
    for j in range(len(offsets) - 1):
        if os.fstat(fd).st_size < offsets[j + 1]:  # the reader's guard against SIGBUS
            raise SystemExit("truncated")
        buf = whole[offsets[j] : offsets[j + 1]].copy()
        yield buf
        del buf
    del whole
    mapped.close()
    os.close(fd)

def _copied_then_hashed(path, expected, source):
    fd, size, head, offsets = opened(path)
    hasher = xxhash.xxh3_128(head)
    update = hasher.update
    items = []
    for j in range(len(offsets) - 1):
        start, end = offsets[j], offsets[j + 1]
        buf = np.empty(end - start, dtype=np.uint8)
        view = memoryview(buf)
        for at in range(0, end - start, PIECE):
            piece = view[at : at + PIECE]
            source(fd, piece, start + at)
            update(piece)
        items.append(buf)
    if offsets[-1] < size:
        update(os.pread(fd, size - offsets[-1], offsets[-1]))
    if hasher.hexdigest() != expected:
        raise SystemExit(f"{path}: incremental digest differs")
    os.close(fd)
    items.reverse()
    while items:
        yield items.pop()

def _pread_into(fd, piece, at):
    if os.preadv(fd, [piece], at) != len(piece):
        raise SystemExit("short read")

def copy_then_hash(path, expected):
    return _copied_then_hashed(path, expected, _pread_into)

def copy_then_hash_mapped(path, expected):
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    whole = memoryview(mapped)
    def copy(fd, piece, at):
        if os.fstat(fd).st_size < at + len(piece):
            raise SystemExit("truncated")
        piece[:] = whole[at : at + len(piece)]
    try:
        yield from _copied_then_hashed(path, expected, copy)
    finally:
        whole.release()
        mapped.close()

def hash_pieces_copy(path, expected):
    # the mapping hashed a piece at a time, each piece then copied into the items it holds
    # while it is in L2; every item handed out after the digest matched
    fd, size, head, offsets = opened(path)
    mapped = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    whole = np.frombuffer(mapped, dtype=np.uint8)
    items = [np.empty(offsets[j + 1] - offsets[j], dtype=np.uint8) for j in range(len(offsets) - 1)]
    hasher, j = xxhash.xxh3_128(), 0
    for start in range(0, size, PIECE):
        end = min(start + PIECE, size)
        if os.fstat(fd).st_size < end:  # the reader's guard against SIGBUS, once a piece
            raise SystemExit("truncated")
        hasher.update(whole[start:end])
        while j < len(items) and offsets[j] < end:
            first, stop = offsets[j], offsets[j + 1]
            a, b = max(start, first), min(end, stop)
            items[j][a - first : b - first] = whole[a:b]
            if stop > end:
                break
            j += 1
    if hasher.hexdigest() != expected:
        raise SystemExit(f"{path}: digest differs")
    del whole
    mapped.close()
    os.close(fd)
    items.reverse()
    while items:
        yield items.pop()

def usage():
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime, own.ru_minflt

def main():
    root, order, passes = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if sys.argv[4] == "kept":  # as in a DataLoader worker: freed item memory kept for the next ones
        from shardwright.reader.itemfile import keep_freed_item_memory

        keep_freed_item_memory()
    with open(os.path.join(root, "index.json")) as f:
        chunks = [(os.path.join(root, c["filename"]), c["checksum"].partition(":")[2]) for c in json.load(f)["chunks"]]
    read = globals()[order]
    np.ones(1 << 28, dtype=np.uint8)  # memory touched first, as bench_readsum does
    cpu, faults = usage()
    total = 0
    for _ in range(passes):
        for path, expected in chunks:
            for item in read(path, expected):
                total += int(item.sum(dtype=np.uint64)) >= 0
                del item
    cpu2, faults2 = usage()
    print((cpu2 - cpu) / passes, (faults2 - faults) / passes, total)

main()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--passes", type=int, default=20)
    parser.add_argument("--items", type=int, default=400)
    parser.add_argument(
        "--memory",
        choices=("default", "kept"),
        default="default",
        help="kept: glibc keeps freed item memory, as in a loader worker (reader.itemfile.keep_freed_item_memory)",
    )
    parser.add_argument("--src", default=SRC, help="the shardwright source to write the dataset with")
    parser.add_argument("--orders", default=",".join(ORDERS), help="the orders run (unchecked is always run)")
    parser.add_argument("--piece-kib", type=int, default=256, help="the piece hashed (and copied) at a time")
    args = parser.parse_args()
    orders = ("unchecked", *(o for o in args.orders.split(",") if o != "unchecked"))
    sys.path.insert(0, HERE)
    import bench_readsum

    root = tempfile.mkdtemp(prefix="bench-hashorder-")
    try:
        data = bench_readsum.write(root, args.items)
        script = os.path.join(root, "run.py")
        with open(script, "w") as f:
            f.write(RUN)
        env = dict(os.environ, PYTHONPATH=os.path.abspath(args.src), HASHORDER_PIECE_KIB=str(args.piece_kib))
        load_before = os.getloadavg()[0]
        runs: dict[str, list[tuple[float, float]]] = {order: [] for order in orders}
        for r in range(args.rounds):
            for order in orders[r % len(orders) :] + orders[: r % len(orders)]:
                done = subprocess.run(
                    [sys.executable, script, data, order, str(args.passes), args.memory],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode:
                    raise SystemExit(f"the {order} run failed:\n{done.stderr}")
                cpu, faults, total = done.stdout.split()
                if int(total) != args.items * args.passes:
                    raise SystemExit(f"the {order} run read {total} items, expected {args.items * args.passes}")
                runs[order].append((float(cpu), float(faults)))
        base = [cpu for cpu, _ in runs["unchecked"]]
        for order, got in runs.items():
            ratios = sorted(cpu / ref for (cpu, _), ref in zip(got, base, strict=True))
            print(
                f"{order:22s} cpu {statistics.median(c for c, _ in got) * 1000:6.1f} ms a pass, "
                f"{statistics.median(f for _, f in got):7.0f} faults a pass; / unchecked: median "
                f"{statistics.median(ratios):.3f} [{ratios[0]:.3f}-{ratios[-1]:.3f}]"
            )
        print(f"load average before {load_before:.2f} / after {os.getloadavg()[0]:.2f} (1 min)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
