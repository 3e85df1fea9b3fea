"""litdata's examples/modality/parquet.py done with ``shardwright`` in place of ``litdata``: a
folder of two parquet files streamed without optimize (``StreamingDataset(folder,
item_loader=ParquetLoader())``, ``ds[0]`` a dict of columns, a batch from
``StreamingDataLoader``), and the same rows as litdata's ParquetLoader gives.

The example's code is not copied: the test makes the same calls on the same kind of data.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
torch = pytest.importorskip("torch")

import shardwright  # noqa: E402


def _folder(root: Path) -> None:
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for part in range(2):
        ids = list(range(part * 4, part * 4 + 4))
        table = pa.table({"id": ids, "x": rng.standard_normal(4).astype(np.float32), "split": ["train"] * 4})
        pq.write_table(table, root / f"part-{part}.parquet")


def test_modality_parquet(tmp_path):
    folder = tmp_path / "source" / "parquet"
    _folder(folder)
    ds = shardwright.StreamingDataset(str(folder), item_loader=shardwright.ParquetLoader())
    row = ds[0]
    assert set(row) == {"id", "x", "split"} and row["id"] == 0 and row["split"] == "train"
    batch = next(iter(shardwright.StreamingDataLoader(ds, batch_size=4, num_workers=0)))
    assert batch["id"].tolist() == [0, 1, 2, 3] and batch["x"].shape == (4,)
    # a second run over the same folder (the example seeds it again) reads its index
    again = shardwright.StreamingDataset(str(folder), item_loader=shardwright.ParquetLoader())
    assert [r["id"] for r in again] == list(range(8))

    litdata = pytest.importorskip("litdata")
    pytest.importorskip("polars")
    from litdata.streaming.item_loader import ParquetLoader

    theirs = litdata.StreamingDataset(str(folder), item_loader=ParquetLoader())
    assert sorted(map(str, theirs)) == sorted(map(str, again))  # same rows (the index is ours: same order too)
    assert [r["id"] for r in theirs] == list(range(8))
