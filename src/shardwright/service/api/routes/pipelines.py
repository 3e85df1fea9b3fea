"""``GET /api/v1/pipelines``: what can be run, and the JSON Schema of each one's config."""

from __future__ import annotations

from fastapi import APIRouter

from ... import schemas
from ..deps import ServiceDep, TokenDep

router = APIRouter(prefix="/pipelines", tags=["pipelines"], dependencies=[TokenDep])


@router.get("", response_model=schemas.PipelineList)
def list_pipelines(service: ServiceDep):
    return {
        "pipelines": [
            {"name": p.name, "description": p.description, "config_schema": p.config_schema()}
            for p in sorted(service.pipelines.values(), key=lambda p: p.name)
        ]
    }
