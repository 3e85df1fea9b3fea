"""What the scheduler asks of an executor (local processes, Slurm arrays, a test's fake), and
what an executor answers. Executors do the slow part (start a process, call ``sbatch``, ask
``scontrol``, read status files and the output's progress) and decide nothing: the scheduler
calls them outside its lock and settles what they saw under it (transitions.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .model import Progress, RunnerReport
from .store import AttemptRecord, JobRecord


@dataclass(frozen=True)
class Launch:
    """Everything an executor needs to start attempt ``number`` of ``job``."""

    job: JobRecord
    number: int
    job_dir: str
    log_path: str
    env: dict
    storage_options: dict | None  # held in memory only; handed to the job process on stdin


@dataclass(frozen=True)
class Started:
    pid: int | None = None
    pid_start: str | None = None
    slurm_job_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Observation:
    """What an executor saw of a RUNNING attempt."""

    progress: Progress | None = None  # newer progress to record
    ended: bool = False
    report: RunnerReport | None = None  # the attempt's last report (when ended)
    how_it_ended: str = ""
    server_stop: bool = False  # ended because the server stopped it (not a failure of the job)
    slurm_job_ids: tuple[str, ...] = ()  # a submission found again after a restart


class Executor(Protocol):
    kind: str

    def records_before_start(self) -> bool:
        """True: the attempt is recorded (and the job RUNNING) before :meth:`start` (Slurm: a server
        that dies right after sbatch finds the submission by its name)."""

    def start(self, launch: Launch) -> Started:
        """Start the attempt; raise to fail it (the message says why)."""

    def observe(self, job: JobRecord, attempt: AttemptRecord, job_dir: str) -> Observation:
        """Look at a RUNNING attempt (and stop it if ``job.cancel_requested``)."""

    def recover(self, job: JobRecord, attempt: AttemptRecord, job_dir: str) -> Observation | None:
        """After a restart: the attempt a previous server left RUNNING; None: keep following it."""

    def shutdown(self, grace: float) -> list[str]:
        """The server stops: stop what must not outlive it; the job ids whose attempts ended."""


__all__ = ["Executor", "Launch", "Observation", "Started"]
