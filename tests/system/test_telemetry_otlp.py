"""Run telemetry over OTLP/HTTP on loopback: a real optimize() in a subprocess, configured only
by the standard OTEL_* variables, exports through the SDK's OTLP/HTTP exporters to a receiver
written for the test (tests/support/otlp_receiver.py: protobuf decoded with opentelemetry-proto,
the exporter's own dependency). The spans and counters that arrive describe the dataset on disk."""

from __future__ import annotations

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip(
    "opentelemetry.exporter.otlp.proto.http",
    reason="OTEL_*_EXPORTER=otlp needs opentelemetry-exporter-otlp-proto-http (requirements-test.txt)",
)

from shardwright import StreamingDataset
from support.otel import run_optimize
from support.otlp_receiver import OtlpReceiver


def test_optimize_exports_spans_and_counters_over_otlp_http(tmp_path):
    out = tmp_path / "out"
    with OtlpReceiver() as receiver:
        done, (items, chunks, _nbytes) = run_optimize(
            tmp_path,
            {
                "OTEL_METRICS_EXPORTER": "otlp",
                "OTEL_TRACES_EXPORTER": "otlp",
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,  # the exporters append /v1/metrics, /v1/traces
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_SERVICE_NAME": "otlp-test",
            },
            600,
            50,
            (11, 401),
        )
        assert "could not start" not in done.stderr and "Failed to export" not in done.stderr, done.stderr
        spans = receiver.spans()
        sums = receiver.latest_sums()
        chunk_pids = receiver.pids("shardwright.run.chunks_committed")
        content_types = set(receiver.content_types)

    assert content_types == {"application/x-protobuf"}, "OTLP/HTTP with protobuf bodies"
    length = len(StreamingDataset(str(out)))
    chunk_files = sorted(p for p in out.iterdir() if p.name.endswith(".bin"))
    assert length == items == 600

    # counters: what the run committed, summed over the caller and its 2 worker processes
    assert sums["shardwright.run.items"] == length
    assert sums["shardwright.run.inputs_done"] == 600
    assert sums["shardwright.run.retries"] == 2, "fn's two retries"
    assert sums["shardwright.run.chunks_committed"] == chunks == len(chunk_files)
    assert sums["shardwright.run.bytes_written"] == sum(p.stat().st_size for p in chunk_files)
    assert len(chunk_pids) == 2, "each worker process exported its own series"

    # spans: one run, one attempt, and the commit rounds, all in one trace
    by_name: dict[str, list] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (run,) = by_name["shardwright.optimize"]
    (attempt,) = by_name["shardwright.attempt"]
    commits = by_name["shardwright.commit"]
    assert run.parent_span_id == "" and run.attributes["output"] == str(out)
    assert attempt.parent_span_id == run.span_id and attempt.trace_id == run.trace_id
    assert {c.trace_id for c in commits} == {run.trace_id}
    assert {c.parent_span_id for c in commits} == {attempt.span_id}
    assert {c.pid for c in commits} == chunk_pids, "commit spans come from the worker processes"
    assert sum(c.attributes["chunks"] for c in commits) == chunks
    assert sums["shardwright.run.commit_duration"] == len(commits), "one latency sample per commit round"
