"""Run counters in files (shardwright.tally): what each process counted, summed by the reader
the jobs service's /metrics uses; foreign, oversized or linked files are left out."""

from __future__ import annotations

import json
import os

from shardwright import tally, telemetry
from shardwright.tally import CounterFile, RunCounts, read_counters


def test_counts_of_several_processes_add_up_and_bad_files_are_left_out(tmp_path):
    a = CounterFile(str(tmp_path))
    a.add("store_requests", 2, "PUT", "ok")
    a.add("store_requests", 1, "PUT", "transient")
    a.add("retries", 1, "store transient")
    a.add("items", 10)
    a.write_now()
    other = RunCounts({("PUT", "ok"): 3, ("GET", "ok"): 1}, {"fn": 2}, {"GET": 1}, items=5, bytes_written=7)
    (tmp_path / "elsewhere-1.json").write_text(json.dumps(other.to_json()))
    (tmp_path / "bad-2.json").write_text('{"items": -1}')
    (tmp_path / "big-3.json").write_text(" " * (tally.MAX_FILE_BYTES + 1))
    os.symlink(tmp_path / "elsewhere-1.json", tmp_path / "link-4.json")
    got = read_counters(str(tmp_path))
    assert got.store_requests == {("PUT", "ok"): 5, ("PUT", "transient"): 1, ("GET", "ok"): 1}
    assert got.retries == {"store transient": 1, "fn": 2} and got.throttled == {"GET": 1}
    assert (got.items, got.bytes_written) == (15, 7)
    assert read_counters(str(tmp_path / "missing")) == RunCounts()


def test_the_variable_turns_the_counter_file_on_beside_opentelemetry_off(tmp_path, monkeypatch):
    monkeypatch.setenv(tally.COUNTERS_DIR_ENV, str(tmp_path))
    for name in ("OTEL_METRICS_EXPORTER", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    telemetry.reset()
    try:
        counters = telemetry.get()
        assert counters.enabled
        counters.store_request("PUT", "ok")
        counters.retry("store transient")
        counters.bytes_written(100)
        counters.chunks_committed(2, 0.01)
        counters.flush()
        got = read_counters(str(tmp_path))
        assert got.store_requests == {("PUT", "ok"): 1} and got.retries == {"store transient": 1}
        assert (got.bytes_written, got.chunks_committed) == (100, 2)
    finally:
        monkeypatch.delenv(tally.COUNTERS_DIR_ENV)
        telemetry.reset()
    assert not telemetry.get().enabled
