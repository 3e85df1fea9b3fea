"""map's last step on the in-process memory backend: staged files of a published run are moved
under their names once, a crash in the middle is finished by running it again, and nothing of
an attempt that never committed becomes visible."""

from __future__ import annotations

import json
import uuid

import pytest

from shardwright.engine.map_run import move_staged
from shardwright.errors import StorageError
from shardwright.format import ChunkEntry, IndexConfig, ItemEncoder, build_chunk, render_index
from shardwright.storage import open_storage


def published_map(url: str, inputs: dict[str, dict[str, bytes]]) -> None:
    """A map run's published state: staged files, and an index of one manifest per input."""
    run = open_storage(f"{url}-run", create=True)
    encoder, items = ItemEncoder(), []
    for position, (attempt, files) in enumerate(inputs.items()):
        for name, data in files.items():
            run.write_bytes(f"staged/{attempt}/{name}", data)
        items.append(encoder.encode({"files": json.dumps(sorted(files)), "staged": attempt}, position))
    chunk = build_chunk(items)
    run.write_bytes("chunk-0.bin", chunk)
    run.write_bytes("staged/dead-attempt/never.txt", b"an attempt killed before its commit")
    config = IndexConfig(None, 16, None, encoder.data_format, encoder.data_spec)
    run.write_bytes("index.json", render_index([ChunkEntry("chunk-0.bin", len(items), len(chunk))], config))


def user_files(url: str) -> dict[str, bytes]:
    out = open_storage(url)
    return {key: out.read_bytes(key) for key in out.list()}


def test_materialize_moves_each_file_once_and_a_crash_is_finished_by_a_rerun():
    url = f"memory://map-{uuid.uuid4().hex[:8]}"
    published_map(url, {"a1": {"x/1.txt": b"one", "top.bin": b"first"}, "a2": {"x/2.txt": b"two", "top.bin": b"later"}})
    out = open_storage(url)
    moved = []

    def crash_after_two(op, key):
        if op == "write_bytes" and key:
            moved.append(key)
            if len(moved) == 3:
                return StorageError("power cut")
        return None

    out.fail_when(crash_after_two)
    with pytest.raises(StorageError):
        move_staged(open_storage(f"{url}-run"), out)
    partial = user_files(url)
    assert len(partial) == 2 and all(value in (b"one", b"first", b"two", b"later") for value in partial.values())
    out.clear_faults()
    assert move_staged(open_storage(f"{url}-run"), out) == 4
    # Later inputs replace earlier files of the same name; the dead attempt stays hidden and is removed.
    assert user_files(url) == {"x/1.txt": b"one", "x/2.txt": b"two", "top.bin": b"later"}
    assert not open_storage(f"{url}-run").list("staged/")
    assert move_staged(open_storage(f"{url}-run"), out) == 4  # done: a no-op
