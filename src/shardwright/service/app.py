"""The FastAPI application: REST API under /api/v1 (routers in api/routes/), the dashboard at /."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, Request

from .api.deps import API, Service, TokenDep
from .api.problems import RequestLimits, install_handlers
from .api.routes import dashboard as dashboard_routes
from .api.routes import jobs as job_routes
from .api.routes import metrics as metrics_routes
from .api.routes import pipelines as pipeline_routes
from .metrics import ServiceMetrics, clock, metrics_available, route_template
from .pipelines import Pipeline
from .scheduler import Scheduler, ServiceConfig


def create_app(
    config: ServiceConfig, pipelines: dict[str, Pipeline], scheduler: Scheduler, token: str, *, run_loop: bool = True
) -> FastAPI:
    """The app; its lifespan runs the scheduler's loop (``run_loop=False``: tests drive ``tick()``)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if run_loop:
            scheduler.start()
        try:
            yield
        finally:
            scheduler.stop()

    app = FastAPI(
        title="shardwright jobs", version="1", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.service = Service(config, pipelines, scheduler, token)
    app.state.metrics = ServiceMetrics(scheduler.store, scheduler.files.counters) if metrics_available() else None
    if app.state.metrics is not None:
        found = app.state.metrics

        @app.middleware("http")
        async def time_requests(request: Request, call_next):
            start = clock()
            response = await call_next(request)
            if request.url.path.startswith(API):
                found.observe(route_template(request, API), request.method, response.status_code, clock() - start)
            return response

    app.add_middleware(RequestLimits, limit=config.max_body_bytes)
    install_handlers(app)
    app.include_router(pipeline_routes.router, prefix=API)
    app.include_router(job_routes.router, prefix=API)
    app.include_router(dashboard_routes.router)
    app.include_router(metrics_routes.router)
    app.add_api_route("/openapi.json", app.openapi, include_in_schema=False, dependencies=[TokenDep])
    return app
