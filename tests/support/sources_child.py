"""A child process for the sources tests: one optimize() over a source described by argv[1]
(JSON: kind, path, output_dir, mode, num_workers, sleep), so tests can SIGKILL it for real.
With SOURCES_CHILD_HOLD_AFTER=N in the environment each worker process makes N outputs, then
waits in fn until it is killed (the run can never finish before the test's kill)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from shardwright import optimize, sources

CONFIG = json.loads(sys.argv[1]) if __name__ == "__main__" else {}


_made = [0]  # fn's calls in this process
_never = threading.Event()


def _pause() -> None:
    # from the environment, not from CONFIG: fn's identity includes the globals it reads, and
    # a test slows a rerun down (or holds it) without changing fn
    time.sleep(float(os.environ.get("SOURCES_CHILD_SLEEP", "0")))
    hold_after = os.environ.get("SOURCES_CHILD_HOLD_AFTER")
    _made[0] += 1
    if hold_after and _made[0] > int(hold_after):
        _never.wait()  # this worker is held until the test kills the run: the kill lands mid-run


def row_id(row: dict) -> dict:
    _pause()
    return {"id": row["id"]}


def file_bytes(ref) -> dict:
    _pause()
    return {"name": ref.path.rsplit("/", 1)[-1], "data": ref.read()}


def main() -> None:
    os.environ["SOURCES_CHILD_SLEEP"] = str(CONFIG.get("sleep", 0))
    kind = CONFIG["kind"]
    if kind == "parquet":
        inputs, fn = sources.parquet(CONFIG["path"], columns=["id"]), row_id
    elif kind == "files":
        inputs, fn = sources.files(CONFIG["path"], pattern=CONFIG.get("pattern", "**/*")), file_bytes
    else:
        raise SystemExit(f"unknown kind {kind}")
    optimize(
        fn,
        inputs,
        CONFIG["output_dir"],
        chunk_size=CONFIG.get("chunk_size", 4),
        num_workers=CONFIG.get("num_workers", 2),
        mode=CONFIG.get("mode"),
        verbose=False,
    )


if __name__ == "__main__":
    main()
