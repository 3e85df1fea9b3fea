"""``GET /metrics``: Prometheus's text format (service.metrics); the API token is required
unless the server was started with ``--metrics-public``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ...metrics import CONTENT_TYPE
from ..deps import ServiceDep, require_token
from ..problems import ApiProblem

router = APIRouter(include_in_schema=False)


@router.get("/metrics")
def metrics(request: Request, service: ServiceDep) -> Response:
    if not service.config.metrics_public:
        require_token(request, service)
    found = getattr(request.app.state, "metrics", None)
    if found is None:
        raise ApiProblem(
            501,
            "MetricsUnavailable",
            "prometheus-client is not installed on the server: pip install 'shardwright[telemetry]' and restart it",
            kind="system",
        )
    return Response(found.render(), media_type=CONTENT_TYPE)
