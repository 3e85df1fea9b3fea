"""A child process for the map tests: runs one shardwright.map() call described by argv[1]
(JSON: inputs count, output, workers, sleep per input, a log directory of fn calls)."""

from __future__ import annotations

import json
import os
import sys
import time

from shardwright import map as sw_map

CONFIG = json.loads(sys.argv[1]) if __name__ == "__main__" else {}


def write_files(i: int, out: str) -> None:
    """Two files per input, the second large enough that a kill can land mid-write."""
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
