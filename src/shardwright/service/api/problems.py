"""The API's one error shape, ``{"error": {kind, type, message}, "detail": [...]}``, and the
limits every request passes before a handler sees it (size, JSON, nesting), answered in it."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ...errors import ShardwrightError, classify
from ..classify import http_status

MAX_JSON_DEPTH = 32


class ApiProblem(Exception):
    """An error answered as ``{"error": {kind, type, message}}`` with an HTTP status."""

    def __init__(self, status: int, type_: str, message: str, kind: str = "user", detail: Any = None):
        super().__init__(message)
        self.status, self.type, self.message, self.kind, self.detail = status, type_, message, kind, detail


def problem_response(p: ApiProblem) -> JSONResponse:
    body: dict[str, Any] = {"error": {"kind": p.kind, "type": p.type, "message": p.message}}
    if p.detail is not None:
        body["detail"] = p.detail
    headers = {"WWW-Authenticate": "Bearer"} if p.status == 401 else None
    return JSONResponse(body, status_code=p.status, headers=headers)


def field_errors(errors, prefix: tuple = ()) -> tuple[str, list]:
    """pydantic's errors as ``field: message`` (one line) and a list of {field, message}."""
    detail = []
    for e in errors:
        loc = tuple(x for x in e.get("loc", ()) if x != "body")
        detail.append({"field": ".".join(str(x) for x in prefix + loc), "message": e.get("msg", "")})
    message = "; ".join(f"{d['field'] or 'body'}: {d['message']}" for d in detail)
    return message, detail


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiProblem)
    async def on_problem(request: Request, exc: ApiProblem):
        return problem_response(exc)

    @app.exception_handler(RequestValidationError)
    async def on_validation(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            message = "; ".join(
                str(e.get("ctx", {}).get("error", "")) for e in errors if e.get("type") == "json_invalid"
            )
            return problem_response(ApiProblem(400, "InvalidJSON", f"body: invalid JSON ({message})"))
        message, detail = field_errors(errors)
        return problem_response(ApiProblem(422, "ValidationError", message, detail=detail))

    async def on_error(request: Request, exc: Exception):
        row = classify(exc)
        return problem_response(ApiProblem(http_status(exc), type(exc).__name__, str(exc).split("\n")[0], row.kind))

    app.add_exception_handler(ShardwrightError, on_error)  # expected (a full disk under the store: 507)
    app.add_exception_handler(Exception, on_error)  # a bug: 500, still in the API's shape


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_BRACKET = re.compile(rb"[\[\]{}]")


def json_depth(body: bytes) -> int:
    """How deeply arrays and objects nest in a JSON text (strings skipped), without parsing it."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub(b'""', body)):
        if m.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


class RequestLimits:
    """ASGI middleware: a request body over ``limit`` bytes (413), JSON nested deeper than
    MAX_JSON_DEPTH (422), and text that is not JSON (400) are answered before the app parses it."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self._too_big(scope, receive, send)
        chunks, seen, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return await self.app(scope, receive, send)  # a disconnect: nothing to answer
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.limit:
                return await self._too_big(scope, receive, send)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        problem = self._json_problem(body, headers)
        if problem is not None:
            return await problem_response(problem)(scope, receive, send)
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    @staticmethod
    def _json_problem(body: bytes, headers: dict) -> ApiProblem | None:
        if not body.strip() or b"json" not in headers.get(b"content-type", b"application/json"):
            return None
        depth = json_depth(body)
        if depth > MAX_JSON_DEPTH:
            return ApiProblem(
                422,
                "TooDeep",
                f"body: JSON nested {depth} levels deep, over the limit of {MAX_JSON_DEPTH}; send flatter inputs",
            )
        try:
            json.loads(body)
        except (ValueError, RecursionError) as exc:
            return ApiProblem(400, "InvalidJSON", f"body: invalid JSON ({exc})")
        return None

    async def _too_big(self, scope, receive, send):
        problem = ApiProblem(
            413,
            "BodyTooLarge",
            f"body: request body over the limit of {self.limit:,} bytes: send fewer inputs per job "
            "(or start the server with a larger --max-body-bytes)",
        )
        await problem_response(problem)(scope, receive, send)
