"""Calls that may fail for a moment: which failures are transient, how long to wait before the
next attempt, and the record of every attempt an input made.

An I/O-bound fn (an LLM teacher over HTTP, an API) fails in two ways. A *transient* failure
(a timeout, a dropped connection, an HTTP 408/425/429/5xx) goes away if the same call is made
again a little later; a *user* failure (a 400 for a malformed request, a ValueError in fn)
comes back every time, so retrying only burns calls. :func:`is_transient` tells them apart
without importing any client library: it reads the HTTP status the exception carries
(openai's and httpx's ``status_code``, requests' and httpx's ``response.status_code``,
aiohttp's and urllib's ``status``) and knows the timeout and connection errors of openai,
httpx, requests, aiohttp and urllib3 by name.

:class:`RetryPolicy` bounds the retries: ``max_retries`` counts the *consecutive* failed
attempts since the input last made progress (a sample or a ResumePoint), so a long document
with scattered transient errors still finishes while a dead teacher fails the input quickly.
:func:`backoff` is exponential with full jitter (the wait is uniform in [0, min(cap, base *
2**(n-1))]: clients that failed together do not retry together), and never shorter than the
server's ``Retry-After``. :class:`AttemptHistory` keeps what happened, for the failure record:
``3 attempts: 429 RateLimitError (Retry-After 1.0 s), 500 InternalServerError, ValueError``.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import ArgumentTypeError, UsageError, short_repr

#: HTTP statuses a later attempt may get past: request timeout, too early, too many requests,
#: and every server error (500 internal, 502/503/504 gateway and overload, 529 overloaded).
TRANSIENT_STATUSES = frozenset({408, 425, 429, *range(500, 600)})

#: The longest Retry-After honoured, in seconds: a server asking for an hour is treated as
#: asking for this long, so one bad header cannot park an input for the rest of the run.
MAX_RETRY_AFTER = 300.0
LONGEST_RETRY_AFTER = 86400.0  # the most max_retry_after may be set to

#: Timeout and connection errors of the client libraries users bring, by (top-level module,
#: class name) anywhere in the exception's MRO, so that none of them has to be imported.
#: requests' ConnectionError and Timeout are OSErrors, not the builtin ConnectionError.
_TRANSIENT_NAMES = frozenset(
    {
        ("httpx", "TimeoutException"),
        ("httpx", "NetworkError"),
        ("httpx", "RemoteProtocolError"),
        ("requests", "ConnectionError"),
        ("requests", "Timeout"),
        ("requests", "ChunkedEncodingError"),
        ("aiohttp", "ClientConnectionError"),
        ("aiohttp", "ClientPayloadError"),
        ("aiohttp", "ServerTimeoutError"),
        ("openai", "APIConnectionError"),  # APITimeoutError is a subclass
        ("anthropic", "APIConnectionError"),
        ("urllib3", "TimeoutError"),
        ("urllib3", "ProtocolError"),
        ("urllib3", "NewConnectionError"),
    }
)

T = TypeVar("T")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _status_of(obj: object, name: str) -> int | None:
    value = getattr(obj, name, None)
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries, or None: ``exc.status_code`` (openai, httpx,
    starlette), ``exc.status`` (aiohttp's ClientResponseError, urllib's HTTPError), or the
    status of ``exc.response`` (httpx's HTTPStatusError, requests' HTTPError). Only an int in
    100..599 counts: an unrelated ``status = "failed"`` attribute is not an HTTP status."""
    for name in ("status_code", "status"):
        status = _status_of(exc, name)
        if status is not None:
            return status
    response = getattr(exc, "response", None)
    if response is not None:
        for name in ("status_code", "status"):
            status = _status_of(response, name)
            if status is not None:
                return status
    return None


def _headers(exc: BaseException) -> Mapping[str, Any] | None:
    for holder in (exc, getattr(exc, "response", None)):
        headers = getattr(holder, "headers", None) if holder is not None else None
        if headers is not None and hasattr(headers, "get"):
            return headers
    return None


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    value = headers.get(name)
    if value is None:  # a plain dict is case-sensitive; the clients' header maps are not
        lowered = name.lower()
        try:
            value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == lowered), None)
        except Exception:  # an exotic mapping: no header rather than an error in error handling
            return None
    return value if isinstance(value, str) else None


def parse_retry_after(value: str, *, now: float | None = None, limit: float = MAX_RETRY_AFTER) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delay-seconds (``"2"``, ``"1.5"``) or an
    HTTP date; None when unparsable. Clamped to [0, limit]."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), limit)


def retry_after(exc: BaseException, *, limit: float = MAX_RETRY_AFTER) -> float | None:
    """How long the server asked us to wait, in seconds (bounded by ``limit``), from the
    exception's response headers: ``retry-after-ms`` (OpenAI's, more precise) or
    ``Retry-After``; None when the exception carries neither."""
    headers = _headers(exc)
    if headers is None:
        return None
    millis = _header(headers, "retry-after-ms")
    if millis is not None:
        try:
            seconds = float(millis) / 1000.0
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds):
            return min(max(seconds, 0.0), limit)
    value = _header(headers, "retry-after")
    return parse_retry_after(value, limit=limit) if value is not None else None


def _named_transient(cls: type) -> bool:
    for base in cls.__mro__:
        top = (getattr(base, "__module__", "") or "").split(".", 1)[0]
        if (top, base.__name__) in _TRANSIENT_NAMES:
            return True
    return False


def is_transient(exc: BaseException, extra_types: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether another attempt of the same call may succeed: an instance of ``extra_types``
    (the user's own), an HTTP status in :data:`TRANSIENT_STATUSES`, a timeout, or a connection
    error. An exception with any other HTTP status (400, 401, 404, 422) is the caller's to fix,
    even when its class is a connection-ish one; so is anything else (ValueError, KeyError)."""
    if extra_types and isinstance(exc, extra_types):
        return True
    status = http_status(exc)
    if status is not None:
        return status in TRANSIENT_STATUSES
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError)):
        return True
    return _named_transient(type(exc))


def backoff(
    attempt: int, base: float, cap: float, rng: random.Random | None = None, *, retry_after: float | None = None
) -> float:
    """Seconds to wait before retry number ``attempt`` (1 = the first retry): full jitter,
    uniform in [0, min(cap, base * 2**(attempt-1))]. A server's ``retry_after`` is a floor: the
    wait is at least that, plus up to 10 % more so that the clients it throttled together do
    not all come back in the same instant."""
    if not _is_int(attempt) or attempt < 1:
        raise UsageError(f"backoff attempt must be an int >= 1; got {short_repr(attempt)}")
    source: Any = rng if rng is not None else random  # the module's shared generator by default
    ceiling = min(cap, base * 2.0 ** min(attempt - 1, 60))
    delay = source.uniform(0.0, ceiling)
    if retry_after is not None and math.isfinite(retry_after) and retry_after > 0:
        retry_after = min(retry_after, LONGEST_RETRY_AFTER)  # whoever parsed it: never a wait sleep refuses
        delay = max(delay, retry_after * (1.0 + 0.1 * source.random()))
    return delay


def _check_number(name: str, value: object, low: float, high: float) -> float:
    if not _is_number(value):
        raise ArgumentTypeError(
            f"RetryPolicy {name} must be a number of seconds; got {short_repr(value)} ({type(value).__name__})"
        )
    number = float(value)  # type: ignore[arg-type]
    if not (low <= number <= high):  # also refuses NaN
        raise UsageError(f"RetryPolicy {name} must be between {low:g} and {high:g} seconds; got {short_repr(value)}")
    return number


@dataclass(frozen=True)
class RetryPolicy:
    """How an input's transient failures are retried.

    - ``max_retries``: how many *consecutive* failed attempts since the input last made
      progress (a sample or a ResumePoint) are retried; the next failure fails the input.
      0 retries nothing.
    - ``base_delay`` / ``max_delay``: the backoff's first ceiling and its cap, in seconds.
    - ``transient``: the user's own exception types that are worth retrying too (a
      ``QuotaExceeded`` of an SDK that carries no HTTP status).
    - ``max_retry_after``: the longest ``Retry-After`` honoured.
    """

    max_retries: int = 8
    base_delay: float = 0.5
    max_delay: float = 30.0
    transient: tuple[type[BaseException], ...] = ()
    max_retry_after: float = MAX_RETRY_AFTER

    def __post_init__(self) -> None:
        if not _is_int(self.max_retries):
            raise ArgumentTypeError(
                f"RetryPolicy max_retries must be an int; got {short_repr(self.max_retries)} ({type(self.max_retries).__name__})"
            )
        if not 0 <= self.max_retries <= 1000:
            raise UsageError(f"RetryPolicy max_retries must be between 0 and 1000; got {self.max_retries}")
        base = _check_number("base_delay", self.base_delay, 0.0, 3600.0)
        cap = _check_number("max_delay", self.max_delay, 0.0, 3600.0)
        if cap < base:
            raise UsageError(f"RetryPolicy max_delay ({cap:g} s) must be at least base_delay ({base:g} s)")
        most = _check_number("max_retry_after", self.max_retry_after, 0.0, LONGEST_RETRY_AFTER)
        transient = self.transient
        if isinstance(transient, type):
            transient = (transient,)  # one type given bare: the obvious meaning
        if not isinstance(transient, (tuple, list)) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in transient
        ):
            raise ArgumentTypeError(
                f"RetryPolicy transient must be a tuple of exception classes, e.g. (MyQuotaError,); got {short_repr(self.transient)}"
            )
        object.__setattr__(self, "base_delay", base)
        object.__setattr__(self, "max_delay", cap)
        object.__setattr__(self, "max_retry_after", most)
        object.__setattr__(self, "transient", tuple(transient))

    @classmethod
    def of(cls, value: object, name: str = "retries") -> RetryPolicy:
        """The policy an option names: None (the defaults), an int (``max_retries``), a dict of
        fields, or a RetryPolicy."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if _is_int(value):
            return cls(max_retries=value)  # type: ignore[arg-type]
        if isinstance(value, dict):
            unknown = sorted(set(value) - {"max_retries", "base_delay", "max_delay", "transient", "max_retry_after"})
            if unknown:
                raise UsageError(
                    f"{name} has unknown keys {unknown}; use max_retries, base_delay, max_delay, transient, max_retry_after"
                )
            return cls(**value)
        raise ArgumentTypeError(
            f"{name} must be None, an int (max_retries), a dict or a RetryPolicy; got {short_repr(value)} ({type(value).__name__})"
        )

    def is_transient(self, exc: BaseException) -> bool:
        return is_transient(exc, self.transient)

    def delay(self, attempt: int, exc: BaseException | None = None, rng: random.Random | None = None) -> float:
        """The wait before retry number ``attempt`` after ``exc``, honouring its Retry-After."""
        after = retry_after(exc, limit=self.max_retry_after) if exc is not None else None
        return backoff(attempt, self.base_delay, self.max_delay, rng, retry_after=after)


@dataclass(frozen=True)
class FailedAttempt:
    """One failed attempt: when, what (class, HTTP status, a bounded message), whether it was
    transient, and how long the next attempt waited (None: it was the last)."""

    number: int  # 1-based, counting every attempt of the input
    at: float  # time.time()
    error: str  # the exception's class name
    message: str
    status: int | None
    transient: bool
    retry_after: float | None
    delay: float | None = None

    def describe(self) -> str:
        what = f"{self.status} {self.error}" if self.status is not None else self.error
        if self.retry_after is not None:
            what += f" (Retry-After {self.retry_after:g} s)"
        elif not self.transient:
            what += " (not transient)"
        return what

    def as_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "at": round(self.at, 3),
            "error": self.error,
            "message": self.message,
            "status": self.status,
            "transient": self.transient,
            "retry_after": self.retry_after,
            "delay": None if self.delay is None else round(self.delay, 3),
        }


#: How many failed attempts a history keeps in full (the first ones and the latest ones); the
#: count stays exact, so a record of an input that failed 900 times stays small.
KEEP_ATTEMPTS = 20


@dataclass
class AttemptHistory:
    """Every attempt of one input, under a policy. Call :meth:`progress` when the input yields
    a sample or a ResumePoint, and :meth:`failed` when an attempt raises: it returns the wait
    before the next attempt, or None when the input must fail (not transient, or
    ``max_retries`` consecutive failures since the last progress)."""

    policy: RetryPolicy = field(default_factory=RetryPolicy)
    attempts: int = 1  # the attempt running now (1: the first)
    consecutive: int = 0  # failed attempts since the last progress
    failures: list[FailedAttempt] = field(default_factory=list)
    dropped: int = 0  # failures not kept in ``failures`` (beyond KEEP_ATTEMPTS)

    def progress(self) -> None:
        self.consecutive = 0

    def failed(self, exc: BaseException, rng: random.Random | None = None, *, now: float | None = None) -> float | None:
        transient = self.policy.is_transient(exc)
        self.consecutive += 1
        after = retry_after(exc, limit=self.policy.max_retry_after)
        delay = None
        if transient and self.consecutive <= self.policy.max_retries:
            delay = self.policy.delay(self.consecutive, exc, rng)
        record = FailedAttempt(
            number=self.attempts,
            at=time.time() if now is None else now,
            error=type(exc).__name__,
            message=str(exc)[:200],
            status=http_status(exc),
            transient=transient,
            retry_after=after,
            delay=delay,
        )
        self._keep(record)
        if delay is not None:
            self.attempts += 1
        return delay

    def _keep(self, record: FailedAttempt) -> None:
        self.failures.append(record)
        if len(self.failures) > KEEP_ATTEMPTS:  # keep the first half and the latest ones
            del self.failures[KEEP_ATTEMPTS // 2]
            self.dropped += 1

    @property
    def failed_attempts(self) -> int:
        return len(self.failures) + self.dropped

    def describe(self) -> str:
        """One line for a failure record: ``3 attempts: 429 RateLimitError (Retry-After 1 s), ...``."""
        if not self.failures:
            return f"{self.attempts} attempt{'s' if self.attempts != 1 else ''}"
        parts = [f.describe() for f in self.failures]
        if self.dropped:
            parts.insert(KEEP_ATTEMPTS // 2, f"... {self.dropped} more ...")
        head = f"{self.attempts} attempt{'s' if self.attempts != 1 else ''}"
        if self.failures[-1].delay is None and self.failures[-1].transient:
            head += f" ({self.consecutive} consecutive failures, max_retries={self.policy.max_retries})"
        return f"{head}: " + ", ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "failed_attempts": self.failed_attempts,
            "consecutive": self.consecutive,
            "max_retries": self.policy.max_retries,
            "failures": [f.as_json() for f in self.failures],
            "dropped": self.dropped,
        }


def retry_sync(
    call: Callable[[], T],
    policy: RetryPolicy | None = None,
    *,
    history: AttemptHistory | None = None,
    rng: random.Random | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, retried under ``policy`` while it fails transiently; the last failure is
    raised as is. Pass ``history`` to read the attempts afterwards (a call that succeeds counts
    as progress)."""
    history = history if history is not None else AttemptHistory(policy or RetryPolicy())
    while True:
        try:
            result = call()
        except Exception as exc:
            delay = history.failed(exc, rng)
            if delay is None:
                raise
            sleep(delay)
        else:
            history.progress()
            return result


async def retry_async(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy | None = None,
    *,
    history: AttemptHistory | None = None,
    rng: random.Random | None = None,
) -> T:
    """``await call()``, retried under ``policy`` while it fails transiently (the asyncio
    twin of :func:`retry_sync`; the waits are ``asyncio.sleep``, so cancelling works)."""
    history = history if history is not None else AttemptHistory(policy or RetryPolicy())
    while True:
        try:
            result = await call()
        except Exception as exc:
            delay = history.failed(exc, rng)
            if delay is None:
                raise
            await asyncio.sleep(delay)
        else:
            history.progress()
            return result
