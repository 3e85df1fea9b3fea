"""Run telemetry (shardwright.telemetry) with the OpenTelemetry SDK's in-memory reader and span
exporter: the driver's run and attempt spans, the committer's commit spans and latency, the
tracker's counters; and the rule that keeps it off (and opentelemetry unimported) by default."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest

pytest.importorskip(
    "opentelemetry.sdk"
)  # the telemetry extra: the unit layer also runs with the core dependencies only

from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from shardwright import telemetry
from shardwright.engine.committer import ChunkCommitter
from shardwright.engine.driver import drive
from shardwright.engine.executors import ExecutorCall, OpenedRun, Placement, ShareTotals
from shardwright.engine.inputs import run_inputs
from shardwright.engine.messages import Committed, Progress
from shardwright.engine.options import OptimizeOptions
from shardwright.engine.planning import NodeIdentity
from shardwright.engine.progress import Tracker
from shardwright.format import ItemEncoder
from shardwright.protocol.claim import claim_format
from shardwright.protocol.commit import PendingChunk, RoundSettings
from shardwright.protocol.records import load_progress
from shardwright.storage import MemoryStorage
from shardwright.storage.cloud import is_throttling
from support.otel import in_memory, metric_points


def value(v: object) -> dict:
    return {"v": v}


@pytest.fixture
def otel() -> Iterator[tuple[InMemoryMetricReader, InMemorySpanExporter]]:
    with in_memory() as recorded:
        yield recorded


def points(reader: InMemoryMetricReader) -> dict[str, list]:
    return metric_points(reader)


def total(reader: InMemoryMetricReader, name: str) -> int:
    return sum(p.value for p in points(reader).get(name, []))


class CommittingExecutor:
    """Runs every shard in this process through a real ChunkCommitter and Tracker: one item
    and one chunk per input."""

    @contextlib.contextmanager
    def place(self, call: ExecutorCall) -> Iterator[Placement]:
        yield Placement(NodeIdentity(0, 1, "a test"), 1)

    def run_shards(self, run: OpenedRun) -> ShareTotals:
        storage, manifest, values = run.storage, run.manifest, run.call.inputs.values
        encoder = ItemEncoder()
        encoder.encode(value(values[0]), 0)
        claim_format(storage, manifest.run_id, list(encoder.data_format or []), encoder.data_spec, 0)
        progress = load_progress(storage, manifest.shard_bounds(), manifest.run_id, repair=True)
        tracker = Tracker(progress, verbose=False)
        committer = ChunkCommitter(
            storage,
            RoundSettings(manifest.run_id, manifest.generation, None, True),
            lambda record, key: tracker.on_message(Committed(0, record, key)),
        )
        for p in list(progress.values()):
            for k in range(p.end - p.next_input):
                position = p.next_input + k
                item = encoder.encode(value(values[position]), position)
                job = PendingChunk(p.shard, p.next_seq + k, [item], position, position + 1, 0, position + 1 == p.end)
                committer.submit(job)
                tracker.on_message(Progress(0, 1))
        committer.close()
        return ShareTotals(items=tracker.items, chunks=tracker.chunks, bytes=tracker.bytes)


def test_a_run_has_its_spans_and_counters(otel):
    reader, spans = otel
    name = f"telemetry-{uuid.uuid4().hex[:8]}"
    options = OptimizeOptions.validate(value, chunk_size=1, num_shards=2, verbose=False)
    call = ExecutorCall(value, run_inputs(list(range(6))), f"memory://{name}", options, time.monotonic())
    try:
        result = drive(call, CommittingExecutor())
    finally:
        MemoryStorage.drop(name)
    assert result.published and result.items == 6
    assert total(reader, "shardwright.run.items") == 6
    assert total(reader, "shardwright.run.inputs_done") == 6
    assert total(reader, "shardwright.run.chunks_committed") == 6
    assert total(reader, "shardwright.run.bytes_written") == result.bytes > 0
    (latency,) = points(reader)["shardwright.run.commit_duration"]
    assert latency.count >= 1 and latency.sum > 0
    finished = spans.get_finished_spans()
    by_name: dict[str, list] = {}
    for span in finished:
        by_name.setdefault(span.name, []).append(span)
    (run,) = by_name["shardwright.optimize"]
    (attempt,) = by_name["shardwright.attempt"]
    assert attempt.parent is not None and attempt.parent.span_id == run.context.span_id
    assert attempt.attributes is not None and attempt.attributes["mode"] == "create"
    commits = by_name["shardwright.commit"]
    assert commits and sum(s.attributes["chunks"] for s in commits) == 6


def test_counters_by_cause_and_in_flight(otel):
    reader, _spans = otel
    counters = telemetry.get()
    counters.retry("fn")
    counters.retry("store transient")
    counters.retry("store transient")
    counters.throttled("PUT")
    counters.calls_in_flight(3)
    counters.calls_in_flight(-1)
    counters.store_request("PUT", "ok")
    got = points(reader)
    causes = {p.attributes["cause"]: p.value for p in got["shardwright.run.retries"]}
    assert causes == {"fn": 1, "store transient": 2}
    assert total(reader, "shardwright.store.throttled") == 1
    assert total(reader, "shardwright.run.calls_in_flight") == 2
    (request,) = got["shardwright.store.requests"]
    assert dict(request.attributes) == {"verb": "PUT", "outcome": "ok"}


def test_throttling_is_read_from_what_the_sdks_raise():
    class Azure(Exception):
        status_code = 429

    class Boto(Exception):
        response = {"Error": {"Code": "SlowDown"}, "ResponseMetadata": {"HTTPStatusCode": 503}}

    assert is_throttling(Azure()) and is_throttling(Boto())
    assert not is_throttling(ValueError("429"))


@pytest.mark.parametrize(
    ("variables", "on"),
    [
        ({}, False),
        ({"OTEL_METRICS_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_METRICS_EXPORTER": "none", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_METRICS_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_the_standard_variables_turn_it_on(monkeypatch, variables, on):
    for name in ("OTEL_METRICS_EXPORTER", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    for name, setting in variables.items():
        monkeypatch.setenv(name, setting)
    assert telemetry.enabled_by_environment() is on


def test_off_by_default_imports_no_opentelemetry():
    code = (
        "import sys, os\n"
        "for k in [k for k in os.environ if k.startswith('OTEL_')]: del os.environ[k]\n"
        "from shardwright import telemetry\n"
        "from shardwright.engine import committer, driver, progress\n"
        "t = telemetry.get(); t.items(1); t.batch(0, 0, 4, 0.1)\n"
        "with t.span('x'): pass\n"
        "assert not t.enabled\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], 'imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_run_span_begins_with_its_block_and_holds_what_opens_after_it(otel):
    """The SDK may still be starting when optimize() begins: the run's span is created late,
    from the start time its block recorded, and spans opened after it are its children."""
    _reader, spans = otel
    before = time.time_ns()
    with telemetry.RunSpan("run", output="here") as run:
        opened_at = time.time_ns()
        time.sleep(0.01)  # work before the span is created (the output being opened)
        with run.open().span("inner"):
            pass
    (inner, outer) = spans.get_finished_spans()
    assert outer.name == "run" and outer.attributes["output"] == "here"
    assert before <= outer.start_time <= opened_at, "it starts when the block did, not when it was created"
    assert inner.parent is not None and inner.parent.span_id == outer.context.span_id


def test_a_run_that_ends_before_its_span_is_opened_still_has_it_with_the_error(otel):
    _reader, spans = otel
    with pytest.raises(ValueError, match="bad input"), telemetry.RunSpan("run"):
        raise ValueError("bad input")
    (span,) = spans.get_finished_spans()
    assert span.name == "run" and not span.status.is_ok
    assert [e.name for e in span.events] == ["exception"]


def test_the_sdk_started_in_the_background_is_the_one_used_and_forks_wait_for_it():
    """start_in_background() starts the SDK on a thread; get() and a fork both wait for it, so
    a child never inherits a half-done import (it builds its own, with its own pid)."""
    code = (
        "import os, sys\n"
        "os.environ['OTEL_TRACES_EXPORTER'] = 'console'\n"
        "from shardwright import telemetry\n"
        "telemetry.start_in_background()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    assert 'opentelemetry.sdk.trace' in sys.modules, 'the fork waited for the start'\n"
        "    assert telemetry.get().enabled\n"
        "    os._exit(0)\n"
        "assert os.waitpid(pid, 0)[1] == 0\n"
        "assert telemetry.get().enabled and telemetry.get() is telemetry.get()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, stdout=subprocess.DEVNULL)
