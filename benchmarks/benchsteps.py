"""What the side-by-side benchmarks share: a timed step in a fresh process (optionally another
venv's interpreter: mosaicml-streaming pins numpy < 2.2, so it lives in a venv of its own),
and the median / min / ratio cells of their tables."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

__all__ = [
    "cell",
    "fresh_step",
    "load_average",
    "median_rate",
    "ratio",
    "tree_cpu_by_pid",
    "tree_cpu_seconds",
    "cpu_seconds_between",
]

# The interpreter of the venv mosaicml-streaming is installed in (benchmarks/README.md):
# python3 -m venv /tmp/mds-venv && /tmp/mds-venv/bin/pip install mosaicml-streaming==0.13.0 pillow
MOSAIC_PYTHON = os.environ.get("MOSAIC_PYTHON", "/tmp/mds-venv/bin/python")


def mosaic_python() -> str | None:
    """The interpreter that runs mosaicml-streaming's steps: this one when it imports
    ``streaming``, else MOSAIC_PYTHON when that exists; None: not installed anywhere."""
    try:
        import streaming  # noqa: F401

        return sys.executable
    except ImportError:
        pass
    return MOSAIC_PYTHON if os.access(MOSAIC_PYTHON, os.X_OK) else None


def fresh_step(script: str, args: list[str], log, python: str | None = None) -> dict:
    """Run ``script --step ...`` in a fresh process; its last stdout line is the step's JSON
    result ({"failed": True} when it exits non-zero; its stderr goes to ``log``)."""
    cmd = [python or sys.executable, os.path.abspath(script), *args]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=log, text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        return {"failed": True}
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_rate(times: dict[str, list[float]], step: str, amount: float) -> float | None:
    """``amount`` (items, tokens) per second at the median time of ``step``; None: not run or failed."""
    return amount / statistics.median(times[step]) if times.get(step) else None


def cell(times: dict[str, list[float]], step: str, rate: float | None, fmt: str = "{:,.0f}") -> str:
    """A table cell: the median rate and the min time beside it ("failed" / "-" when none)."""
    if not times.get(step) or rate is None:
        return "failed" if step in times else "-"
    return f"{fmt.format(rate)} (median {statistics.median(times[step]):.2f} s, min {min(times[step]):.2f} s)"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def tree_cpu_by_pid() -> dict[int, float]:
    """CPU seconds (user + system, plus what their reaped children used) of this process and of
    every live descendant, by pid: Linux /proc, so no extra dependency. Servers a benchmark
    starts (Ray's daemons, the cloud emulators) are descendants of its process, so they count."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        parents[int(name)] = int(fields[1])
        times[int(name)] = sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
    mine, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        mine.add(pid)
        todo.extend(p for p, parent in parents.items() if parent == pid and p not in mine)
    return {pid: times[pid] for pid in mine if pid in times}


def tree_cpu_seconds() -> float:
    """The sum of :func:`tree_cpu_by_pid`. A descendant that exits unreaped by its parent
    between two readings takes its CPU time with it: compare readings of runs whose processes
    are waited for (pools, emulators), or use :func:`cpu_seconds_between`."""
    return sum(tree_cpu_by_pid().values())


def cpu_seconds_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds spent between two :func:`tree_cpu_by_pid` readings by the processes alive
    at both (never negative when a process ends in between)."""
    return sum(max(0.0, after[pid] - before[pid]) for pid in before.keys() & after.keys())


def json_run_under(src: str, code: str, args: list[str]) -> dict:
    """Run ``python -c code *args`` in a fresh interpreter with ``src`` as the package's tree
    (PYTHONPATH) and return the JSON object its last line of output prints: the A/B scripts'
    one run of one checkout."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True)
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result
