"""What two datasets are compared by in the reproducibility tests (issue 35): the sha256 of
every file a dataset holds and its index.json without the time it was written."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

CHUNK_TAIL = re.compile(r"-\d+((?:\.zstd)?\.bin)$")  # the fencing epoch a stamped chunk name carries


def contents(out: Path) -> tuple[str, list[str]]:
    """(digest, the sha256 of every chunk in index order)."""
    document = json.loads((out / "index.json").read_bytes())
    hashes = [hashlib.sha256((out / c["filename"]).read_bytes()).hexdigest() for c in document["chunks"]]
    return document["digest"], hashes


def every_file(out: Path, names: bool = True) -> tuple[dict[str, str], dict]:
    """(name -> sha256 of every file the dataset holds, index.json minus updated_at). With
    ``names=False`` a chunk name's epoch tail is dropped (names and index then compared up to it)."""

    def name(n: str) -> str:
        return n if names else CHUNK_TAIL.sub(r"\1", n)

    files = {name(p.name): hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir() if p.is_file()}
    document = json.loads((out / "index.json").read_bytes())
    del document["updated_at"]
    for chunk in document["chunks"]:
        chunk["filename"] = name(chunk["filename"])
    files.pop("index.json")
    return files, document
