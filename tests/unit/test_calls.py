"""engine.calls: which failures are transient, Retry-After, backoff, the retry policy's bounds and
the attempt history. The exceptions are shaped like the clients' own (status_code, status,
response.status_code, headers): the functions read attributes, they import no client."""

from __future__ import annotations

import asyncio
import email.utils
import random
import time

import pytest

from shardwright.engine.calls import (
    KEEP_ATTEMPTS,
    AttemptHistory,
    RetryPolicy,
    backoff,
    http_status,
    is_transient,
    parse_retry_after,
    retry_after,
    retry_async,
    retry_sync,
)
from shardwright.errors import ArgumentTypeError, UsageError


class Response:
    def __init__(self, status_code: int, headers: dict | None = None):
        self.status_code = status_code
        self.headers = headers or {}


class HTTPStatusError(Exception):  # httpx / requests: the status is on .response
    def __init__(self, status: int, headers: dict | None = None):
        super().__init__(f"HTTP {status}")
        self.response = Response(status, headers)


class APIStatusError(Exception):  # openai: .status_code and .response
    def __init__(self, status: int, headers: dict | None = None):
        super().__init__(f"Error code: {status}")
        self.status_code = status
        self.response = Response(status, headers)


class ClientResponseError(Exception):  # aiohttp: .status and .headers
    def __init__(self, status: int, headers: dict | None = None):
        super().__init__(f"{status}, message='...'")
        self.status = status
        self.headers = headers


def _named(module: str, name: str, *bases: type) -> type:
    return type(name, bases or (Exception,), {"__module__": module})


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504, 529])
@pytest.mark.parametrize("shape", [HTTPStatusError, APIStatusError, ClientResponseError])
def test_transient_statuses_are_retried_whatever_the_client(shape, status):
    exc = shape(status)
    assert http_status(exc) == status
    assert is_transient(exc)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 422])
@pytest.mark.parametrize("shape", [HTTPStatusError, APIStatusError, ClientResponseError])
def test_client_errors_are_not_transient(shape, status):
    assert not is_transient(shape(status))


def test_timeouts_and_connection_errors_are_transient_user_errors_are_not():
    assert is_transient(TimeoutError("read timed out"))
    assert is_transient(asyncio.TimeoutError())
    assert is_transient(ConnectionResetError("reset by peer"))
    assert is_transient(ConnectionRefusedError())
    for exc in (ValueError("bad prompt"), KeyError("choices"), RuntimeError("x"), OSError("disk")):
        assert not is_transient(exc)


def test_client_libraries_errors_are_known_by_name_without_importing_them():
    requests_base = _named("requests.exceptions", "RequestException", OSError)
    cases = [
        _named("httpx", "ReadTimeout", _named("httpx", "TimeoutException")),
        _named("httpx", "ConnectError", _named("httpx", "NetworkError")),
        _named("requests.exceptions", "ConnectionError", requests_base),
        _named("requests.exceptions", "ReadTimeout", _named("requests.exceptions", "Timeout", requests_base)),
        _named("aiohttp.client_exceptions", "ServerDisconnectedError", _named("aiohttp", "ClientConnectionError")),
        _named("openai", "APITimeoutError", _named("openai._exceptions", "APIConnectionError")),
    ]
    for cls in cases:
        assert is_transient(cls("x")), cls.__mro__
    assert not is_transient(requests_base("a requests error that is neither"))
    assert not is_transient(_named("mylib", "TimeoutException")("not httpx's"))


def test_a_4xx_on_a_connection_like_class_is_still_the_callers():
    cls = _named("aiohttp", "ClientConnectionError")
    exc = cls("x")
    exc.status = 400
    assert not is_transient(exc)


def test_user_named_types_are_transient():
    class QuotaExceeded(Exception):
        pass

    assert not is_transient(QuotaExceeded())
    assert is_transient(QuotaExceeded(), (QuotaExceeded,))
    assert RetryPolicy(transient=(QuotaExceeded,)).is_transient(QuotaExceeded())


def test_a_non_http_status_attribute_is_ignored():
    exc = ValueError("x")
    exc.status = "failed"  # type: ignore[attr-defined]
    assert http_status(exc) is None
    exc.status = True  # type: ignore[attr-defined]
    assert http_status(exc) is None
    exc.status = 42  # type: ignore[attr-defined]
    assert http_status(exc) is None


def test_retry_after_seconds_date_milliseconds_and_bounds():
    assert retry_after(APIStatusError(429, {"retry-after": "2"})) == 2.0
    assert retry_after(HTTPStatusError(429, {"Retry-After": "1.5"})) == 1.5
    assert retry_after(ClientResponseError(429, {"RETRY-AFTER": "3"})) == 3.0  # a plain dict, any case
    assert retry_after(APIStatusError(429, {"retry-after-ms": "250", "retry-after": "1"})) == 0.25
    assert retry_after(APIStatusError(429, {"retry-after": "100000"})) == 300.0
    assert retry_after(APIStatusError(429, {"retry-after": "-5"})) == 0.0
    assert retry_after(APIStatusError(429, {"retry-after": "soon"})) is None
    assert retry_after(APIStatusError(429, {"retry-after": "nan"})) is None
    assert retry_after(APIStatusError(429)) is None
    assert retry_after(ValueError()) is None
    now = time.time()
    date = email.utils.formatdate(now + 10, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(10, abs=1)
    assert parse_retry_after(email.utils.formatdate(now - 100, usegmt=True), now=now) == 0.0


def test_backoff_is_full_jitter_under_the_exponential_ceiling():
    rng = random.Random(1)
    for attempt in range(1, 12):
        ceiling = min(10.0, 0.5 * 2 ** (attempt - 1))
        delays = [backoff(attempt, 0.5, 10.0, rng) for _ in range(300)]
        assert all(0.0 <= d <= ceiling for d in delays)
        assert max(delays) > 0.8 * ceiling and min(delays) < 0.2 * ceiling  # spread over the range
    assert backoff(10_000, 0.5, 10.0, rng) <= 10.0  # no overflow


def test_backoff_honours_retry_after_as_a_floor_with_a_little_spread():
    rng = random.Random(2)
    delays = [backoff(1, 0.1, 1.0, rng, retry_after=5.0) for _ in range(200)]
    assert all(5.0 <= d <= 5.5 for d in delays)
    assert len(set(delays)) > 100
    policy = RetryPolicy(base_delay=0.1, max_delay=1.0)
    assert policy.delay(1, APIStatusError(429, {"retry-after": "2"}), rng) >= 2.0


def test_backoff_refuses_a_nonsense_attempt():
    for attempt in (0, -1, 1.0, True):
        with pytest.raises(UsageError, match="attempt"):
            backoff(attempt, 0.5, 1.0)  # type: ignore[arg-type]


def test_retry_policy_is_frozen_with_strict_types_and_bounds():
    policy = RetryPolicy()
    assert policy.max_retries >= 5 and policy.base_delay > 0 and policy.max_delay >= policy.base_delay
    with pytest.raises(Exception):
        policy.max_retries = 3  # type: ignore[misc]
    with pytest.raises(ArgumentTypeError, match="max_retries must be an int"):
        RetryPolicy(max_retries="3")  # type: ignore[arg-type]
    with pytest.raises(ArgumentTypeError, match="max_retries must be an int"):
        RetryPolicy(max_retries=True)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="between 0 and 1000"):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ArgumentTypeError, match="base_delay must be a number"):
        RetryPolicy(base_delay="1")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="base_delay must be between"):
        RetryPolicy(base_delay=float("nan"))
    with pytest.raises(UsageError, match="at least base_delay"):
        RetryPolicy(base_delay=5, max_delay=1)
    with pytest.raises(ArgumentTypeError, match="tuple of exception classes"):
        RetryPolicy(transient=("ValueError",))  # type: ignore[arg-type]
    assert RetryPolicy(transient=KeyError).transient == (KeyError,)  # type: ignore[arg-type]
    assert RetryPolicy(base_delay=1, max_delay=2).base_delay == 1.0


def test_retry_policy_of_an_option():
    assert RetryPolicy.of(None) == RetryPolicy()
    assert RetryPolicy.of(3).max_retries == 3
    assert RetryPolicy.of({"max_retries": 2, "base_delay": 0.1}).base_delay == 0.1
    policy = RetryPolicy(max_retries=1)
    assert RetryPolicy.of(policy) is policy
    with pytest.raises(UsageError, match="unknown keys \\['retries'\\]"):
        RetryPolicy.of({"retries": 2})
    with pytest.raises(ArgumentTypeError, match="retries must be None, an int"):
        RetryPolicy.of("3")
    with pytest.raises(ArgumentTypeError):
        RetryPolicy.of(False)


def test_history_counts_consecutive_failures_since_progress():
    history = AttemptHistory(RetryPolicy(max_retries=2, base_delay=0.01, max_delay=0.02))
    rng = random.Random(0)
    assert history.failed(APIStatusError(500), rng) is not None
    history.progress()  # a page done: the count starts again
    assert history.failed(APIStatusError(429, {"retry-after": "0.05"}), rng) >= 0.05
    assert history.failed(TimeoutError("t"), rng) is not None
    assert history.failed(APIStatusError(503), rng) is None  # the third in a row: give up
    assert history.attempts == 4 and history.failed_attempts == 4 and history.consecutive == 3
    text = history.describe()
    assert text.startswith("4 attempts (3 consecutive failures, max_retries=2): ")
    assert "500 APIStatusError" in text and "429 APIStatusError (Retry-After 0.05 s)" in text
    record = history.as_json()
    assert record["attempts"] == 4 and [f["status"] for f in record["failures"]] == [500, 429, None, 503]
    assert record["failures"][-1]["delay"] is None


def test_history_gives_up_at_once_on_a_user_error():
    history = AttemptHistory(RetryPolicy())
    assert history.failed(ValueError("bad page")) is None
    assert history.describe() == "1 attempt: ValueError (not transient)"


def test_history_stays_small_for_many_failures():
    history = AttemptHistory(RetryPolicy(max_retries=1000, base_delay=0, max_delay=0))
    for i in range(500):
        history.failed(APIStatusError(500))
        if i % 2:
            history.progress()
    assert history.failed_attempts == 500 and len(history.failures) == KEEP_ATTEMPTS
    assert history.failures[0].number == 1 and history.failures[-1].number == 500
    assert "... 480 more ..." in history.describe()


def test_retry_sync_and_async_retry_transient_failures_only():
    failures = [APIStatusError(429), APIStatusError(502)]

    def flaky():
        if failures:
            raise failures.pop(0)
        return "ok"

    waits: list[float] = []
    history = AttemptHistory(RetryPolicy(base_delay=0.01, max_delay=0.01))
    assert retry_sync(flaky, history=history, sleep=waits.append) == "ok"
    assert history.attempts == 3 and len(waits) == 2 and history.consecutive == 0

    def broken():
        raise ValueError("4xx-like")

    with pytest.raises(ValueError):
        retry_sync(broken, RetryPolicy(), sleep=waits.append)
    assert len(waits) == 2

    calls = []

    async def flaky_async():
        calls.append(1)
        if len(calls) < 3:
            raise TimeoutError()
        return len(calls)

    assert asyncio.run(retry_async(flaky_async, RetryPolicy(base_delay=0.001, max_delay=0.001))) == 3

    async def always():
        raise ConnectionResetError()

    with pytest.raises(ConnectionResetError):
        asyncio.run(retry_async(always, RetryPolicy(max_retries=2, base_delay=0, max_delay=0)))
