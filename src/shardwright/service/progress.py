"""How far a job's output is, read from the output itself (the engine's typed status report,
``shardwright.protocol.status``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..protocol.history import read_history
from ..protocol.status import read_status
from ..secrets import redact, secret_values
from ..storage import open_storage
from .model import Progress


@dataclass(frozen=True)
class OutputProgress:
    progress: Progress
    published: bool


def read_progress(output_dir: str, storage_options: dict | None, inputs_total: int) -> OutputProgress | None:
    """What the output says now, or None when it cannot be read now."""
    try:
        report = read_status(open_storage(output_dir, storage_options))
    except Exception:  # nothing written yet, a read racing a publish, storage down: try again later
        return None
    if report.state == "complete":
        last = report.last_run or {}
        items = last.get("items", 0)
        items = items if isinstance(items, int) and not isinstance(items, bool) and items >= 0 else 0
        return OutputProgress(Progress(inputs_total, inputs_total, items), True)
    if report.state == "empty":
        return OutputProgress(Progress(0, inputs_total, 0), False)
    done = min(max(0, int(report.inputs_done)), inputs_total)
    return OutputProgress(Progress(done, inputs_total, max(0, int(report.items_committed))), False)


def read_output_history(
    output_dir: str, storage_options: dict | None, limit: int = 50
) -> tuple[list[dict], str | None]:
    """The newest ``limit`` optimize() calls recorded in the output (oldest first), or why not."""
    try:
        attempts = read_history(open_storage(output_dir, storage_options), limit)
    except Exception as exc:  # nothing written yet, storage down: say so, the page asks again
        return [], redact(f"{type(exc).__name__}: {exc}", secret_values(storage_options)).split("\n")[0][:500]
    out = []
    for a in attempts:
        data = a.to_json()
        data.pop("attempt_id", None)
        data.pop("user", None)
        out.append(data)
    return out, None if out else "no optimize() call is recorded in the output yet"


def read_inputs_status(output_dir: str, storage_options: dict | None) -> tuple[dict, str | None]:
    """Counts of the job's inputs done / in progress / pending / failed, the inputs live workers
    are on by name (with their ResumePoint state), and an ETA; or why the output cannot say."""
    empty: dict = {"counts": {}, "in_progress": [], "eta_seconds": None}
    try:
        report = read_status(open_storage(output_dir, storage_options))
    except Exception as exc:  # nothing written yet, storage down: say so, the page asks again
        return empty, redact(f"{type(exc).__name__}: {exc}", secret_values(storage_options)).split("\n")[0][:500]
    if report.state in ("empty", "complete"):
        note = "nothing written yet" if report.state == "empty" else "no run in progress: the dataset is published"
        return empty, note
    entries = [
        {"input": e.input, "name": e.name, "state": e.state, "calls": e.calls, "worker": e.worker, "place": e.place}
        for e in report.in_progress
    ]
    return {"counts": report.counts, "in_progress": entries, "eta_seconds": report.eta_s}, None
