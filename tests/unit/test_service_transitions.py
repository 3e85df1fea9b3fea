"""service.transitions as decision tables: (the job, how its attempt ended) -> the job's next
state, the attempt's outcome and error. Pure: no store, no processes, no clock."""

from __future__ import annotations

import pytest

from shardwright.service.executor_slurm import DIED
from shardwright.service.model import (
    AttemptOutcome,
    JobError,
    JobState,
    Progress,
    ReportState,
    RunnerReport,
    RunResult,
    Trigger,
)
from shardwright.service.store import AttemptRecord, JobRecord
from shardwright.service.transitions import RetryPolicy, settle, slurm_report, trigger

POLICY = RetryPolicy(auto_retries=2, backoff=1.0)
NOW = 1000.0
FN_ERROR = JobError("user", "FnError", "fn raised on input 3", 3, False)
DISK = JobError("system", "StorageError", "bucket unreachable", None, True)
BUG = JobError("system", "KeyError", "'x'", None, False)


def job(*, cancel=False, auto_retries=0, attempts=(), progress=Progress(2, 10, 2)):
    return JobRecord(
        id="j",
        state=JobState.RUNNING,
        pipeline="p",
        inputs=None,
        output_dir="/o",
        config={},
        options={},
        executor={"kind": "local"},
        storage_option_keys=(),
        created_at=0.0,
        progress=progress,
        cancel_requested=cancel,
        auto_retries=auto_retries,
        attempts=attempts or (AttemptRecord(1, Trigger.SUBMIT, 1.0),),
    )


def report(state, error=None, published=None, signal=None):
    result = RunResult(published, 10, False) if published is not None else None
    return RunnerReport(
        attempt=1, state=state, progress=Progress(10, 10, 10), error=error, signal=signal, result=result
    )


S, F, STOP = ReportState.SUCCEEDED, ReportState.FAILED, ReportState.INTERRUPTED


@pytest.mark.parametrize(
    "case, the_job, the_report, server_stop, state, outcome, error_type, retries, waits",
    [
        ("published", job(), report(S, published=True), False, "SUCCEEDED", "succeeded", None, 0, 0),
        ("old runner: no result", job(), report(S), False, "SUCCEEDED", "succeeded", None, 0, 0),
        ("returned unpublished", job(), report(S, published=False), False, "FAILED", "failed", "NotPublished", 0, 0),
        ("fn raised", job(), report(F, FN_ERROR), False, "FAILED", "failed", "FnError", 0, 0),
        ("a bug", job(), report(F, BUG), False, "FAILED", "failed", "KeyError", 0, 0),
        ("storage down", job(), report(F, DISK), False, "PENDING", "failed", "StorageError", 1, 1.0),
        (
            "storage, 2nd retry",
            job(auto_retries=1),
            report(F, DISK),
            False,
            "PENDING",
            "failed",
            "StorageError",
            2,
            2.0,
        ),
        (
            "storage, no retry left",
            job(auto_retries=2),
            report(F, DISK),
            False,
            "FAILED",
            "failed",
            "StorageError",
            2,
            0,
        ),
        ("killed: no report", job(), None, False, "PENDING", "failed", "JobProcessDied", 1, 1.0),
        ("killed, no retry left", job(auto_retries=2), None, False, "FAILED", "failed", "JobProcessDied", 2, 0),
        ("failed no error", job(), report(F), False, "FAILED", "failed", "Unknown", 0, 0),
        (
            "stopped by a signal",
            job(),
            report(STOP, signal="SIGTERM"),
            False,
            "PENDING",
            "failed",
            "Interrupted",
            1,
            1.0,
        ),
        (
            "canceled, stopped",
            job(cancel=True),
            report(STOP, signal="SIGTERM"),
            False,
            "CANCELED",
            "canceled",
            "Interrupted",
            0,
            0,
        ),
        ("canceled but failed", job(cancel=True), report(F, FN_ERROR), False, "CANCELED", "canceled", "FnError", 0, 0),
        (
            "canceled, finished",
            job(cancel=True),
            report(S, published=True),
            False,
            "SUCCEEDED",
            "succeeded",
            None,
            0,
            0,
        ),
        (
            "server stopped it",
            job(),
            report(STOP, signal="SIGTERM"),
            True,
            "PENDING",
            "interrupted",
            "ServerStopped",
            0,
            0,
        ),
        ("server restart, dead", job(auto_retries=2), None, True, "PENDING", "interrupted", "ServerStopped", 2, 0),
        ("server stop, fn raised", job(), report(F, FN_ERROR), True, "FAILED", "failed", "FnError", 0, 0),
    ],
)
def test_settle(case, the_job, the_report, server_stop, state, outcome, error_type, retries, waits):
    t = settle(the_job, the_report, "was killed by SIGKILL", server_stop=server_stop, policy=POLICY, now=NOW)
    assert (t.state.value, t.outcome.value) == (state, outcome), case
    assert (t.attempt_error.type if t.attempt_error else None) == error_type, case
    assert t.auto_retries == retries, case
    assert t.not_before == (NOW + waits if waits else 0.0), case
    assert (t.job_error is not None) == (t.state == JobState.FAILED), case  # the job's error: only when FAILED
    if the_report is not None:
        assert t.progress == the_report.progress
    else:
        assert t.progress == the_job.progress
    if error_type in ("JobProcessDied", "Interrupted", "ServerStopped"):
        assert t.attempt_error.kind == "system" and t.attempt_error.transient


def test_a_dead_job_process_says_how_it_ended():
    t = settle(job(), None, "was killed by SIGKILL (the OOM killer?)", server_stop=False, policy=POLICY, now=NOW)
    assert t.attempt_error.message == "the job process was killed by SIGKILL (the OOM killer?)"


def _attempt(number, outcome, error=None):
    return AttemptRecord(number, Trigger.SUBMIT, 1.0, 2.0, outcome, error)


@pytest.mark.parametrize(
    "attempts, auto_retries, expected",
    [
        ((), 0, Trigger.SUBMIT),
        ((_attempt(1, AttemptOutcome.INTERRUPTED),), 0, Trigger.SERVER_RESTART),
        ((_attempt(1, AttemptOutcome.FAILED, DISK),), 1, Trigger.AUTO_RETRY),
        ((_attempt(1, AttemptOutcome.FAILED, DISK),), 0, Trigger.RETRY),  # the user retried (counter reset)
        ((_attempt(1, AttemptOutcome.FAILED, FN_ERROR),), 1, Trigger.RETRY),
        ((_attempt(1, AttemptOutcome.CANCELED),), 0, Trigger.RETRY),
    ],
)
def test_trigger(attempts, auto_retries, expected):
    the_job = job(auto_retries=auto_retries)
    the_job = JobRecord(**{**the_job.__dict__, "attempts": attempts, "state": JobState.PENDING})
    assert trigger(the_job) == expected


DONE = Progress(10, 10, 10)


@pytest.mark.parametrize(
    "case, states, reports, published, state, error_type, transient",
    [
        ("published", {"1_0": "COMPLETED", "1_1": "COMPLETED"}, {}, DONE, "succeeded", None, None),
        ("a task's fn raised", {"1_0": "FAILED"}, {"0": report(F, FN_ERROR)}, None, "failed", "FnError", False),
        ("OOM, no report", {"1_0": "COMPLETED", "1_1": "OUT_OF_MEMORY"}, {}, None, "failed", "SlurmTaskDied", True),
        ("time limit", {"1_0": "TIMEOUT"}, {"0": report(ReportState.RUNNING)}, None, "failed", "SlurmTaskDied", True),
        ("killed by a signal", {"1_0": "FAILED", "1_1": "COMPLETED"}, {}, None, "failed", "SlurmTaskDied", True),
        (
            "stopped at a commit",
            {"1_0": "TIMEOUT"},
            {"0": report(STOP, signal="SIGTERM")},
            None,
            "interrupted",
            None,
            None,
        ),
        (
            "reported beats died",
            {"1_0": "FAILED", "1_1": "OUT_OF_MEMORY"},
            {"0": report(F, FN_ERROR)},
            None,
            "failed",
            "FnError",
            False,
        ),
        ("slurm forgot it", None, {}, None, "failed", "SlurmTaskDied", True),
        ("completed, unpublished", {"1_0": "COMPLETED"}, {}, None, "failed", "SlurmJobFailed", False),
        ("canceled by someone", {"1_0": "CANCELLED"}, {}, None, "failed", "SlurmJobFailed", False),
    ],
)
def test_slurm_report(case, states, reports, published, state, error_type, transient):
    r = slurm_report(["1"], states, reports, published, DIED)
    assert r.state.value == state, case
    assert (r.error.type if r.error else None) == error_type, case
    if transient is not None:
        assert r.error.transient == transient, case


def test_slurm_never_retries_a_state_slurm_requeues():
    from shardwright.service.executor_slurm import FINAL

    # settled only once every task is final; requeued states are not final, so never two copies
    assert "PREEMPTED" not in FINAL and "NODE_FAIL" not in FINAL and "REQUEUED" not in FINAL
    assert DIED - {"NODE_FAIL"} <= FINAL
