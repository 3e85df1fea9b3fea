"""How a worker's loops end early: the stop asked for, fn's failure, an input over its timeout.
Shared by the plain loop (worker.py) and the in-flight machinery (inflight.py)."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["FnFailed", "InputTimeout", "StopRequested", "stop_requested", "watch_stops"]

# The stop test of the worker running in this process (set by the in-flight machinery), so
# that fn can ask: one worker per process, so one process-wide slot.
_stop_test: list[Callable[[], bool]] = []


def watch_stops(test: Callable[[], bool] | None) -> None:
    """Make ``test`` (None: nothing) what :func:`stop_requested` asks in this process."""
    _stop_test[:] = [test] if test is not None else []


def stop_requested() -> bool:
    """True once the worker running fn was asked to stop (Ctrl-C, SIGTERM, the run's own stop).

    For an fn that starts work ahead of its samples (the calls of the next pages): once it is
    True, start nothing new and let what already started finish, yielding its samples, then a
    ResumePoint; the run pauses at that ResumePoint, so no call in flight is lost and a resume
    repeats none. False outside a worker and in workers without ``concurrency=``'s machinery."""
    return bool(_stop_test) and _stop_test[0]()


class InputTimeout(TimeoutError):
    """fn spent longer than ``timeout`` on one input: a failure of that input, like any
    exception fn raises (retried, skipped or raised as on_error says)."""


class StopRequested(Exception):
    """Raised inside a worker when the main process (or a signal) asks it to stop."""


class FnFailed(Exception):
    """fn failed on an input for good (on_error="raise"): what came before it is committed."""

    def __init__(self, original: BaseException, tb: str):
        super().__init__(str(original))
        self.original = original
        self.tb = tb
