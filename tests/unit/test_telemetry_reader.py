"""Reader telemetry with the OpenTelemetry SDK's in-memory reader: a loader's batches, items,
time waiting, chunk bytes, downloads and cache hits, per rank and worker."""

from __future__ import annotations

import uuid

import pytest

pytest.importorskip(
    "opentelemetry.sdk"
)  # the telemetry extra: the unit layer also runs with the core dependencies only

from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from shardwright import StreamingDataset
from shardwright.reader.loader import StreamingDataLoader
from shardwright.storage import MemoryStorage, open_storage
from support.datasets import write_dataset
from support.otel import in_memory, metric_points


@pytest.fixture
def reader():
    with in_memory(traces=False) as (metrics, _spans):
        yield metrics


def points(metrics: InMemoryMetricReader) -> dict[str, list]:
    return metric_points(metrics)


def total(got: dict[str, list], name: str) -> int:
    return sum(p.value for p in got.get(name, []))


@pytest.fixture
def remote(tmp_path):
    """A 10-item dataset of 3 chunks in the memory store (a remote one: read through the cache)."""
    write_dataset(tmp_path / "data", [{"i": i} for i in range(10)], chunk_size=4)
    name = f"reader-metrics-{uuid.uuid4().hex[:8]}"
    store = open_storage(f"memory://{name}")
    for path in (tmp_path / "data").iterdir():
        store.write_bytes(path.name, path.read_bytes())
    yield f"memory://{name}"
    MemoryStorage.drop(name)


def test_a_loader_counts_batches_items_waits_downloads_and_hits(reader, remote, tmp_path):
    for _epoch in range(2):  # the second reads every chunk from the cache
        dataset = StreamingDataset(remote, cache_dir=str(tmp_path / "cache"))
        batches = list(StreamingDataLoader(dataset, batch_size=4))
        assert sum(len(b["i"]) for b in batches) == 10
    got = points(reader)
    assert total(got, "shardwright.reader.batches") == 6
    assert total(got, "shardwright.reader.items") == 20
    assert total(got, "shardwright.reader.chunk_downloads") == 3
    assert total(got, "shardwright.reader.cache_hits") == 3
    assert total(got, "shardwright.reader.bytes") > 0
    assert total(got, "shardwright.reader.download_bytes") > 0
    (wait,) = got["shardwright.reader.wait_duration"]
    assert wait.count == 6 and dict(wait.attributes) == {"rank": 0, "worker": 0}
    assert wait.explicit_bounds[0] < 0.001  # buckets fine enough for p50/p95/p99 of fast batches
