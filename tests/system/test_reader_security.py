"""Untrusted datasets and a hostile cache directory: real files, real symlinks, real pickles."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from shardwright import StreamingDataset, optimize
from shardwright.errors import CorruptStateError, StorageError, UnsupportedFormatError
from shardwright.format import ChunkEntry, IndexConfig, ItemEncoder, build_chunk, render_index
from shardwright.reader import ChunkCache
from shardwright.storage import LocalStorage

MARKER = "shardwright-pwned"


class Evil:
    """Unpickling this calls open(path, "w"): it creates a file (code of the dataset's choosing)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def write(out: Path, samples: list) -> None:
    out.mkdir(parents=True, exist_ok=True)
    enc = ItemEncoder()
    raw = build_chunk([enc.encode(s, i) for i, s in enumerate(samples)])
    (out / "chunk-0.bin").write_bytes(raw)
    config = IndexConfig(None, len(samples), None, enc.data_format, enc.data_spec)
    (out / "index.json").write_bytes(render_index([ChunkEntry("chunk-0.bin", len(samples), len(raw))], config))


def test_pickle_leaf_that_runs_code_is_refused_by_default(tmp_path):
    target = tmp_path / MARKER
    out = tmp_path / "evil"
    write(out, [{"x": 1, "p": Evil(str(target))}])
    ds = StreamingDataset(out)
    with pytest.raises(
        UnsupportedFormatError, match=r"refers to \w+\.open: unpickling it runs code.*allow_pickle=True"
    ):
        ds[0]
    assert not target.exists(), "nothing of the pickle may run by default"
    assert StreamingDataset(out, allow_pickle=True)[0]["x"] == 1
    assert target.exists(), "with allow_pickle=True the pickle is loaded as is (trusted datasets)"


def plain_sample(i: int) -> dict:
    return {"none": None, "set": {i}, "f32": np.float32(i), "i64": np.int64(i), "zero_d": np.array(i)}


def test_plain_data_pickles_and_numpy_scalars_need_no_flag(tmp_path):
    out = tmp_path / "plain"
    optimize(plain_sample, list(range(5)), str(out), num_workers=1, verbose=False)
    ds = StreamingDataset(out)
    assert ds.config.data_format.count("pickle") == 2  # None and the set only: plain data
    for i in range(5):
        x = ds[i]
        assert x["none"] is None and x["set"] == {i} and x["f32"] == i and x["i64"] == i and x["zero_d"] == i


def test_symlinked_chunk_file_is_corrupt_state(tmp_path):
    out = tmp_path / "ds"
    write(out, [{"x": i} for i in range(3)])
    secret = tmp_path / "secret.bin"
    os.rename(out / "chunk-0.bin", secret)
    os.symlink(secret, out / "chunk-0.bin")
    with pytest.raises(CorruptStateError, match="is a symbolic link"):
        StreamingDataset(out)[0]


def test_nul_byte_in_chunk_name_and_deep_spec(tmp_path):
    out = tmp_path / "ds"
    write(out, [{"x": 1}])
    index = json.loads((out / "index.json").read_text())
    index["chunks"][0]["filename"] = "chunk\u0000.bin"
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(CorruptStateError, match="no control characters"):  # a NUL is one of them
        StreamingDataset(out)
    leaf = {"type": None, "context": None, "children_spec": []}
    # Written by hand: json.dumps itself would recurse too deep.
    text = '{"type": "builtins.list", "context": "null", "children_spec": [' * 100_000
    text += json.dumps(leaf) + "]}" * 100_000
    index = json.loads((out / "index.json").read_text())
    index["chunks"][0]["filename"] = "chunk-0.bin"
    index["config"]["data_spec"] = "[1, " + text + "]"
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(CorruptStateError, match="nested more than 64 deep|nests its data_spec"):
        StreamingDataset(out)


# --- the cache directory -----------------------------------------------------------------------


def _cache(tmp_path: Path, root: Path) -> tuple[ChunkCache, ChunkEntry]:
    source = tmp_path / "remote"
    source.mkdir(exist_ok=True)
    (source / "c.bin").write_bytes(b"x" * 1000)
    cache = ChunkCache(root=str(root), name="ds", url="s3://b/p", storage=LocalStorage(str(source)), max_bytes=1500)
    return cache, ChunkEntry("c.bin", 1, 1000)


def test_cache_dirs_are_owner_only(tmp_path):
    cache, entry = _cache(tmp_path, tmp_path / "root")
    cache.open(entry).close()
    for path in (tmp_path / "root", tmp_path / "root" / "ds"):
        assert (path.stat().st_mode & 0o777) == 0o700


def test_planted_symlink_cache_dir_is_refused_and_victim_untouched(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    (victim / "ds").mkdir()
    (victim / "ds" / "old.bin").write_bytes(b"y" * 5000)
    (victim / "ds" / ".shardwright-cache.json").write_text("{}")  # even a planted marker
    os.symlink(victim, tmp_path / "root")  # the attacker's link at the predictable cache path
    cache, entry = _cache(tmp_path, tmp_path / "root")
    with pytest.raises(StorageError, match="is a symbolic link"):
        cache.check_existing()
    with pytest.raises(StorageError, match="is a symbolic link"):
        cache.open(entry)
    assert sorted(os.listdir(victim)) == ["ds", "precious.txt"]
    assert (victim / "ds" / "old.bin").read_bytes() == b"y" * 5000
    assert not (victim / "ds" / "c.bin").exists()


def test_symlinked_dataset_dir_inside_the_root_is_refused(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "root").mkdir(mode=0o700)
    os.symlink(victim, tmp_path / "root" / "ds")
    cache, entry = _cache(tmp_path, tmp_path / "root")
    with pytest.raises(StorageError, match="symbolic link"):
        cache.open(entry)
    assert os.listdir(victim) == []


def test_eviction_never_follows_links_out_of_the_root(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "big.bin").write_bytes(b"z" * 10_000)
    (victim / ".shardwright-cache.json").write_text("{}")
    cache, entry = _cache(tmp_path, tmp_path / "root")
    cache.open(entry).close()
    os.symlink(victim, tmp_path / "root" / "planted")  # a link among the cached datasets
    os.symlink(victim / "big.bin", tmp_path / "root" / "ds" / "link.bin")
    cache.evict(0)
    assert (victim / "big.bin").read_bytes() == b"z" * 10_000


def test_world_writable_or_foreign_cache_dir_is_refused(tmp_path):
    root = tmp_path / "open"
    root.mkdir()
    os.chmod(root, 0o777)
    cache, entry = _cache(tmp_path, root)
    with pytest.raises(StorageError, match="writable by every user"):
        cache.open(entry)
    if os.geteuid() == 0:  # only root can give a directory away
        other = tmp_path / "other"
        other.mkdir(mode=0o700)
        os.chown(other, 12345, 12345)
        cache, entry = _cache(tmp_path, other)
        with pytest.raises(StorageError, match="owned by uid 12345"):
            cache.open(entry)
