"""OpenTelemetry test setup shared by the telemetry tests.

- :func:`in_memory` (unit layer): the SDK's in-memory metric reader and span exporter handed to
  shardwright.telemetry.configure, and :func:`metric_points` to read the reader back.
- :func:`run_optimize` (system layer): a real optimize() with 2 worker processes in a
  subprocess configured only by the OTEL_* variables given (the test's own OTEL_* removed),
  whose fn fails once on chosen inputs (each then succeeds on its retry).

Import it after ``pytest.importorskip("opentelemetry.sdk")``: it imports the SDK.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shardwright import telemetry

RUN_SCRIPT = """
import sys
from shardwright import optimize

out, items, chunk_size, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
failing = {int(i) for i in sys.argv[5].split(",")}
failed_once = set()

def fn(i):
    if i in failing and i not in failed_once:  # each fails once, then succeeds on its retry
        failed_once.add(i)
        raise RuntimeError("flaky")
    return {"i": i, "text": "x" * (i % 7)}

if __name__ == "__main__":
    result = optimize(fn, list(range(items)), out, chunk_size=chunk_size, num_workers=2, max_retries=1,
                      verbose=False, concurrency=concurrency)
    sys.stderr.write(f"RESULT {result.items} {result.chunks} {result.bytes}\\n")
"""


@contextlib.contextmanager
def in_memory(traces: bool = True) -> Iterator[tuple[InMemoryMetricReader, InMemorySpanExporter]]:
    """This process's telemetry recorded in memory (spans too when ``traces``), reset after."""
    reader, spans = InMemoryMetricReader(), InMemorySpanExporter()
    tracer_provider = None
    if traces:
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    telemetry.configure(MeterProvider(metric_readers=[reader]), tracer_provider)
    try:
        yield reader, spans
    finally:
        telemetry.reset()


def metric_points(reader: InMemoryMetricReader) -> dict[str, list]:
    """Every data point the reader holds, by instrument name."""
    data = reader.get_metrics_data()
    found: dict[str, list] = {}
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def run_optimize(
    tmp_path: Path,
    otel_variables: dict[str, str],
    items: int,
    chunk_size: int,
    failing: tuple[int, ...],
    concurrency: int = 1,
) -> tuple[subprocess.CompletedProcess, tuple[int, int, int]]:
    """Run :data:`RUN_SCRIPT` into ``tmp_path / "out"``; returns the finished process and the
    result's (items, chunks, bytes). Every process flushes its telemetry at exit, so once this
    returns, whatever it exported has been sent."""
    script = tmp_path / "run.py"
    script.write_text(RUN_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(otel_variables)
    args = [str(tmp_path / "out"), str(items), str(chunk_size), str(concurrency), ",".join(map(str, failing))]
    done = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got, chunks, nbytes = (int(v) for v in done.stderr.split("RESULT ")[1].split()[:3])
    return done, (got, chunks, nbytes)
