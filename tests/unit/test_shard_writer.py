"""ShardWriter.add_run (the hot loop's batched hand-off) cuts exactly the chunks that
ShardWriter.add cuts item by item, with the same resume positions in every chunk."""

from __future__ import annotations

import random

import pytest

from support.shard_writers import LIMITS, summary, writer_for


@pytest.mark.parametrize("chunk_bytes, chunk_size", LIMITS)
@pytest.mark.parametrize("seed", range(6))
def test_add_run_cuts_the_chunks_add_cuts(chunk_bytes, chunk_size, seed):
    rng = random.Random(seed)
    items = [bytes([k % 256]) * rng.choice([0, 1, 3, 8, 12, 30]) for k in range(200)]
    one, one_chunks = writer_for(chunk_bytes, chunk_size)
    for k, data in enumerate(items):
        one.add(data, 5 + k, after=(5 + k + 1, 0))
    one.commit(done=True)

    runs, run_chunks = writer_for(chunk_bytes, chunk_size)
    k = 0
    while k < len(items):  # batches of random length, as the hot loop's time- and size-cut flushes
        size = rng.choice([1, 2, 5, 17, 64, 200])
        runs.add_run(items[k : k + size], 5 + k)
        assert runs.position == (5 + min(k + size, len(items)), 0)
        k += size
    runs.commit(done=True)

    assert summary(run_chunks.chunks) == summary(one_chunks.chunks)
    assert b"".join(b"".join(c.items) for c in run_chunks.chunks) == b"".join(items)


def test_an_item_larger_than_chunk_bytes_is_a_chunk_of_its_own():
    writer, recorder = writer_for(chunk_bytes=10, chunk_size=None, start=0)
    writer.add_run([b"a" * 4, b"b" * 50, b"c" * 4], 0)
    writer.commit(done=True)
    assert [list(c.items) for c in recorder.chunks] == [[b"a" * 4], [b"b" * 50], [b"c" * 4]]
    assert [(c.first_input, c.next_input) for c in recorder.chunks] == [(0, 1), (1, 2), (2, 3)]


def test_an_empty_run_changes_nothing():
    writer, recorder = writer_for(chunk_bytes=10, chunk_size=None, start=7)
    writer.add_run([], 7)
    assert writer.position == (7, 0) and recorder.chunks == [] and writer.items == []
