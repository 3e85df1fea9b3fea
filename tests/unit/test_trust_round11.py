"""Trust round 11 (docs/trust-round11.md): what the round's probes found, each with the
test that fails without its fix."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import struct
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")  # the core-only venvs (Python 3.10, 3.12) have none
pq = pytest.importorskip("pyarrow.parquet")

from shardwright import StreamingDataset, optimize, sources  # noqa: E402
from shardwright.errors import CorruptStateError, FnError, RunMismatchError  # noqa: E402


def _zigzag_varint(n: int) -> bytes:
    z, out = (n << 1) ^ (n >> 63), bytearray()
    while True:
        low, z = z & 0x7F, z >> 7
        if not z:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def _footer_claiming(path: Path, rows: int, claimed: int) -> None:
    """A parquet file of one row group of ``rows`` rows whose footer says ``claimed`` (every
    count of ``rows`` in the thrift footer rewritten: the file's, the group's, each column's)."""
    table = pa.table({"i": pa.array(range(rows), pa.int64()), "s": pa.array([f"row{k}" for k in range(rows)])})
    pq.write_table(table, path, row_group_size=rows, write_statistics=False)
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack("<I", data[-8:-4])
    start = len(data) - 8 - length
    old, new = _zigzag_varint(rows), _zigzag_varint(claimed)
    assert len(old) == len(new)
    footer = bytes(data[start:-8]).replace(old, new)
    data[start:-8] = footer
    path.write_bytes(bytes(data))
    meta = pq.ParquetFile(path).metadata
    assert (meta.num_rows, meta.row_group(0).num_rows) == (claimed, claimed)
    assert pq.ParquetFile(path).read_row_group(0).num_rows == rows  # pyarrow decodes what is there


def test_a_parquet_row_group_holding_fewer_rows_than_its_footer_says_fails_its_rows_named(tmp_path):
    """Round 11 row 34: the footer claimed 210 rows of a 200-row group; the rows past 200
    raised a raw IndexError in the worker, which stopped the run although on_error='skip'."""
    data = tmp_path / "data"
    data.mkdir()
    _footer_claiming(data / "a.parquet", 200, 210)
    out = tmp_path / "out"
    result = optimize(
        lambda row: {"i": row["i"]},
        sources.parquet(str(data)),
        str(out),
        chunk_size=100,
        num_workers=1,
        on_error="skip",
        verbose=False,
    )
    assert result.failed == 210
    record = json.loads(next((out / ".shardwright" / "failed").glob("*.json")).read_text())
    assert "decoded to 200 rows where the file's footer says 210" in json.dumps(record)


def test_the_parquet_reader_refuses_a_row_group_with_fewer_rows_than_its_footer(tmp_path):
    _footer_claiming(tmp_path / "a.parquet", 1000, 1100)
    source = sources.parquet(str(tmp_path / "a.parquet"))
    with pytest.raises(CorruptStateError, match="row group 0 decoded to 1,000 rows where the file's footer says 1,100"):
        source.read_row_group(0, 0)


def _stop_at(row: dict) -> dict:
    if row["x"] == 55 and os.environ.get("T11_STOP") == "1":
        raise RuntimeError("stopped here")
    return {"x": row["x"]}


def test_a_resume_over_hf_arrow_files_replaced_in_place_is_refused(tmp_path, monkeypatch):
    """Round 11 row 37: load_from_disk takes the fingerprint from state.json, so a dataset
    directory whose arrow file was replaced (state.json kept) had the same identity, and the
    resume published rows 0-54 of the old data with rows 55-99 of the new, without a word."""
    datasets = pytest.importorskip("datasets")
    for name, base in (("A", 0), ("B", 1000)):
        datasets.Dataset.from_dict({"x": list(range(base, base + 100))}).save_to_disk(str(tmp_path / name))
    out = str(tmp_path / "out")
    call = dict(num_workers=1, chunk_size=10, num_shards=1, verbose=False)
    monkeypatch.setenv("T11_STOP", "1")
    with pytest.raises(FnError):
        optimize(_stop_at, sources.hf(datasets.load_from_disk(str(tmp_path / "A"))), out, **call)
    arrow = "data-00000-of-00001.arrow"
    shutil.copyfile(tmp_path / "B" / arrow, tmp_path / "A" / arrow)
    monkeypatch.setenv("T11_STOP", "0")
    replaced = datasets.load_from_disk(str(tmp_path / "A"))
    assert replaced[0]["x"] == 1000
    with pytest.raises(RunMismatchError, match="changed since the interrupted run"):
        optimize(_stop_at, sources.hf(replaced), out, **call)


def test_an_unchanged_hf_dataset_still_resumes(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"x": list(range(100))}).save_to_disk(str(tmp_path / "A"))
    out = str(tmp_path / "out")
    call = dict(num_workers=1, chunk_size=10, num_shards=1, verbose=False)
    monkeypatch.setenv("T11_STOP", "1")
    with pytest.raises(FnError):
        optimize(_stop_at, sources.hf(datasets.load_from_disk(str(tmp_path / "A"))), out, **call)
    monkeypatch.setenv("T11_STOP", "0")
    result = optimize(_stop_at, sources.hf(datasets.load_from_disk(str(tmp_path / "A"))), out, **call)
    assert result.resumed
    assert [x["x"] for x in StreamingDataset(out)] == list(range(100))


class _CountedGroups(tuple):
    """A file's row-group sizes that count how often one is looked up."""

    lookups = 0

    def __getitem__(self, index):  # type: ignore[override]
        type(self).lookups += 1
        return super().__getitem__(index)


def test_reading_a_parquet_file_of_many_row_groups_looks_each_group_up_a_bounded_number_of_times(tmp_path):
    """Round 11 row 36: each block's row group was found by scanning the groups before it, so
    reading a file of n one-row groups took n²/2 steps (20,000 groups, a 4 MB file: 20 s; a
    million: hours). Counted, not timed: the lookups per row stay bounded."""
    n = 3000
    pq.write_table(pa.table({"i": pa.array(range(n), pa.int64())}), tmp_path / "g.parquet", row_group_size=1)
    source = sources.parquet(str(tmp_path / "g.parquet"))
    assert source.row_group_rows == [(1,) * n]
    source._row_groups = [_CountedGroups(source._row_groups[0])]  # the count is the point
    assert [row["i"] for row in source] == list(range(n))
    assert _CountedGroups.lookups < 10 * n, f"{_CountedGroups.lookups:,} lookups of {n:,} row groups"


def test_a_jsonl_line_at_the_cap_ended_by_crlf_is_read_like_one_ended_by_lf(tmp_path, monkeypatch):
    """Round 11 row 39: a line of exactly the cap's bytes was read when it ended with LF and
    refused as "longer than the line limit" when it ended with CRLF (its CR counted). The cap
    is lowered here so that the line is small; the code path is the one of 64 MB."""
    jsonl_module = importlib.import_module("shardwright.sources.jsonl")  # the package exports a function of that name

    cap = 64
    monkeypatch.setattr(jsonl_module, "MAX_LINE", cap)

    def line(k: int, end: bytes) -> bytes:
        head = b'{"k":%d,"s":"' % k
        return head + b"a" * (cap - len(head) - 2) + b'"}' + end

    path = tmp_path / "a.jsonl"
    path.write_bytes(line(0, b"\n") + line(1, b"\r\n") + line(2, b"a\r\n") + b'{"k":3}\r\n' + line(4, b"ab"))
    rows = list(sources.jsonl(str(path)))
    assert [row["k"] for row in rows[:2]] == [0, 1]
    assert "longer than" in rows[2].problem and rows[3] == {"k": 3} and "longer than" in rows[4].problem


def test_a_skipped_unreadable_row_is_not_told_to_pass_on_error_skip(tmp_path):
    """Round 11 row 40: the failure record of a JSONL line over the cap, written by a run with
    on_error='skip', ended "fix or remove that line (or pass on_error='skip')"."""
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"k":0}\n{"k":\n{"k":2}\n')
    for concurrency in (1, 2):
        out = tmp_path / f"out{concurrency}"
        result = optimize(
            lambda row: row,
            sources.jsonl(str(path)),
            str(out),
            num_workers=1,
            on_error="skip",
            concurrency=concurrency,
            verbose=False,
        )
        assert result.failed == 1
        record = json.dumps(json.loads(next((out / ".shardwright" / "failed").glob("*.json")).read_text()))
        assert "a.jsonl:2: not valid JSON" in record and "fix or remove that line" in record
        assert "pass on_error" not in record, record
    with pytest.raises(FnError, match=r"fix or remove that line \(or pass on_error='skip'\)"):
        optimize(lambda row: row, sources.jsonl(str(path)), str(tmp_path / "raise"), num_workers=1, verbose=False)
