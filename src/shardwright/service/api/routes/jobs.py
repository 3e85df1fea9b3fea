"""``/api/v1/jobs``: submit, list, show, cancel, retry, delete, logs."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Response
from pydantic import ValidationError

from ....engine.options import OptimizeOptions as EngineOptions
from ....errors import ShardwrightError, classify
from ....storage.options import check_storage_option_names
from ... import schemas
from ...classify import http_status
from ...config_identity import ConfigChangedError, check_config_unchanged
from ...input_sources import check_input_location
from ...locations import LocationRefused, check_output_credentials, check_output_location
from ...model import JobState, Progress
from ...progress import read_inputs_status, read_output_history
from ...scheduler import JobStateError, QueueFullError
from ...store import JobRecord, new_job_id
from ..deps import API, JobDep, ServiceDep, TokenDep
from ..problems import ApiProblem, field_errors

ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": schemas.ApiError} for s in (400, 401, 403, 404, 409, 413, 422, 507)
}
router = APIRouter(prefix="/jobs", tags=["jobs"], dependencies=[TokenDep], responses={401: ERRORS[401]})


def out(service: ServiceDep, job: JobRecord) -> schemas.Job:
    scheduler = service.scheduler
    return schemas.job_out(job, scheduler.secrets_available(job), scheduler.rate(job))


def _config(service: ServiceDep, body: schemas.JobSubmit) -> dict:
    pipeline = service.pipelines[body.pipeline]
    if pipeline.config_model is None:
        if body.config:
            raise ApiProblem(
                422,
                "ValidationError",
                f"config: pipeline {pipeline.name} takes no config; leave config out",
                detail=[{"field": "config", "message": "takes no config"}],
            )
        return {}
    try:
        return pipeline.validate_config(body.config)
    except ValidationError as exc:
        message, detail = field_errors(exc.errors(), ("config",))
        raise ApiProblem(422, "ValidationError", message, detail=detail) from None


def _options(service: ServiceDep, body: schemas.JobSubmit) -> dict:
    options: dict = body.options.model_dump(exclude_none=True)  # type: ignore[attr-defined]  # JobOptions
    try:  # the engine's own rules (chunk_bytes sizes, ...), before anything is queued
        EngineOptions.validate(service.pipelines[body.pipeline].fn, **options)
    except ShardwrightError as exc:
        status = http_status(exc) if classify(exc).kind == "user" else 422
        raise ApiProblem(status, type(exc).__name__, f"options: {exc}") from None
    _check_storage_options(body.storage_options, body.output_dir)
    return options


def _check_storage_options(storage_options: dict | None, output_dir: str | None = None) -> None:
    try:
        if storage_options:
            check_storage_option_names(storage_options, output_dir)
        if output_dir is not None:
            check_output_credentials(output_dir, storage_options)
    except LocationRefused as exc:
        raise ApiProblem(exc.status, "InvalidStorageOptions", str(exc)) from None
    except ShardwrightError as exc:
        raise ApiProblem(
            422, type(exc).__name__, f"storage_options: {exc}".replace(": storage_options ", ": ")
        ) from None


def _check_executor(body: schemas.JobSubmit, ray_address: str | None) -> None:
    if body.executor.kind == "slurm" and body.storage_options:
        raise ApiProblem(
            422,
            "ValidationError",
            "storage_options: Slurm jobs cannot carry credentials (they would "
            "be written into the batch job); give the cluster's tasks credentials through their "
            "environment (AWS_* variables, ~/.aws) and leave storage_options out",
        )
    if body.executor.kind == "ray" and not ray_address:
        raise ApiProblem(
            422,
            "ValidationError",
            'executor.kind: this server has no Ray cluster (the operator starts it with --ray-address); use "local"',
        )
    if body.executor.kind != "ray" and (body.executor.shared_output or body.executor.ray_remote_args):
        raise ApiProblem(
            422, "ValidationError", 'executor.shared_output: only Ray jobs take it; use {"kind": "ray", ...}'
        )
    if body.executor.kind != "slurm" and body.executor.array != 1:
        raise ApiProblem(
            422,
            "ValidationError",
            'executor.array: only Slurm jobs have array tasks; use {"kind": "slurm", "array": N}',
        )


@router.post("", status_code=201, response_model=schemas.Job, responses=ERRORS)
def submit(body: schemas.JobSubmit, service: ServiceDep):
    config = service.config
    if body.pipeline not in service.pipelines:
        raise ApiProblem(
            404,
            "UnknownPipeline",
            f"pipeline: no pipeline {body.pipeline!r}; the pipelines are "
            f"{', '.join(sorted(service.pipelines))} (GET {API}/pipelines)",
        )
    inputs: list | dict = body.inputs if isinstance(body.inputs, list) else body.inputs.model_dump(exclude_none=True)
    if isinstance(inputs, dict):  # a source: read only under an --input-root
        try:
            inputs["url"] = check_input_location(inputs["url"], config.input_roots)
        except LocationRefused as exc:
            raise ApiProblem(exc.status, "InputNotAllowed" if exc.status == 403 else "InvalidInput", str(exc)) from None
    elif not inputs:
        raise ApiProblem(422, "ValidationError", "inputs: the list is empty; give at least one input")
    elif len(inputs) > config.max_inputs:
        raise ApiProblem(
            413,
            "TooManyInputs",
            f"inputs: {len(inputs):,} inputs, more than this server's "
            f"limit of {config.max_inputs:,}; split them into several jobs",
        )
    job_config = _config(service, body)
    try:
        output_dir = check_output_location(body.output_dir, config.output_roots, config.state_dirs)
    except LocationRefused as exc:
        raise ApiProblem(
            exc.status, "OutputNotAllowed" if exc.status == 403 else "InvalidOutputDir", str(exc)
        ) from None
    _check_executor(body, config.ray_address)
    options = _options(service, body)
    record = JobRecord(
        id=new_job_id(),
        state=JobState.PENDING,
        pipeline=body.pipeline,
        inputs=inputs,
        output_dir=output_dir,
        config=job_config,
        options=options,
        executor=body.executor.model_dump(),
        storage_option_keys=tuple(sorted(body.storage_options or {})),
        created_at=time.time(),
        progress=Progress(0, len(inputs) if isinstance(inputs, list) else 0, 0),
    )
    try:
        check_config_unchanged(service.scheduler.store.list(), record, body.storage_options)
    except ConfigChangedError as exc:
        raise ApiProblem(409, "ConfigChanged", str(exc), detail={"changed_keys": exc.keys}) from None
    try:
        job = service.scheduler.submit(record, body.storage_options)
    except JobStateError as exc:
        raise ApiProblem(409, "OutputBusy", str(exc)) from None
    except QueueFullError as exc:
        raise ApiProblem(429, "QueueFull", str(exc)) from None
    return out(service, job)


@router.get("", response_model=schemas.JobList)
def list_jobs(service: ServiceDep, state: str | None = None, limit: int = 1000):
    states = [s.value for s in JobState]
    if state is not None and state.upper() not in states:
        raise ApiProblem(422, "ValidationError", f"state: {state!r} is not a job state; use one of {', '.join(states)}")
    jobs = service.scheduler.store.list(JobState(state.upper()) if state else None, limit=max(1, min(limit, 10_000)))
    return {"jobs": [out(service, j) for j in jobs]}


@router.get("/{job_id}", response_model=schemas.Job, responses=ERRORS)
def show_job(job: JobDep, service: ServiceDep):
    return out(service, job)


def _action(service: ServiceDep, fn, job_id: str, *args) -> schemas.Job:
    try:
        return out(service, fn(job_id, *args))
    except JobStateError as exc:
        raise ApiProblem(409, "InvalidJobState", str(exc)) from None
    except QueueFullError as exc:  # a retry waits like a submit
        raise ApiProblem(429, "QueueFull", str(exc)) from None
    except KeyError:
        raise ApiProblem(404, "JobNotFound", f"no job {job_id}") from None


@router.post("/{job_id}/cancel", response_model=schemas.Job, responses=ERRORS)
def cancel_job(job: JobDep, service: ServiceDep):
    return _action(service, service.scheduler.cancel, job.id)


@router.post("/{job_id}/retry", response_model=schemas.Job, responses=ERRORS)
def retry_job(job: JobDep, service: ServiceDep, body: schemas.RetryRequest | None = None):
    storage_options = body.storage_options if body else None
    _check_storage_options(storage_options, job.output_dir)
    return _action(service, service.scheduler.retry, job.id, storage_options)


@router.delete("/{job_id}", status_code=204, responses=ERRORS)
def delete_job(job: JobDep, service: ServiceDep):
    try:
        service.scheduler.delete(job.id)
    except JobStateError as exc:
        raise ApiProblem(409, "InvalidJobState", str(exc)) from None
    return Response(status_code=204)


@router.get("/{job_id}/history", response_model=schemas.OutputHistory, responses=ERRORS)
def job_history(job: JobDep, service: ServiceDep):
    """The output's own record of every optimize() call on it (each attempt, each node)."""
    runs, note = read_output_history(job.output_dir, service.scheduler.secrets.get(job.id))
    return {"id": job.id, "output_dir": job.output_dir, "runs": runs, "note": note}


@router.get("/{job_id}/inputs", response_model=schemas.InputsStatus, responses=ERRORS)
def job_inputs(job: JobDep, service: ServiceDep):
    """The job's inputs in the user's terms: done / in progress (by name) / pending / failed, an ETA."""
    status, note = read_inputs_status(job.output_dir, service.scheduler.secrets.get(job.id))
    return {"id": job.id, **status, "note": note}


@router.get("/{job_id}/logs", response_model=schemas.Logs, responses=ERRORS)
def job_logs(job: JobDep, service: ServiceDep):
    return {"id": job.id, "text": service.scheduler.logs(job.id)}
