"""Interleaved pairs of the same optimize() in fresh processes under two settings (two
checkouts, telemetry off and on ...): what bench_ab.py and bench_telemetry.py share.

Each run writes ``items`` small dicts ``{"i": i, "x": i * i}`` in chunks of ``chunk_size`` on
2 workers to a fresh directory. Kept per run: the wall seconds of the call, the cpu seconds
of the caller's main thread during the call (what the call's own thread did: steady on a
loaded machine, and it leaves out work moved to a background thread or the workers), and
the cpu seconds of the whole process tree (getrusage of the children: interpreter start and
imports included). The settings run alternately, one pair after another, so that a change of
load hits both sides of a pair; ratios are taken per pair and their median printed.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
from dataclasses import dataclass, field

__all__ = ["Runs", "children_cpu", "floor_seconds", "paired_runs"]

RUN = """
import sys, time
if sys.argv[4] == "warm":  # the SDK imported before the timer: only what telemetry adds per run is timed
    import opentelemetry.sdk.metrics, opentelemetry.sdk.trace, opentelemetry.sdk.metrics.export  # noqa
    import opentelemetry.sdk.trace.export  # noqa
from shardwright import optimize
def fn(i):
    return {"i": i, "x": i * i}
if __name__ == "__main__":
    t, c = time.perf_counter(), time.thread_time()
    optimize(fn, list(range(int(sys.argv[2]))), sys.argv[1], chunk_size=int(sys.argv[3]), num_workers=2, verbose=False)
    sys.stderr.write(f"{time.perf_counter() - t} {time.thread_time() - c}\\n")
"""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # waited-for children and theirs
    return usage.ru_utime + usage.ru_stime


def floor_seconds(items: int) -> float:
    """fn's work alone over the inputs, in this process."""
    import time

    t = time.perf_counter()
    for i in range(items):
        {"i": i, "x": i * i}
    return time.perf_counter() - t


@dataclass
class Runs:
    """Per setting, one value a run: ``wall`` (the call), ``caller`` (its main thread's cpu),
    ``tree`` (the process tree's cpu)."""

    wall: dict[str, list[float]] = field(default_factory=dict)
    caller: dict[str, list[float]] = field(default_factory=dict)
    tree: dict[str, list[float]] = field(default_factory=dict)

    def median(self, metric: str, name: str) -> float:
        return statistics.median(getattr(self, metric)[name])

    def ratios(self, metric: str, a: str, b: str) -> list[float]:
        """``b / a`` of each pair."""
        values = getattr(self, metric)
        return [y / x for x, y in zip(values[a], values[b], strict=True)]

    def summary(self, a: str, b: str) -> str:
        """The medians of the paired ratios ``b / a``, and the pairs of the steadiest metric."""
        parts = [
            f"{metric} {statistics.median(self.ratios(metric, a, b)):.3f}" for metric in ("wall", "caller", "tree")
        ]
        pairs = " ".join(f"{r:.3f}" for r in self.ratios("caller", a, b))
        return f"{b}/{a}, median of {len(self.wall[a])} pairs: {', '.join(parts)} (caller pairs {pairs})"


def paired_runs(
    settings: list[tuple[str, dict[str, str]]], items: int, chunk_size: int, pairs: int, root: str, start: str = "cold"
) -> Runs:
    """``pairs`` rounds of one run per setting (name, environment), in order."""
    script = os.path.join(root, "run_optimize.py")
    with open(script, "w") as f:
        f.write(RUN)
    runs = Runs()
    for k in range(pairs):
        for name, env in settings:
            out = os.path.join(root, f"{name}-{start}-{k}")
            before = children_cpu()
            done = subprocess.run(
                [sys.executable, script, out, str(items), str(chunk_size), start],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            if done.returncode:
                raise SystemExit(f"the {name} run failed:\n{done.stderr}")
            wall, caller = (float(v) for v in done.stderr.strip().splitlines()[-1].split())
            runs.tree.setdefault(name, []).append(children_cpu() - before)
            runs.wall.setdefault(name, []).append(wall)
            runs.caller.setdefault(name, []).append(caller)
    return runs
