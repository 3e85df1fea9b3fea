"""Trust round 5, parquet read in place: a row group is refused before pyarrow decodes it when
its footer's row count times the least bytes a row takes passes the decoded-bytes limit
(format.limits). An 87 KB file of 20 million int64 zeros became 4 GB of dicts in the reader."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import shardwright as sw  # noqa: E402
from shardwright.errors import CorruptStateError  # noqa: E402
from shardwright.format.limits import reset_limits, set_limits  # noqa: E402

ROWS = 2_000_000


@pytest.fixture
def bomb(tmp_path):
    folder = tmp_path / "pq"
    folder.mkdir()
    table = pa.table({"x": pa.array(np.zeros(ROWS, dtype=np.int64))})
    pq.write_table(table, folder / "bomb.parquet", row_group_size=ROWS, compression="zstd")
    assert (folder / "bomb.parquet").stat().st_size < 100_000
    set_limits(max_decoded_bytes=16 << 20)  # 2M rows: 16 MB as Arrow, ~200 MB as dicts
    yield folder
    reset_limits()


def test_the_reader_refuses_the_row_group_before_decoding(bomb):
    ds = sw.StreamingDataset(str(bomb), item_loader=sw.ParquetLoader())
    assert len(ds) == ROWS  # the footer's count: listing is fine
    tracemalloc.start()
    try:
        with pytest.raises(CorruptStateError) as info:
            ds[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "bomb.parquet row group 0" in str(info.value) and "SHARDWRIGHT_MAX_DECODED_BYTES" in str(info.value)
    assert peak < 16 << 20, peak


def test_a_source_row_group_is_a_bad_row_not_an_allocation(bomb):
    set_limits(max_decoded_bytes=8 << 20)  # under the Arrow table's 16 MB
    rows = sw.sources.parquet(str(bomb))
    first = rows[0]
    assert type(first).__name__ == "BadRow" and "refused before decoding" in first.problem


def test_a_file_within_the_limit_reads(tmp_path):
    pq.write_table(pa.table({"x": list(range(100))}), tmp_path / "ok.parquet")
    ds = sw.StreamingDataset(str(tmp_path), item_loader=sw.ParquetLoader())
    assert [ds[i]["x"] for i in range(100)] == list(range(100))
