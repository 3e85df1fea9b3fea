"""Telemetry sent to OpenTelemetry (shardwright.telemetry, when on).

Counting costs a locked integer addition: the counters and up-down counters are the SDK's
*observable* instruments, whose callbacks report the totals kept here when the SDK collects
(each export interval, and the last export at exit), instead of one SDK ``add()`` per call
(~0.05-0.1 ms each: attribute sets, views, exemplars). What is exported is the same: monotonic
cumulative sums (and delta ones if the exporter asks for them) by the same attributes. The two
histograms (commit and wait latency) record each sample as it comes: once per commit round
and once per batch.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from .base import LATENCY_BUCKETS, METER_NAME, TRACE_PARENT_ENV, Telemetry

__all__ = ["Live"]

Attributes = tuple[tuple[str, Any], ...]

# name -> (unit, description, up-down): every summed series
SUMS: dict[str, tuple[str, str, bool]] = {
    "shardwright.run.items": ("{item}", "items committed", False),
    "shardwright.run.inputs_done": ("{input}", "inputs finished", False),
    "shardwright.run.inputs_failed": ("{input}", "inputs failed", False),
    "shardwright.run.retries": ("{retry}", "retries, by cause", False),
    "shardwright.store.throttled": ("{response}", "429s seen, by verb", False),
    "shardwright.run.calls_in_flight": ("{call}", "fn calls running", True),
    "shardwright.run.chunks_committed": ("{chunk}", "chunks committed", False),
    "shardwright.store.requests": ("{request}", "store requests", False),
    "shardwright.run.bytes_written": ("By", "chunk bytes committed", False),
    "shardwright.reader.batches": ("{batch}", "batches handed out", False),
    "shardwright.reader.items": ("{item}", "items in the batches handed out", False),
    "shardwright.reader.bytes": ("By", "chunk bytes loaded (decoded)", False),
    "shardwright.reader.chunk_downloads": ("{chunk}", "chunks downloaded", False),
    "shardwright.reader.download_bytes": ("By", "bytes downloaded", False),
    "shardwright.reader.cache_hits": ("{chunk}", "chunks found in the cache", False),
}


class Live(Telemetry):
    enabled = True

    def __init__(self, meter_provider: Any, tracer_provider: Any):
        meter = meter_provider.get_meter(METER_NAME)
        self._tracer = tracer_provider.get_tracer(METER_NAME) if tracer_provider is not None else None
        self._lock = threading.Lock()
        # name -> attributes -> total; a series is reported once something was added to it
        self._sums: dict[str, dict[Attributes, int]] = {name: {} for name in SUMS}
        for name, (unit, description, up_down) in SUMS.items():
            create = meter.create_observable_up_down_counter if up_down else meter.create_observable_counter
            create(name, callbacks=[self._observer(name)], unit=unit, description=description)
        self._commit_seconds = meter.create_histogram(
            "shardwright.run.commit_duration",
            unit="s",
            description="one commit round, written to sealed",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
        )
        self._wait = meter.create_histogram(
            "shardwright.reader.wait_duration",
            unit="s",
            description="time the training loop waited for a batch",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS,
        )

    def _add(self, name: str, n: int, attributes: Attributes = ()) -> None:
        series = self._sums[name]
        with self._lock:
            series[attributes] = series.get(attributes, 0) + n

    def _observer(self, name: str) -> Callable[[Any], Iterable[Any]]:
        from opentelemetry.metrics import Observation

        series = self._sums[name]

        def observe(_options: Any) -> Iterable[Any]:
            with self._lock:
                totals = list(series.items())
            return [Observation(total, dict(attributes)) for attributes, total in totals]

        return observe

    def items(self, n: int) -> None:
        self._add("shardwright.run.items", n)

    def inputs_done(self, n: int) -> None:
        self._add("shardwright.run.inputs_done", n)

    def failed(self, n: int = 1) -> None:
        self._add("shardwright.run.inputs_failed", n)

    def retry(self, cause: str) -> None:
        self._add("shardwright.run.retries", 1, (("cause", cause),))

    def throttled(self, verb: str) -> None:
        self._add("shardwright.store.throttled", 1, (("verb", verb),))

    def calls_in_flight(self, delta: int) -> None:
        self._add("shardwright.run.calls_in_flight", delta)

    def chunks_committed(self, chunks: int, seconds: float) -> None:
        self._add("shardwright.run.chunks_committed", chunks)
        self._commit_seconds.record(seconds)

    def store_request(self, verb: str, outcome: str) -> None:
        self._add("shardwright.store.requests", 1, (("verb", verb), ("outcome", outcome)))

    def bytes_written(self, n: int) -> None:
        self._add("shardwright.run.bytes_written", n)

    def batch(self, rank: int, worker: int, items: int, wait_seconds: float) -> None:
        where = (("rank", rank), ("worker", worker))
        self._add("shardwright.reader.batches", 1, where)
        self._add("shardwright.reader.items", items, where)
        self._wait.record(wait_seconds, dict(where))

    def bytes_read(self, rank: int, worker: int, nbytes: int) -> None:
        self._add("shardwright.reader.bytes", nbytes, (("rank", rank), ("worker", worker)))

    def chunk_download(self, rank: int, worker: int, nbytes: int) -> None:
        where = (("rank", rank), ("worker", worker))
        self._add("shardwright.reader.chunk_downloads", 1, where)
        self._add("shardwright.reader.download_bytes", nbytes, where)

    def cache_hit(self, rank: int, worker: int) -> None:
        self._add("shardwright.reader.cache_hits", 1, (("rank", rank), ("worker", worker)))

    @contextmanager
    def _span(self, name: str, start_ns: int | None, attributes: dict[str, Any]) -> Iterator[Any]:
        from opentelemetry import trace

        assert self._tracer is not None
        parent = None
        inherited = os.environ.get(TRACE_PARENT_ENV)
        if inherited and not trace.get_current_span().get_span_context().is_valid:
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

            parent = TraceContextTextMapPropagator().extract({"traceparent": inherited})
        with self._tracer.start_as_current_span(
            name, context=parent, attributes=attributes, start_time=start_ns
        ) as span:
            yield span

    def span(self, name: str, start_ns: int | None = None, **attributes: Any) -> AbstractContextManager[Any]:
        if self._tracer is None:
            return nullcontext()
        return self._span(name, start_ns, {k: v for k, v in attributes.items() if v is not None})

    @contextmanager
    def _handed(self) -> Iterator[None]:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        previous = os.environ.get(TRACE_PARENT_ENV)
        if "traceparent" in carrier:
            os.environ[TRACE_PARENT_ENV] = carrier["traceparent"]
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(TRACE_PARENT_ENV, None)
            else:
                os.environ[TRACE_PARENT_ENV] = previous

    def handed_to_children(self) -> AbstractContextManager[Any]:
        return nullcontext() if self._tracer is None else self._handed()
