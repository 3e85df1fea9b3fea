"""Run telemetry exported from real processes: an optimize() with 2 worker processes and the
standard variables set to the SDK's console exporters. Every process flushes its series at
exit (the workers too), and they add up to what the run committed."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("opentelemetry.sdk")

from support.otel import run_optimize


def documents(text: str) -> list[dict]:
    """The JSON documents the console exporters printed one after another."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while True:
        start = text.find("{", i)
        if start < 0:
            return out
        doc, i = decoder.raw_decode(text, start)
        out.append(doc)


@pytest.mark.parametrize("concurrency", [1, 4])
def test_every_process_exports_and_the_counters_add_up(tmp_path, concurrency):
    done, (items, chunks, nbytes) = run_optimize(
        tmp_path,
        {"OTEL_METRICS_EXPORTER": "console", "OTEL_TRACES_EXPORTER": "console"},
        300,
        25,
        (7, 250),
        concurrency,
    )
    latest: dict[tuple[str, int], int] = {}  # cumulative: each process's last export counts
    spans: dict[str, set] = {}
    traced: list[dict] = []
    for doc in documents(done.stdout):
        if "resource_metrics" in doc:
            for resource in doc["resource_metrics"]:
                pid = resource["resource"]["attributes"]["process.pid"]
                for scope in resource["scope_metrics"]:
                    for metric in scope["metrics"]:
                        points = metric["data"]["data_points"]
                        latest[(metric["name"], pid)] = sum(p.get("value", p.get("count", 0)) for p in points)
        elif "name" in doc and "context" in doc:
            spans.setdefault(doc["name"], set()).add(doc["resource"]["attributes"]["process.pid"])
            traced.append(doc)
    sums: dict[str, int] = {}
    pids_by_metric: dict[str, set] = {}
    for (name, pid), value in latest.items():
        sums[name] = sums.get(name, 0) + value
        pids_by_metric.setdefault(name, set()).add(pid)
    assert sums["shardwright.run.items"] == items == 300
    assert sums["shardwright.run.inputs_done"] == 300
    assert sums["shardwright.run.retries"] == 2, "fn's two retries"
    if concurrency > 1:  # the level the I/O-bound loop reports goes back to 0 at the end
        assert "shardwright.run.calls_in_flight" in sums and sums["shardwright.run.calls_in_flight"] == 0
    assert sums["shardwright.run.bytes_written"] == nbytes
    assert sums["shardwright.run.chunks_committed"] == chunks
    assert len(pids_by_metric["shardwright.run.chunks_committed"]) == 2, "each worker process flushed its own"
    assert len(spans["shardwright.optimize"]) == 1 and len(spans["shardwright.attempt"]) == 1
    assert len(spans["shardwright.commit"]) == 2, "commit spans come from both worker processes"
    (run,) = [d for d in traced if d["name"] == "shardwright.optimize"]
    (attempt,) = [d for d in traced if d["name"] == "shardwright.attempt"]
    commits = [d for d in traced if d["name"] == "shardwright.commit"]
    assert {d["context"]["trace_id"] for d in commits} == {run["context"]["trace_id"]}, "one trace"
    assert {d["parent_id"] for d in commits} == {attempt["context"]["span_id"]}
