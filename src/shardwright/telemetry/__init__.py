"""Run and reader telemetry through OpenTelemetry: off unless asked for, free when off.

**When it is on.** Only when ``opentelemetry-sdk`` is installed (the ``telemetry`` extra)
*and* the standard variables ask for it: ``OTEL_SDK_DISABLED`` is not ``true``, and
``OTEL_METRICS_EXPORTER`` or ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``,
``console``; ``none`` asks for nothing). The specification's default exporter is ``otlp``,
but a data library must not start sending to ``localhost:4317`` because a package happens
to be installed: so an unset variable means off here. An application that installed its own
SDK providers (``opentelemetry.metrics.set_meter_provider``) gets our series through them
when the variables enable us; :func:`configure` hands providers over explicitly (tests, or
an application that wants them whatever the environment says). When off, ``opentelemetry``
is never imported and every call below is an empty method.

Each process builds its own providers the first time it records (worker processes too:
the variables are inherited), with the ``process.pid`` resource attribute so that the
series of a run's processes stay apart, and flushes them at exit (a forked multiprocessing
child included). ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` are honoured by the
SDK (default service name here: ``shardwright``).

**What it costs when on** (issue 35; docs/observability.md): ``optimize()`` starts the SDK on
a background thread while it opens its output (:func:`start_in_background`, :class:`RunSpan`),
so the call does not wait for the import; counting is a locked integer addition that the
SDK reads through observable instruments when it exports (live.py).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from contextlib import AbstractContextManager
from typing import Any

from ..tally import COUNTERS_DIR_ENV, CounterFile
from .base import LATENCY_BUCKETS, METER_NAME, OFF, TRACE_PARENT_ENV, InFlight, Telemetry
from .live import Live

__all__ = [
    "InFlight",
    "LATENCY_BUCKETS",
    "METER_NAME",
    "TRACE_PARENT_ENV",
    "RunSpan",
    "Telemetry",
    "configure",
    "enabled_by_environment",
    "get",
    "reset",
    "start_in_background",
]

log = logging.getLogger("shardwright")


def _exporter_names(variable: str) -> list[str]:
    value = os.environ.get(variable, "").strip().lower()
    return [name.strip() for name in value.split(",") if name.strip() and name.strip() != "none"]


def _asked_for() -> bool:
    """What the variables say, without importing anything."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(_exporter_names("OTEL_METRICS_EXPORTER") or _exporter_names("OTEL_TRACES_EXPORTER"))


def enabled_by_environment() -> bool:
    """The rule of the module docstring, without importing opentelemetry when it says no."""
    if not _asked_for():
        return False
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        return False
    return True


class _Tallied(Telemetry):
    """The run counters also kept in a counter file (shardwright.tally) for the jobs service,
    on top of ``inner`` (OpenTelemetry, or nothing)."""

    enabled = True

    def __init__(self, inner: Telemetry, counters: Any):
        self.inner, self.counters = inner, counters

    def items(self, n: int) -> None:
        self.inner.items(n)
        self.counters.add("items", n)

    def inputs_done(self, n: int) -> None:
        self.inner.inputs_done(n)
        self.counters.add("inputs_done", n)

    def failed(self, n: int = 1) -> None:
        self.inner.failed(n)
        self.counters.add("failed", n)

    def retry(self, cause: str) -> None:
        self.inner.retry(cause)
        self.counters.add("retries", 1, cause)

    def throttled(self, verb: str) -> None:
        self.inner.throttled(verb)
        self.counters.add("throttled", 1, verb)

    def calls_in_flight(self, delta: int) -> None:
        self.inner.calls_in_flight(delta)

    def chunks_committed(self, chunks: int, seconds: float) -> None:
        self.inner.chunks_committed(chunks, seconds)
        self.counters.add("chunks_committed", chunks)

    def store_request(self, verb: str, outcome: str) -> None:
        self.inner.store_request(verb, outcome)
        self.counters.add("store_requests", 1, verb, outcome)

    def bytes_written(self, n: int) -> None:
        self.inner.bytes_written(n)
        self.counters.add("bytes_written", n)

    def batch(self, rank: int, worker: int, items: int, wait_seconds: float) -> None:
        self.inner.batch(rank, worker, items, wait_seconds)

    def bytes_read(self, rank: int, worker: int, nbytes: int) -> None:
        self.inner.bytes_read(rank, worker, nbytes)

    def chunk_download(self, rank: int, worker: int, nbytes: int) -> None:
        self.inner.chunk_download(rank, worker, nbytes)

    def cache_hit(self, rank: int, worker: int) -> None:
        self.inner.cache_hit(rank, worker)

    def flush(self) -> None:
        self.counters.write_now()

    def span(self, name: str, start_ns: int | None = None, **attributes: Any) -> AbstractContextManager[Any]:
        return self.inner.span(name, start_ns, **attributes)

    def handed_to_children(self) -> AbstractContextManager[Any]:
        return self.inner.handed_to_children()


_lock = threading.Lock()
_current: tuple[int, Telemetry] | None = None  # (pid, telemetry): a forked child builds its own
_explicit: Telemetry | None = None


def get() -> Telemetry:
    """This process's telemetry: the live one when enabled, else the no-op one."""
    if _explicit is not None:
        return _explicit
    current = _current
    if current is not None and current[0] == os.getpid():
        return current[1]
    return _build()


def _build() -> Telemetry:
    global _current
    with _lock:
        pid = os.getpid()
        if _current is not None and _current[0] == pid:
            return _current[1]
        telemetry: Telemetry = OFF
        if enabled_by_environment():
            try:
                telemetry = _from_environment()
            except Exception as exc:  # telemetry must never stop a run
                log.warning("OpenTelemetry is enabled by OTEL_* variables but could not start: %s", exc)
        counters_dir = os.environ.get(COUNTERS_DIR_ENV)
        if counters_dir:  # the jobs service's run counters (shardwright.tally)
            telemetry = _Tallied(telemetry, CounterFile(counters_dir))
        _current = (pid, telemetry)
        return telemetry


_building: tuple[int, threading.Thread] | None = None  # (pid, thread) of start_in_background()


def start_in_background() -> None:
    """When the variables enable telemetry and this process has not started it yet, import
    and start the SDK in a background thread, so that the caller's next steps (an optimize()
    opening its output: fsyncs, a lease) overlap it (issue 35: importing the SDK is ~30 ms of
    a run's critical path otherwise). :func:`get` waits for it (it holds the build's lock),
    and so does every fork of this process (a child must not inherit a half-done import)."""
    global _building
    pid = os.getpid()
    if _explicit is not None or (_current is not None and _current[0] == pid) or not _asked_for():
        return
    if _building is not None and _building[0] == pid:
        return
    thread = threading.Thread(target=_build, name="shardwright-telemetry-start", daemon=True)
    _building = (pid, thread)
    thread.start()


def _finish_building() -> None:
    """Before a fork: let a background start end first (its imports must not be half done in the child)."""
    building = _building
    if building is not None and building[0] == os.getpid() and building[1].is_alive():
        building[1].join(timeout=60)


os.register_at_fork(before=_finish_building)


class RunSpan:
    """A span that begins when its ``with`` block does but is only created by :meth:`open`
    (or at the end of the block), from its recorded start time: the block's first steps run
    while :func:`start_in_background` starts the SDK. Spans opened after :meth:`open` are its
    children."""

    def __init__(self, name: str, **attributes: Any):
        self.name, self.attributes = name, attributes
        self._start_ns = 0
        self._span: AbstractContextManager[Any] | None = None

    def __enter__(self) -> RunSpan:
        self._start_ns = time.time_ns()
        start_in_background()
        return self

    def open(self) -> Telemetry:
        """Create the span now (waiting for the SDK if it is still starting), current from here
        to the end of the ``with`` block; returns this process's telemetry."""
        telemetry = get()
        if self._span is None:
            self._span = telemetry.span(self.name, self._start_ns, **self.attributes)
            self._span.__enter__()
        return telemetry

    def __exit__(self, *exc: Any) -> bool | None:
        if self._span is None and not get().enabled:
            return None
        self.open()  # a block that ended before open() (nothing to do, or an error) still has its span
        assert self._span is not None
        return self._span.__exit__(*exc)


def configure(meter_provider: Any = None, tracer_provider: Any = None) -> Telemetry:
    """Use these OpenTelemetry providers in this process, whatever the variables say (either
    may be None: that signal is then not recorded)."""
    global _explicit
    if meter_provider is None:
        from opentelemetry.metrics import NoOpMeterProvider

        meter_provider = NoOpMeterProvider()
    _explicit = Live(meter_provider, tracer_provider)
    return _explicit


def reset() -> None:
    """Forget :func:`configure`'d providers and what the variables said (read again at next use)."""
    global _explicit, _current, _base_resource
    _explicit = None
    _current = None
    _base_resource = None


def _from_environment() -> Telemetry:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    global _base_resource
    if _base_resource is None:  # once per process tree: a forked worker inherits it and adds its pid
        _base_resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "shardwright"})
    resource = _base_resource.merge(Resource({"process.pid": os.getpid()}))
    meter_provider: Any = None
    tracer_provider: Any = None
    closers: list[Any] = []
    metric_exporters = _exporter_names("OTEL_METRICS_EXPORTER")
    if metric_exporters:
        ours = metrics.get_meter_provider()
        if isinstance(ours, MeterProvider) and os.getpid() == _pid_at_import:
            meter_provider = ours  # the application's own SDK provider
        else:
            readers = [PeriodicExportingMetricReader(_metric_exporter(name)) for name in metric_exporters]
            meter_provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
            closers.append(meter_provider)
    trace_exporters = _exporter_names("OTEL_TRACES_EXPORTER")
    if trace_exporters:
        theirs = trace.get_tracer_provider()
        if isinstance(theirs, TracerProvider) and os.getpid() == _pid_at_import:
            tracer_provider = theirs
        else:
            tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
            for name in trace_exporters:
                tracer_provider.add_span_processor(BatchSpanProcessor(_span_exporter(name)))
            closers.append(tracer_provider)
    for closer in closers:
        _flush_at_exit(closer)
    if meter_provider is None:
        from opentelemetry.metrics import NoOpMeterProvider

        meter_provider = NoOpMeterProvider()
    return Live(meter_provider, tracer_provider)


def _flush_at_exit(provider: Any) -> None:
    """Shut ``provider`` down (its last export) at exit: atexit in a normal process, and
    multiprocessing's finalizers in a forked child (which leaves by os._exit, skipping atexit)."""
    import multiprocessing.util

    closed: list[bool] = []

    def close() -> None:  # both hooks run in a process that imported multiprocessing: once only
        if not closed:
            closed.append(True)
            provider.shutdown()

    atexit.register(close)
    multiprocessing.util.Finalize(provider, close, exitpriority=10)


def _otlp(signal: str) -> Any:
    """The OTLP exporter class of ``signal`` (http/protobuf or grpc, by
    OTEL_EXPORTER_OTLP_PROTOCOL), from ``opentelemetry-exporter-otlp``."""
    protocol = os.environ.get(
        f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    kind = "grpc" if protocol.strip() == "grpc" else "http"
    module, name = {
        ("metrics", "http"): ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "OTLPMetricExporter"),
        ("metrics", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc.metric_exporter", "OTLPMetricExporter"),
        ("traces", "http"): ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter"),
        ("traces", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter"),
    }[(signal, kind)]
    import importlib

    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:
        raise RuntimeError(
            f"OTEL_{signal.upper()}_EXPORTER=otlp needs the OTLP exporter ({kind}): pip install "
            f"opentelemetry-exporter-otlp-proto-{kind}, or set the variable to console or none"
        ) from None


def _metric_exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if name == "otlp":
        return _otlp("metrics")()
    raise RuntimeError(f"OTEL_METRICS_EXPORTER={name!r} is not one shardwright knows: use otlp, console or none")


def _span_exporter(name: str) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name == "otlp":
        return _otlp("traces")()
    raise RuntimeError(f"OTEL_TRACES_EXPORTER={name!r} is not one shardwright knows: use otlp, console or none")


_pid_at_import = os.getpid()
_base_resource: Any = None  # the SDK's Resource of this process tree, without process.pid
