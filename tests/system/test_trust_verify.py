"""`shardwright verify` and shardwright.verify() on real datasets, local and on the S3 server:
bit flips, truncation, a missing chunk and swapped chunks are each found and named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardwright import optimize, verify
from shardwright.errors import CorruptStateError, DatasetNotFoundError, IncompleteDatasetError
from support.datasets import write_dataset


def sample(i: int) -> dict:
    return {"i": i, "text": f"item {i:04d} " * 8}


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.fixture(params=[None, "zstd"])
def local_dataset(tmp_path, request) -> Path:
    out = tmp_path / "ds"
    optimize(
        sample,
        list(range(60)),
        str(out),
        chunk_size=10,
        num_shards=1,
        num_workers=1,
        verbose=False,
        compression=request.param,
    )
    return out


def _chunks(out: Path) -> list[str]:
    return [c["filename"] for c in json.loads((out / "index.json").read_text())["chunks"]]


def _flip(path: Path, offset: int = -20) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_intact_dataset_exits_0(local_dataset):
    report = verify(local_dataset)
    assert report.ok and report.chunks == 6 and report.items == 60 and report.checksums == "all"
    done = _cli("verify", str(local_dataset))
    assert done.returncode == 0, done.stderr
    assert "intact" in done.stdout and "checksums" in done.stdout


def test_bit_flip_truncation_missing_and_swapped_chunks_are_each_named(local_dataset):
    names = _chunks(local_dataset)
    _flip(local_dataset / names[0])
    truncated = local_dataset / names[1]
    truncated.write_bytes(truncated.read_bytes()[:-7])
    (local_dataset / names[2]).unlink()
    a, b = local_dataset / names[3], local_dataset / names[4]
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    report = verify(local_dataset)
    assert not report.ok
    found = {d.filename: d.problem for d in report.damaged}
    assert set(found) == {names[0], names[1], names[2], names[3], names[4]}, found
    assert "checksum" in found[names[0]]
    assert "missing" in found[names[2]]
    done = _cli("verify", str(local_dataset))
    assert done.returncode == 1
    for name in names[:5]:
        assert f"damaged:  {name}: " in done.stdout
    assert names[5] not in done.stdout.replace("DAMAGED", "")


def test_not_a_dataset_or_unfinished_or_usage_error_exits_2(tmp_path):
    with pytest.raises(DatasetNotFoundError):
        verify(tmp_path / "nothing")
    done = _cli("verify", str(tmp_path / "nothing"))
    assert done.returncode == 2 and done.stderr.startswith("shardwright: error:") and "Traceback" not in done.stderr
    (tmp_path / "empty").mkdir()
    assert _cli("verify", str(tmp_path / "empty")).returncode == 2
    assert _cli("verify", str(tmp_path), "--storage-options", "{not json").returncode == 2


def test_damaged_index_is_damage(local_dataset):
    (local_dataset / "index.json").write_text('{"chunks": [')
    report = verify(local_dataset)
    assert [d.filename for d in report.damaged] == ["index.json"]
    assert _cli("verify", str(local_dataset)).returncode == 1


def test_dataset_without_checksums_is_checked_by_size_and_structure_and_says_so(tmp_path):
    out = tmp_path / "old"
    entries = write_dataset(out, [{"i": i} for i in range(30)], chunk_size=10, checksums=False)
    report = verify(out)
    assert report.ok and report.checksums == "none"
    assert "sizes and structure only" in report.summary()
    truncated = out / entries[1].filename
    truncated.write_bytes(truncated.read_bytes()[:-3])
    report = verify(out)
    assert [d.filename for d in report.damaged] == [entries[1].filename]


def test_reader_refuses_a_flipped_local_chunk_on_first_load(tmp_path):
    from shardwright import StreamingDataset

    out = tmp_path / "ds"
    entries = write_dataset(out, [{"i": i, "pad": b"x" * 50} for i in range(20)], chunk_size=10)
    _flip(out / entries[1].filename, offset=-5)  # inside an item's bytes: structure still looks right
    ds = StreamingDataset(out)
    assert ds[0]["i"] == 0
    with pytest.raises(CorruptStateError, match=rf"chunk file .*{entries[1].filename} is damaged.*checksum"):
        ds[15]
    assert StreamingDataset(out, check_checksums=False)[15]["i"] == 15  # what an unchecked read returns


def test_verify_on_s3(s3_url, s3_storage_options, s3_server):
    optimize(
        sample,
        list(range(40)),
        s3_url,
        chunk_size=10,
        num_shards=1,
        num_workers=1,
        verbose=False,
        storage_options=s3_storage_options,
    )
    assert verify(s3_url, storage_options=s3_storage_options).ok
    bucket, prefix = s3_url[len("s3://") :].split("/", 1)
    client = s3_server.client()
    names = [
        c["filename"]
        for c in json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/index.json")["Body"].read())["chunks"]
    ]
    body = bytearray(client.get_object(Bucket=bucket, Key=f"{prefix}/{names[0]}")["Body"].read())
    body[-3] ^= 0x10
    client.put_object(Bucket=bucket, Key=f"{prefix}/{names[0]}", Body=bytes(body))
    client.delete_object(Bucket=bucket, Key=f"{prefix}/{names[1]}")
    c2 = client.get_object(Bucket=bucket, Key=f"{prefix}/{names[2]}")["Body"].read()
    c3 = client.get_object(Bucket=bucket, Key=f"{prefix}/{names[3]}")["Body"].read()
    client.put_object(Bucket=bucket, Key=f"{prefix}/{names[2]}", Body=c3)
    client.put_object(Bucket=bucket, Key=f"{prefix}/{names[3]}", Body=c2)
    report = verify(s3_url, storage_options=s3_storage_options)
    assert sorted(d.filename for d in report.damaged) == sorted(names[:4])
    done = _cli("verify", s3_url, "--storage-options", json.dumps(s3_storage_options))
    assert done.returncode == 1 and done.stdout.count("damaged:  ") == 4
    assert s3_storage_options["aws_secret_access_key"] not in done.stdout + done.stderr


def test_reader_refuses_a_damaged_download(s3_url, s3_storage_options, s3_server, tmp_path):
    from shardwright import StreamingDataset

    optimize(
        sample,
        list(range(20)),
        s3_url,
        chunk_size=10,
        num_shards=1,
        num_workers=1,
        verbose=False,
        storage_options=s3_storage_options,
    )
    bucket, prefix = s3_url[len("s3://") :].split("/", 1)
    client = s3_server.client()
    names = [
        c["filename"]
        for c in json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/index.json")["Body"].read())["chunks"]
    ]
    body = bytearray(client.get_object(Bucket=bucket, Key=f"{prefix}/{names[1]}")["Body"].read())
    body[-3] ^= 0x10
    client.put_object(Bucket=bucket, Key=f"{prefix}/{names[1]}", Body=bytes(body))
    ds = StreamingDataset(s3_url, storage_options=s3_storage_options, cache_dir=str(tmp_path / "cache"), prefetch=False)
    assert ds[0]["i"] == 0
    with pytest.raises(CorruptStateError, match=rf"{names[1]} is damaged.*checksum"):
        ds[12]
    cached = list((tmp_path / "cache").rglob(names[1]))
    assert cached == [], "a damaged download is not kept in the cache"


def test_unfinished_run_is_not_a_dataset(tmp_path):
    out = tmp_path / "ds"
    (out / ".shardwright" / "shards").mkdir(parents=True)
    (out / ".shardwright" / "manifest.json").write_text("{}")
    with pytest.raises((IncompleteDatasetError, DatasetNotFoundError)):
        verify(out)
