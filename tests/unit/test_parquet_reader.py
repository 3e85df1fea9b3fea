"""Parquet folders read in place: StreamingDataset(folder, item_loader=ParquetLoader())."""

from __future__ import annotations

import json
import os
import uuid

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("torch")

from shardwright import (  # noqa: E402
    CorruptStateError,
    ParquetLoader,
    StreamingDataLoader,
    StreamingDataset,
    index_parquet_dataset,
)
from shardwright.storage import open_storage  # noqa: E402

FILES, ROWS, GROUP = 4, 230, 50  # row groups of 50, the last of each file short


def _write(folder, files: int = FILES, rows: int = ROWS) -> list[dict]:
    os.makedirs(folder, exist_ok=True)
    every = []
    for f in range(files):
        ids = list(range(f * rows, (f + 1) * rows))
        table = pa.table({"id": ids, "text": [f"row {i}" for i in ids], "score": [i / 7 for i in ids]})
        pq.write_table(table, os.path.join(folder, f"part-{f:02d}.parquet"), row_group_size=GROUP)
        every.extend(table.to_pylist())
    return every


@pytest.fixture
def folder(tmp_path):
    path = str(tmp_path / "pq")
    _write(path)
    return path


def _ids(loader) -> list[int]:
    return [i for batch in loader for i in batch["id"].tolist()]


def test_in_order_rows_and_index_built_on_first_use(folder):
    ds = StreamingDataset(folder, item_loader=ParquetLoader())
    assert len(ds) == FILES * ROWS
    assert ds[0] == {"id": 0, "text": "row 0", "score": 0.0}
    assert ds[-1]["id"] == FILES * ROWS - 1
    assert [row["id"] for row in ds] == list(range(FILES * ROWS))
    # one reader chunk per row group
    assert len(ds.chunks) == FILES * 5 and ds.chunks[4].chunk_size == 30
    with open(os.path.join(folder, "index.json")) as f:
        index = json.load(f)  # litdata's layout: one chunk per file
    assert index["config"]["item_loader"] == "ParquetLoader"
    assert [c["filename"] for c in index["chunks"]] == [f"part-{f:02d}.parquet" for f in range(FILES)]
    assert [c["chunk_size"] for c in index["chunks"]] == [ROWS] * FILES
    assert index["config"]["data_format"] == ["int64", "string", "double"]


def test_indexed_folder_reads_without_item_loader(folder):
    index_parquet_dataset(folder)
    assert StreamingDataset(folder)[5]["id"] == 5  # its index.json says ParquetLoader


def test_columns(folder):
    ds = StreamingDataset(folder, item_loader=ParquetLoader(columns=["id"]))
    assert ds[3] == {"id": 3}
    with pytest.raises(ValueError, match="columns"):
        ParquetLoader(columns="id")


def test_two_worker_loader_in_order_and_shuffled(folder):
    total = FILES * ROWS
    plain = StreamingDataLoader(StreamingDataset(folder, item_loader=ParquetLoader()), batch_size=16, num_workers=2)
    assert sorted(_ids(plain)) == list(range(total))
    shuffled = StreamingDataset(folder, item_loader=ParquetLoader(), shuffle=True, seed=3)
    first = _ids(StreamingDataLoader(shuffled, batch_size=16, num_workers=2))
    assert sorted(first) == list(range(total)) and first != list(range(total))
    again = StreamingDataset(folder, item_loader=ParquetLoader(), shuffle=True, seed=3)
    assert _ids(StreamingDataLoader(again, batch_size=16, num_workers=2)) == first


@pytest.mark.parametrize("workers_after", [2, 1])
def test_mid_epoch_resume_exact_and_elastic(folder, workers_after):
    def loader(workers):
        ds = StreamingDataset(folder, item_loader=ParquetLoader(), shuffle=True, seed=5)
        return StreamingDataLoader(ds, batch_size=10, num_workers=workers)

    whole = _ids(loader(2))
    first = loader(2)
    seen = []
    for n, batch in enumerate(first):
        seen.extend(batch["id"].tolist())
        if n == 30:
            state = first.state_dict()
            break
    resumed = loader(workers_after)
    resumed.load_state_dict(state)
    rest = _ids(resumed)
    assert sorted(seen + rest) == list(range(FILES * ROWS))  # every row exactly once
    if workers_after == 2:
        assert seen + rest == whole  # exact: the uninterrupted order


def test_file_changed_since_index_is_an_error(folder):
    StreamingDataset(folder, item_loader=ParquetLoader())
    pq.write_table(pa.table({"id": list(range(10))}), os.path.join(folder, "part-01.parquet"))
    with pytest.raises(CorruptStateError, match="part-01.parquet.*changed"):
        StreamingDataset(folder, item_loader=ParquetLoader())


def test_index_parquet_dataset_into_cache_dir_and_a_store(tmp_path, folder):
    cache = str(tmp_path / "cache")
    index_parquet_dataset(folder, cache_dir=cache)
    assert os.path.isfile(os.path.join(cache, "index.json"))
    assert not os.path.exists(os.path.join(folder, "index.json"))
    ds = StreamingDataset(folder, item_loader=ParquetLoader(), cache_dir=cache)
    assert ds[ROWS]["id"] == ROWS
    # a folder in a store (memory://): read through ranged reads, the index written there
    name = f"pq-{uuid.uuid4().hex}"
    store = open_storage(f"memory://{name}")
    for entry in sorted(os.listdir(folder)):
        with open(os.path.join(folder, entry), "rb") as f:
            store.write_bytes(entry, f.read())
    index_parquet_dataset(f"memory://{name}")
    assert json.loads(store.read_bytes("index.json"))["config"]["item_loader"] == "ParquetLoader"
    remote = StreamingDataset(f"memory://{name}", item_loader=ParquetLoader())
    assert [row["id"] for row in remote] == list(range(FILES * ROWS))


def test_same_rows_as_litdata(folder):
    litdata = pytest.importorskip("litdata")
    pytest.importorskip("polars")  # litdata's ParquetLoader needs it
    from litdata.streaming.item_loader import ParquetLoader as LitParquetLoader

    litdata.index_parquet_dataset(folder)  # litdata's index, read by us
    theirs = litdata.StreamingDataset(folder, item_loader=LitParquetLoader())
    ours = StreamingDataset(folder, item_loader=LitParquetLoader())  # their loader object, accepted
    assert len(ours) == len(theirs)
    assert [ours[i] for i in range(len(ours))] == [theirs[i] for i in range(len(theirs))]
    assert list(ours) == list(theirs)


HF_READER = """
import json, sys
import shardwright
from shardwright import StreamingDataset
ds = StreamingDataset("hf://datasets/org/name", shuffle=True, seed=1)
train = StreamingDataset("hf://datasets/org/name/data/train-*.parquet")
try:
    StreamingDataset("hf://datasets/org/name", item_loader=shardwright.TokensLoader(block_size=4))
    refused = ""
except ValueError as exc:
    refused = str(exc)
print(json.dumps([sorted(row["id"] for row in ds), len(train), refused]))
"""


def _hub_cache(tmp_path):
    """A dataset org/name in huggingface_hub's cache layout, built on disk: train and test splits."""
    repo = tmp_path / "hub" / "datasets--org--name"
    snapshot = repo / "snapshots" / ("a" * 40)
    (snapshot / "data").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    for f in range(2):
        pq.write_table(pa.table({"id": list(range(f * 5, f * 5 + 5))}), snapshot / "data" / f"train-{f}.parquet")
    pq.write_table(pa.table({"id": [100, 101]}), snapshot / "data" / "test-0.parquet")
    return snapshot, {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}


def _run(code: str, env: dict) -> object:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_hf_dataset_from_huggingface_hub_cache(tmp_path):
    """hf://datasets/org/name through huggingface_hub: a dataset already in its cache (built on
    disk here) is read offline, ParquetLoader by default, its data/ subfolder included."""
    pytest.importorskip("huggingface_hub")
    snapshot, env = _hub_cache(tmp_path)
    everything, train, refused = _run(HF_READER, env)
    assert everything == [*range(10), 100, 101] and train == 10
    assert refused.startswith("Invalid item_loader for hf://datasets")
    assert not (snapshot / "index.json").exists()  # the snapshot is huggingface_hub's: nothing written there


def test_optimize_hf_split(tmp_path):
    pytest.importorskip("huggingface_hub")
    _snapshot, env = _hub_cache(tmp_path)
    out = str(tmp_path / "opt")
    code = (
        "import json, shardwright\n"
        f"shardwright.optimize_hf('org/name', {out!r}, split='train', num_workers=1, verbose=False)\n"
        f"print(json.dumps([row['id'] for row in shardwright.StreamingDataset({out!r})]))"
    )
    assert _run(code, env) == list(range(10))


def test_index_hf_dataset_then_read_with_its_cache_dir(tmp_path):
    pytest.importorskip("huggingface_hub")
    _snapshot, env = _hub_cache(tmp_path)
    index_dir = str(tmp_path / "hf-index")
    code = (
        "import json, shardwright\n"
        f"where = shardwright.index_hf_dataset('hf://datasets/org/name/data', cache_dir={index_dir!r})\n"
        "ds = shardwright.StreamingDataset('hf://datasets/org/name/data', cache_dir=where)\n"
        "print(json.dumps([where, len(ds), ds[0]]))"
    )
    where, length, first = _run(code, env)
    assert where == index_dir and length == 12 and first == {"id": 100}  # data/test-0 sorts first
    with open(os.path.join(index_dir, "index.json")) as f:
        assert [c["filename"] for c in json.load(f)["chunks"]][0] == "test-0.parquet"


def test_page_checksums_checked(tmp_path):
    """A page whose bytes no longer match the CRC its writer stored is a CorruptStateError naming
    the file and row group (check_checksums=False reads the damaged value)."""
    import struct

    folder = tmp_path / "crc"
    folder.mkdir()
    values = [0x1122334455667788 + i for i in range(100)]
    path = folder / "a.parquet"
    pq.write_table(pa.table({"v": values}), path, write_page_checksum=True, compression="NONE", use_dictionary=False)
    data = bytearray(path.read_bytes())
    data[data.find(struct.pack("<q", values[5]))] ^= 1  # same size: the index still matches
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match="a.parquet row group 0"):
        StreamingDataset(str(folder), item_loader=ParquetLoader())[5]
    unchecked = StreamingDataset(str(folder), item_loader=ParquetLoader(), check_checksums=False)
    assert unchecked[5]["v"] != values[5]
