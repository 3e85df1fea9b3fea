"""A child process for the map tests: runs one shardwright.map() call described by argv[1]
(JSON: inputs count, output, workers, sleep per input, a log directory of fn calls)."""

from __future__ import annotations

import json
import os
import sys
import time

from shardwright import map as sw_map

CONFIG = json.loads(sys.argv[1]) if __name__ == "__main__" else {}


def _gated(i: int) -> None:
    """With ``MAP_GATE`` (a path) and ``MAP_HOLD_FROM`` in the environment (not in CONFIG:
    fn's configuration is the same for every run of a test), input ``i >= MAP_HOLD_FROM``
    waits until that file exists (polled: a held worker still takes its signals), so the run
    is certainly still going when the test kills it, at any load."""
    gate = os.environ.get("MAP_GATE")
    deadline = time.monotonic() + 600
    while gate and i >= int(os.environ["MAP_HOLD_FROM"]) and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)


def write_files(i: int, out: str) -> None:
    """Two files per input, the second large enough that a kill can land mid-write."""
    _gated(i)
    with open(os.path.join(CONFIG["log"], f"{i}-{os.getpid()}-{time.monotonic_ns()}"), "w"):
        pass  # one log file per call of fn: how often each input was processed
    os.makedirs(os.path.join(out, "labels"), exist_ok=True)
    with open(os.path.join(out, "labels", f"{i:04d}.txt"), "w") as handle:
        handle.write(f"label {i}\n")
    with open(os.path.join(out, f"blob-{i:04d}.bin"), "wb") as handle:
        for _ in range(8):
            handle.write(bytes([i % 256]) * 65536)
            time.sleep(CONFIG.get("sleep", 0) / 8)


if __name__ == "__main__":
    sw_map(
        write_files,
        list(range(CONFIG["n"])),
        CONFIG["out"],
        num_workers=CONFIG.get("workers", 2),
        verbose=False,
        storage_options=CONFIG.get("storage_options"),
    )
