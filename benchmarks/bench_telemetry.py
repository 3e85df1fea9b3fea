#!/usr/bin/env python
"""What issue 35's observability costs: resume receipts against a loader epoch, and run
telemetry on against off for a small-items optimize().

    .venv/bin/python benchmarks/bench_telemetry.py                 # 200k items, median of 3
    .venv/bin/python benchmarks/bench_telemetry.py --items 50000 --repeats 1

Receipts: one epoch of a StreamingDataLoader (batch 256, no workers: the receipt is computed in
the training process) over ``--items`` small dicts, shuffled and in order, against one
``state_dict()`` taken at the end of that epoch (its receipt lists every id once: the
dearest point). Telemetry: the same optimize() in a fresh process with no OTEL_* variable
(off) and with OTEL_METRICS_EXPORTER=console OTEL_TRACES_EXPORTER=console (on; the
exporters' output discarded).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

RUN = """
import sys, time
from shardwright import optimize
def fn(i):
    return {"i": i}
if __name__ == "__main__":
    t = time.perf_counter()
    optimize(fn, list(range(int(sys.argv[2]))), sys.argv[1], chunk_size=1000, num_workers=2, mode="overwrite", verbose=False)
    sys.stderr.write(f"{time.perf_counter() - t}\\n")
"""


def receipts(items: int, repeats: int, root: str) -> None:
    from shardwright import StreamingDataLoader, StreamingDataset, optimize

    path = os.path.join(root, "receipts")
    optimize(_item, list(range(items)), path, chunk_size=2000, num_workers=2, mode="overwrite", verbose=False)
    for shuffle in (False, True):
        epochs, states = [], []
        for _ in range(repeats):
            loader = StreamingDataLoader(StreamingDataset(path, shuffle=shuffle), batch_size=256)
            last, state = len(loader) - 1, 0.0
            t = time.perf_counter()
            for k, _batch in enumerate(loader):
                if k == last:  # the whole epoch consumed: the dearest receipt
                    s = time.perf_counter()
                    receipt = loader.state_dict()["receipt"]
                    state = time.perf_counter() - s
                    assert receipt["consumed"]["count"] == items, receipt
            epochs.append(time.perf_counter() - t - state)
            states.append(state)
        epoch, state = statistics.median(epochs), statistics.median(states)
        print(
            f"receipts shuffle={shuffle}: epoch {epoch:.3f} s, receipt {state * 1000:.1f} ms "
            f"= {100 * state / epoch:.2f} % of the epoch"
        )


def _item(i: int) -> dict:
    return {"i": i, "x": float(i)}


def telemetry(items: int, repeats: int, root: str) -> None:
    script = os.path.join(root, "run.py")
    with open(script, "w") as f:
        f.write(RUN)
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    on = dict(base, OTEL_METRICS_EXPORTER="console", OTEL_TRACES_EXPORTER="console")
    times: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(repeats):
        for name, env in (("off", base), ("on", on)):
            done = subprocess.run(
                [sys.executable, script, os.path.join(root, f"out-{name}"), str(items)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            if done.returncode:
                raise SystemExit(f"the {name} run failed:\n{done.stderr}")
            times[name].append(float(done.stderr.strip().splitlines()[0]))
    off, on_s = statistics.median(times["off"]), statistics.median(times["on"])
    print(
        f"telemetry: optimize of {items:,} items off {off:.3f} s, on {on_s:.3f} s ({100 * (on_s - off) / off:+.1f} %)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=["receipts", "telemetry"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        if args.only != "telemetry":
            receipts(args.items, args.repeats, root)
        if args.only != "receipts":
            telemetry(args.items, args.repeats, root)


if __name__ == "__main__":
    main()
