"""How a worker's loops end early: the stop asked for, fn's failure, an input over its timeout.
Shared by the plain loop (worker.py) and the in-flight machinery (inflight.py)."""

from __future__ import annotations

__all__ = ["FnFailed", "InputTimeout", "StopRequested"]


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
