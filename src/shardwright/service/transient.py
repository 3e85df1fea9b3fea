"""Whether fn failed on a transient error of a service it calls (issue 32 item 7): a teacher
LLM's 429 or 5xx, a timeout, a dropped connection. Such a failure is the system's, not the
user's: the service retries the job with its backoff (``auto_retries``), resuming where it
stopped, instead of failing it as a user error.

Recognised through the exception fn raised (the FnError's cause chain) by the engine's one
rule for a transient call (:func:`shardwright.engine.calls.is_transient`: an HTTP status
408/425/429/5xx, a timeout, a connection error, the clients' own types by name), or, when the
exception did not come back from the worker, by the status its message states.
"""

from __future__ import annotations

import re

from ..engine.calls import is_transient
from ..errors import FnError

__all__ = ["is_transient_fn_failure"]


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
        if is_transient(cause):
            return True
        cause = cause.__cause__ or cause.__context__
    return False
