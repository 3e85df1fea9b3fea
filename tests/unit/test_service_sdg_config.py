"""Issue 32 item 7, the service's parts that need no server: a teacher's 429/5xx inside fn is
a transient system error; a config's changed keys are named; ``#token=...&job=ID`` keeps the
job to open once the token is taken out of the address (the dashboard's own script, in node)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

pytest.importorskip("httpx")  # the service extra: the unit layer also runs with the core dependencies only

import httpx

from shardwright.errors import FnError
from shardwright.service.config_identity import changed_keys
from shardwright.service.dashboard import DASHBOARD_HTML
from shardwright.service.model import JobError
from shardwright.service.transient import is_transient_fn_failure


def fn_error(cause: BaseException | None, message: str = "fn raised on input 3 (x)") -> FnError:
    error = FnError(message, input_index=3, input_repr="x", worker_traceback="")
    error.__cause__ = cause
    return error


def http_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
    response = httpx.Response(status, request=request)
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        return exc
    raise AssertionError("no error")


@pytest.mark.parametrize("status", [429, 500, 503, 408])
def test_a_teachers_transient_status_in_fn_is_a_transient_system_error(status):
    error = JobError.from_exception(fn_error(http_error(status)))
    assert (error.kind, error.transient, error.type) == ("system", True, "FnError")


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_a_teachers_client_error_stays_a_user_error(status):
    error = JobError.from_exception(fn_error(http_error(status)))
    assert (error.kind, error.transient) == ("user", False)
    assert JobError.from_exception(fn_error(ValueError("bad page"))).kind == "user"


def test_the_status_is_read_from_the_message_when_the_cause_did_not_come_back():
    said = "fn raised on input 3 (x) in worker 0: HTTPStatusError: Server error '503 Service Unavailable' for url"
    assert is_transient_fn_failure(fn_error(None, said))
    assert is_transient_fn_failure(fn_error(None, "fn raised: RateLimitError: Error code: 429 - {}"))
    assert not is_transient_fn_failure(fn_error(None, "fn raised on input 503 (x): ValueError: page 429 is bad"))
    assert is_transient_fn_failure(fn_error(TimeoutError("read timed out")))


def test_changed_config_keys_are_named_nested_ones_dotted():
    old = {"samples_per_page": 3, "teacher": {"url": "a", "model": "m"}, "temperature": 0.7}
    new = {"samples_per_page": 2, "teacher": {"url": "a", "model": "n"}, "seed": 1, "temperature": 0.7}
    assert changed_keys(old, new) == ["samples_per_page", "seed", "teacher.model"]
    assert changed_keys(old, dict(old)) == []


@pytest.mark.skipif(shutil.which("node") is None, reason="node runs the dashboard's script")
def test_the_dashboard_keeps_the_job_of_a_token_link():
    script = DASHBOARD_HTML.split('"use strict";', 1)[1].split("let timer", 1)[0]
    harness = (
        "const stored = {}; const sessionStorage = {setItem: (k, v) => { stored[k] = v; }};\n"
        "const location = {hash: '#token=t0k3n&job=j123', pathname: '/dashboard'};\n"
        "let address = null; const history = {replaceState: (a, b, url) => { address = url; }};\n"
        + script
        + "\nconsole.log(JSON.stringify({stored, address}));"
    )
    out = subprocess.run(["node", "-e", harness], capture_output=True, text=True, timeout=30, check=True).stdout
    result = json.loads(out)
    assert result["stored"] == {"shardwright-token": "t0k3n"}
    assert result["address"] == "/dashboard#job=j123"
