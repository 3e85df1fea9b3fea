"""Run telemetry exported from real processes: an optimize() with 2 worker processes and the
standard variables set to the SDK's console exporters. Every process flushes its series at
exit (the workers too), and they add up to what the run committed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SCRIPT = """
import sys
from shardwright import optimize

failed_once = set()

def fn(i):
    if i in (7, 250) and i not in failed_once:  # each fails once, then succeeds on its retry
        failed_once.add(i)
        raise RuntimeError("flaky")
    return {"i": i}

if __name__ == "__main__":
    result = optimize(fn, list(range(300)), sys.argv[1], chunk_size=25, num_workers=2, max_retries=1, verbose=False,
                      concurrency=int(sys.argv[2]))
    sys.stderr.write(f"RESULT {result.items} {result.chunks} {result.bytes}\\n")
"""


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
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_METRICS_EXPORTER="console", OTEL_TRACES_EXPORTER="console")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out"), str(concurrency)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    items, chunks, nbytes = (int(v) for v in done.stderr.split("RESULT ")[1].split()[:3])
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
