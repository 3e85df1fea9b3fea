"""``shardwright runs ROOT``: every shardwright output under a local directory or an S3
prefix, with its state."""

from __future__ import annotations

import json

from ..errors import ShardwrightError
from ..protocol.layout import INDEX_KEY, MANIFEST_KEY, RUN_RECORD_KEY
from ..protocol.status import RunStatus, read_status
from ..storage import open_storage

MAX_OUTPUTS = 1000  # a root holding more is listed partly, and says so
MARKERS = (INDEX_KEY, MANIFEST_KEY, RUN_RECORD_KEY)


def find_outputs(root: str, storage_options: dict | None = None) -> tuple[list[str], bool]:
    """Sub-paths (relative to ``root``, "" for the root itself) that hold a shardwright output
    or dataset, sorted; and whether the list was cut at MAX_OUTPUTS."""
    storage = open_storage(root, storage_options)
    found: set[str] = set()
    for key in storage.list(""):
        for marker in MARKERS:
            if key == marker or key.endswith("/" + marker):
                found.add(key[: len(key) - len(marker)].rstrip("/"))
    # an output's own state dir is not a nested output
    outputs = sorted(
        p for p in found if not any(p.startswith(o + "/") and "/.shardwright" in p[len(o) :] for o in found if o != p)
    )
    return outputs[:MAX_OUTPUTS], len(outputs) > MAX_OUTPUTS


def describe(status: RunStatus) -> str:
    """One line: state, progress and the reason a run stopped."""
    if status.state in ("running", "interrupted", "failed"):
        pct = 100.0 * status.inputs_done / status.inputs if status.inputs else 100.0
        line = f"{status.state:<11} {status.inputs_done:,}/{status.inputs:,} inputs ({pct:.0f}%)"
        if status.stop_reason:
            line += f"  {status.stop_reason}"
        return line
    last = status.last_run or {}
    items = f"{last.get('items', 0):,} items" if last else ""
    return f"{status.state:<11} {items}"


def list_runs(root: str, storage_options: dict | None = None, as_json: bool = False) -> int:
    """Print every output under ``root`` with its state; returns the exit code."""
    outputs, cut = find_outputs(root, storage_options)
    rows = []
    base = root.rstrip("/")
    for sub in outputs:
        url = f"{base}/{sub}" if sub else base
        try:
            status = read_status(open_storage(url, storage_options))
        except ShardwrightError as exc:
            rows.append({"output_dir": url, "state": "unreadable", "error": str(exc).split("\n")[0]})
            continue
        row = status.to_json()
        row["summary"] = describe(status)
        rows.append(row)
    if as_json:
        print(json.dumps(rows, indent=1, default=str))
    else:
        if not rows:
            print(f"no shardwright outputs under {root}")
        for row in rows:
            print(f"{row['output_dir']}  {row.get('summary') or row['state'] + ': ' + row.get('error', '')}")
        if cut:
            print(f"(listing stopped at {MAX_OUTPUTS} outputs)")
    return 0
