"""The API's request and response models (pydantic): what OpenAPI at /openapi.json shows."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .store import AttemptRecord, JobRecord

State = Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELED"]


class OptimizeOptions(BaseModel):
    """Keyword arguments of ``shardwright.optimize`` a job may set (the rest is the service's)."""

    model_config = ConfigDict(extra="forbid")
    chunk_size: int | None = Field(None, ge=1, description="items per chunk")
    chunk_bytes: int | str | None = Field(None, description="bytes per chunk, e.g. 64MB")
    compression: Literal["zstd"] | None = None
    num_workers: int | None = Field(None, ge=1, le=256)
    mode: Literal["overwrite", "append"] | None = None
    num_shards: int | None = Field(None, ge=1, le=1_000_000)
    on_error: Literal["raise", "skip"] = "raise"
    max_retries: int = Field(0, ge=0, le=100, description="per-input retries of fn inside one attempt")
    start_method: Literal["fork", "spawn", "forkserver"] | None = None


class ExecutorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["local", "slurm"] = "local"
    array: int = Field(1, ge=1, le=100_000, description="Slurm array tasks (kind=slurm)")


class JobSubmit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pipeline: str = Field(..., min_length=1, max_length=200)
    inputs: list[Any] = Field(..., min_length=1)
    output_dir: str = Field(..., min_length=1, max_length=4096)
    config: dict[str, Any] = Field(default_factory=dict)
    options: OptimizeOptions = Field(default_factory=lambda: OptimizeOptions.model_validate({}))
    storage_options: dict[str, Any] | None = Field(
        None, description="boto3 client arguments; kept in the server's memory only, never returned or stored"
    )
    executor: ExecutorSpec = Field(default_factory=lambda: ExecutorSpec.model_validate({}))


class RetryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    storage_options: dict[str, Any] | None = Field(
        None, description="give them again when the job failed with SecretsLost (the server restarted)"
    )


class Progress(BaseModel):
    inputs_done: int
    inputs_total: int
    items: int


class JobError(BaseModel):
    kind: Literal["user", "system"]
    type: str
    message: str
    input_index: int | None = None
    transient: bool = False


class Attempt(BaseModel):
    number: int
    trigger: str
    outcome: str
    started_at: datetime
    finished_at: datetime | None
    error: JobError | None
    pid: int | None
    slurm_job_ids: list[str]


class Job(BaseModel):
    id: str
    state: State
    pipeline: str
    output_dir: str
    progress: Progress
    attempts: int
    error: JobError | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested: bool
    config: dict[str, Any]
    options: dict[str, Any]
    executor: dict[str, Any]
    storage_options: dict[str, str] = Field(description="names only; every value is shown as ***")
    secrets_available: bool
    attempt_history: list[Attempt]


class JobList(BaseModel):
    jobs: list[Job]


class Pipeline(BaseModel):
    name: str
    description: str
    config_schema: dict[str, Any] | None


class PipelineList(BaseModel):
    pipelines: list[Pipeline]


class Logs(BaseModel):
    id: str
    text: str


class ApiErrorBody(BaseModel):
    kind: Literal["user", "system"]
    type: str
    message: str


class ApiError(BaseModel):
    error: ApiErrorBody


def _time(t: float | None) -> datetime | None:
    return datetime.fromtimestamp(t, timezone.utc) if t else None


def attempt_out(a: AttemptRecord) -> Attempt:
    return Attempt.model_validate(
        {
            "number": a.number,
            "trigger": a.trigger,
            "outcome": a.outcome,
            "started_at": _time(a.started_at),
            "finished_at": _time(a.finished_at),
            "error": a.error,
            "pid": a.pid,
            "slurm_job_ids": list(a.slurm_job_ids),
        }
    )


def job_out(job: JobRecord, secrets_available: bool) -> Job:
    progress = {k: int((job.progress or {}).get(k, 0)) for k in ("inputs_done", "inputs_total", "items")}
    return Job.model_validate(
        {
            "id": job.id,
            "state": job.state,
            "pipeline": job.pipeline,
            "output_dir": job.output_dir,
            "progress": progress,
            "attempts": len(job.attempts),
            "error": job.error,
            "created_at": _time(job.created_at),
            "started_at": _time(job.started_at),
            "finished_at": _time(job.finished_at),
            "cancel_requested": job.cancel_requested,
            "config": job.config,
            "options": job.options,
            "executor": job.executor,
            "storage_options": {k: "***" for k in job.storage_option_keys},
            "secrets_available": secrets_available,
            "attempt_history": [attempt_out(a) for a in job.attempts],
        }
    )
