#!/usr/bin/env python
"""Parquet read in place: shardwright's ParquetLoader vs litdata 0.2.76's, side by side.

    .venv/bin/python benchmarks/bench_parquet.py                 # 1M rows in 10 files, median of 5
    .venv/bin/python benchmarks/bench_parquet.py --rows 200000 --repeats 3

Writes ``--files`` parquet files of ``--rows`` rows in all (``{"id": int64, "text": string,
"score": double}``, row groups of ``--row-group`` rows) to a temporary folder, indexes it once
(litdata's ``index.json`` layout, which both read), then reads every row through each
library's ``StreamingDataLoader`` with 2 workers, in order (``seq``) and shuffled
(``shuffle``; each library's own shuffle), the runs of the two libraries alternating so both
see the same machine. The loaders' collate returns the batch size only, so what is timed is
reading a row group and turning its rows into dicts in the workers, not pickling rows back.
Both loaders start their workers with ``spawn`` (litdata refuses ``fork`` with its
ParquetLoader: polars' threads deadlock); the worker start-up is in the timing of both.

Before timing, an untimed check: a shuffled 2-worker epoch stopped half-way and resumed from
its ``state_dict()`` yields exactly the rest of the uninterrupted epoch (every row once).

Reported: rows/s of each (median of ``--repeats``), the ratio shardwright / litdata (> 1:
shardwright faster), and the load average before and after (2 cores shared: compare ratios,
not absolute figures). litdata's ParquetLoader needs polars.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))


def write_files(folder: str, rows: int, files: int, row_group: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    per = rows // files
    for f in range(files):
        ids = list(range(f * per, (f + 1) * per))
        table = pa.table({"id": ids, "text": [f"row number {i}" for i in ids], "score": [i / 7 for i in ids]})
        pq.write_table(table, os.path.join(folder, f"part-{f:03d}.parquet"), row_group_size=row_group)


def _count(batch) -> int:
    return len(batch)


def run_ours(folder: str, shuffle: bool, workers: int, batch: int, context: str) -> tuple[float, int]:
    from shardwright import ParquetLoader, StreamingDataLoader, StreamingDataset

    ds = StreamingDataset(folder, item_loader=ParquetLoader(), shuffle=shuffle, seed=1)
    loader = StreamingDataLoader(
        ds, batch_size=batch, num_workers=workers, collate_fn=_count, multiprocessing_context=context
    )
    start = time.perf_counter()
    n = sum(loader)
    return time.perf_counter() - start, n


def _ids(batch) -> list[int]:
    return [row["id"] for row in batch]


def check_resume(folder: str, workers: int, batch: int, context: str) -> str:
    """Untimed: a shuffled 2-worker epoch stopped mid-way, its state_dict() loaded into a new
    loader, must end with exactly the uninterrupted epoch's rows in its order (so every row
    exactly once). The figure is only worth printing if this holds."""
    from shardwright import ParquetLoader, StreamingDataLoader, StreamingDataset

    def loader():
        ds = StreamingDataset(folder, item_loader=ParquetLoader(columns=["id"]), shuffle=True, seed=7)
        return StreamingDataLoader(
            ds, batch_size=batch, num_workers=workers, collate_fn=_ids, multiprocessing_context=context
        )

    whole = [i for ids in loader() for i in ids]
    first, seen = loader(), []
    stop = len(whole) // batch // 2
    for n, ids in enumerate(first):
        seen.extend(ids)
        if n + 1 == stop:
            state = first.state_dict()
            break
    resumed = loader()
    resumed.load_state_dict(state)
    rest = [i for ids in resumed for i in ids]
    if seen + rest != whole or len(set(whole)) != len(whole):
        raise SystemExit(f"mid-epoch resume is not exact: {len(seen):,} + {len(rest):,} rows vs {len(whole):,}")
    return f"exact mid-epoch resume: {len(seen):,} rows before the state_dict, {len(rest):,} after, each once"


def run_litdata(folder: str, shuffle: bool, workers: int, batch: int, context: str) -> tuple[float, int]:
    import litdata
    from litdata.streaming.item_loader import ParquetLoader

    ds = litdata.StreamingDataset(folder, item_loader=ParquetLoader(), shuffle=shuffle, seed=1)
    loader = litdata.StreamingDataLoader(
        ds, batch_size=batch, num_workers=workers, collate_fn=_count, multiprocessing_context=context
    )
    start = time.perf_counter()
    n = sum(loader)
    return time.perf_counter() - start, n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--row-group", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--ours-context", default="spawn", help="shardwright's worker start method (fork works too)")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="bench-parquet-")
    try:
        write_files(folder, args.rows, args.files, args.row_group)
        from shardwright import index_parquet_dataset

        index_parquet_dataset(folder)
        print(f"{args.rows:,} rows in {args.files} files, row groups of {args.row_group:,}; {args.workers} workers")
        print(check_resume(folder, args.workers, args.batch, args.ours_context))
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        results: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeats):
            for mode in ("seq", "shuffle"):
                for name, run, context in (
                    ("shardwright", run_ours, args.ours_context),
                    ("litdata", run_litdata, "spawn"),
                ):
                    seconds, n = run(folder, mode == "shuffle", args.workers, args.batch, context)
                    if n != args.rows // args.files * args.files:
                        raise SystemExit(f"{name} {mode}: read {n:,} rows, expected {args.rows:,}")
                    results.setdefault((name, mode), []).append(seconds)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        print(f"{'mode':<8} {'shardwright rows/s':>20} {'litdata rows/s':>16} {'ratio':>7}")
        for mode in ("seq", "shuffle"):
            ours = args.rows / statistics.median(results[("shardwright", mode)])
            theirs = args.rows / statistics.median(results[("litdata", mode)])
            print(f"{mode:<8} {ours:>20,.0f} {theirs:>16,.0f} {ours / theirs:>6.2f}x")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
