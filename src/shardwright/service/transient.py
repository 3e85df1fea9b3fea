"""Whether fn failed on a transient error of a service it calls (issue 32 item 7): a teacher
LLM's 429 or 5xx, a timeout, a dropped connection. Such a failure is the system's, not the
user's: the service retries the job with its backoff (``auto_retries``), resuming where it
stopped, instead of failing it as a user error.

Recognised through the exception fn raised (the FnError's cause chain): an HTTP status
408/425/429/5xx carried as ``status_code`` / ``status`` / ``response.status_code`` (httpx's,
requests' and openai's errors), ``TimeoutError`` / ``ConnectionError``, and the timeout and
connection error types of httpx and openai by name (no import of either).
"""

from __future__ import annotations

import re

from ..errors import FnError

__all__ = ["TRANSIENT_STATUSES", "is_transient_fn_failure", "transient_status"]

TRANSIENT_STATUSES = frozenset({408, 425, 429})  # and every 5xx
_TRANSIENT_NAMES = frozenset(
    {
        "ConnectError",
        "ConnectTimeout",
        "ReadTimeout",
        "WriteTimeout",
        "PoolTimeout",
        "RemoteProtocolError",
        "APIConnectionError",
        "APITimeoutError",
        "RateLimitError",
        "InternalServerError",
    }
)


def transient_status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries, when it is a transient one."""
    response = getattr(exc, "response", None)
    for value in (
        getattr(exc, "status_code", None),
        getattr(exc, "status", None),
        getattr(response, "status_code", None),
    ):
        if type(value) is int and (value in TRANSIENT_STATUSES or 500 <= value <= 599):
            return value
    return None


def _transient(exc: BaseException) -> bool:
    return (
        isinstance(exc, (TimeoutError, ConnectionError))
        or type(exc).__name__ in _TRANSIENT_NAMES
        or transient_status(exc) is not None
    )


# fn's exception as its message says it when the exception itself did not come back from the
# worker (not picklable): httpx's "Server error '503 Service Unavailable'", openai's "Error code:
# 429 - ...", requests' "500 Server Error: ..."
_STATUS_TEXT = re.compile(r"(?:'|Error code: )(408|425|429|5\d\d)\b|\b(408|425|429|5\d\d) (?:Client|Server) Error\b")


def is_transient_fn_failure(exc: BaseException) -> bool:
    """``exc`` is an FnError whose cause (fn's own exception, or one it chains) is transient."""
    if not isinstance(exc, FnError):
        return False
    if exc.__cause__ is None:
        return bool(_STATUS_TEXT.search(str(exc).split("\n--- worker traceback ---")[0]))
    seen: set[int] = set()
    cause: BaseException | None = exc.__cause__
    while cause is not None and id(cause) not in seen and len(seen) < 20:
        seen.add(id(cause))
        if _transient(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False
