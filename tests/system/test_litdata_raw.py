"""StreamingRawDataset against litdata 0.2.76's on one local folder: the same files and bytes
(litdata lists in the filesystem's order, shardwright sorted by path), and litdata's own
listing file, which litdata writes into the folder, is not an item."""

from __future__ import annotations

import pytest

import shardwright as sw

torch = pytest.importorskip("torch")
ld = pytest.importorskip("litdata")


def test_same_files_and_bytes_as_litdata(tmp_path):
    root = tmp_path / "files"
    for i in range(11):
        sub = root / f"c{i % 3}" / ("x" if i % 2 else "")
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i:02d}.bin").write_bytes(bytes([i]) * (i + 1))
    theirs = ld.StreamingRawDataset(str(root), cache_dir=str(tmp_path / "cache"))
    ours = sw.StreamingRawDataset(str(root))
    assert sorted(f.path for f in theirs.files) == [f.path for f in ours.files]
    assert sorted(theirs[i] for i in range(len(theirs))) == sorted(ours[i] for i in range(len(ours)))
    assert ours.files[0].to_dict() == {"path": str(root / "c0" / "f00.bin"), "size": 1}
