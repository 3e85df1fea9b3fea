"""Parquet folders in place on a real S3 server (SeaweedFS on loopback): footers read with
ranged reads, the index written on first use kept in cache_dir, each file downloaded whole
into the chunk cache once and reused by every later reader (the same inode: never fetched
again), a damaged cached copy fetched again, shuffled 2-worker reads, two ranks' disjoint
shares and an exact mid-epoch resume."""

from __future__ import annotations

import glob
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
        table = pa.table({"id": ids, "text": [f"row {i}" for i in ids]})
        pq.write_table(table, sink, row_group_size=64, write_page_checksum=True)
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


def _cached_files(cache: str) -> dict[str, int]:
    """The cached copies of the parquet files under the cache root, by name, with their inodes."""
    found = glob.glob(os.path.join(cache, "*", "part-*.parquet"))
    return {os.path.basename(p): os.stat(p).st_ino for p in found}


def test_s3_parquet_files_cached_once_and_reused(folder, s3_server, tmp_path):
    options = s3_server.storage_options
    cache = str(tmp_path / "cache")

    def rows(**kwargs) -> list[int]:
        ds = StreamingDataset(folder, item_loader=ParquetLoader(), storage_options=options, cache_dir=cache, **kwargs)
        return [row["id"] for row in ds]

    assert _cached_files(cache) == {}
    assert rows() == list(range(FILES * ROWS))
    first = _cached_files(cache)
    assert sorted(first) == [f"part-{f}.parquet" for f in range(FILES)]
    store = open_storage(folder, options)
    for name in first:  # the copies are the store's bytes
        with open(glob.glob(os.path.join(cache, "*", name))[0], "rb") as f:
            assert f.read() == store.read_bytes(name)
    # a new reader (shuffled, 2 workers) reads the copies: none downloaded again (same inodes)
    loader = StreamingDataLoader(
        StreamingDataset(
            folder, item_loader=ParquetLoader(), storage_options=options, cache_dir=cache, shuffle=True, seed=4
        ),
        batch_size=32,
        num_workers=2,
    )
    assert sorted(_ids(loader)) == list(range(FILES * ROWS))
    assert _cached_files(cache) == first

    # a cached copy damaged in place (same size, one byte of a page flipped): its page CRC fails,
    # the copy is deleted and fetched again, and the rows come out right
    damaged = glob.glob(os.path.join(cache, "*", "part-1.parquet"))[0]
    data = bytearray(open(damaged, "rb").read())
    at = data.find(b"row 3")
    data[at] ^= 0x01
    with open(damaged, "wb") as f:
        f.write(bytes(data))
    assert rows() == list(range(FILES * ROWS))
    again = _cached_files(cache)
    assert again["part-1.parquet"] != first["part-1.parquet"] and again["part-0.parquet"] == first["part-0.parquet"]


def test_s3_parquet_ranks_take_disjoint_shares(folder, s3_server, tmp_path, monkeypatch):
    options = s3_server.storage_options
    shares = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        ds = StreamingDataset(
            folder, item_loader=ParquetLoader(), storage_options=options, cache_dir=str(tmp_path), shuffle=True
        )
        shares.append(_ids(StreamingDataLoader(ds, batch_size=16, num_workers=2)))
    assert shares[0] and shares[1] and not set(shares[0]) & set(shares[1])
    assert sorted(shares[0] + shares[1]) == list(range(FILES * ROWS))
