"""The dataset digest (issue 35 §1): a Merkle root over the chunks' checksums, written into
index.json, recomputed by verify, compared by diff, independent of chunk names."""

from __future__ import annotations

import json

import pytest

from shardwright.cli.main import main
from shardwright.format import ChunkEntry, IndexConfig, dataset_digest, differing_chunks, index_digest
from shardwright.format.digest import merkle_root, parse_digest
from shardwright.reader.diff import diff
from shardwright.reader.verify import verify
from support.datasets import write_dataset

CONFIG = IndexConfig(None, 4, None, ["int"], "spec")


def entries(*checksums, size=4):
    return [ChunkEntry(f"chunk-0-{k:05d}-000000.bin", size, 100, checksum=c) for k, c in enumerate(checksums)]


def test_digest_ignores_names_but_not_bytes_order_or_counts():
    base = dataset_digest(entries("xxh3_128:aa", "xxh3_128:bb"), CONFIG)
    assert base is not None and base.startswith("sw1-sha256:") and len(base) == len("sw1-sha256:") + 64
    renamed = [
        ChunkEntry("chunk-9-00000-000001-77.bin", 4, 100, checksum="xxh3_128:aa"),
        entries("x", "xxh3_128:bb")[1],
    ]
    assert dataset_digest(renamed, CONFIG) == base
    assert dataset_digest(entries("xxh3_128:bb", "xxh3_128:aa"), CONFIG) != base  # order
    assert dataset_digest(entries("xxh3_128:aa", "xxh3_128:bc"), CONFIG) != base  # bytes
    assert dataset_digest(entries("xxh3_128:aa", "xxh3_128:bb", size=5), CONFIG) != base  # item counts
    assert dataset_digest(entries("xxh3_128:aa"), CONFIG) != base  # a chunk dropped
    other = IndexConfig(None, 4, "zstd", ["int"], "spec")
    assert dataset_digest(entries("xxh3_128:aa", "xxh3_128:bb"), other) != base  # decoding
    assert dataset_digest(entries("xxh3_128:aa", None), CONFIG) is None  # a chunk without checksum


def test_merkle_root_shape():
    a, b, c = (bytes([i]) * 32 for i in range(3))
    assert merkle_root([a]) == a
    assert merkle_root([a, b, c]) != merkle_root([a, b]) != merkle_root([b, a])
    assert merkle_root([a, b, c, c]) != merkle_root([a, b, c])  # the odd node is carried, not duplicated


def test_parse_digest_is_strict():
    assert parse_digest({"chunks": []}) is None
    with pytest.raises(ValueError, match="not a sw1-sha256 digest"):
        parse_digest({"digest": "sw1-sha256:" + "0" * 63})
    with pytest.raises(ValueError):
        parse_digest({"digest": 5})


def test_differing_chunks_names_item_ranges():
    a = entries("xxh3_128:1", "xxh3_128:2", "xxh3_128:3")
    assert differing_chunks(a, a) == []
    assert differing_chunks(a, entries("xxh3_128:1", "xxh3_128:X", "xxh3_128:3")) == [(4, 8, 1)]
    assert differing_chunks(a, entries("xxh3_128:1", "xxh3_128:2")) == [(8, 12, 2)]
    cut_otherwise = a[:1] + [ChunkEntry("c", 3, 100, checksum="xxh3_128:2")]
    assert differing_chunks(a, cut_otherwise) == [(4, 12, 1)]


def test_written_datasets_carry_their_digest_and_verify_checks_it(tmp_path):
    chunks = write_dataset(tmp_path / "a", [{"i": i} for i in range(10)], chunk_size=4)
    document = json.loads((tmp_path / "a" / "index.json").read_bytes())
    assert document["digest"] == index_digest((tmp_path / "a" / "index.json").read_bytes(), "x")
    report = verify(tmp_path / "a")
    assert report.ok and report.digest == document["digest"] and "digest sw1-sha256:" in report.summary()
    assert len(chunks) == 3
    # an entry edited so that sizes still look right: the digest no longer matches
    document["chunks"][0], document["chunks"][1] = document["chunks"][1], document["chunks"][0]
    (tmp_path / "a" / "index.json").write_text(json.dumps(document))
    damaged = verify(tmp_path / "a")
    assert not damaged.ok and any("do not give the digest" in d.problem for d in damaged.damaged)


def test_a_dataset_without_checksums_has_no_digest(tmp_path):
    write_dataset(tmp_path / "old", [{"i": i} for i in range(5)], checksums=False)
    assert "digest" not in json.loads((tmp_path / "old" / "index.json").read_bytes())
    report = verify(tmp_path / "old")
    assert report.ok and report.digest is None and "no digest" in report.summary()


def test_diff_says_same_or_where(tmp_path, capsys):
    samples = [{"i": i} for i in range(12)]
    write_dataset(tmp_path / "a", samples, chunk_size=4)
    write_dataset(tmp_path / "b", samples, chunk_size=4, generation=3)  # other chunk names
    write_dataset(tmp_path / "c", samples[:4] + [{"i": -1}] + samples[5:], chunk_size=4)
    assert diff(tmp_path / "a", tmp_path / "b").same
    found = diff(tmp_path / "a", tmp_path / "c")
    assert not found.same and found.ranges == ((4, 8, 1),)
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "same:" in capsys.readouterr().out
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "c")]) == 1
    assert "items 4..7 differ" in capsys.readouterr().out
    assert main(["diff", str(tmp_path / "a"), str(tmp_path / "missing")]) == 2
