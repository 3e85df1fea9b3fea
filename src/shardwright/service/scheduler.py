"""The server's job loop: FIFO queue, N at a time, follows attempts, retries, recovers.

One long-lived thread starts every job process (PR_SET_PDEATHSIG follows the thread that
forked, so it must outlive its children) and follows them through their executor. The lock
guards decisions only: the loop observes (status files, the output's progress, ``scontrol``)
and launches (a process, ``sbatch``) outside it, then settles what it saw under it with the
pure functions of transitions.py. A job being launched is marked in ``self.launching`` so it
cannot be launched twice; API handlers only change records under the lock and wake the loop.

Secrets: a job's storage_options are kept in ``self.secrets`` (memory) and handed to the job
process on stdin. The store keeps their names only; after a restart a job that needs them
and lost them fails with ``SecretsLost`` and says how to retry with them.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

from .config import ServiceConfig
from .executor_local import LocalExecutor
from .executor_slurm import SlurmExecutor
from .executors import Executor, Launch, Observation
from .jobfiles import JobFiles
from .model import AttemptOutcome, JobError, JobState, Progress
from .store import AttemptRecord, JobRecord, JobStore
from .transitions import secrets_lost, settle, trigger

log = logging.getLogger("shardwright.service")


class Speed:
    """Progress samples of one attempt over the last minute: items/s and an ETA."""

    WINDOW = 60.0

    def __init__(self, attempt: int):
        self.attempt = attempt
        self.samples: list[tuple[float, Progress]] = []

    def add(self, attempt: int, at: float, progress: Progress) -> None:
        if attempt != self.attempt:
            self.attempt, self.samples = attempt, []
        self.samples = [s for s in self.samples if at - s[0] <= self.WINDOW] + [(at, progress)]

    def rate(self, now: Progress) -> tuple[float, float | None] | None:
        if len(self.samples) < 2:
            return None
        (t0, first), (t1, last) = self.samples[0], self.samples[-1]
        if t1 - t0 < 0.5:
            return None
        items = max(0, last.items - first.items) / (t1 - t0)
        inputs = max(0, last.inputs_done - first.inputs_done) / (t1 - t0)
        eta = (now.inputs_total - now.inputs_done) / inputs if inputs > 0 else None
        return round(items, 3), round(eta, 1) if eta is not None else None


class JobStateError(Exception):
    """The job is not in a state that allows the action (HTTP 409)."""


class QueueFullError(Exception):
    """--max-queued jobs are waiting already (HTTP 429)."""


def _running_attempt(job: JobRecord) -> AttemptRecord:
    attempt = job.current_attempt
    if attempt is None:
        raise RuntimeError(f"job {job.id} is {job.state} without an attempt")
    return attempt


class Scheduler:
    def __init__(self, store: JobStore, config: ServiceConfig, executors: dict[str, Executor] | None = None):
        self.store, self.config = store, config
        self.files = JobFiles(config)
        self.lock = threading.RLock()
        self.secrets: dict[str, dict] = {}
        self.launching: set[str] = set()  # job ids between "chosen to start" and "recorded as RUNNING"
        self.speed: dict[str, Speed] = {}  # job id -> progress samples of its running attempt
        self.executors: dict[str, Executor] = executors or {
            "local": LocalExecutor(config.cancel_grace),
            "slurm": SlurmExecutor(self.files.job_env()),
            # a Ray job's driver is a local job process (cancel, retry and restarts as for local
            # jobs) whose optimize() spreads the shards over the cluster at config.ray_address
            "ray": LocalExecutor(config.cancel_grace, kind="ray"),
        }
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="shardwright-jobs", daemon=True)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Graceful: running local jobs get SIGTERM, commit and go back to PENDING."""
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout if timeout is not None else self.config.cancel_grace + 10)

    def wake(self) -> None:
        self._wake.set()

    # -- API actions ----------------------------------------------------------------------------

    def submit(self, job: JobRecord, storage_options: dict | None) -> JobRecord:
        """Queue a new job (its spec file is written first; nothing is left if that fails)."""
        with self.files.new_job_dir(job):
            with self.lock:
                self.check_queue_room()
                self.check_output_free(job.output_dir)
                job = self.store.create(replace(job, queue_pos=self.store.next_queue_pos()))
                if storage_options:
                    self.secrets[job.id] = storage_options
        self._wake.set()
        return job

    def check_queue_room(self) -> None:
        """Refuse a job past ``max_queued`` waiting ones: each is a store row, a /metrics series
        per gauge and a slot in every scan, and a token holder could queue them without end."""
        limit = self.config.max_queued
        if len(self.store.list(JobState.PENDING, limit=limit)) >= limit:
            raise QueueFullError(
                f"{limit:,} jobs are waiting to run already (this server's --max-queued); "
                "submit again when some have started, or cancel some"
            )

    def check_output_free(self, output_dir: str, except_job: str | None = None) -> None:
        """One live job per output: two would only race for its lease."""
        # every live job: the store lists 1,000 by default, and --max-queued may allow more
        live = self.config.max_queued + self.config.max_running + 1000
        for state in (JobState.PENDING, JobState.RUNNING):
            for other in self.store.list(state, limit=live):
                if other.output_dir == output_dir and other.id != except_job:
                    raise JobStateError(
                        f"output_dir: job {other.id} ({other.state}) already writes {output_dir}; "
                        "wait for it, cancel it, or choose another output_dir"
                    )

    def cancel(self, job_id: str) -> JobRecord:
        with self.lock:
            job = self._get(job_id)
            if job.state == JobState.PENDING and job_id not in self.launching:
                job = self.store.update(job_id, state=JobState.CANCELED, finished_at=time.time(), cancel_requested=True)
            elif not job.state.is_terminal():  # RUNNING, or being launched: its executor stops it
                job = self.store.update(job_id, cancel_requested=True)
            else:
                raise JobStateError(f"job {job_id} is {job.state}: only PENDING or RUNNING jobs can be canceled")
        self._wake.set()
        return job

    def retry(self, job_id: str, storage_options: dict | None = None) -> JobRecord:
        with self.lock:
            job = self._get(job_id)
            if job.state not in (JobState.FAILED, JobState.CANCELED):
                raise JobStateError(f"job {job_id} is {job.state}: only FAILED or CANCELED jobs can be retried")
            self.check_queue_room()  # a retried job waits like a submitted one (trust round 8)
            self.check_output_free(job.output_dir, except_job=job_id)
            if storage_options:
                self.secrets[job_id] = storage_options
            job = self.store.update(
                job_id,
                retry=True,
                state=JobState.PENDING,
                error=None,
                finished_at=None,
                cancel_requested=False,
                auto_retries=0,
                not_before=0.0,
                queue_pos=self.store.next_queue_pos(),
                storage_option_keys=tuple(sorted(storage_options)) if storage_options else job.storage_option_keys,
            )
        self._wake.set()
        return job

    def delete(self, job_id: str) -> None:
        with self.lock:
            job = self._get(job_id)
            if not job.state.is_terminal():
                raise JobStateError(f"job {job_id} is {job.state}: cancel it first (POST /api/v1/jobs/{job_id}/cancel)")
            self.store.delete(job_id)
            self.secrets.pop(job_id, None)
        self.files.remove(job_id)

    def logs(self, job_id: str, tail_bytes: int = 1_000_000) -> str:
        self._get(job_id)
        return self.files.log_text(job_id, tail_bytes, self.secrets.get(job_id))

    def rate(self, job: JobRecord) -> tuple[float, float | None] | None:
        """(items per second, seconds left) of a RUNNING job, from the progress seen lately."""
        speed = self.speed.get(job.id)
        return speed.rate(job.progress) if speed is not None and job.state == JobState.RUNNING else None

    def secrets_available(self, job: JobRecord) -> bool:
        return not job.storage_option_keys or job.id in self.secrets

    def _get(self, job_id: str) -> JobRecord:
        job = self.store.get(job_id)
        if job is None:
            raise KeyError(job_id)
        return job

    def executor(self, job: JobRecord) -> Executor:
        return self.executors[job.executor_kind]

    # -- the loop -------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            try:
                self._recover()
            except Exception:  # follow and start jobs anyway; say what went wrong
                log.exception("recovery error")
            while not self._stopping.is_set():
                try:
                    self.tick()
                except Exception:  # keep following jobs; say what went wrong
                    log.exception("job loop error")
                self._wake.wait(self.config.poll_interval)
                self._wake.clear()
        finally:
            self._shutdown()

    def tick(self) -> None:
        """Follow every RUNNING job, then start what may start (one pass of the loop)."""
        with self.lock:
            running = [j for j in self.store.list(JobState.RUNNING) if j.id not in self.launching]
        for job in running:
            attempt = _running_attempt(job)
            try:
                observation = self.executor(job).observe(job, attempt, self.files.job_dir(job.id))
            except Exception:  # one job's trouble (a file, Slurm) must not stop following the others
                log.exception("job %s: cannot follow attempt %d now", job.id, attempt.number)
                continue
            with self.lock:
                self._apply(job.id, attempt.number, observation)
        for launch in self.choose():
            self.launch(launch)

    def _apply(self, job_id: str, number: int, seen: Observation) -> None:
        """Under the lock: record what an executor saw of attempt ``number`` (if it is still current)."""
        job = self.store.get(job_id)
        if job is None or job.state != JobState.RUNNING or _running_attempt(job).number != number:
            return  # settled meanwhile (or deleted)
        if seen.slurm_job_ids:
            self.store.update_attempt(job_id, number, slurm_job_ids=seen.slurm_job_ids)
        if seen.progress is not None and seen.progress != job.progress:
            job = self.store.update(job_id, progress=seen.progress)
            self.speed.setdefault(job_id, Speed(number)).add(number, time.time(), seen.progress)
        if not seen.ended:
            return
        self.speed.pop(job_id, None)
        t = settle(
            job,
            seen.report,
            seen.how_it_ended,
            server_stop=seen.server_stop,
            policy=self.config.retry_policy,
            now=time.time(),
        )
        now = time.time()
        self.store.update_attempt(job_id, number, outcome=t.outcome, finished_at=now, error=t.attempt_error)
        fields: dict = {"state": t.state, "progress": t.progress, "auto_retries": t.auto_retries}
        if t.state == JobState.PENDING:
            fields["not_before"] = t.not_before
        else:
            fields.update(finished_at=now, error=t.job_error)
        self.store.update(job_id, **fields)
        if t.state == JobState.SUCCEEDED:
            self.secrets.pop(job_id, None)
        log.info("job %s attempt %d %s: job %s", job_id, number, t.outcome, t.state)

    def choose(self) -> list[Launch]:
        """Under the lock: the PENDING jobs to start now, marked launching."""
        launches = []
        with self.lock:
            running = len(self.store.list(JobState.RUNNING)) + len(self.launching)
            now = time.time()
            for job in self.store.list(JobState.PENDING):
                if job.id in self.launching:
                    continue
                if not self.secrets_available(job):
                    self.store.update(job.id, state=JobState.FAILED, finished_at=now, error=secrets_lost(job))
                    continue
                if running >= self.config.max_running or job.not_before > now:
                    continue
                self.launching.add(job.id)
                running += 1
                number = len(job.attempts) + 1
                launches.append(
                    Launch(
                        job,
                        number,
                        self.files.job_dir(job.id),
                        self.files.log_path(job.id),
                        self.files.job_env(job.executor_kind),
                        self.secrets.get(job.id),
                    )
                )
        return launches

    def launch(self, launch: Launch) -> None:
        job, number = launch.job, launch.number
        why = trigger(job)
        started = time.time()
        executor = self.executor(job)
        try:
            self.files.log_attempt(job.id, number, str(why), started)
            if executor.records_before_start():
                with self.lock:
                    self.store.add_attempt(
                        job.id,
                        AttemptRecord(number, why, started),
                        state=JobState.RUNNING,
                        started_at=job.started_at or started,
                    )
            try:
                result = executor.start(launch)
            except Exception as exc:
                error = JobError.from_exception(exc, f"cannot start the attempt ({executor.kind}): {exc}")
                with self.lock:
                    if not executor.records_before_start():
                        self.store.add_attempt(
                            job.id, AttemptRecord(number, why, started), state=JobState.RUNNING, started_at=started
                        )
                    self.store.update_attempt(
                        job.id, number, outcome=AttemptOutcome.FAILED, finished_at=started, error=error
                    )
                    self.store.update(job.id, state=JobState.FAILED, finished_at=started, error=error)
                return
            with self.lock:
                if executor.records_before_start():
                    self.store.update_attempt(job.id, number, slurm_job_ids=result.slurm_job_ids)
                else:
                    attempt = AttemptRecord(number, why, started, pid=result.pid, pid_start=result.pid_start)
                    self.store.add_attempt(
                        job.id, attempt, state=JobState.RUNNING, started_at=job.started_at or started
                    )
            log.info("job %s attempt %d (%s) started (%s)", job.id, number, why, executor.kind)
        finally:
            with self.lock:
                self.launching.discard(job.id)

    # -- restart and shutdown -------------------------------------------------------------------

    def _recover(self) -> None:
        """After a restart: kill job processes a previous server left, settle their attempts."""
        with self.lock:
            running = self.store.list(JobState.RUNNING)
            dangling = [j for j in self.store.list(JobState.PENDING) if j.current_attempt is not None]
        for job in running:
            attempt = _running_attempt(job)
            try:
                seen = self.executor(job).recover(job, attempt, self.files.job_dir(job.id))
            except RuntimeError as exc:
                log.error("%s", exc)
                continue
            if seen is not None:
                with self.lock:
                    self._apply(job.id, attempt.number, seen)
        # a server before this one could die between starting an attempt and marking its job RUNNING
        for job in dangling:
            last = job.current_attempt
            if last is not None and last.outcome == AttemptOutcome.RUNNING:
                try:
                    self.executors["local"].recover(job, last, self.files.job_dir(job.id))
                except RuntimeError as exc:
                    log.error("%s", exc)
                    continue
                with self.lock:
                    self.store.update_attempt(
                        job.id,
                        last.number,
                        outcome=AttemptOutcome.INTERRUPTED,
                        finished_at=time.time(),
                        error=JobError.system(
                            "ServerStopped", "the server stopped while starting this attempt", transient=True
                        ),
                    )

    def _shutdown(self) -> None:
        for executor in self.executors.values():
            for job_id in executor.shutdown(self.config.cancel_grace):
                job = self.store.get(job_id)
                if job is None or job.state != JobState.RUNNING:
                    continue
                attempt = _running_attempt(job)
                report = self.files.report(job_id, attempt.number)
                with self.lock:
                    self._apply(
                        job_id,
                        attempt.number,
                        Observation(
                            ended=True, report=report, how_it_ended="was stopped with the server", server_stop=True
                        ),
                    )


__all__ = ["JobStateError", "Scheduler", "ServiceConfig"]
