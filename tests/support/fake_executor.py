"""An executor for in-process service tests: starts nothing; a test says how each attempt ends."""

from __future__ import annotations

from shardwright.service.executors import Launch, Observation, Started
from shardwright.service.model import Progress, RunnerReport
from shardwright.service.store import AttemptRecord, JobRecord


class FakeExecutor:
    kind = "local"

    def __init__(self):
        self.started: list[tuple[str, int]] = []  # (job id, attempt) in start order
        self.endings: dict[str, Observation] = {}
        self.progress: dict[str, Progress] = {}
        self.canceled: list[str] = []
        self.secrets: dict[str, dict | None] = {}
        self.broken: set[str] = set()  # job ids whose observation raises (a file or Slurm in trouble)

    def records_before_start(self) -> bool:
        return False

    def start(self, launch: Launch) -> Started:
        self.started.append((launch.job.id, launch.number))
        self.secrets[launch.job.id] = launch.storage_options
        return Started(pid=None)

    def end(self, job_id: str, report: RunnerReport | None, how: str = "was killed by SIGKILL") -> None:
        self.endings[job_id] = Observation(ended=True, report=report, how_it_ended=how)

    def observe(self, job: JobRecord, attempt: AttemptRecord, job_dir: str) -> Observation:
        if job.id in self.broken:
            raise OSError(f"cannot read the status of {job.id}")
        if job.cancel_requested and job.id not in self.canceled:
            self.canceled.append(job.id)
        if job.id in self.endings:
            return self.endings.pop(job.id)
        return Observation(progress=self.progress.pop(job.id, None))

    def recover(self, job: JobRecord, attempt: AttemptRecord, job_dir: str) -> Observation | None:
        return Observation(ended=True, how_it_ended="was stopped by a server restart", server_stop=True)

    def shutdown(self, grace: float) -> list[str]:
        return []
