"""What every telemetry implementation answers (shardwright.telemetry): the no-op base,
recording nothing (telemetry off), and the names shared by the live one."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

__all__ = ["InFlight", "LATENCY_BUCKETS", "METER_NAME", "OFF", "TRACE_PARENT_ENV", "Telemetry"]

METER_NAME = "shardwright"
#: the run's span, handed to its worker processes (W3C traceparent): their spans join the run's trace
TRACE_PARENT_ENV = "SHARDWRIGHT_TRACEPARENT"
#: seconds: a chunk commit round, and the wait for a batch (p50/p95/p99 come from these)
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Telemetry:
    """The counters of runs and readers. This base records nothing (telemetry off); the
    live one (telemetry.live.Live) records each call for OpenTelemetry."""

    enabled = False

    # -- runs (optimize) -------------------------------------------------------------------
    def items(self, n: int) -> None:
        """``n`` more items committed."""

    def inputs_done(self, n: int) -> None:
        """``n`` more inputs finished."""

    def failed(self, n: int = 1) -> None:
        """``n`` more inputs failed (after their retries)."""

    def retry(self, cause: str) -> None:
        """One more retry, by cause (``fn``, or a store failure kind: ``transient``, ...)."""

    def throttled(self, verb: str) -> None:
        """A store answered 429 (or its SDK's throttling code) to ``verb``."""

    def calls_in_flight(self, delta: int) -> None:
        """I/O-bound fn calls running now: +1 when one starts, -1 when it ends."""

    def chunks_committed(self, chunks: int, seconds: float) -> None:
        """A commit round of ``chunks`` chunks took ``seconds`` (written to sealed)."""

    def store_request(self, verb: str, outcome: str) -> None:
        """One store operation (GET, PUT, LIST ...) ended: ``ok`` or the failure kind."""

    def bytes_written(self, n: int) -> None:
        """``n`` more bytes of chunks committed."""

    # -- readers ---------------------------------------------------------------------------
    def batch(self, rank: int, worker: int, items: int, wait_seconds: float) -> None:
        """A loader handed a batch of ``items`` items after waiting ``wait_seconds`` for it."""

    def bytes_read(self, rank: int, worker: int, nbytes: int) -> None:
        """A reader process loaded a chunk of ``nbytes`` bytes (decoded: what its items are read from)."""

    def chunk_download(self, rank: int, worker: int, nbytes: int) -> None:
        """A chunk was downloaded into the cache."""

    def cache_hit(self, rank: int, worker: int) -> None:
        """A chunk was found in the cache (no download)."""

    def flush(self) -> None:
        """Write the counter file now (shardwright.tally): before a job process reports its end."""

    # -- traces ----------------------------------------------------------------------------
    def span(self, name: str, start_ns: int | None = None, **attributes: Any) -> AbstractContextManager[Any]:
        """A span (a no-op context when off), begun at ``start_ns`` (time.time_ns()) or now."""
        return nullcontext()

    def handed_to_children(self) -> AbstractContextManager[Any]:
        """While open, processes started from here (worker processes) put their spans under
        the current span: its W3C traceparent is in their environment (TRACE_PARENT_ENV)."""
        return nullcontext()


OFF = Telemetry()


class InFlight:
    """Calls in flight as a level: :meth:`set` reports the change since the last value to
    :meth:`Telemetry.calls_in_flight` (an up-down counter sums the deltas of every process)."""

    def __init__(self, telemetry: Telemetry):
        self.telemetry, self.value = telemetry, 0

    def set(self, value: int) -> None:
        if value != self.value and self.telemetry.enabled:
            self.telemetry.calls_in_flight(value - self.value)
        self.value = value
