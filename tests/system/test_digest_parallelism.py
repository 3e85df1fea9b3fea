"""The same dataset bytes and digest whatever the parallelism and the crash schedule (issue 35:
the digest part; chunk names still carry each run's fencing epoch, so names are not compared)."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from shardwright.cli.main import main
from support.helpers import assert_exactly_once, finish, kill_loop

pytestmark = pytest.mark.slow


def contents(out: Path) -> tuple[str, list[str]]:
    """(digest, the sha256 of every chunk in index order)."""
    document = json.loads((out / "index.json").read_bytes())
    hashes = [hashlib.sha256((out / c["filename"]).read_bytes()).hexdigest() for c in document["chunks"]]
    return document["digest"], hashes


def test_same_digest_and_chunk_bytes_for_1_2_4_workers_and_after_sigkills(tmp_path, capsys):
    base = {"kind": "generator", "n": 3000, "chunk_size": 50, "num_shards": 8}
    runs = {}
    for workers in (1, 2, 4):
        config = {**base, "num_workers": workers, "output_dir": str(tmp_path / f"w{workers}")}
        finish(config)
        assert_exactly_once(config)
        runs[workers] = contents(Path(config["output_dir"]))
    killed = {**base, "sleep": 0.001, "output_dir": str(tmp_path / "killed")}
    kills = kill_loop(killed, random.Random("digest"), kills_wanted=3, check=lambda: None)
    assert kills >= 1, "no kill landed"
    killed["num_workers"] = 2
    finish(killed)
    assert_exactly_once(killed)
    runs["killed"] = contents(Path(killed["output_dir"]))
    assert len({json.dumps(r) for r in runs.values()}) == 1, {k: v[0] for k, v in runs.items()}
    assert main(["verify", killed["output_dir"]]) == 0
    assert runs[1][0] in capsys.readouterr().out
    assert main(["diff", str(tmp_path / "w1"), killed["output_dir"]]) == 0
