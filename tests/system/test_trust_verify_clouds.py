"""`shardwright verify` on the Google Cloud Storage and Azure Blob emulators: intact, then a bit
flip, a truncation, a missing chunk and two swapped chunks, each named; no secret printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shardwright import optimize, verify
from shardwright.storage import open_storage


def sample(i: int) -> dict:
    return {"i": i, "text": f"item {i:04d} " * 8}


@pytest.fixture(params=["gcs", "azure"])
def cloud(request) -> tuple[str, dict]:
    name = request.param
    return request.getfixturevalue(f"{name}_url"), request.getfixturevalue(f"{name}_storage_options")


def test_verify_finds_and_names_each_kind_of_damage(cloud):
    url, options = cloud
    optimize(
        sample, list(range(50)), url, chunk_size=10, num_shards=1, num_workers=1, verbose=False, storage_options=options
    )
    assert verify(url, storage_options=options).ok
    storage = open_storage(url, options)
    names = [c["filename"] for c in json.loads(storage.read_bytes("index.json"))["chunks"]]
    flipped = bytearray(storage.read_bytes(names[0]))
    flipped[-3] ^= 0x04
    storage.write_bytes(names[0], bytes(flipped))
    storage.write_bytes(names[1], storage.read_bytes(names[1])[:-5])
    storage.delete(names[2])
    c3, c4 = storage.read_bytes(names[3]), storage.read_bytes(names[4])
    storage.write_bytes(names[3], c4)
    storage.write_bytes(names[4], c3)
    report = verify(url, storage_options=options)
    assert sorted(d.filename for d in report.damaged) == sorted(names[:5])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "verify", url, "--storage-options", json.dumps(options)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1 and done.stdout.count("damaged:  ") == 5, done.stdout + done.stderr
    for secret in options.values():
        if isinstance(secret, str) and "AccountKey=" in secret:
            key = secret.split("AccountKey=", 1)[1].split(";", 1)[0]
            assert key not in done.stdout + done.stderr
