"""``GET /``: the dashboard page (static; it holds no data and asks for the token itself)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

from ...dashboard import DASHBOARD_HTML

router = APIRouter(include_in_schema=False)

HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "frame-ancestors 'none'",
}


@router.get("/", response_class=HTMLResponse)
def dashboard():
    return HTMLResponse(DASHBOARD_HTML, headers=HEADERS)
