"""What a route needs, as FastAPI dependencies: the service (its config, pipelines and
scheduler), a checked bearer token (:data:`TokenDep`) and the job a path names (:data:`JobDep`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from ..auth import token_matches
from ..pipelines import Pipeline
from ..scheduler import Scheduler, ServiceConfig
from ..store import JobRecord
from .problems import ApiProblem

API = "/api/v1"


@dataclass(frozen=True)
class Service:
    config: ServiceConfig
    pipelines: dict[str, Pipeline]
    scheduler: Scheduler
    token: str


def get_service(request: Request) -> Service:
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(get_service)]


def require_token(request: Request, service: ServiceDep) -> None:
    if not token_matches(request.headers.get("authorization"), service.token):
        raise ApiProblem(
            401,
            "Unauthorized",
            "missing or wrong bearer token: send `Authorization: Bearer TOKEN` "
            "(the operator finds it where `shardwright serve` said)",
        )


TokenDep = Depends(require_token)


def get_job(job_id: str, service: ServiceDep) -> JobRecord:
    job = service.scheduler.store.get(job_id)
    if job is None:
        raise ApiProblem(404, "JobNotFound", f"no job {job_id}: list jobs with GET {API}/jobs")
    return job


JobDep = Annotated[JobRecord, Depends(get_job)]
