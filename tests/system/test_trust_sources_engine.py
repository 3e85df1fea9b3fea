"""Issue 33 (sources) through the whole engine with real worker processes."""

from __future__ import annotations

import gzip
import json

import pytest

from shardwright import FnError, StreamingDataset, optimize, sources
from shardwright.sources.jsonl import MAX_LINE


def parse(row):
    return {"n": row["n"]}


def ns(output_dir) -> list:
    ds = StreamingDataset(str(output_dir))
    return [ds[i]["n"] for i in range(len(ds))]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_line_over_the_cap_fails_once_and_every_other_row_lands_once(tmp_path, suffix):
    lines = [json.dumps({"n": i}).encode() for i in range(12)]
    lines[4] = b'{"n": 4, "pad": "' + b"a" * (MAX_LINE + 10) + b'"}'
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / "in" / f"data{suffix}"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(data, 1) if suffix.endswith(".gz") else data)
    out = tmp_path / "out"
    result = optimize(parse, sources.jsonl(path), out, chunk_size=3, num_workers=2, on_error="skip", verbose=False)
    assert result.failed == 1 and result.items == 11
    assert ns(out) == [i for i in range(12) if i != 4]
    (failure,) = (out / ".shardwright" / "failed").iterdir()
    assert f"data{suffix}:5" in failure.read_text() and "line limit" in failure.read_text()
    with pytest.raises(FnError, match=rf"data{suffix.replace('.', '[.]')}:5: longer than"):
        optimize(parse, sources.jsonl(path), tmp_path / "raise", chunk_size=3, num_workers=1, verbose=False)


def test_blank_lines_and_a_bom_are_no_failed_inputs(tmp_path):
    (tmp_path / "d.jsonl").write_bytes(b'\xef\xbb\xbf{"n": 0}\n\n{"n": 1}\n   \n{"n": 2}\n\n')
    result = optimize(parse, sources.jsonl(tmp_path / "d.jsonl"), tmp_path / "out", num_workers=1, verbose=False)
    assert result.published and result.failed == 0 and ns(tmp_path / "out") == [0, 1, 2]


def test_a_damaged_parquet_row_group_fails_its_rows_under_on_error_skip(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"n": list(range(300)), "text": [f"row {i:05d} " * 20 for i in range(300)]})
    path = tmp_path / "p.parquet"
    pq.write_table(table, str(path), row_group_size=100)
    start = pq.ParquetFile(str(path)).metadata.row_group(1).column(1).data_page_offset
    with open(path, "r+b") as f:
        f.seek(start + 40)
        f.write(b"\xff" * 200)
    out = tmp_path / "out"
    result = optimize(parse, sources.parquet(path), out, chunk_size=50, num_workers=2, on_error="skip", verbose=False)
    assert result.failed == 100 and ns(out) == list(range(100)) + list(range(200, 300))
    assert "p.parquet row group 1" in next((out / ".shardwright" / "failed").iterdir()).read_text()
