"""Parquet folders in place on a real S3 server (SeaweedFS on loopback): ranged reads of the
footers and row groups, the index written on first use kept in cache_dir, shuffled 2-worker
reads and an exact mid-epoch resume."""

from __future__ import annotations

import io
import json
import os

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("torch")

from shardwright import ParquetLoader, StreamingDataLoader, StreamingDataset  # noqa: E402
from shardwright.storage import open_storage  # noqa: E402

FILES, ROWS = 3, 300


@pytest.fixture(scope="module")
def folder(s3_server):
    bucket = s3_server.create_bucket()
    url = f"s3://{bucket}/pq"
    store = open_storage(url, s3_server.storage_options)
    for f in range(FILES):
        ids = list(range(f * ROWS, (f + 1) * ROWS))
        sink = io.BytesIO()
        pq.write_table(pa.table({"id": ids, "text": [f"row {i}" for i in ids]}), sink, row_group_size=64)
        store.write_bytes(f"part-{f}.parquet", sink.getvalue())
    yield url
    try:
        s3_server.delete_bucket(bucket)
    except Exception:
        pass


def _ids(loader) -> list[int]:
    return [i for batch in loader for i in batch["id"].tolist()]


def test_s3_parquet_in_place(folder, s3_server, tmp_path):
    options = s3_server.storage_options
    cache = str(tmp_path / "index")
    ds = StreamingDataset(folder, item_loader=ParquetLoader(), storage_options=options, cache_dir=cache)
    assert len(ds) == FILES * ROWS and ds[ROWS + 1] == {"id": ROWS + 1, "text": f"row {ROWS + 1}"}
    with open(os.path.join(cache, "index.json")) as f:
        assert [c["filename"] for c in json.load(f)["chunks"]] == [f"part-{f}.parquet" for f in range(FILES)]

    def loader():
        again = StreamingDataset(
            folder, item_loader=ParquetLoader(), storage_options=options, cache_dir=cache, shuffle=True, seed=2
        )
        return StreamingDataLoader(again, batch_size=20, num_workers=2)

    whole = _ids(loader())
    assert sorted(whole) == list(range(FILES * ROWS))
    first, seen = loader(), []
    for n, batch in enumerate(first):
        seen.extend(batch["id"].tolist())
        if n == 12:
            state = first.state_dict()
            break
    resumed = loader()
    resumed.load_state_dict(state)
    assert seen + _ids(resumed) == whole
