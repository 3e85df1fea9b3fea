"""Issue 33 (sources): JSONL lines over the cap, BOMs, blank lines and empty files; damaged
parquet row groups; what sources.files lists (FIFOs, links out) and reads (the listed file)."""

from __future__ import annotations

import gzip
import json
import logging
import os
import pickle

import pytest

from shardwright import sources
from shardwright.errors import InputsError
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


def test_files_skips_a_fifo_naming_it(tmp_path, caplog):
    (tmp_path / "a.bin").write_bytes(b"a")
    os.mkfifo(tmp_path / "pipe")
    with caplog.at_level(logging.WARNING, logger="shardwright"):
        listed = sources.files(tmp_path)
    assert [ref.path for ref in listed] == [str(tmp_path / "a.bin")]
    assert "pipe" in caplog.text and "not a regular file" in caplog.text


def test_files_refuses_a_link_out_of_the_directory_and_keeps_one_inside(tmp_path):
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"KEY")
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.bin").write_bytes(b"a")
    (root / "b.bin").symlink_to(root / "a.bin")
    assert [ref.read() for ref in sources.files(root)] == [b"a", b"a"]
    (root / "c.bin").symlink_to(secret)
    with pytest.raises(InputsError, match=r"c\.bin is a symbolic link to .*secret\.key, out of"):
        sources.files(root)


@pytest.mark.parametrize("how", ["link", "another file"])
def test_a_listed_file_swapped_after_the_listing_is_never_read(tmp_path, how):
    secret = tmp_path / "secret.key"
    secret.write_bytes(b"KEY")
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.bin").write_bytes(b"abc")
    ref = pickle.loads(pickle.dumps(sources.files(root)))[0]  # as a worker gets it
    assert ref.read() == b"abc"
    os.unlink(root / "a.bin")
    if how == "link":
        (root / "a.bin").symlink_to(secret)
    else:
        os.link(secret, root / "a.bin")  # same size, another inode
    with pytest.raises(InputsError, match=r"a\.bin (was replaced by a symbolic link|is no longer the file)"):
        ref.read()
    with pytest.raises(InputsError):
        ref.open()


def test_service_reads_clouds_with_the_jobs_credentials_only():
    pytest.importorskip("pydantic")  # the service extra
    from shardwright.errors import UsageError
    from shardwright.service.input_sources import job_read_options

    google = pytest.importorskip("google.auth.credentials")
    assert isinstance(job_read_options("gs://b/x", None)["credentials"], google.AnonymousCredentials)
    assert isinstance(job_read_options("gs://b/x", {"project": "p"})["credentials"], google.AnonymousCredentials)
    with pytest.raises(UsageError, match=r"az://c/x is read with the job's own credentials.*sas_token"):
        job_read_options("az://c/x", None)
    with pytest.raises(UsageError):
        job_read_options("az://c/x", {"account_url": "https://a.blob.core.windows.net"})
    assert job_read_options("az://c/x", {"sas_token": "t"}) == {"sas_token": "t"}
    assert job_read_options("/data/x", None) is None
