"""The jobs service's state machine as pure functions: what happens to a job when one of its
attempts ends (:func:`settle`), why the next attempt starts (:func:`trigger`), and how a Slurm
array's end reads as one report (:func:`slurm_report`). No store, no processes, no clock: the
scheduler observes, calls these under its lock, and writes what they return.

============================================  ==========================================
the attempt ended ...                          the job becomes
============================================  ==========================================
reported success (the dataset is published)   SUCCEEDED (final)
cancel was requested                          CANCELED (whatever the report says)
the server stopped it (not a failure)         PENDING, attempt ``interrupted``
a transient system failure, retries left      PENDING after a backoff, ``auto-retry``
any other failure                             FAILED
============================================  ==========================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .model import AttemptOutcome, JobError, JobState, Progress, ReportState, RunnerReport, Trigger
from .store import JobRecord


@dataclass(frozen=True)
class RetryPolicy:
    auto_retries: int = 2  # automatic retries after a transient system failure, per submit/retry
    backoff: float = 1.0  # seconds before the first, doubling


@dataclass(frozen=True)
class Transition:
    """What :func:`settle` decided: the job's next state and the ended attempt's record."""

    state: JobState
    outcome: AttemptOutcome
    attempt_error: JobError | None
    job_error: JobError | None  # the job's own ``error`` (set when it FAILED)
    progress: Progress
    auto_retries: int
    not_before: float = 0.0

    @property
    def ends_job(self) -> bool:
        return self.state.is_terminal()


def trigger(job: JobRecord) -> Trigger:
    """Why the next attempt of a PENDING job starts."""
    last = job.current_attempt
    if last is None:
        return Trigger.SUBMIT
    if last.outcome == AttemptOutcome.INTERRUPTED:
        return Trigger.SERVER_RESTART
    if last.outcome == AttemptOutcome.FAILED and job.auto_retries > 0 and last.error and last.error.transient:
        return Trigger.AUTO_RETRY
    return Trigger.RETRY


def _reported_error(report: RunnerReport | None, how_it_ended: str) -> JobError | None:
    """The failure the report says (None: it succeeded)."""
    state = report.state if report else None
    if state == ReportState.SUCCEEDED:
        if report is not None and report.result is not None and not report.result.published:
            # optimize() returned without publishing (a single-node run must publish): never a success
            return JobError.system(
                "NotPublished", "the run ended without publishing the dataset (index.json); see the job's log"
            )
        return None
    if state == ReportState.FAILED:
        assert report is not None
        return report.error or JobError.system("Unknown", "the job process reported a failure")
    if state == ReportState.INTERRUPTED:
        assert report is not None
        return JobError.system(
            "Interrupted", f"stopped by {report.signal or 'a signal'}; committed work is kept", transient=True
        )
    return JobError.system("JobProcessDied", f"the job process {how_it_ended}", transient=True)


def settle(
    job: JobRecord,
    report: RunnerReport | None,
    how_it_ended: str,
    *,
    server_stop: bool,
    policy: RetryPolicy,
    now: float,
) -> Transition:
    """A RUNNING job's attempt ended (``report`` is its last status, None if it wrote none)."""
    progress = (report.progress if report else None) or job.progress
    error = _reported_error(report, how_it_ended)
    if error is None:
        return Transition(JobState.SUCCEEDED, AttemptOutcome.SUCCEEDED, None, None, progress, job.auto_retries)
    if job.cancel_requested:
        return Transition(JobState.CANCELED, AttemptOutcome.CANCELED, error, None, progress, job.auto_retries)
    if server_stop and not (report and report.state == ReportState.FAILED):
        stopped = JobError.system(
            "ServerStopped", f"the server stopped while this attempt ran ({error.message})", transient=True
        )
        return Transition(JobState.PENDING, AttemptOutcome.INTERRUPTED, stopped, None, progress, job.auto_retries)
    if error.transient and job.auto_retries < policy.auto_retries:
        delay = policy.backoff * (2**job.auto_retries)
        return Transition(
            JobState.PENDING, AttemptOutcome.FAILED, error, None, progress, job.auto_retries + 1, now + delay
        )
    return Transition(JobState.FAILED, AttemptOutcome.FAILED, error, error, progress, job.auto_retries)


def secrets_lost(job: JobRecord) -> JobError:
    """A PENDING job needs storage_options that only a previous server held in memory."""
    return JobError.system(
        "SecretsLost",
        f"the server restarted and this job's storage_options ({', '.join(job.storage_option_keys)}) "
        f"were kept only in its memory; retry with them: POST /api/v1/jobs/{job.id}/retry "
        'with {"storage_options": {...}}',
    )


def slurm_report(
    ids: list[str],
    states: Mapping[str, str] | None,
    task_reports: Mapping[str, RunnerReport],
    published_progress: Progress | None,
    died_states: frozenset[str],
) -> RunnerReport:
    """One report for a Slurm array whose tasks all ended (``states``: Slurm's last word on each
    task, None when Slurm forgot the job; ``task_reports``: the status files the tasks wrote).

    Published: success. A task that reported a failure (or an interruption): that report. Tasks
    that ended without reporting (killed by the OOM killer, the time limit, a node failure:
    ``died_states``) make a transient system failure, retried like a killed local job; Slurm does
    not requeue a task in those states, so a retry never runs two copies of one task.
    """
    if published_progress is not None:
        return RunnerReport(attempt=0, state=ReportState.SUCCEEDED, progress=published_progress)
    for wanted in (ReportState.FAILED, ReportState.INTERRUPTED):
        for _, report in sorted(task_reports.items()):
            if report.state == wanted:
                return report
    summary = ", ".join(f"{task} {state}" for task, state in sorted((states or {}).items()))
    died = sorted(task for task, state in (states or {}).items() if state in died_states)
    if died or states is None:
        which = ", ".join(f"{task} {(states or {}).get(task, '')}".strip() for task in died) or "some tasks"
        return RunnerReport(
            attempt=0,
            state=ReportState.FAILED,
            error=JobError.system(
                "SlurmTaskDied",
                f"Slurm task(s) {which} ended without reporting (out of memory, time limit or node failure) "
                "and Slurm will not requeue them; committed work is kept",
                transient=True,
            ),
        )
    return RunnerReport(
        attempt=0,
        state=ReportState.FAILED,
        error=JobError.system(
            "SlurmJobFailed",
            f"Slurm job {','.join(ids)} ended ({summary or 'unknown'}) and the output is not published",
        ),
    )


__all__ = ["RetryPolicy", "Transition", "secrets_lost", "settle", "slurm_report", "trigger"]
