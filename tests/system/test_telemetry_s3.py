"""Run telemetry's store series against the real S3 server behind the fault proxy: the
requests, 429s and retries it counts are the ones the proxy injected."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from shardwright import telemetry
from shardwright.storage import open_storage


@pytest.fixture
def metrics():
    reader = InMemoryMetricReader()
    telemetry.configure(MeterProvider(metric_readers=[reader]))
    yield reader
    telemetry.reset()


def series(reader: InMemoryMetricReader, name: str) -> dict[tuple, int]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[tuple, int] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        out[tuple(sorted(point.attributes.items()))] = point.value
    return out


def test_429s_retries_and_requests_are_what_the_proxy_injected(metrics, fault_proxy, s3_bucket):
    storage = open_storage(f"s3://{s3_bucket}/telemetry", fault_proxy.storage_options)
    storage.write_bytes("k", b"bytes")
    fault_proxy.stats.clear()
    fault_proxy.configure(methods={"GET"}, next_faults=["429"] * 3)
    assert storage.read_bytes("k") == b"bytes"
    assert fault_proxy.stats["429"] == 3 and fault_proxy.stats["requests"] == 4
    assert series(metrics, "shardwright.store.throttled") == {(("verb", "GET"),): 3}
    assert series(metrics, "shardwright.run.retries") == {(("cause", "store transient"),): 3}
    requests = series(metrics, "shardwright.store.requests")
    assert requests[(("outcome", "transient"), ("verb", "GET"))] == 3
    assert requests[(("outcome", "ok"), ("verb", "GET"))] == 1
    assert requests[(("outcome", "ok"), ("verb", "PUT"))] >= 1
