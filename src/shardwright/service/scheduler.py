"""The server's job loop: FIFO queue, N at a time, follows attempts, retries, recovers.

One long-lived thread starts every job process (PR_SET_PDEATHSIG follows the thread that
forked, so it must outlive its children) and polls their status files. API handlers only
change records under ``self.lock`` and wake the loop.

Secrets: a job's storage_options are kept in ``self.secrets`` (memory) and handed to the job
process on stdin. The store keeps their names only; after a restart a job that needs them
and lost them fails with ``SecretsLost`` and says how to retry with them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from ..secrets import redact, secret_values
from . import executor_local as local
from . import executor_slurm as slurm_exec
from .progress import read_progress
from .runner import read_status, status_path
from .store import FINAL_STATES, AttemptRecord, JobRecord, JobStore, new_job_id


@dataclass(frozen=True)
class ServiceConfig:
    db_path: str
    state_dir: str
    module: str
    module_path: str | None = None  # directory to put on sys.path of job processes
    max_running: int = 2
    auto_retries: int = 2
    retry_backoff: float = 1.0
    cancel_grace: float = 30.0
    poll_interval: float = 0.25
    output_roots: tuple = ()
    max_inputs: int = 100_000
    max_body_bytes: int = 16 * 1024 * 1024


SLURM_FORGOTTEN_GRACE = 300.0  # s: Slurm no longer knows the job and its tasks did not all report


class JobStateError(Exception):
    """The job is not in a state that allows the action (HTTP 409)."""


def running_attempt(job: JobRecord) -> AttemptRecord:
    """The attempt of a RUNNING job (there always is one: a job becomes RUNNING by starting it)."""
    attempt = job.current_attempt
    if attempt is None:
        raise RuntimeError(f"job {job.id} is {job.state} without an attempt")
    return attempt


def _error(kind: str, type_: str, message: str, transient: bool = False, input_index=None) -> dict:
    return {"kind": kind, "type": type_, "message": message, "input_index": input_index, "transient": transient}


class Scheduler:
    def __init__(self, store: JobStore, config: ServiceConfig):
        self.store, self.config = store, config
        self.lock = threading.RLock()
        self.secrets: dict[str, dict] = {}
        self.procs: dict[str, subprocess.Popen] = {}  # job id -> Popen of its current local attempt
        self.term_sent: dict[str, float] = {}
        self.slurm_polled: dict[str, float] = {}
        self.slurm_forgotten: dict[str, float] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="shardwright-jobs", daemon=True)
        os.makedirs(os.path.join(config.state_dir, "jobs"), mode=0o700, exist_ok=True)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Graceful: running local jobs get SIGTERM, commit and go back to PENDING."""
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout if timeout is not None else self.config.cancel_grace + 10)

    def job_dir(self, job_id: str) -> str:
        return os.path.join(self.config.state_dir, "jobs", job_id)

    def log_path(self, job_id: str) -> str:
        return os.path.join(self.job_dir(job_id), "log.txt")

    # -- API actions ----------------------------------------------------------------------------

    def submit(
        self,
        pipeline: str,
        inputs: list,
        output_dir: str,
        config: dict,
        options: dict,
        executor: dict,
        storage_options: dict | None,
    ) -> JobRecord:
        job_id = new_job_id()
        path = self.job_dir(job_id)
        os.makedirs(path, mode=0o700)
        spec = {
            "job_id": job_id,
            "module": self.config.module,
            "sys_path": [self.config.module_path or os.getcwd()],
            "pipeline": pipeline,
            "inputs": inputs,
            "output_dir": output_dir,
            "config": config,
            "options": options,
        }
        with open(os.path.join(path, "spec.json"), "w") as f:
            json.dump(spec, f)
        with self.lock:
            try:
                self.check_output_free(output_dir)
            except JobStateError:
                shutil.rmtree(path, ignore_errors=True)
                raise
            if storage_options:
                self.secrets[job_id] = storage_options
            job = self.store.create(
                JobRecord(
                    id=job_id,
                    state="PENDING",
                    pipeline=pipeline,
                    inputs=inputs,
                    output_dir=output_dir,
                    config=config,
                    options=options,
                    executor=executor,
                    storage_option_keys=tuple(sorted(storage_options or {})),
                    created_at=time.time(),
                    queue_pos=self.store.next_queue_pos(),
                    progress={"inputs_done": 0, "inputs_total": len(inputs), "items": 0},
                )
            )
        self._wake.set()
        return job

    def check_output_free(self, output_dir: str, except_job: str | None = None) -> None:
        """One live job per output: two would only race for its lease."""
        for state in ("PENDING", "RUNNING"):
            for other in self.store.list(state):
                if other.output_dir == output_dir and other.id != except_job:
                    raise JobStateError(
                        f"output_dir: job {other.id} ({other.state}) already writes {output_dir}; "
                        "wait for it, cancel it, or choose another output_dir"
                    )

    def cancel(self, job_id: str) -> JobRecord:
        with self.lock:
            job = self._get(job_id)
            if job.state == "PENDING":
                job = self.store.update(job_id, state="CANCELED", finished_at=time.time(), cancel_requested=True)
            elif job.state == "RUNNING":
                job = self.store.update(job_id, cancel_requested=True)
            else:
                raise JobStateError(f"job {job_id} is {job.state}: only PENDING or RUNNING jobs can be canceled")
        self._wake.set()
        return job

    def retry(self, job_id: str, storage_options: dict | None = None) -> JobRecord:
        with self.lock:
            job = self._get(job_id)
            if job.state not in ("FAILED", "CANCELED"):
                raise JobStateError(f"job {job_id} is {job.state}: only FAILED or CANCELED jobs can be retried")
            self.check_output_free(job.output_dir, except_job=job_id)
            if storage_options:
                self.secrets[job_id] = storage_options
                keys = tuple(sorted(storage_options))
            else:
                keys = job.storage_option_keys
            job = self.store.update(
                job_id,
                state="PENDING",
                error=None,
                finished_at=None,
                cancel_requested=False,
                auto_retries=0,
                not_before=0.0,
                queue_pos=self.store.next_queue_pos(),
                storage_option_keys=keys,
            )
        self._wake.set()
        return job

    def delete(self, job_id: str) -> None:
        with self.lock:
            job = self._get(job_id)
            if job.state in ("PENDING", "RUNNING"):
                raise JobStateError(f"job {job_id} is {job.state}: cancel it first (POST /api/v1/jobs/{job_id}/cancel)")
            self.store.delete(job_id)
            self.secrets.pop(job_id, None)
        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)

    def logs(self, job_id: str, tail_bytes: int = 1_000_000) -> str:
        self._get(job_id)
        parts = []
        paths = [self.log_path(job_id)]
        slurm_logs = os.path.join(self.job_dir(job_id), "slurm-logs")
        if os.path.isdir(slurm_logs):
            paths += [os.path.join(slurm_logs, n) for n in sorted(os.listdir(slurm_logs))]
        for path in paths:
            try:
                with open(path, "rb") as f:
                    f.seek(max(0, os.path.getsize(path) - tail_bytes))
                    text = f.read().decode("utf-8", "replace")
            except OSError:
                continue
            if path != paths[0]:
                text = f"=== {os.path.basename(path)}\n{text}"
            parts.append(text)
        text = "".join(parts)
        # progress bars redraw with \r: keep the last state of each line
        text = "\n".join(
            line.rsplit("\r", 1)[-1] if "\r" in line.rstrip("\r") else line.rstrip("\r") for line in text.split("\n")
        )
        return redact(text, secret_values(self.secrets.get(job_id)))

    def secrets_available(self, job: JobRecord) -> bool:
        return not job.storage_option_keys or job.id in self.secrets

    def _get(self, job_id: str) -> JobRecord:
        job = self.store.get(job_id)
        if job is None:
            raise KeyError(job_id)
        return job

    # -- the loop -------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            try:
                with self.lock:
                    self._recover()
            except Exception as exc:  # follow and start jobs anyway; say what went wrong
                print(f"shardwright serve: recovery error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            while not self._stopping.is_set():
                try:
                    with self.lock:
                        self._tick()
                except Exception as exc:  # keep following jobs; say what went wrong
                    print(
                        f"shardwright serve: job loop error: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True
                    )
                self._wake.wait(self.config.poll_interval)
                self._wake.clear()
        finally:
            self._shutdown()

    def _tick(self) -> None:
        for job in self.store.list("RUNNING"):
            if job.executor.get("kind") == "slurm":
                self._follow_slurm(job)
            else:
                self._follow_local(job)
        self._start_pending()

    def _start_pending(self) -> None:
        running = len(self.store.list("RUNNING"))
        now = time.time()
        for job in self.store.list("PENDING"):
            if not self.secrets_available(job):
                self.store.update(
                    job.id,
                    state="FAILED",
                    finished_at=now,
                    error=_error(
                        "system",
                        "SecretsLost",
                        f"the server restarted and this job's storage_options ({', '.join(job.storage_option_keys)}) "
                        f"were kept only in its memory; retry with them: POST /api/v1/jobs/{job.id}/retry "
                        'with {"storage_options": {...}}',
                    ),
                )
                continue
            if running >= self.config.max_running or job.not_before > now:
                continue
            self._launch(job)
            running += 1

    def _trigger(self, job: JobRecord) -> str:
        last = job.current_attempt
        if last is None:
            return "submit"
        if last.outcome == "interrupted":
            return "server-restart"
        if last.outcome == "failed" and job.auto_retries > 0 and (last.error or {}).get("transient"):
            return "auto-retry"
        return "retry"

    def _launch(self, job: JobRecord) -> None:
        number = len(job.attempts) + 1
        trigger = self._trigger(job)
        started = time.time()
        path = self.job_dir(job.id)
        with open(self.log_path(job.id), "a") as log:
            log.write(
                f"=== attempt {number} ({trigger}) at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(started))}\n"
            )
        if job.executor.get("kind") == "slurm":
            # recorded first: a server that dies right after sbatch finds the submission by its name
            self.store.add_attempt(job.id, AttemptRecord(number, trigger, started))
            self.store.update(job.id, state="RUNNING", started_at=job.started_at or started, cancel_requested=False)
            try:
                ids = slurm_exec.submit(path, job.id, number, int(job.executor.get("array", 1)), self._slurm_env())
            except Exception as exc:
                error = _error("system", type(exc).__name__, f"sbatch failed: {exc}")
                self.store.update_attempt(job.id, number, outcome="failed", finished_at=started, error=error)
                self.store.update(job.id, state="FAILED", finished_at=started, error=error)
                return
            self.store.update_attempt(job.id, number, slurm_job_ids=tuple(ids))
            return
        else:
            try:
                proc = local.start_runner(
                    path, number, self.secrets.get(job.id), self.log_path(job.id), self._job_env()
                )
            except OSError as exc:
                error = _error("system", type(exc).__name__, f"cannot start the job process: {exc}")
                self.store.add_attempt(job.id, AttemptRecord(number, trigger, started, started, "failed", error))
                self.store.update(job.id, state="FAILED", finished_at=started, error=error)
                return
            self.procs[job.id] = proc
            self.store.add_attempt(
                job.id, AttemptRecord(number, trigger, started, pid=proc.pid, pid_start=local.process_start(proc.pid))
            )
        self.store.update(job.id, state="RUNNING", started_at=job.started_at or started, cancel_requested=False)

    def _job_env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "SHARDWRIGHT_API_TOKEN"}
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # .../src
        extra = [p for p in (self.config.module_path, here) if p]
        env["PYTHONPATH"] = os.pathsep.join(extra + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def _slurm_env(self) -> dict:
        """Slurm clients need the server's SLURM_CONF etc.; sbatch passes this environment to the tasks."""
        return self._job_env()

    # -- following local attempts ---------------------------------------------------------------

    def _follow_local(self, job: JobRecord) -> None:
        attempt = running_attempt(job)
        status = read_status(status_path(self.job_dir(job.id), attempt.number))
        if status and status.get("progress") and status["progress"] != job.progress:
            self.store.update(job.id, progress=status["progress"])
        proc = self.procs.get(job.id)
        if job.cancel_requested and proc is not None:
            if job.id not in self.term_sent:
                self.term_sent[job.id] = time.time()
                local.terminate(proc.pid)  # optimize() commits what is done and stops
            elif time.time() - self.term_sent[job.id] > self.config.cancel_grace:
                local.kill_group(proc.pid)
        returncode = proc.poll() if proc is not None else None
        if proc is not None and returncode is None:
            return
        if proc is None and local.is_same_process(attempt.pid, attempt.pid_start):
            return  # not ours (should not happen after _recover); keep watching
        if proc is not None:
            local.kill_group(proc.pid)  # workers of a runner that died must not linger
        self.procs.pop(job.id, None)
        self.term_sent.pop(job.id, None)
        status = read_status(status_path(self.job_dir(job.id), attempt.number))
        self._finish(job, status, local.describe_exit(returncode), server_stop=False)

    def _finish(self, job: JobRecord, status: dict | None, how_it_ended: str, server_stop: bool) -> None:
        """An attempt ended: decide the job's next state from its status file."""
        attempt = running_attempt(job)
        now = time.time()
        state = (status or {}).get("state")
        progress = (status or {}).get("progress") or job.progress
        if state == "succeeded":
            self.store.update_attempt(job.id, attempt.number, outcome="succeeded", finished_at=now)
            self.store.update(job.id, state="SUCCEEDED", finished_at=now, error=None, progress=progress)
            self.secrets.pop(job.id, None)
            return
        if state == "failed":
            error = (status or {}).get("error") or _error("system", "Unknown", "the job process reported a failure")
        elif state == "interrupted":
            error = _error(
                "system",
                "Interrupted",
                f"stopped by {(status or {}).get('signal', 'a signal')}; committed work is kept",
                transient=True,
            )
        else:
            error = _error("system", "JobProcessDied", f"the job process {how_it_ended}", transient=True)
        if job.cancel_requested:
            self.store.update_attempt(job.id, attempt.number, outcome="canceled", finished_at=now, error=error)
            self.store.update(job.id, state="CANCELED", finished_at=now, progress=progress)
            return
        if server_stop and state != "failed":
            self.store.update_attempt(
                job.id,
                attempt.number,
                outcome="interrupted",
                finished_at=now,
                error=_error(
                    "system", "ServerStopped", f"the server stopped while this attempt ran ({error['message']})", True
                ),
            )
            self.store.update(job.id, state="PENDING", progress=progress)
            return
        self.store.update_attempt(job.id, attempt.number, outcome="failed", finished_at=now, error=error)
        if error.get("transient") and job.auto_retries < self.config.auto_retries:
            delay = self.config.retry_backoff * (2**job.auto_retries)
            self.store.update(
                job.id, state="PENDING", auto_retries=job.auto_retries + 1, not_before=now + delay, progress=progress
            )
            return
        self.store.update(job.id, state="FAILED", finished_at=now, error=error, progress=progress)

    # -- following Slurm attempts ---------------------------------------------------------------

    def _follow_slurm(self, job: JobRecord) -> None:
        now = time.time()
        if now - self.slurm_polled.get(job.id, 0) < 1.0:
            return
        self.slurm_polled[job.id] = now
        attempt = running_attempt(job)
        env = self._slurm_env()
        ids = list(attempt.slurm_job_ids)
        if not ids:  # the server died between recording the attempt and recording sbatch's answer
            try:
                ids = slurm_exec.find_submitted(slurm_exec.job_name(job.id, attempt.number), env)
            except slurm_exec.SlurmUnavailable:
                return
            if not ids:
                self._finish(job, None, "was never submitted (the server stopped first)", server_stop=True)
                return
            self.store.update_attempt(job.id, attempt.number, slurm_job_ids=tuple(ids))
        progress = read_progress(job.output_dir, None, int(job.progress.get("inputs_total", 0)))
        if progress and {k: progress[k] for k in ("inputs_done", "inputs_total", "items")} != job.progress:
            self.store.update(job.id, progress={k: progress[k] for k in ("inputs_done", "inputs_total", "items")})
        if job.cancel_requested and job.id not in self.term_sent:
            self.term_sent[job.id] = now
            try:
                slurm_exec.cancel(ids, env)
            except Exception as exc:
                print(f"shardwright serve: job {job.id}: {exc}", file=sys.stderr, flush=True)
        try:
            states = slurm_exec.task_states(ids, env)
        except slurm_exec.SlurmUnavailable as exc:
            print(f"shardwright serve: job {job.id}: {exc}; asking again", file=sys.stderr, flush=True)
            return
        task_files = self._task_statuses(job.id, attempt.number)
        if states is not None and not slurm_exec.all_final(states):
            self.slurm_forgotten.pop(job.id, None)
            return
        published = bool(progress and progress.get("published"))
        if states is None and not published and len(task_files) < int(job.executor.get("array", 1)):
            # Slurm forgot the job and not every task reported: give the output a while to say more
            if now - self.slurm_forgotten.setdefault(job.id, now) < SLURM_FORGOTTEN_GRACE:
                return
        self.slurm_forgotten.pop(job.id, None)
        self.term_sent.pop(job.id, None)
        self.slurm_polled.pop(job.id, None)
        summary = ", ".join(f"{t} {s}" for t, s in sorted((states or {}).items()))
        status: dict | None
        if published and progress is not None:
            status = {
                "state": "succeeded",
                "progress": {k: progress[k] for k in ("inputs_done", "inputs_total", "items")},
            }
        else:
            failed = [s for s in task_files.values() if s.get("state") == "failed"]
            interrupted = [s for s in task_files.values() if s.get("state") == "interrupted"]
            status = failed[0] if failed else (interrupted[0] if interrupted else None)
            if status is None:
                status = {
                    "state": "failed",
                    "error": _error(
                        "system",
                        "SlurmJobFailed",
                        f"Slurm job {','.join(ids)} ended ({summary or 'unknown'}) and the output is not published",
                        transient=False,
                    ),
                }
        self._finish(job, status, f"ended in Slurm ({summary})", server_stop=False)

    def _task_statuses(self, job_id: str, attempt: int) -> dict[str, dict]:
        prefix = f"attempt-{attempt}-task-"
        out = {}
        for name in os.listdir(self.job_dir(job_id)):
            if name.startswith(prefix) and name.endswith(".json"):
                status = read_status(os.path.join(self.job_dir(job_id), name))
                if status:
                    out[name[len(prefix) : -5]] = status
        return out

    # -- restart and shutdown -------------------------------------------------------------------

    def _recover(self) -> None:
        """After a restart: kill job processes a previous server left, settle their attempts."""
        for job in self.store.list("RUNNING"):
            if job.executor.get("kind") == "slurm":
                continue  # Slurm runs it, not us: keep following it
            attempt = running_attempt(job)
            if not local.kill_stale(attempt.pid, attempt.pid_start):
                print(
                    f"shardwright serve: job {job.id}: pid {attempt.pid} does not die; not restarting it",
                    file=sys.stderr,
                    flush=True,
                )
                continue
            status = read_status(status_path(self.job_dir(job.id), attempt.number))
            self._finish(job, status, "was stopped by a server restart", server_stop=True)
        # the server died between starting an attempt and marking its job RUNNING
        for job in self.store.list("PENDING"):
            dangling = job.current_attempt
            if dangling is not None and dangling.outcome == "running":
                local.kill_stale(dangling.pid, dangling.pid_start)
                self.store.update_attempt(
                    job.id,
                    dangling.number,
                    outcome="interrupted",
                    finished_at=time.time(),
                    error=_error("system", "ServerStopped", "the server stopped while starting this attempt", True),
                )

    def _shutdown(self) -> None:
        with self.lock:
            for proc in list(self.procs.values()):
                local.terminate(proc.pid)
            deadline = time.monotonic() + self.config.cancel_grace
            for job_id, proc in list(self.procs.items()):
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except Exception:
                    local.kill_group(proc.pid)
                    proc.wait()
                job = self.store.get(job_id)
                if job is not None and job.state == "RUNNING":
                    status = read_status(status_path(self.job_dir(job_id), running_attempt(job).number))
                    self._finish(job, status, "was stopped with the server", server_stop=True)
            self.procs.clear()


__all__ = ["Scheduler", "ServiceConfig", "JobStateError", "FINAL_STATES"]
