"""``concurrency``, ``durable_every``, ``stop_grace`` and ``retries``: the options of I/O-bound fns (issue 32),
validated once into a frozen dataclass."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentTypeError, UsageError
from .calls import RetryPolicy
from .resume import FnKind, classify_fn

__all__ = ["MAX_CONCURRENCY", "InflightOptions"]

MAX_CONCURRENCY = 1024  # inputs in flight per worker process: beyond this, add workers or nodes
DEFAULT_DURABLE_EVERY = 2.0  # seconds: what a SIGKILL may cost beyond the calls in flight
MAX_DURABLE_EVERY = 3600.0
DEFAULT_STOP_GRACE = 20.0  # seconds inputs in flight get to reach a ResumePoint after Ctrl-C/SIGTERM
MAX_STOP_GRACE = 3600.0


def _seconds(name: str, value: object, minimum: float, maximum: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{name} must be a number of seconds ({what}); got {value!r} ({type(value).__name__})")
    if not minimum <= value <= maximum:
        raise UsageError(f"{name} must be between {minimum:g} and {maximum:g} seconds ({what}); got {value!r}")
    return float(value)


@dataclass(frozen=True)
class InflightOptions:
    """How a worker process runs fn: ``concurrency`` inputs in flight at once (1: one at a time,
    as before), their progress made durable every ``durable_every`` seconds, and on Ctrl-C or
    SIGTERM ``stop_grace`` seconds for inputs in flight to reach their next ResumePoint."""

    concurrency: int = 1
    durable_every: float = DEFAULT_DURABLE_EVERY
    stop_grace: float = DEFAULT_STOP_GRACE
    kind: FnKind = FnKind("sync", False)
    retries: RetryPolicy = RetryPolicy()  # transient failures of an input in flight (engine.calls)

    @property
    def in_flight(self) -> bool:
        """Whether the worker runs fn through the in-flight machinery (engine.inflight): more
        than one input at a time, an async fn, or a fn that takes ``resume=``. Otherwise the
        plain loop of one input at a time runs, exactly as before."""
        return self.concurrency > 1 or self.kind.is_async or self.kind.accepts_resume

    @classmethod
    def validate(
        cls,
        fn: object,
        concurrency: object,
        durable_every: object,
        stop_grace: object,
        timeout: float | None,
        retries: object = None,
    ) -> InflightOptions:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise ArgumentTypeError(
                f"concurrency must be an int (inputs in flight per worker process); got {concurrency!r} "
                f"({type(concurrency).__name__})"
            )
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise UsageError(
                f"concurrency must be between 1 and {MAX_CONCURRENCY} (inputs in flight per worker process); got "
                f"{concurrency!r}"
            )
        kind = classify_fn(fn)
        options = cls(
            concurrency=concurrency,
            durable_every=_seconds("durable_every", durable_every, 0.05, MAX_DURABLE_EVERY, "between progress saves"),
            stop_grace=_seconds("stop_grace", stop_grace, 0.0, MAX_STOP_GRACE, "to reach a ResumePoint on a stop"),
            kind=kind,
            retries=RetryPolicy.of(retries, "retries"),
        )
        if timeout is not None and options.in_flight and not kind.is_async:
            raise UsageError(
                "timeout= needs fn to run one input at a time in the worker's main thread (a SIGALRM); this fn runs "
                "in threads (concurrency > 1, or it takes resume=): make fn async (async def) or drop timeout"
            )
        return options
