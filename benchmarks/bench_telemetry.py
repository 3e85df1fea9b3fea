#!/usr/bin/env python
"""What issue 35's observability costs, printed as ratios: run telemetry on against off for a
small-items optimize(), and resume receipts on against off for a loader epoch.

    .venv/bin/python benchmarks/bench_telemetry.py                 # 200k items, 5 pairs
    .venv/bin/python benchmarks/bench_telemetry.py --items 50000 --pairs 3 --only receipts

Telemetry: the same optimize() (2 worker processes, chunks of 1,000; benchmarks/paired.py,
shared with bench_ab.py) in a fresh process with no OTEL_* variable (off) and with
OTEL_METRICS_EXPORTER=console OTEL_TRACES_EXPORTER=console (on; the exporters' output
discarded), off and on run alternately, one ratio per pair, the median printed. Twice: *cold*,
the call as a user's first one (the SDK started inside it: in the caller, in the background
while the output is opened, and in each worker), and *warm*, the SDK imported before the
timer in both runs, which leaves what telemetry adds per item, per chunk and per process
start. Three figures a run: wall seconds of the call; cpu seconds of the caller's main thread
during the call (the steadiest on a loaded machine: it is what the call itself waited on
in the caller, though not the workers' share); cpu seconds of the whole process tree
(getrusage of the children, interpreter start and imports included). The floor: fn alone
over the same inputs in a loop. No peer exports run telemetry (litdata has none), so there
is no peer column.

Receipts: a training loop over ``--items`` small dicts (StreamingDataLoader, batch 256, no
workers: the receipt is computed in the training process) that checkpoints every
``--every`` batches, against the same loop that never calls state_dict() (off: a receipt is
only ever computed in state_dict(), never per item), in order and shuffled; the last
state_dict() (at the end of the epoch: a loader's receipts are incremental, so it adds only
what was read since the one before) is printed as a share of the epoch too, and so is the
sum of all state_dict() calls of the epoch (steadier than the ratio of two epochs on a loaded
machine); all in cpu seconds of the training thread. Side by side: litdata's
StreamingDataLoader over the same dataset (litdata reads ours) checkpointing at the same
points, and the floor: the same dicts from a list,
collated in batches of 256 (no reading at all).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from paired import floor_seconds, paired_runs


def _item(i: int) -> dict:
    return {"i": i, "x": float(i)}


def telemetry(items: int, pairs: int, root: str) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    on_env = dict(base, OTEL_METRICS_EXPORTER="console", OTEL_TRACES_EXPORTER="console")
    floor = floor_seconds(items)
    print(f"telemetry, optimize() of {items:,} small dicts on 2 workers; floor (fn alone) {floor:.3f} s")
    for start in ("cold", "warm"):
        runs = paired_runs([("off", base), ("on", on_env)], items, 1000, pairs, root, start)
        off, on = runs.median("wall", "off"), runs.median("wall", "on")
        print(
            f"  {start}: wall off {off:.3f} s (min {min(runs.wall['off']):.3f}, {off / floor:.1f}x the floor), "
            f"on {on:.3f} s (min {min(runs.wall['on']):.3f}); caller cpu off {runs.median('caller', 'off'):.3f} s, "
            f"on {runs.median('caller', 'on'):.3f} s; tree cpu off {runs.median('tree', 'off'):.3f} s, "
            f"on {runs.median('tree', 'on'):.3f} s\n    {runs.summary('off', 'on')}"
        )


def _epoch(loader, every: int, items: int, checkpoint: bool) -> tuple[float, float, float]:
    """(cpu seconds of the epoch, of its last state_dict(), of all its state_dict() calls)
    with a state_dict() every ``every`` batches and at the last one when ``checkpoint``, else
    none. Cpu seconds of this thread (time.thread_time): with no loader workers the epoch is
    read in it, and unlike wall time it holds still on a loaded machine."""
    last, dearest, total = len(loader) - 1, 0.0, 0.0
    t = time.thread_time()
    for k, _batch in enumerate(loader):
        if checkpoint and (k % every == every - 1 or k == last):
            s = time.thread_time()
            state = loader.state_dict()
            dearest = time.thread_time() - s
            total += dearest
            if k == last and "receipt" in state:
                assert state["receipt"]["consumed"]["count"] == items, state["receipt"]
    return time.thread_time() - t, dearest, total


def receipts(items: int, pairs: int, every: int, root: str) -> None:
    from shardwright import StreamingDataLoader, StreamingDataset, optimize

    path = os.path.join(root, "receipts")
    optimize(_item, list(range(items)), path, chunk_size=2000, num_workers=2, mode="overwrite", verbose=False)
    print(f"receipts, an epoch of {items:,} small dicts in batches of 256, a state_dict() every {every} batches")
    floor = _floor(items)
    print(f"  floor (the dicts from a list, collated): {floor:.3f} s")
    for shuffle in (False, True):
        offs, ons, dearest, totals = [], [], [], []
        for _ in range(pairs):
            for checkpoint, out in ((False, offs), (True, ons)):
                loader = StreamingDataLoader(StreamingDataset(path, shuffle=shuffle), batch_size=256)
                epoch, last, total = _epoch(loader, every, items, checkpoint)
                out.append(epoch)
                if checkpoint:
                    dearest.append(last)
                    totals.append(total)
        ratios = [on / off for off, on in zip(offs, ons, strict=True)]
        off, on = statistics.median(offs), statistics.median(ons)
        last, total = statistics.median(dearest), statistics.median(totals)
        print(
            f"  shardwright shuffle={shuffle}: cpu s: off {off:.3f} ({off / floor:.1f}x the floor), on {on:.3f} s; "
            f"on/off median of {pairs} pairs {statistics.median(ratios):.3f}; all state_dict() calls "
            f"{total * 1000:.1f} ms = {100 * total / off:.2f} % of the epoch, the end-of-epoch one "
            f"{last * 1000:.1f} ms = {100 * last / off:.2f} %"
        )
    _peer(path, items, pairs, every, floor)


def _floor(items: int) -> float:
    import torch.utils.data

    data = [_item(i) for i in range(items)]
    collate = torch.utils.data.default_collate
    t = time.thread_time()
    for start in range(0, items, 256):
        collate(data[start : start + 256])
    return time.thread_time() - t


def _peer(path: str, items: int, pairs: int, every: int, floor: float) -> None:
    try:
        import litdata
    except ImportError as exc:
        print(f"  litdata: not installed ({exc})")
        return
    offs, ons, totals = [], [], []
    for _ in range(pairs):
        for checkpoint, out in ((False, offs), (True, ons)):
            loader = litdata.StreamingDataLoader(litdata.StreamingDataset(path, shuffle=False), batch_size=256)
            epoch, _last, total = _epoch(loader, every, items, checkpoint)
            out.append(epoch)
            if checkpoint:
                totals.append(total)
    ratios = [on / off for off, on in zip(offs, ons, strict=True)]
    off, on = statistics.median(offs), statistics.median(ons)
    print(
        f"  litdata {litdata.__version__} shuffle=False (no receipts): cpu s: off {off:.3f} ({off / floor:.1f}x the floor), "
        f"on {on:.3f} s; on/off median of {pairs} pairs {statistics.median(ratios):.3f}; all state_dict() "
        f"calls {statistics.median(totals) * 1000:.1f} ms = {100 * statistics.median(totals) / off:.2f} % of the epoch"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--every", type=int, default=100, help="batches between two state_dict() calls")
    parser.add_argument("--only", choices=["receipts", "telemetry"])
    args = parser.parse_args()
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}, {os.cpu_count()} cpus")
    with tempfile.TemporaryDirectory() as root:
        if args.only != "telemetry":
            receipts(args.items, args.pairs, args.every, root)
        if args.only != "receipts":
            telemetry(args.items, args.pairs, root)
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
