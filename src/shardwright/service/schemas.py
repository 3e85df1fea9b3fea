"""The API's request and response models (pydantic): what OpenAPI at /openapi.json shows."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, create_model

from ..engine.options import JOB_OPTIONS, OptionSpec
from .input_sources import SourceSpec
from .model import JobState
from .store import AttemptRecord, JobRecord

State = Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELED"]
assert set(State.__args__) == {s.value for s in JobState}  # type: ignore[attr-defined]


class RetriesOptions(BaseModel):
    """The JSON fields of a job's ``retries`` (engine.calls.RetryPolicy; exception types of its
    ``transient`` are Python objects, so a pipeline names them in its own fn, not in a job)."""

    model_config = ConfigDict(extra="forbid")
    max_retries: StrictInt | None = Field(None, ge=0, le=1000, description="consecutive failed attempts retried")
    base_delay: StrictFloat | None = Field(None, ge=0, le=3600, description="the backoff's first ceiling, seconds")
    max_delay: StrictFloat | None = Field(None, ge=0, le=3600, description="the backoff's cap, seconds")
    max_retry_after: StrictFloat | None = Field(None, ge=0, le=86400, description="the longest Retry-After honoured")


def _option_field(spec: OptionSpec) -> tuple[Any, Any]:
    """The pydantic type and Field of one row of the engine's JOB_OPTIONS (strict: "4" is not 4)."""
    kinds: dict[str, Any] = {
        "int": Annotated[StrictInt, Field(ge=spec.minimum, le=spec.maximum)],
        "float": Annotated[StrictFloat, Field(ge=spec.minimum, le=spec.maximum)],  # strict: ints pass, "1" not
        "bool": StrictBool,
        "size": StrictInt | StrictStr,
        "choice": Literal[spec.choices] if spec.choices else StrictStr,
        "retries": Annotated[StrictInt, Field(ge=0, le=1000)] | RetriesOptions,
    }
    kind = kinds[spec.kind]
    if spec.default is None:
        return kind | None, Field(None, description=spec.help)
    return kind, Field(spec.default, description=spec.help)


#: Keyword arguments of ``shardwright.optimize`` a job may set, generated from the engine's
#: ``shardwright.engine.options.JOB_OPTIONS`` (the rest is the service's to choose).
JobOptions: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "JobOptions",
    __config__=ConfigDict(extra="forbid"),
    __doc__="Keyword arguments of shardwright.optimize a job may set (the rest is the service's).",
    **{spec.name: _option_field(spec) for spec in JOB_OPTIONS},
)
OptimizeOptions = JobOptions  # the name before the options came from the engine's table


class ExecutorSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["local", "slurm", "ray"] = "local"
    array: StrictInt = Field(1, ge=1, le=100_000, description="Slurm array tasks (kind=slurm)")
    shared_output: StrictBool = Field(
        False, description="kind=ray: the local output_dir is one filesystem every Ray node mounts (NFS, Lustre)"
    )
    ray_remote_args: dict[str, Any] | None = Field(
        None, description="kind=ray: Ray options of each task (num_cpus, num_gpus, resources)"
    )


class JobSubmit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pipeline: str = Field(..., min_length=1, max_length=200)
    inputs: list[Any] | SourceSpec = Field(
        ..., description="a JSON list, or a source read under an --input-root (docs/sources.md)"
    )
    output_dir: str = Field(..., min_length=1, max_length=4096)
    config: dict[str, Any] = Field(default_factory=dict)
    options: JobOptions = Field(default_factory=lambda: JobOptions.model_validate({}))  # type: ignore[valid-type]  # built from a table
    storage_options: dict[str, Any] | None = Field(
        None,
        description="the storage backend's options (boto3 client arguments for s3://, the SDKs' names for gs:// and az://); "
        "kept in the server's memory only, never returned or stored",
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
    items_per_second: float | None = Field(None, description="while RUNNING: items written per second lately")
    eta_seconds: float | None = Field(None, description="while RUNNING: seconds until every input is done, estimated")


class JobList(BaseModel):
    jobs: list[Job]


class Pipeline(BaseModel):
    name: str
    description: str
    config_schema: dict[str, Any] | None


class PipelineList(BaseModel):
    pipelines: list[Pipeline]


class OutputRun(BaseModel):
    """One optimize() call on the job's output, as the output's own history records it."""

    run_id: str | None
    mode: str | None
    node_rank: int
    num_nodes: int
    host: str
    pid: int
    slurm_task: str | None
    started_at: float
    finished_at: float
    inputs_total: int
    inputs_done_before: int
    inputs_done_after: int
    items_written: int
    ended: str
    error: dict[str, Any] | None


class OutputHistory(BaseModel):
    id: str
    output_dir: str
    runs: list[OutputRun]
    note: str | None = Field(None, description="why the history could not be read (nothing written yet, ...)")


class InputInProgress(BaseModel):
    input: int = Field(description="position among the job's inputs")
    name: str = Field(description="the input by name: a file's path, a source row's file and row, a short repr")
    state: str | None = Field(None, description="its last ResumePoint state (JSON), when one was recorded")
    calls: int = Field(0, description="its calls in flight under the pipeline's Limiter (0: none or not known)")
    worker: int
    place: str = Field(description="where the worker runs (a host, a node)")


class InputsStatus(BaseModel):
    """The job's inputs in the user's terms, read from the output (issue 32 item 6)."""

    id: str
    counts: dict[str, int] = Field(
        description="inputs done, in_tails (kept in pending tails after a stop, committed on resume), in_progress, pending, failed"
    )
    in_progress: list[InputInProgress]
    eta_seconds: float | None = Field(None, description="seconds left at the running attempt's rate so far")
    note: str | None = Field(None, description="why the output could not be read now")


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
            "trigger": a.trigger.value,
            "outcome": a.outcome.value,
            "started_at": _time(a.started_at),
            "finished_at": _time(a.finished_at),
            "error": a.error.to_json() if a.error else None,
            "pid": a.pid,
            "slurm_job_ids": list(a.slurm_job_ids),
        }
    )


def job_out(job: JobRecord, secrets_available: bool, rate: tuple[float, float | None] | None = None) -> Job:
    return Job.model_validate(
        {
            "id": job.id,
            "state": job.state.value,
            "pipeline": job.pipeline,
            "output_dir": job.output_dir,
            "progress": job.progress.to_json(),
            "attempts": len(job.attempts),
            "error": job.error.to_json() if job.error else None,
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
            "items_per_second": rate[0] if rate else None,
            "eta_seconds": rate[1] if rate else None,
        }
    )
