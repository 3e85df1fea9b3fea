"""What two datasets are compared by in the reproducibility tests (issue 35): the name and
sha256 of every file a dataset holds and its index.json without the time it was written.
Chunk names carry their content's checksum (protocol 6), never a clock, so they are compared
as they are."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def contents(out: Path) -> tuple[str, list[str]]:
    """(digest, the sha256 of every chunk in index order)."""
    document = json.loads((out / "index.json").read_bytes())
    hashes = [hashlib.sha256((out / c["filename"]).read_bytes()).hexdigest() for c in document["chunks"]]
    return document["digest"], hashes


def every_file(out: Path) -> tuple[dict[str, str], dict]:
    """(name -> sha256 of every file the dataset holds, index.json minus updated_at)."""
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if p.is_file()}
    document = json.loads((out / "index.json").read_bytes())
    del document["updated_at"]
    files.pop("index.json")
    return files, document
