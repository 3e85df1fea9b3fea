"""Issue 33 (sources): JSONL lines over the cap, BOMs, blank lines and empty files; damaged
parquet row groups; what sources.files lists (FIFOs, links out) and reads (the listed file)."""

from __future__ import annotations

import gzip
import json
import logging

import pytest

from shardwright import sources
from shardwright.sources import BadRow
from shardwright.sources.jsonl import MAX_LINE


def _long_line(n: int) -> bytes:
    return b'{"n": %d, "pad": "' % n + b"a" * (MAX_LINE + 10) + b'"}'


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_line_over_the_cap_is_one_bad_row_and_every_other_row_is_itself(tmp_path, suffix):
    lines = [json.dumps({"n": i}).encode() for i in range(6)]
    lines[2] = _long_line(2)
    data = b"\n".join(lines) + b"\n"
    path = tmp_path / f"data{suffix}"
    path.write_bytes(gzip.compress(data, 1) if suffix.endswith(".gz") else data)
    source = sources.jsonl(path)
    assert len(source) == 6
    rows = list(source)
    bad = rows[2]
    assert isinstance(bad, BadRow) and bad.where.endswith(f"data{suffix}:3") and "line limit" in bad.problem
    assert [r for i, r in enumerate(rows) if i != 2] == [{"n": i} for i in range(6) if i != 2]


def test_a_last_line_over_the_cap_without_newline(tmp_path):
    (tmp_path / "d.jsonl").write_bytes(b'{"n": 0}\n' + _long_line(1))
    rows = list(sources.jsonl(tmp_path / "d.jsonl"))
    assert rows[0] == {"n": 0} and isinstance(rows[1], BadRow) and len(rows) == 2


def test_bom_and_blank_lines_are_not_failed_inputs(tmp_path):
    (tmp_path / "d.jsonl").write_bytes(b'\xef\xbb\xbf{"n": 0}\n\n  \r\n{"n": 1}\n')
    rows = list(sources.jsonl(tmp_path / "d.jsonl"))
    assert rows[0] == {"n": 0} and rows[3] == {"n": 1}
    assert all(isinstance(r, BadRow) and r.blank for r in rows[1:3])


def test_an_empty_file_is_named_in_a_warning(tmp_path, caplog):
    (tmp_path / "a.jsonl").write_bytes(b'{"n": 0}\n')
    (tmp_path / "b.jsonl").write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="shardwright"):
        assert len(sources.jsonl(tmp_path)) == 1
    assert "b.jsonl" in caplog.text and "no lines" in caplog.text


def test_a_damaged_parquet_row_group_is_bad_rows_naming_file_and_group(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"id": list(range(300)), "text": [f"row {i:05d} " * 20 for i in range(300)]})
    path = tmp_path / "p.parquet"
    pq.write_table(table, str(path), row_group_size=100, compression="snappy")
    meta = pq.ParquetFile(str(path)).metadata
    column = meta.row_group(1).column(1)
    start = column.data_page_offset
    with open(path, "r+b") as f:  # garble the data page of row group 1's text column
        f.seek(start + 40)
        f.write(b"\xff" * 200)
    source = sources.parquet(path)
    assert source[0]["id"] == 0 and source[299]["id"] == 299
    bad = source[150]
    assert isinstance(bad, BadRow) and "p.parquet row group 1" in bad.where
    assert "replace the file" in str(bad.error())
