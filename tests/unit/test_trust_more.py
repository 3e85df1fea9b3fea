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
