"""A small OTLP/HTTP receiver for the system tests: what an OpenTelemetry Collector's ``otlp``
receiver does over HTTP, and no more.

It listens on a free loopback port and answers ``POST /v1/metrics`` and ``POST /v1/traces``
(protobuf bodies, optionally gzip'ed, as the SDK's ``opentelemetry-exporter-otlp-proto-http``
sends them) with an empty ``Export*ServiceResponse``. Each request is decoded with
``opentelemetry-proto`` (the exporter's own dependency) and kept, so a test reads back exactly
what crossed the wire. No Collector binary is packaged in these registries; this stands in.

    with OtlpReceiver() as receiver:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint  # http://127.0.0.1:PORT
        ...
        receiver.spans()            # [Span(name, trace_id, span_id, parent_span_id, pid, attrs)]
        receiver.latest_sums()      # {metric name: sum over processes of its last export}
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

# the per-signal request and (empty) response messages
_SIGNALS: dict[str, tuple[Any, Any]] = {
    "/v1/metrics": (metrics_service_pb2.ExportMetricsServiceRequest, metrics_service_pb2.ExportMetricsServiceResponse),
    "/v1/traces": (trace_service_pb2.ExportTraceServiceRequest, trace_service_pb2.ExportTraceServiceResponse),
}
_MAX_BODY = 64 << 20  # a test's exports are small; refuse anything absurd rather than allocate it


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "" for a root span
    pid: int
    attributes: dict[str, Any] = field(default_factory=dict)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def _attributes(key_values: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in key_values}


class OtlpReceiver:
    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []  # (path, decoded request), in arrival order
        self.content_types: set[str] = set()
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                kinds = _SIGNALS.get(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                if kinds is None or not 0 <= length <= _MAX_BODY:
                    self.send_error(404 if kinds is None else 413)
                    return
                body = self.rfile.read(length)
                if self.headers.get("Content-Encoding", "").lower() == "gzip":
                    body = gzip.decompress(body)
                request = kinds[0]()
                request.ParseFromString(body)
                reply = kinds[1]().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
                with receiver._arrived:
                    receiver.requests.append((self.path, request))
                    receiver.content_types.add(self.headers.get("Content-Type", ""))
                    receiver._arrived.notify_all()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _of(self, path: str) -> list[Any]:
        with self._lock:
            return [request for p, request in self.requests if p == path]

    def spans(self) -> list[Span]:
        out = []
        for request in self._of("/v1/traces"):
            for resource_spans in request.resource_spans:
                pid = _attributes(resource_spans.resource.attributes).get("process.pid", 0)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        out.append(
                            Span(
                                span.name,
                                span.trace_id.hex(),
                                span.span_id.hex(),
                                span.parent_span_id.hex(),
                                int(pid),
                                _attributes(span.attributes),
                            )
                        )
        return out

    def latest(self) -> dict[tuple[str, int, tuple], float]:
        """Each (metric, process, attribute set)'s value in its process's last export: the
        counters are cumulative, so the last one holds the process's total (a histogram's
        value is its count)."""
        out: dict[tuple[str, int, tuple], float] = {}
        for request in self._of("/v1/metrics"):
            for resource_metrics in request.resource_metrics:
                pid = int(_attributes(resource_metrics.resource.attributes).get("process.pid", 0))
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        kind = metric.WhichOneof("data")
                        for point in getattr(metric, kind).data_points:
                            attrs = tuple(sorted(_attributes(point.attributes).items()))
                            if kind == "histogram":
                                value: float = point.count
                            else:
                                value = point.as_int if point.WhichOneof("value") == "as_int" else point.as_double
                            out[(metric.name, pid, attrs)] = value
        return out

    def latest_sums(self) -> dict[str, float]:
        """Each metric summed over processes and attribute sets (the run's total)."""
        sums: dict[str, float] = {}
        for (name, _pid, _attrs), value in self.latest().items():
            sums[name] = sums.get(name, 0) + value
        return sums

    def pids(self, metric: str) -> set[int]:
        return {pid for (name, pid, _attrs) in self.latest() if name == metric}
