"""Local executor: each attempt is a ``python -m shardwright.service.runner`` process.

The process runs in a session of its own (so its optimize() workers can be signalled as a
group) and dies with the server (the runner sets PR_SET_PDEATHSIG; the workers do the same
with the runner). Its pid and start time are recorded, so a restarted server can tell a
stale job process from a pid the kernel reused, and kill only the former.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from ..process import describe_exit as describe_process_exit
from ..process import is_same_process, kill_group, kill_stale, process_start, terminate
from .executors import Launch, Observation, Started
from .runner import read_status, status_path
from .store import AttemptRecord, JobRecord

__all__ = [
    "LocalExecutor",
    "describe_exit",
    "is_same_process",
    "kill_group",
    "kill_stale",
    "process_start",
    "start_runner",
    "terminate",
]


def start_runner(
    job_dir: str, attempt: int, storage_options: dict | None, log_path: str, env: dict
) -> subprocess.Popen:
    """Start one attempt; storage_options reach it on stdin only."""
    argv = [
        sys.executable,
        "-m",
        "shardwright.service.runner",
        job_dir,
        "--attempt",
        str(attempt),
        "--parent-pid",
        str(os.getpid()),
    ]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=job_dir,
            start_new_session=True,
        )
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps(storage_options).encode() if storage_options else b"")
        proc.stdin.close()
    except BrokenPipeError:
        pass
    return proc


def describe_exit(returncode: int | None) -> str:
    """How a job process ended; None: it ended while the server was down (no exit status)."""
    return "ended while the server was down" if returncode is None else describe_process_exit(returncode)


class LocalExecutor:
    """Job processes of this server. Used by the scheduler's loop thread only (PR_SET_PDEATHSIG
    follows the thread that forked, so that thread outlives its children)."""

    def __init__(self, cancel_grace: float, kind: str = "local"):
        self.cancel_grace, self.kind = cancel_grace, kind
        self.procs: dict[str, subprocess.Popen] = {}  # job id -> its current attempt's process
        self.term_sent: dict[str, float] = {}

    def records_before_start(self) -> bool:
        return False

    def start(self, launch: Launch) -> Started:
        proc = start_runner(launch.job_dir, launch.number, launch.storage_options, launch.log_path, launch.env)
        self.procs[launch.job.id] = proc
        return Started(pid=proc.pid, pid_start=process_start(proc.pid))

    def observe(self, job: JobRecord, attempt: AttemptRecord, job_dir: str) -> Observation:
        report = read_status(status_path(job_dir, attempt.number))
        progress = report.progress if report and report.progress != job.progress else None
        proc = self.procs.get(job.id)
        if job.cancel_requested and proc is not None:
            if job.id not in self.term_sent:
                self.term_sent[job.id] = time.time()
                terminate(proc.pid)  # optimize() commits what is done and stops
            elif time.time() - self.term_sent[job.id] > self.cancel_grace:
                kill_group(proc.pid)
        returncode = proc.poll() if proc is not None else None
        if proc is not None and returncode is None:
            return Observation(progress=progress)
        if proc is None and is_same_process(attempt.pid, attempt.pid_start):
            return Observation(progress=progress)  # not ours (should not happen after recover); keep watching
        if proc is not None:
            kill_group(proc.pid)  # workers of a runner that died must not linger
        self.procs.pop(job.id, None)
        self.term_sent.pop(job.id, None)
        report = read_status(status_path(job_dir, attempt.number))
        return Observation(ended=True, report=report, how_it_ended=describe_exit(returncode))

    def recover(self, job: JobRecord, attempt: AttemptRecord, job_dir: str) -> Observation | None:
        if not kill_stale(attempt.pid, attempt.pid_start):
            raise RuntimeError(f"job {job.id}: pid {attempt.pid} does not die; not restarting it")
        report = read_status(status_path(job_dir, attempt.number))
        return Observation(ended=True, report=report, how_it_ended="was stopped by a server restart", server_stop=True)

    def shutdown(self, grace: float) -> list[str]:
        for proc in self.procs.values():
            terminate(proc.pid)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                kill_group(proc.pid)
                proc.wait()
        ended = list(self.procs)
        self.procs.clear()
        return ended
