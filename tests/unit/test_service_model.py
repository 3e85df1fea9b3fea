"""The jobs service's typed records: the guard on terminal states, JSON round trips, and the
shapes older servers wrote (a store and status files from before this change still load)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from shardwright.errors import CorruptStateError, FnError, StorageError
from shardwright.service.model import (
    AttemptOutcome,
    JobError,
    JobState,
    Progress,
    ReportState,
    RunnerReport,
    TerminalStateError,
    Trigger,
    check_transition,
)
from shardwright.service.runner import read_status
from shardwright.service.store import AttemptRecord, JobRecord, SqliteJobStore, StoreFullError

P, R, S, F, C = (JobState(s) for s in ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELED"))


def test_job_states_are_strings_and_know_which_are_terminal():
    assert [s for s in JobState if s.is_terminal()] == [S, F, C]
    assert JobState("FAILED") == "FAILED" and f"{F}" == "FAILED"


@pytest.mark.parametrize(
    "old, new, retry, allowed",
    [
        (P, R, False, True),
        (P, C, False, True),
        (P, F, False, True),
        (R, S, False, True),
        (R, P, False, True),
        (S, P, True, False),  # SUCCEEDED is final, even for a retry
        (S, F, False, False),
        (F, P, False, False),  # only an explicit retry leaves FAILED
        (F, P, True, True),
        (C, P, True, True),
        (C, R, True, False),
        (F, R, False, False),
        (C, S, False, False),
        (F, F, False, True),  # not a transition
    ],
)
def test_the_guard_refuses_to_leave_a_terminal_state(old, new, retry, allowed):
    if allowed:
        check_transition(old, new, retry=retry)
    else:
        with pytest.raises(TerminalStateError):
            check_transition(old, new, retry=retry)


def test_job_error_from_exception_is_the_one_builder():
    e = JobError.from_exception(
        FnError("boom\n--- worker traceback ---\nTB", input_index=4, input_repr="4", worker_traceback="")
    )
    assert e == JobError("user", "FnError", "boom", 4, False)
    assert JobError.from_exception(StorageError("down")).transient
    assert JobError.from_exception(KeyError("k")) == JobError("system", "KeyError", "'k'", None, False)
    assert JobError.from_json(e.to_json(), "x") == e


def test_records_from_older_servers_load_and_garbage_is_refused(tmp_path):
    old_status = {  # a status file as the first servers wrote it (no transient, no signal, no result)
        "attempt": 2,
        "pid": 123,
        "state": "failed",
        "progress": {"inputs_done": 3, "inputs_total": 9, "items": 3},
        "error": {"kind": "user", "type": "FnError", "message": "m", "input_index": 1},
        "started_at": 1.0,
        "updated_at": 2.0,
        "finished_at": 2.0,
    }
    path = tmp_path / "attempt-2.json"
    path.write_text(json.dumps(old_status))
    report = read_status(str(path))
    assert report == RunnerReport(
        attempt=2,
        state=ReportState.FAILED,
        pid=123,
        progress=Progress(3, 9, 3),
        error=JobError("user", "FnError", "m", 1, False),
        started_at=1.0,
        updated_at=2.0,
        finished_at=2.0,
    )
    assert RunnerReport.from_json(report.to_json(), "again") == report
    for bad in ({"state": "done"}, {"progress": {"items": -1}}, {"error": {"kind": "alien"}}, [], {"attempt": "2"}):
        with pytest.raises(CorruptStateError):
            RunnerReport.from_json(bad, "bad.json")
    path.write_text("{not json")
    assert read_status(str(path)) is None  # a torn file: asked again later


OLD_SCHEMA_ROWS = """
INSERT INTO jobs VALUES ('abc', 'FAILED', 'square', '[1, 2]', '/o', '{"factor": 2}', '{"chunk_size": 2}',
  '{"kind": "local", "array": 1}', '["aws_secret_access_key"]', 1.5, 1,
  '{"inputs_done": 1, "inputs_total": 2, "items": 1}',
  '{"kind": "system", "type": "WorkerDiedError", "message": "w", "input_index": null, "transient": true}',
  2.0, 3.0, 0, 1, 0);
INSERT INTO attempts VALUES ('abc', 1, 'submit', 2.0, 2.5, 'failed',
  '{"kind": "system", "type": "JobProcessDied", "message": "m", "input_index": null}', 42, '777', '[]');
INSERT INTO attempts VALUES ('abc', 2, 'auto-retry', 2.6, 3.0, 'failed', NULL, NULL, NULL, '["12"]');
"""


def test_a_store_written_before_the_typed_records_loads(tmp_path):
    db = tmp_path / "jobs.db"
    SqliteJobStore(str(db)).close()  # the schema is the one the first servers created
    with sqlite3.connect(db) as raw:
        raw.executescript(OLD_SCHEMA_ROWS)
    store = SqliteJobStore(str(db))
    job = store.get("abc")
    assert job.state == F and job.progress == Progress(1, 2, 1) and job.inputs == [1, 2]
    assert job.error == JobError("system", "WorkerDiedError", "w", None, True)
    assert job.storage_option_keys == ("aws_secret_access_key",) and job.executor_kind == "local"
    first, second = job.attempts
    assert first.trigger == Trigger.SUBMIT and first.outcome == AttemptOutcome.FAILED and first.pid_start == "777"
    assert first.error == JobError("system", "JobProcessDied", "m", None, False)
    assert second.trigger == Trigger.AUTO_RETRY and second.slurm_job_ids == ("12",) and second.error is None
    with pytest.raises(TerminalStateError):
        store.update("abc", state=R)  # the guard holds on old rows too
    assert store.update("abc", retry=True, state=P).state == P
    assert [j.id for j in store.list(P)] == ["abc"] and store.list(P)[0].inputs is None


def test_the_store_round_trips_typed_records_and_refuses_a_full_disk_cleanly(tmp_path):
    store = SqliteJobStore(str(tmp_path / "jobs.db"))
    job = JobRecord("j1", P, "p", [1], "/o", {}, {}, {"kind": "slurm", "array": 2}, (), 1.0, progress=Progress(0, 1, 0))
    store.create(job)
    got = store.add_attempt("j1", AttemptRecord(1, Trigger.SUBMIT, 2.0), state=R, started_at=2.0)
    assert got.state == R and got.current_attempt.outcome == AttemptOutcome.RUNNING
    store.update_attempt("j1", 1, outcome=AttemptOutcome.SUCCEEDED, slurm_job_ids=("5", "6"))
    done = store.update("j1", state=S, progress=Progress(1, 1, 3))
    assert done.current_attempt.slurm_job_ids == ("5", "6") and done.progress.items == 3
    with pytest.raises(TerminalStateError):
        store.update("j1", retry=True, state=P)
    assert store.get("j1").state == S  # the refused change left nothing behind
    # a full disk: SQLite's "database or disk is full" becomes StoreFullError (HTTP 507)
    store._db.execute("PRAGMA max_page_count = 1")  # (a disk that is full now)
    with pytest.raises(StoreFullError, match="is full"):
        store.create(JobRecord("j2", P, "p", [1] * 10_000, "/o2", {}, {}, {}, (), 1.0))
    assert store.get("j2") is None
