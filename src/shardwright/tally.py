"""Run counters in files: what the jobs service's ``GET /metrics`` reports of the runs it started.

A run's store requests, retries and bytes happen in its worker processes, not in the process
that started it, and a job process is not a server a scraper could ask. So when
``SHARDWRIGHT_COUNTERS_DIR`` names a directory, every process of the run (the caller and each
worker process: the variable is inherited) keeps its counts in memory and rewrites a JSON file
of its own there (``HOST-PID.json``) at most every :data:`FLUSH_SECONDS` while they change,
and once more when it exits. :func:`read_counters` sums the files. The service sets the
variable for each attempt of a job (``JOB_DIR/attempt-N-counters``). Standard library only; a
process killed with SIGKILL loses what it counted since its last rewrite.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["COUNTERS_DIR_ENV", "CounterFile", "RunCounts", "read_counters"]

COUNTERS_DIR_ENV = "SHARDWRIGHT_COUNTERS_DIR"
FLUSH_SECONDS = 0.5
#: bounds on what a reader takes from the directory (one small file per process of a run)
MAX_FILES = 10_000
MAX_FILE_BYTES = 1_000_000
_LABELLED = ("store_requests", "retries", "throttled")  # series -> {label(s): count}
_PLAIN = ("items", "inputs_done", "failed", "chunks_committed", "bytes_written")


@dataclass(frozen=True)
class RunCounts:
    """Counts of one run (summed over its processes). ``store_requests`` is keyed by
    ``(verb, outcome)``, ``retries`` by cause, ``throttled`` by verb."""

    store_requests: dict[tuple[str, str], int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    throttled: dict[str, int] = field(default_factory=dict)
    items: int = 0
    inputs_done: int = 0
    failed: int = 0
    chunks_committed: int = 0
    bytes_written: int = 0

    def plus(self, other: RunCounts) -> RunCounts:
        def merged(a: dict, b: dict) -> dict:
            return dict(Counter(a) + Counter(b))

        return RunCounts(
            merged(self.store_requests, other.store_requests),
            merged(self.retries, other.retries),
            merged(self.throttled, other.throttled),
            *(getattr(self, name) + getattr(other, name) for name in _PLAIN),
        )

    def to_json(self) -> dict:
        return {
            "store_requests": [[verb, outcome, n] for (verb, outcome), n in sorted(self.store_requests.items())],
            "retries": dict(sorted(self.retries.items())),
            "throttled": dict(sorted(self.throttled.items())),
            **{name: getattr(self, name) for name in _PLAIN},
        }

    @classmethod
    def from_json(cls, data: object) -> RunCounts:
        """What a counter file says; ValueError when it is not such a file."""
        if not isinstance(data, dict):
            raise ValueError("not an object")
        requests = {}
        for row in data.get("store_requests") or []:
            if not (isinstance(row, list) and len(row) == 3):
                raise ValueError("a store_requests row is not [verb, outcome, n]")
            requests[(str(row[0]), str(row[1]))] = _count(row[2])
        labelled = {
            name: {str(k): _count(v) for k, v in _object(data.get(name)).items()} for name in ("retries", "throttled")
        }
        return cls(requests, labelled["retries"], labelled["throttled"], *(_count(data.get(n, 0)) for n in _PLAIN))


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value


def _object(value: object) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("not an object")
    return value


class CounterFile:
    """This process's counts, rewritten to ``DIRECTORY/HOST-PID.json`` by a daemon thread."""

    def __init__(self, directory: str):
        self.directory = directory
        self.path = os.path.join(directory, f"{socket.gethostname()}-{os.getpid()}.json")
        self._lock = threading.Lock()
        self._writing = threading.Lock()  # the thread and write_now() share the tmp file
        self._counts: Counter[tuple[str, ...]] = Counter()
        self._changed = threading.Event()
        self._closed = False
        threading.Thread(target=self._loop, name="shardwright-counters", daemon=True).start()
        _flush_at_exit(self)

    def add(self, series: str, n: int, *labels: str) -> None:
        with self._lock:
            self._counts[(series,) + labels] += n
        self._changed.set()

    def snapshot(self) -> RunCounts:
        with self._lock:
            counts = dict(self._counts)
        labelled: dict[str, dict[Any, int]] = {name: {} for name in _LABELLED}
        plain = dict.fromkeys(_PLAIN, 0)
        for key, n in counts.items():
            series, labels = key[0], key[1:]
            if series == "store_requests":
                labelled[series][(labels[0], labels[1])] = n
            elif series in labelled:
                labelled[series][labels[0]] = n
            else:
                plain[series] = n
        return RunCounts(
            labelled["store_requests"], labelled["retries"], labelled["throttled"], *(plain[n] for n in _PLAIN)
        )

    def flush(self) -> None:
        with self._writing:
            self._changed.clear()
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            tmp = f"{self.path}.tmp"
            with open(tmp, "w") as f:
                json.dump(self.snapshot().to_json(), f)
            os.replace(tmp, self.path)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._changed.set()  # the thread sees it and ends
            self.write_now()

    def write_now(self) -> None:
        """Rewrite the file now; an error (a full disk) is left for the next rewrite: counting
        must never stop a run."""
        try:
            self.flush()
        except OSError:
            self._changed.set()

    def _loop(self) -> None:
        while not self._closed:
            self._changed.wait()
            if self._closed:
                return
            self.write_now()
            threading.Event().wait(FLUSH_SECONDS)  # at most one rewrite per interval


def _flush_at_exit(counters: CounterFile) -> None:
    """The last rewrite at exit: atexit in a normal process, multiprocessing's finalizers in a
    forked child (which leaves by os._exit, skipping atexit)."""
    import multiprocessing.util

    atexit.register(counters.close)
    multiprocessing.util.Finalize(counters, counters.close, exitpriority=10)


def read_counters(directory: str) -> RunCounts:
    """The sum of the counter files in ``directory`` (nothing: no file yet). Links are not
    followed, sizes are bounded, and a file that cannot be read now (half a rename away,
    foreign) is left out of this sum."""
    total = RunCounts()
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))[:MAX_FILES]
    except OSError:
        return total
    for name in names:
        try:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            with os.fdopen(fd, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
            if len(data) > MAX_FILE_BYTES:
                continue
            total = total.plus(RunCounts.from_json(json.loads(data)))
        except (OSError, ValueError):
            continue
    return total
