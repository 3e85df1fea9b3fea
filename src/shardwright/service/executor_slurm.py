"""Slurm executor: a job with ``{"executor": {"kind": "slurm", "array": N}}`` is one sbatch
array, written, submitted and followed by shardwright's own Slurm helper
(:mod:`shardwright.cluster.slurm`, the home of every Slurm command). Every task runs the runner
with ``--slurm``; optimize() takes the task's share of the shards from the array variables and
the task that finishes last publishes. This module keeps what the service reads into Slurm's
states.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from ..cluster import slurm as helper
from .executors import Launch, Observation, Started
from .model import RunnerReport
from .progress import read_progress
from .runner import read_status
from .store import AttemptRecord, JobRecord
from .transitions import slurm_report

log = logging.getLogger("shardwright.service")

#: Slurm job states after which a task will not run again by itself. NODE_FAIL and PREEMPTED are
#: not here: they are followed by a requeue (the helper's scripts use --requeue).
FINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})
#: Final states of a task that was killed (or never ran) rather than stopped by its own code:
#: when it wrote no failure of its own, the service retries the job (a transient system failure).
DIED = frozenset({"FAILED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "NODE_FAIL"})

SlurmUnavailable = helper.SlurmUnavailable
task_states = helper.task_states
cancel = helper.cancel_jobs


def job_name(job_id: str, attempt: int) -> str:
    """The Slurm job name of one attempt: how a restarted server finds a submission it did not record."""
    return f"sw-job-{job_id}-a{attempt}"


def find_submitted(name: str, env: dict) -> list[str]:
    return helper.find_jobs_by_name(name, env)


def submit(job_dir: str, job_id: str, attempt: int, array: int, env: dict) -> list[str]:
    command = [sys.executable, "-m", "shardwright.service.runner", job_dir, "--attempt", str(attempt), "--slurm"]
    script = helper.write_sbatch_script(
        command, array, log_dir=os.path.join(job_dir, "slurm-logs"), chdir=job_dir, job_name=job_name(job_id, attempt)
    )
    submissions, explicit = helper.plan_submissions(array)
    return helper.submit_run(script, submissions, explicit, env=env, cwd=job_dir)


def all_final(states: dict[str, str]) -> bool:
    return bool(states) and all(s in FINAL for s in states.values())


SLURM_FORGOTTEN_GRACE = 300.0  # s: Slurm no longer knows the job and its tasks did not all report
POLL_EVERY = 1.0  # s between two questions to Slurm about one job


def task_reports(job_dir: str, attempt: int) -> dict[str, RunnerReport]:
    """The status files the tasks of one attempt wrote, by task id."""
    prefix = f"attempt-{attempt}-task-"
    out = {}
    for name in os.listdir(job_dir):
        if name.startswith(prefix) and name.endswith(".json"):
            report = read_status(os.path.join(job_dir, name))
            if report:
                out[name[len(prefix) : -5]] = report
    return out


class SlurmExecutor:
    """Slurm arrays: submitted with sbatch, followed with scontrol/sacct and the output's state."""

    kind = "slurm"

    def __init__(self, env: dict, forgotten_grace: float = SLURM_FORGOTTEN_GRACE):
        self.env, self.forgotten_grace = env, forgotten_grace
        self.polled: dict[str, float] = {}
        self.forgotten: dict[str, float] = {}
        self.term_sent: set[str] = set()

    def records_before_start(self) -> bool:
        return True

    def start(self, launch: Launch) -> Started:
        array = int(launch.job.executor.get("array", 1))
        return Started(slurm_job_ids=tuple(submit(launch.job_dir, launch.job.id, launch.number, array, launch.env)))

    def observe(self, job: JobRecord, attempt: AttemptRecord, job_dir: str) -> Observation:
        now = time.time()
        if now - self.polled.get(job.id, 0) < POLL_EVERY:
            return Observation()
        self.polled[job.id] = now
        ids = list(attempt.slurm_job_ids)
        found: tuple[str, ...] = ()
        if not ids:  # the server died between recording the attempt and recording sbatch's answer
            try:
                ids = find_submitted(job_name(job.id, attempt.number), self.env)
            except SlurmUnavailable:
                return Observation()
            if not ids:
                return Observation(
                    ended=True, how_it_ended="was never submitted (the server stopped first)", server_stop=True
                )
            found = tuple(ids)
        seen = read_progress(job.output_dir, None, job.progress.inputs_total)
        progress = seen.progress if seen and seen.progress != job.progress else None
        if job.cancel_requested and job.id not in self.term_sent:
            self.term_sent.add(job.id)
            try:
                cancel(ids, self.env)
            except SlurmUnavailable as exc:
                log.warning("job %s: %s", job.id, exc)
        try:
            states = task_states(ids, self.env)
        except SlurmUnavailable as exc:
            log.warning("job %s: %s; asking again", job.id, exc)
            return Observation(progress=progress, slurm_job_ids=found)
        reports = task_reports(job_dir, attempt.number)
        if states is not None and not all_final(states):
            self.forgotten.pop(job.id, None)
            return Observation(progress=progress, slurm_job_ids=found)
        published = seen is not None and seen.published
        if states is None and not published and len(reports) < int(job.executor.get("array", 1)):
            # Slurm forgot the job and not every task reported: give the output a while to say more
            if now - self.forgotten.setdefault(job.id, now) < self.forgotten_grace:
                return Observation(progress=progress, slurm_job_ids=found)
        self.forget(job.id)
        summary = ", ".join(f"{t} {s}" for t, s in sorted((states or {}).items()))
        report = slurm_report(ids, states, reports, seen.progress if published and seen else None, DIED)
        return Observation(
            progress=progress,
            ended=True,
            report=report,
            how_it_ended=f"ended in Slurm ({summary})",
            slurm_job_ids=found,
        )

    def forget(self, job_id: str) -> None:
        self.forgotten.pop(job_id, None)
        self.term_sent.discard(job_id)
        self.polled.pop(job_id, None)

    def recover(self, job: JobRecord, attempt: AttemptRecord, job_dir: str) -> Observation | None:
        return None  # Slurm runs it, not us: keep following it

    def shutdown(self, grace: float) -> list[str]:
        return []  # Slurm jobs outlive the server; the next one follows them
