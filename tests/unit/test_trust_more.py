"""Issue 33 (trust round 4, gaps): sources.jsonl and sources.parquet read the listed local
file only (never a link or another file put in its place after the listing)."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from shardwright import sources
from shardwright.errors import InputsError


def _swap(path, secret, how: str) -> None:
    os.unlink(path)
    if how == "link":
        path.symlink_to(secret)
    else:
        os.link(secret, path)  # another inode


@pytest.mark.parametrize("how", ["link", "another file"])
def test_a_jsonl_file_swapped_after_the_listing_is_never_read(tmp_path, how):
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.jsonl").write_text('{"n": 0}\n{"n": 1}\n')
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"k": 7}\n{"k": 8}\n')  # the same size
    source = sources.jsonl(root)
    assert len(source) == 2 and source[0] == {"n": 0}
    worker = pickle.loads(pickle.dumps(source))  # as a worker gets it
    _swap(root / "a.jsonl", secret, how)
    with pytest.raises(InputsError, match=r"sources\.jsonl: .*a\.jsonl (was replaced by a symbolic link|is no longer)"):
        worker[1]
    fresh = sources.jsonl(root / "a.jsonl")  # listed as it is now: read as listed
    assert fresh[0] == {"k": 7} if how == "another file" else True


@pytest.mark.parametrize("how", ["link", "another file"])
def test_a_parquet_file_swapped_after_the_listing_is_never_read(tmp_path, how):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    root = tmp_path / "in"
    root.mkdir()
    pq.write_table(pa.table({"n": [0, 1, 2]}), root / "a.parquet")
    secret = tmp_path / "secret.parquet"
    pq.write_table(pa.table({"n": [7, 8, 9]}), secret)
    source = sources.parquet(root)
    assert len(source) == 3
    worker = pickle.loads(pickle.dumps(source))
    _swap(root / "a.parquet", secret, how)
    with pytest.raises(
        InputsError, match=r"sources\.parquet: .*a\.parquet (was replaced by a symbolic link|is no longer)"
    ):
        worker[0]
    with pytest.raises(InputsError):
        worker.read_row_group(0, 0)


def test_a_jsonl_file_listed_as_a_link_is_read_and_checked(tmp_path):
    (tmp_path / "real.jsonl").write_text('{"n": 0}\n')
    (tmp_path / "a.jsonl").symlink_to(tmp_path / "real.jsonl")
    source = sources.jsonl(tmp_path / "a.jsonl")
    assert source[0] == {"n": 0}
    (tmp_path / "other.jsonl").write_text('{"n": 9}\n')
    os.unlink(tmp_path / "a.jsonl")
    (tmp_path / "a.jsonl").symlink_to(tmp_path / "other.jsonl")  # retargeted: another inode
    with pytest.raises(InputsError, match="is no longer the file that was listed"):
        pickle.loads(pickle.dumps(source))[0]
    assert json.loads((tmp_path / "other.jsonl").read_text()) == {"n": 9}


# -- map(): every write out of fn's directory stops the run, naming the file -------------


def _up_two(i, out_dir):
    with open(os.path.join(out_dir, "..", "..", f"stray-{i}.txt"), "w") as f:
        f.write("x")


def _into_output(i, out_dir):
    top = out_dir.split(os.sep + ".shardwright" + os.sep)[0]
    with open(os.path.join(top, f"direct-{i}.txt"), "wb") as f:
        f.write(b"x")


def _through_a_link(i, out_dir):
    outside = os.path.join(os.path.dirname(out_dir.split(os.sep + ".shardwright" + os.sep)[0]), "elsewhere")
    os.makedirs(outside, exist_ok=True)
    os.symlink(outside, os.path.join(out_dir, "door"))
    with open(os.path.join(out_dir, "door", f"f-{i}.txt"), "w") as f:
        f.write("x")


def _swallows(i, out_dir):
    try:
        os.rename(_touch(out_dir), os.path.join(out_dir, "..", "..", "..", "moved.txt"))
    except Exception:
        pass
    with open(os.path.join(out_dir, "kept.txt"), "w") as f:
        f.write("x")


def _touch(out_dir):
    path = os.path.join(out_dir, "t.txt")
    with open(path, "w") as f:
        f.write("x")
    return path


@pytest.mark.parametrize(
    "fn, shown",
    [
        (_up_two, r"'\.\./\.\./stray-0\.txt' outside the directory it was given \(through '\.\./'\)"),
        (_into_output, r"direct-0\.txt' outside the directory it was given \(into the output directory"),
        (_through_a_link, r"door/f-0\.txt' outside the directory it was given \(through a symbolic link"),
        (_swallows, r"'\.\./\.\./\.\./moved\.txt' outside the directory"),
    ],
)
def test_map_stops_on_any_write_out_of_fns_directory_naming_the_file(tmp_path, fn, shown):
    import shardwright as sw
    from shardwright.errors import UsageError

    out = tmp_path / "out"
    with pytest.raises(UsageError, match=r"map: fn wrote .*" + shown):
        sw.map(fn, [0], str(out), num_workers=1)
    assert not (out / "direct-0.txt").exists() and not (tmp_path / "elsewhere" / "f-0.txt").exists()
    assert not (out / ".shardwright" / "map" / "stray-0.txt").exists()


def _fine(i, out_dir):
    os.makedirs(os.path.join(out_dir, "sub"), exist_ok=True)
    with open(os.path.join(out_dir, "sub", "..", f"ok-{i}.txt"), "w") as f:  # '..' that stays inside
        f.write("x")


def test_map_keeps_writes_that_stay_inside(tmp_path):
    import shardwright as sw

    sw.map(_fine, [0, 1], str(tmp_path / "out"), num_workers=1)
    assert sorted(p.name for p in (tmp_path / "out").glob("ok-*.txt")) == ["ok-0.txt", "ok-1.txt"]


# -- the jobs service: never the server's credentials ------------------------------------


def test_an_s3_source_with_options_but_no_keys_is_read_unsigned():
    pytest.importorskip("botocore")
    pytest.importorskip("pydantic")  # the service extra
    from botocore import UNSIGNED

    from shardwright.service.input_sources import job_read_options

    options = job_read_options("s3://b/raw/", {"endpoint_url": "http://127.0.0.1:9", "config": {"connect_timeout": 2}})
    assert options["endpoint_url"] == "http://127.0.0.1:9"
    assert options["config"] == {"connect_timeout": 2, "signature_version": UNSIGNED}
    partial = job_read_options("s3://b/raw/", {"aws_access_key_id": "AKIA"})  # a key id alone: boto3 would mix
    assert partial["config"]["signature_version"] is UNSIGNED
    own = {"endpoint_url": "http://h", "aws_access_key_id": "k", "aws_secret_access_key": "s"}
    assert job_read_options("s3://b/raw/", own) == own


@pytest.mark.parametrize(
    "url, options",
    [
        ("s3://b/out", {"endpoint_url": "http://elsewhere:9000"}),
        ("s3://b/out", {"endpoint_url": "http://elsewhere:9000", "aws_access_key_id": "k"}),
        ("gs://b/out", {"api_endpoint": "http://elsewhere:4443"}),
        ("az://c/out", {"account_url": "https://elsewhere.blob.core.windows.net"}),
    ],
)
def test_an_output_naming_an_endpoint_without_its_own_credentials_is_refused(url, options):
    from shardwright.service.locations import LocationRefused, check_output_credentials

    with pytest.raises(LocationRefused, match=r"names an endpoint for .* without the job's own credentials"):
        check_output_credentials(url, options)


@pytest.mark.parametrize(
    "url, options",
    [
        ("s3://b/out", None),
        ("s3://b/out", {"region_name": "eu-west-1"}),
        ("s3://b/out", {"endpoint_url": "http://h", "aws_access_key_id": "k", "aws_secret_access_key": "s"}),
        ("az://c/out", {"account_url": "https://a.blob.core.windows.net", "sas_token": "t"}),
        ("/data/out", {"endpoint_url": "http://h"}),
    ],
)
def test_outputs_with_the_servers_endpoint_or_their_own_credentials_pass(url, options):
    from shardwright.service.locations import check_output_credentials

    check_output_credentials(url, options)


# -- a held output directory: no window between the check and the engine's own writes ------


def test_a_link_swapped_in_after_the_check_is_never_written_through(tmp_path, monkeypatch):
    from shardwright.errors import OutputDirError
    from shardwright.storage import local as local_module
    from shardwright.storage.local import LocalStorage
    from shardwright.storage.pin import PIN_ENV, check_pinned, pin_directory

    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    (out / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    monkeypatch.delenv(PIN_ENV, raising=False)
    pin_directory(os.path.realpath(out))
    monkeypatch.setenv(PIN_ENV, os.environ[PIN_ENV])  # undone after the test
    storage = LocalStorage(str(out))
    storage.write_bytes("sub/a.bin", b"before")

    def check_then_lose_the_race(pin, path):  # the swap lands right after the check passed
        check_pinned(pin, path)
        os.rename(out / "sub", out / "sub-moved")
        os.symlink(elsewhere, out / "sub")

    monkeypatch.setattr(local_module, "check_pinned", check_then_lose_the_race)
    for write in (storage.write_bytes, storage.write_parts):
        with pytest.raises(OutputDirError, match=r"sub was replaced by a symbolic link"):
            write("sub/b.bin", b"x" if write is storage.write_bytes else [b"x"])  # type: ignore[operator]
        assert os.listdir(elsewhere) == []
        os.unlink(out / "sub")
        os.rename(out / "sub-moved", out / "sub")
    assert (out / "sub" / "a.bin").read_bytes() == b"before"
    monkeypatch.setattr(local_module, "check_pinned", check_pinned)
    storage.write_bytes("sub/new/c.bin", b"c", durable=False)  # directories made on the way
    storage.barrier()
    assert (out / "sub" / "new" / "c.bin").read_bytes() == b"c"


# -- hostile progress snapshots are ignored cleanly (the records alone stand) ---------------


def _snapshot(point: str | None = '{"page": 3}', point_outputs: int = 1, positions=(5,)):
    from shardwright.protocol.progress import BufferState, ProgressSnapshot, SlotState

    return ProgressSnapshot(
        "run",
        0,
        2,
        0,
        (4, 0),
        1,
        BufferState(4, (5, 0), [], [b"a"]),
        [SlotState(p, 0, [b"x", b"y"], point, point_outputs, False) for p in positions],
    )


@pytest.mark.parametrize(
    "hostile",
    [
        _snapshot(point='"' + "p" * 5000 + '"'),  # a state over the 4 KB a ResumePoint may hold
        _snapshot(point="{not json"),  # would crash the resume at json.loads
        _snapshot(point_outputs=3),  # past the 2 outputs kept: output 2 would be lost
        _snapshot(positions=(6, 5)),  # slots out of order
    ],
)
def test_a_hostile_progress_snapshot_is_refused_as_damaged(hostile, tmp_path):
    from shardwright.protocol.progress import decode_snapshot, encode_snapshot, read_snapshot, write_snapshot
    from shardwright.storage.local import LocalStorage

    assert decode_snapshot(encode_snapshot(_snapshot())).slots[0].point == '{"page": 3}'
    with pytest.raises(ValueError):
        decode_snapshot(encode_snapshot(hostile))
    storage = LocalStorage(str(tmp_path))
    write_snapshot(storage, hostile)
    assert read_snapshot(storage, "run", 0, 2, 0, (4, 0)) is None


def test_a_progress_snapshot_nested_too_deeply_is_refused_as_damaged(tmp_path):
    import struct

    import xxhash

    from shardwright.protocol.layout import progress_key
    from shardwright.protocol.progress import MAGIC, decode_snapshot, read_snapshot
    from shardwright.storage.local import LocalStorage

    header = b"[" * 200_000 + b"]" * 200_000
    data = MAGIC + struct.pack("<Q", len(header)) + header
    data += xxhash.xxh3_128_digest(data)  # its checksum right: only the nesting is hostile
    with pytest.raises(ValueError, match="nested too deeply"):
        decode_snapshot(data)
    storage = LocalStorage(str(tmp_path))
    storage.write_bytes(progress_key(0, 1), data)
    assert read_snapshot(storage, "run", 0, 2, 0, (4, 0)) is None


# -- a parquet folder's index.json never points the reader out of the folder ---------------


@pytest.mark.parametrize("name", ["../secret/s.parquet", "/etc/passwd", "a//b.parquet", 7])
def test_a_parquet_index_naming_a_file_out_of_its_folder_is_refused(tmp_path, name):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from shardwright import StreamingDataset
    from shardwright.errors import CorruptStateError
    from shardwright.reader.parquet import ParquetLoader

    folder, secret = tmp_path / "pq", tmp_path / "secret"
    folder.mkdir()
    secret.mkdir()
    pq.write_table(pa.table({"id": [1, 2]}), folder / "a.parquet")
    pq.write_table(pa.table({"id": [666]}), secret / "s.parquet")
    assert [StreamingDataset(str(folder), item_loader=ParquetLoader())[i]["id"] for i in range(2)] == [1, 2]
    index = json.loads((folder / "index.json").read_text())
    index["chunks"][0]["filename"] = name
    index["chunks"][0]["chunk_bytes"] = (secret / "s.parquet").stat().st_size
    (folder / "index.json").write_text(json.dumps(index))
    with pytest.raises(CorruptStateError, match=r"not a parquet file inside its folder"):
        StreamingDataset(str(folder), item_loader=ParquetLoader())


def test_a_damaged_receipt_digest_in_a_state_is_one_bounded_line():
    from shardwright.errors import ResumeStateError
    from shardwright.reader.receipts import check_digest

    with pytest.raises(ResumeStateError, match=r"receipt digest is a list, not a dataset digest"):
        check_digest({"receipt": {"digest": ["x"] * 100_000}}, "sw1-sha256:" + "0" * 64)
    with pytest.raises(ResumeStateError) as info:
        check_digest({"receipt": {"digest": "y" * 1_000_000}}, "sw1-sha256:" + "0" * 64)
    assert len(str(info.value)) < 1000
    check_digest({"receipt": {"digest": "d"}}, "d")
