"""shardwright.sources in process: lazy, sliceable, picklable sequences whose identity is
their metadata; every bad input is one InputsError line naming the file and the fix."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import time
import tracemalloc

import pytest

from shardwright import sources
from shardwright.errors import InputsError
from shardwright.protocol.fingerprint import InputsFingerprint
from shardwright.sources import BadRow, FileRef

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def write_parquet(path, first: int, rows: int, row_group: int = 300) -> None:
    table = pa.table({"id": list(range(first, first + rows)), "text": [f"row {i}" for i in range(first, first + rows)]})
    pq.write_table(table, str(path), row_group_size=row_group)


@pytest.fixture
def parquet_dir(tmp_path):
    root = tmp_path / "raw"
    (root / "sub").mkdir(parents=True)
    write_parquet(root / "a.parquet", 0, 1000)
    write_parquet(root / "b.parquet", 1000, 500)
    write_parquet(root / "sub" / "c.parquet", 1500, 700)
    (root / "notes.txt").write_text("not parquet, not listed")
    return root


def test_parquet_rows_in_file_order_lazily_sliced(parquet_dir):
    source = sources.parquet(parquet_dir, columns=["id"])
    assert len(source) == 2200
    assert source[0] == {"id": 0} and source[999] == {"id": 999} and source[-1] == {"id": 2199}
    assert list(source[995:1005]) == [{"id": i} for i in range(995, 1005)]
    assert [row["id"] for row in source] == list(range(2200))
    view = source[1400:1600]
    assert len(view) == 200 and view[0] == {"id": 1400} and view[150:152][1] == {"id": 1551}
    copy = pickle.loads(pickle.dumps(view))
    assert [r["id"] for r in copy] == list(range(1400, 1600))
    assert len(pickle.dumps(view)) < 5000  # metadata, not rows
    assert sources.parquet(parquet_dir / "a.parquet")[3] == {"id": 3, "text": "row 3"}
    assert len(sources.parquet([parquet_dir / "b.parquet", parquet_dir / "a.parquet"])) == 1500
    assert len(sources.parquet(str(parquet_dir / "*.parquet"))) == 1500  # a glob: one level


def test_identity_is_metadata_and_changes_with_a_file(parquet_dir):
    from shardwright.engine.inputs import run_inputs

    def fingerprint(source):
        return run_inputs(source).fingerprint()

    source = sources.parquet(parquet_dir)
    units = list(source.units())
    assert [u.rows for u in units] == [1000, 500, 700] and units[0].name.endswith("a.parquet")
    first = fingerprint(source)
    assert first == fingerprint(sources.parquet(parquet_dir))
    assert fingerprint(source[:1000]) != first
    time.sleep(0.01)
    write_parquet(parquet_dir / "b.parquet", 1000, 500)  # rewritten: same rows, new mtime
    assert fingerprint(sources.parquet(parquet_dir)) != first


def test_fingerprint_of_ten_million_rows_reads_only_metadata(tmp_path):
    import numpy as np

    for f in range(4):
        n = 2_500_000
        table = pa.table({"id": np.arange(f * n, (f + 1) * n, dtype=np.int64)})
        pq.write_table(table, str(tmp_path / f"part-{f}.parquet"), row_group_size=500_000)
    from shardwright.engine.inputs import run_inputs

    tracemalloc.start()
    source = run_inputs(sources.parquet(tmp_path))
    fp = source.fingerprint()
    table = source.identities()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert fp.count == 10_000_000 and len(table.keys) == 4
    assert peak < 20_000_000  # metadata only (the rows would be hundreds of MB)
    assert len(table.to_bytes()) <= 16 * 10_000_000


def test_jsonl_plain_gzip_and_zstd_with_a_kept_line_index(tmp_path):
    import zstandard

    rows = [{"i": i} for i in range(2500)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "a.jsonl").write_text(text)
    with gzip.open(tmp_path / "b.jsonl.gz", "wt") as f:
        f.write(text[: text.index('{"i": 10}')])
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(b'{"z": 1}\n{"z": 2}'))
    source = sources.jsonl(tmp_path)
    assert len(source) == 2500 + 10 + 2
    assert source[2048] == {"i": 2048} and source[2500] == {"i": 0} and source[-1] == {"z": 2}
    assert list(source[2509:2512]) == [{"i": 9}, {"z": 1}, {"z": 2}]
    state = source.dump_state()
    again = sources.jsonl(tmp_path)
    assert again.state_name() == source.state_name() and again.load_state(state)
    assert len(again) == len(source) and again[1500] == {"i": 1500}
    assert not sources.jsonl(tmp_path).load_state(b"[[1, [0]]]")  # another file list: refused


def test_jsonl_bad_line_is_a_bad_row_naming_file_and_line(tmp_path):
    (tmp_path / "x.jsonl").write_bytes(b'{"ok": 1}\n\xff\xfe\n{"ok": 3}\n{broken\n')
    source = sources.jsonl(tmp_path / "x.jsonl")
    assert source[0] == {"ok": 1} and source[2] == {"ok": 3}
    bad = source[1]
    assert isinstance(bad, BadRow) and bad.where.endswith("x.jsonl:2") and "UTF-8" in bad.problem
    assert "x.jsonl:4" in str(source[3].error()) and "JSON" in str(source[3].error())


def test_files_listing_is_compact_and_refs_read_through_storage(tmp_path):
    root = tmp_path / "imgs"
    (root / "a" / "b").mkdir(parents=True)
    for i in range(30):
        (root / "a" / f"{i:03d}.jpg").write_bytes(bytes([i]) * (i + 1))
    (root / "a" / "b" / "deep.jpg").write_bytes(b"deep")
    (root / "skip.txt").write_text("x")
    refs = sources.files(root, pattern="**/*.jpg")
    assert len(refs) == 31
    assert [r.path for r in refs[:2]] == [str(root / "a" / "000.jpg"), str(root / "a" / "001.jpg")]
    ref = refs[5]
    assert isinstance(ref, FileRef) and ref.size == 6 and ref.read() == bytes([5]) * 6
    with ref.open() as f:
        f.seek(2)
        assert f.read(2) == bytes([5, 5])
    assert refs[-1].path.endswith("deep.jpg")
    assert pickle.loads(pickle.dumps(refs[10:12]))[1].read() == bytes([11]) * 12
    assert len(sources.files(root, pattern="a/*.jpg")) == 30


def test_files_driver_holds_under_100_bytes_per_file(tmp_path):
    for i in range(5000):
        (tmp_path / f"file-{i:06d}.bin").write_bytes(b"x")
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    listing = sources.files(tmp_path)
    import gc

    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(listing) == 5000
    assert held / 5000 < 100, held / 5000
    shard = listing[100:200]
    assert len(pickle.dumps(shard)) < 100 * 100 + 2000  # a shard sends only its own part


def test_files_hash_contents_sees_an_edit_that_keeps_size_and_mtime(tmp_path):
    from shardwright.engine.inputs import run_inputs

    def fingerprint(source):
        return run_inputs(source).fingerprint()

    path = tmp_path / "f.bin"
    path.write_bytes(b"aaaa")
    stat = os.stat(path)
    before = fingerprint(sources.files(tmp_path, hash_contents=True))
    assert before == fingerprint(sources.files(tmp_path, hash_contents=True))
    path.write_bytes(b"bbbb")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert fingerprint(sources.files(tmp_path)) == fingerprint(sources.files(tmp_path))
    assert fingerprint(sources.files(tmp_path, hash_contents=True)) != before


def test_hf_rows_of_a_dataset_loaded_from_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"a": list(range(3000)), "b": [str(i) for i in range(3000)]})
    ds.save_to_disk(str(tmp_path / "ds"))
    loaded = datasets.load_from_disk(str(tmp_path / "ds"))
    source = sources.hf(loaded)
    assert len(source) == 3000 and source[2049] == {"a": 2049, "b": "2049"}
    assert [r["a"] for r in source[1020:1030]] == list(range(1020, 1030))
    assert len(pickle.dumps(source[:10])) < 20_000  # the arrow files' paths, not the rows
    [unit] = list(source.units())
    assert unit.version.startswith(loaded._fingerprint + "+files:") and unit.rows == 3000  # and its arrow files
    with pytest.raises(InputsError, match="IterableDataset.*map-style"):
        sources.hf(loaded.to_iterable_dataset())
    with pytest.raises(InputsError, match="one split"):
        sources.hf(datasets.DatasetDict({"train": ds}))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: sources.parquet(d / "missing.parquet"), r"missing\.parquet does not exist"),
        (lambda d: sources.parquet(str(d / "*.pq")), r"\*\.pq matches no file"),
        (lambda d: sources.parquet(d / "bad.parquet"), r"bad\.parquet is not a readable parquet file.*replace"),
        (lambda d: sources.parquet(d / "good.parquet", columns=["nope"]), r"good\.parquet has no column 'nope'"),
        (lambda d: sources.parquet([]), "list of paths is empty"),
        (lambda d: sources.jsonl(d / "none.jsonl"), r"none\.jsonl does not exist"),
        (lambda d: sources.files(d / "empty"), "does not exist or is empty"),
        (lambda d: sources.files(d, pattern="**/*.png"), r"matches '\*\*/\*\.png'|no file under"),
        (lambda d: sources.files(d / "good.parquet"), "is a file; pass the directory"),
        (lambda d: sources.hf([1, 2]), "pass a datasets.Dataset"),
    ],
)
def test_bad_input_is_one_line_naming_the_file_and_the_fix(tmp_path, make, message):
    write_parquet(tmp_path / "good.parquet", 0, 10)
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really a parquet file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputsError, match=message) as info:
        make(tmp_path)
    assert "\n" not in str(info.value)


def test_source_fingerprints_are_stable_in_block_shape():
    from shardwright.protocol.identity import units_fingerprint
    from shardwright.sources import UnitIdentity

    units = [UnitIdentity(f"f{i}", "v", 0, 1000) for i in range(10)]
    fp = units_fingerprint(units, 10_000)
    assert isinstance(fp, InputsFingerprint) and len(fp.block_hashes) == 16 * -(-10_000 // fp.block_size)
    changed = [*units[:5], UnitIdentity("f5", "v2", 0, 1000), *units[6:]]
    assert units_fingerprint(changed, 10_000) != fp
    assert fp.first_difference(units_fingerprint(changed, 10_000)) is not None
