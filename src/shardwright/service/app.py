"""The FastAPI application: REST API under /api/v1, the dashboard at /."""

from __future__ import annotations

import os
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import ValidationError

from ..engine.options import OptimizeOptions as EngineOptions
from ..errors import ShardwrightError
from . import schemas
from .auth import token_matches
from .classify import error_class
from .dashboard import DASHBOARD_HTML
from .pipelines import Pipeline
from .scheduler import JobStateError, Scheduler, ServiceConfig
from .store import STATES

API = "/api/v1"


class ApiProblem(Exception):
    """An error answered as ``{"error": {kind, type, message}}`` with an HTTP status."""

    def __init__(self, status: int, type_: str, message: str, kind: str = "user", detail=None):
        super().__init__(message)
        self.status, self.type, self.message, self.kind, self.detail = status, type_, message, kind, detail


def _problem_response(p: ApiProblem) -> JSONResponse:
    body = {"error": {"kind": p.kind, "type": p.type, "message": p.message}}
    if p.detail is not None:
        body["detail"] = p.detail
    headers = {"WWW-Authenticate": "Bearer"} if p.status == 401 else None
    return JSONResponse(body, status_code=p.status, headers=headers)


def _field_errors(errors, prefix: tuple = ()) -> tuple[str, list]:
    detail = []
    for e in errors:
        loc = tuple(x for x in e.get("loc", ()) if x != "body")
        detail.append({"field": ".".join(str(x) for x in prefix + loc), "message": e.get("msg", "")})
    message = "; ".join(f"{d['field'] or 'body'}: {d['message']}" for d in detail)
    return message, detail


class BodyLimit:
    """Refuse request bodies above a size (413), with or without Content-Length."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        too_big = JSONResponse(
            {
                "error": {
                    "kind": "user",
                    "type": "BodyTooLarge",
                    "message": f"request body over {self.limit:,} bytes: send fewer inputs per job "
                    "(or start the server with a larger --max-body-bytes)",
                }
            },
            status_code=413,
        )
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await too_big(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooBig()
            return message

        try:
            await self.app(scope, limited, send)
        except _TooBig:
            await too_big(scope, receive, send)


class _TooBig(Exception):
    pass


# Object stores a job may write to, and the one spelling each is compared under.
_REMOTE_SCHEMES = {"s3": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "abfs", "abfss": "abfs"}


def _normalize_remote(url: str) -> str:
    """``gcs://b/p/`` -> ``gs://b/p``: one spelling per location, so roots compare as they should."""
    scheme, rest = url.split("://", 1)
    return f"{_REMOTE_SCHEMES.get(scheme.lower(), scheme.lower())}://{rest}".rstrip("/")


def _check_output_dir(output_dir: str, roots: tuple, executor: str) -> str:
    if "://" in output_dir:
        scheme = output_dir.split("://", 1)[0]
        if scheme.lower() not in _REMOTE_SCHEMES:
            raise ApiProblem(
                422,
                "InvalidOutputDir",
                f"output_dir: {scheme}:// is not supported; use an absolute local path, s3://bucket/prefix, "
                "gs://bucket/prefix or az://container/prefix",
            )
        normalized = _normalize_remote(output_dir)
    else:
        if not os.path.isabs(output_dir):
            raise ApiProblem(
                422,
                "InvalidOutputDir",
                f"output_dir: {output_dir!r} is relative; give an absolute path "
                "(jobs do not run in your working directory)",
            )
        normalized = os.path.realpath(output_dir)
    if roots:

        def under(root: str) -> bool:
            if "://" in root:
                root = _normalize_remote(root)
                return normalized == root or normalized.startswith(root + "/")
            real = os.path.realpath(root)
            return normalized == real or normalized.startswith(real.rstrip("/") + "/")

        if not any(under(r) for r in roots):
            raise ApiProblem(
                403,
                "OutputNotAllowed",
                f"output_dir: {output_dir} is outside the allowed output roots "
                f"({', '.join(roots)}); write under one of them",
            )
    return normalized


def create_app(config: ServiceConfig, pipelines: dict[str, Pipeline], scheduler: Scheduler, token: str) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app):
        scheduler.start()
        try:
            yield
        finally:
            scheduler.stop()

    app = FastAPI(
        title="shardwright jobs", version="1", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)

    @app.exception_handler(ApiProblem)
    async def on_problem(request: Request, exc: ApiProblem):
        return _problem_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_validation(request: Request, exc: RequestValidationError):
        message, detail = _field_errors(exc.errors())
        return _problem_response(ApiProblem(422, "ValidationError", message, detail=detail))

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception):
        row = error_class(exc)
        return _problem_response(ApiProblem(row.status, type(exc).__name__, str(exc).split("\n")[0], kind=row.kind))

    def require_token(request: Request) -> None:
        if not token_matches(request.headers.get("authorization"), token):
            raise ApiProblem(
                401,
                "Unauthorized",
                "missing or wrong bearer token: send `Authorization: Bearer TOKEN` "
                "(the operator finds it where `shardwright serve` said)",
            )

    auth = [Depends(require_token)]

    def get_job(job_id: str):
        job = scheduler.store.get(job_id)
        if job is None:
            raise ApiProblem(404, "JobNotFound", f"no job {job_id}: list jobs with GET {API}/jobs")
        return job

    def out(job) -> schemas.Job:
        return schemas.job_out(job, scheduler.secrets_available(job))

    def action(fn, job_id: str, *args):
        get_job(job_id)
        try:
            return out(fn(job_id, *args))
        except JobStateError as exc:
            raise ApiProblem(409, "InvalidJobState", str(exc)) from None
        except KeyError:
            raise ApiProblem(404, "JobNotFound", f"no job {job_id}") from None

    @app.get("/openapi.json", include_in_schema=False, dependencies=auth)
    def openapi():
        return app.openapi()

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def dashboard():
        return HTMLResponse(
            DASHBOARD_HTML,
            headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer"},
        )

    @app.get(f"{API}/pipelines", response_model=schemas.PipelineList, dependencies=auth)
    def list_pipelines():
        return {
            "pipelines": [
                {"name": p.name, "description": p.description, "config_schema": p.config_schema()}
                for p in sorted(pipelines.values(), key=lambda p: p.name)
            ]
        }

    @app.post(
        f"{API}/jobs",
        status_code=201,
        response_model=schemas.Job,
        dependencies=auth,
        responses={
            401: {"model": schemas.ApiError},
            403: {"model": schemas.ApiError},
            404: {"model": schemas.ApiError},
            422: {"model": schemas.ApiError},
        },
    )
    def submit(body: schemas.JobSubmit):
        pipeline = pipelines.get(body.pipeline)
        if pipeline is None:
            raise ApiProblem(
                404,
                "UnknownPipeline",
                f"pipeline: no pipeline {body.pipeline!r}; the pipelines are "
                f"{', '.join(sorted(pipelines))} (GET {API}/pipelines)",
            )
        if len(body.inputs) > config.max_inputs:
            raise ApiProblem(
                413,
                "TooManyInputs",
                f"inputs: {len(body.inputs):,} inputs, more than this server's "
                f"limit of {config.max_inputs:,}; split them into several jobs",
            )
        if pipeline.config_model is None:
            if body.config:
                raise ApiProblem(
                    422,
                    "ValidationError",
                    f"config: pipeline {pipeline.name} takes no config; leave config out",
                    detail=[{"field": "config", "message": "takes no config"}],
                )
            cfg = {}
        else:
            try:
                cfg = pipeline.config_model.model_validate(body.config).model_dump(mode="json")
            except ValidationError as exc:
                message, detail = _field_errors(exc.errors(), ("config",))
                raise ApiProblem(422, "ValidationError", message, detail=detail) from None
        output_dir = _check_output_dir(body.output_dir, config.output_roots, body.executor.kind)
        if body.executor.kind == "slurm" and body.storage_options:
            raise ApiProblem(
                422,
                "ValidationError",
                "storage_options: Slurm jobs cannot carry credentials (they would "
                "be written into the batch job); give the cluster's tasks credentials through their "
                "environment (AWS_* variables, ~/.aws) and leave storage_options out",
            )
        if body.executor.kind == "local" and body.executor.array != 1:
            raise ApiProblem(
                422,
                "ValidationError",
                'executor.array: only Slurm jobs have array tasks; use {"kind": "slurm", "array": N}',
            )
        options = body.options.model_dump(exclude_none=True)
        try:  # the engine's own rules (chunk_bytes sizes, ...), before anything is queued
            EngineOptions.validate(pipeline.fn, **options)
        except ShardwrightError as exc:
            row = error_class(exc)
            raise ApiProblem(row.status if row.kind == "user" else 422, type(exc).__name__, f"options: {exc}") from None
        try:
            job = scheduler.submit(
                pipeline.name, body.inputs, output_dir, cfg, options, body.executor.model_dump(), body.storage_options
            )
        except JobStateError as exc:
            raise ApiProblem(409, "OutputBusy", str(exc)) from None
        return out(job)

    @app.get(f"{API}/jobs", response_model=schemas.JobList, dependencies=auth)
    def list_jobs(state: str | None = None, limit: int = 1000):
        if state is not None and state.upper() not in STATES:
            raise ApiProblem(
                422, "ValidationError", f"state: {state!r} is not a job state; use one of {', '.join(STATES)}"
            )
        jobs = scheduler.store.list(state.upper() if state else None, limit=max(1, min(limit, 10_000)))
        return {"jobs": [out(j) for j in jobs]}

    @app.get(f"{API}/jobs/{{job_id}}", response_model=schemas.Job, dependencies=auth)
    def show_job(job_id: str):
        return out(get_job(job_id))

    @app.post(f"{API}/jobs/{{job_id}}/cancel", response_model=schemas.Job, dependencies=auth)
    def cancel_job(job_id: str):
        return action(scheduler.cancel, job_id)

    @app.post(f"{API}/jobs/{{job_id}}/retry", response_model=schemas.Job, dependencies=auth)
    def retry_job(job_id: str, body: schemas.RetryRequest | None = None):
        return action(scheduler.retry, job_id, body.storage_options if body else None)

    @app.delete(f"{API}/jobs/{{job_id}}", status_code=204, dependencies=auth)
    def delete_job(job_id: str):
        get_job(job_id)
        try:
            scheduler.delete(job_id)
        except JobStateError as exc:
            raise ApiProblem(409, "InvalidJobState", str(exc)) from None
        return Response(status_code=204)

    @app.get(f"{API}/jobs/{{job_id}}/logs", response_model=schemas.Logs, dependencies=auth)
    def job_logs(job_id: str):
        get_job(job_id)
        return {"id": job_id, "text": scheduler.logs(job_id)}

    return app
