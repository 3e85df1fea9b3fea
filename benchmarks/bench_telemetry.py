#!/usr/bin/env python
"""What issue 35's observability costs, printed as ratios: run telemetry on against off for a
small-items optimize(), and resume receipts on against off for a loader epoch.

    .venv/bin/python benchmarks/bench_telemetry.py                 # 200k items, 5 pairs
    .venv/bin/python benchmarks/bench_telemetry.py --items 50000 --pairs 3 --only receipts

Telemetry: the same optimize() (2 worker processes, chunks of 1,000) in a fresh process with
no OTEL_* variable (off) and with OTEL_METRICS_EXPORTER=console OTEL_TRACES_EXPORTER=console
(on; the exporters' output discarded), off and on run alternately, one ratio per pair, the
median printed. Twice: *cold*, the call as a user's first one (importing and starting the
SDK inside it, in the caller and in each worker), and *warm*, the SDK imported before the
timer in both runs, which leaves what telemetry adds per item, per chunk and per process
start; besides wall seconds of the call, the cpu seconds of each run's whole process tree
(getrusage of the children: steadier than wall time on a shared machine, but it includes
the interpreter's start and the imports). The floor: fn alone over the same inputs in a loop. No peer exports
run telemetry (litdata has none), so there is no peer column.

Receipts: a training loop over ``--items`` small dicts (StreamingDataLoader, batch 256, no
workers: the receipt is computed in the training process) that checkpoints every
``--every`` batches, against the same loop that never calls state_dict() (off: a receipt is
only ever computed in state_dict(), never per item), in order and shuffled; the dearest
state_dict() (at the end of the epoch, its receipt covering every id) is printed as a share of
the epoch too, and so is the sum of all state_dict() calls of the epoch (steadier than the
ratio of two epochs on a loaded machine). Side by side: litdata's StreamingDataLoader over the same dataset (litdata
reads ours) checkpointing at the same points, and the floor: the same dicts from a list,
collated in batches of 256 (no reading at all).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

RUN = """
import sys, time
if sys.argv[3] == "warm":  # both runs import the SDK before the timer: only what 'on' adds is timed
    import opentelemetry.sdk.metrics, opentelemetry.sdk.trace, opentelemetry.sdk.metrics.export  # noqa
    import opentelemetry.sdk.trace.export  # noqa
from shardwright import optimize
def fn(i):
    return {"i": i}
if __name__ == "__main__":
    t = time.perf_counter()
    optimize(fn, list(range(int(sys.argv[2]))), sys.argv[1], chunk_size=1000, num_workers=2, mode="overwrite", verbose=False)
    sys.stderr.write(f"{time.perf_counter() - t}\\n")
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # waited-for children and theirs
    return usage.ru_utime + usage.ru_stime


def _fn(i: int) -> dict:
    return {"i": i}


def _item(i: int) -> dict:
    return {"i": i, "x": float(i)}


def telemetry(items: int, pairs: int, root: str) -> None:
    script = os.path.join(root, "run.py")
    with open(script, "w") as f:
        f.write(RUN)
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    on_env = dict(base, OTEL_METRICS_EXPORTER="console", OTEL_TRACES_EXPORTER="console")
    t = time.perf_counter()
    for i in range(items):
        _fn(i)
    floor = time.perf_counter() - t
    print(f"telemetry, optimize() of {items:,} small dicts on 2 workers; floor (fn alone) {floor:.3f} s")
    for start in ("cold", "warm"):
        times: dict[str, list[float]] = {"off": [], "on": []}
        cpus: dict[str, list[float]] = {"off": [], "on": []}
        for _ in range(pairs):
            for name, env in (("off", base), ("on", on_env)):
                before = _children_cpu()
                done = subprocess.run(
                    [sys.executable, script, os.path.join(root, f"out-{name}"), str(items), start],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                if done.returncode:
                    raise SystemExit(f"the {name} run failed:\n{done.stderr}")
                times[name].append(float(done.stderr.strip().splitlines()[0]))
                cpus[name].append(_children_cpu() - before)
        ratios = [on / off for off, on in zip(times["off"], times["on"], strict=True)]
        cpu_ratios = [on / off for off, on in zip(cpus["off"], cpus["on"], strict=True)]
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        print(
            f"  {start}: off {off:.3f} s (min {min(times['off']):.3f}, {off / floor:.1f}x the floor), "
            f"on {on:.3f} s (min {min(times['on']):.3f}); on/off median of {pairs} pairs "
            f"{statistics.median(ratios):.3f} (pairs {' '.join(f'{r:.3f}' for r in ratios)}); cpu seconds of the "
            f"process tree (the whole process, start-up included) off {statistics.median(cpus['off']):.3f}, on "
            f"{statistics.median(cpus['on']):.3f}, on/off median {statistics.median(cpu_ratios):.3f}"
        )


def _epoch(loader, every: int, items: int, checkpoint: bool) -> tuple[float, float, float]:
    """(seconds for the epoch, seconds of its last state_dict(), seconds of all its
    state_dict() calls) with a state_dict() every ``every`` batches and at the last one when
    ``checkpoint``, else none."""
    last, dearest, total = len(loader) - 1, 0.0, 0.0
    t = time.perf_counter()
    for k, _batch in enumerate(loader):
        if checkpoint and (k % every == every - 1 or k == last):
            s = time.perf_counter()
            state = loader.state_dict()
            dearest = time.perf_counter() - s
            total += dearest
            if k == last and "receipt" in state:
                assert state["receipt"]["consumed"]["count"] == items, state["receipt"]
    return time.perf_counter() - t, dearest, total


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
            f"  shardwright shuffle={shuffle}: off {off:.3f} s ({off / floor:.1f}x the floor), on {on:.3f} s; "
            f"on/off median of {pairs} pairs {statistics.median(ratios):.3f}; all state_dict() calls "
            f"{total * 1000:.1f} ms = {100 * total / off:.2f} % of the epoch, the end-of-epoch one "
            f"{last * 1000:.1f} ms = {100 * last / off:.2f} %"
        )
    _peer(path, items, pairs, every, floor)


def _floor(items: int) -> float:
    import torch.utils.data

    data = [_item(i) for i in range(items)]
    collate = torch.utils.data.default_collate
    t = time.perf_counter()
    for start in range(0, items, 256):
        collate(data[start : start + 256])
    return time.perf_counter() - t


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
        f"  litdata {litdata.__version__} shuffle=False (no receipts): off {off:.3f} s ({off / floor:.1f}x the floor), "
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
