"""A child process for the sources tests: one optimize() over a source described by argv[1]
(JSON: kind, path, output_dir, mode, num_workers, sleep), so tests can SIGKILL it for real."""

from __future__ import annotations

import json
import sys
import time

from shardwright import optimize, sources

CONFIG = json.loads(sys.argv[1]) if __name__ == "__main__" else {}


def row_id(row: dict) -> dict:
    time.sleep(CONFIG.get("sleep", 0))
    return {"id": row["id"]}


def file_bytes(ref) -> dict:
    time.sleep(CONFIG.get("sleep", 0))
    return {"name": ref.path.rsplit("/", 1)[-1], "data": ref.read()}


def main() -> None:
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
