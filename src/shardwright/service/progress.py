"""How far a job's output is, read from the output itself (the engine's status report).

The one place that knows where the engine's status lives: today ``shardwright.cli.status_report``;
after the restructure the typed status API of ``shardwright.protocol``.
"""

from __future__ import annotations


def read_progress(output_dir: str, storage_options: dict | None, inputs_total: int) -> dict | None:
    """``{"inputs_done", "inputs_total", "items", "published"}``, or None when it cannot be read now."""
    from ..cli import status_report

    try:
        report = status_report(output_dir, storage_options)
    except Exception:  # nothing written yet, a read racing a publish, storage down: try again later
        return None
    if report.get("state") == "complete":
        last = report.get("last_run") or {}
        return {"inputs_done": inputs_total, "inputs_total": inputs_total, "items": int(last.get("items", 0)),
                "published": True}
    if report.get("state") == "empty":
        return {"inputs_done": 0, "inputs_total": inputs_total, "items": 0, "published": False}
    return {"inputs_done": int(report.get("inputs_done", 0)), "inputs_total": inputs_total,
            "items": int(report.get("items_committed", 0)), "published": False}
