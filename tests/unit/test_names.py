"""Issue 32 item 6: inputs named in the user's terms (shardwright.names)."""

from __future__ import annotations

import json
from pathlib import Path

from shardwright import sources
from shardwright.names import MAX_NAME, display_name, input_name, row_name


def test_a_file_ref_is_named_by_its_path(tmp_path):
    (tmp_path / "doc007.txt").write_text("x")
    listing = sources.files(str(tmp_path))
    assert display_name(listing[0]) == str(tmp_path / "doc007.txt")
    assert input_name(listing, 0) == str(tmp_path / "doc007.txt")


def test_a_source_row_is_named_by_its_file_and_row(tmp_path):
    path = tmp_path / "part-3.jsonl"
    path.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(20)))
    rows = sources.jsonl(str(path))
    assert row_name(rows, 17) == f"{path} row 17"
    assert input_name(rows, 17) == f"{path} row 17"
    assert row_name([1, 2], 0) is None


def test_credentials_are_removed_and_names_are_bounded():
    assert "s3cret" not in display_name("https://user:s3cret@example.com/docs/a.txt")
    assert "s3cret" not in display_name({"url": "https://user:s3cret@example.com/x"})
    assert len(display_name("x" * 10_000)) <= MAX_NAME
    long_path = "/data/" + "d" * 500 + "/doc007.txt"
    assert display_name(long_path).endswith("doc007.txt") and len(display_name(long_path)) <= MAX_NAME
    assert display_name(Path("/data/a.txt")) == "/data/a.txt"
    assert display_name(42) == "42"


def test_a_name_never_raises():
    class Bad:
        def __repr__(self):
            raise RuntimeError("no")

    assert display_name(Bad()) == "<Bad>"
    assert input_name([1], 5) == "input 5"
