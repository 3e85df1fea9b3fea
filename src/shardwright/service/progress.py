"""How far a job's output is, read from the output itself (the engine's typed status report,
``shardwright.protocol.status``)."""

from __future__ import annotations

from ..protocol.status import read_status
from ..storage import open_storage


def read_progress(output_dir: str, storage_options: dict | None, inputs_total: int) -> dict | None:
    """``{"inputs_done", "inputs_total", "items", "published"}``, or None when it cannot be read now."""
    try:
        report = read_status(open_storage(output_dir, storage_options))
    except Exception:  # nothing written yet, a read racing a publish, storage down: try again later
        return None
    if report.state == "complete":
        last = report.last_run or {}
        return {
            "inputs_done": inputs_total,
            "inputs_total": inputs_total,
            "items": int(last.get("items", 0)),
            "published": True,
        }
    if report.state == "empty":
        return {"inputs_done": 0, "inputs_total": inputs_total, "items": 0, "published": False}
    return {
        "inputs_done": report.inputs_done,
        "inputs_total": inputs_total,
        "items": report.items_committed,
        "published": False,
    }
