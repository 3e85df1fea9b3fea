"""Issue 33: hostile chunks and indexes, built with the real format writers and zstandard, are
refused by every reader and by verify, each naming the chunk, before memory follows what the
data claims: a chunk named twice, overflowing sizes, zstd bombs (whole-file, litdata's framed
and per-item zstd, with and without a content size), Arrow footers announcing millions of
rows, unknown checksum algorithms."""

from __future__ import annotations

import io
import json
import struct
import tracemalloc
import uuid
from pathlib import Path

import pytest
import zstandard

from shardwright import StreamingDataset
from shardwright.errors import CorruptStateError
from shardwright.format import (
    ChunkEntry,
    IndexConfig,
    ItemEncoder,
    build_chunk,
    chunk_checksum,
    compress,
    pack_framed,
    pack_sample,
    render_index,
)
from shardwright.format.limits import reset_limits, set_limits
from shardwright.reader.verify import verify
from shardwright.storage import open_storage
from support.datasets import write_dataset

BOMB = 64 << 20  # what the hostile chunks inflate to; every peak below stays far under it
PEAK = 16 << 20


def _samples(n: int = 4) -> list:
    return [{"i": i, "s": f"row {i}"} for i in range(n)]


def _write(out: Path, stored: bytes, n: int, chunk_bytes: int, compression=None, level=None, name="c-0.bin"):
    """One chunk file of ``n`` items of :func:`_samples`' format, as index.json describes it."""
    enc = ItemEncoder()
    for i, s in enumerate(_samples(1)):
        enc.encode(s, i)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_bytes(stored)
    entry = ChunkEntry(name, n, chunk_bytes, checksum=chunk_checksum(stored))  # the attacker rewrites it too
    config = IndexConfig(None, n, compression, enc.data_format, enc.data_spec, compression_level=level)
    (out / "index.json").write_bytes(render_index([entry], config))


def _classic(n: int = 4) -> bytes:
    enc = ItemEncoder()
    return build_chunk([enc.encode(s, i) for i, s in enumerate(_samples(n))])


def _peak(fn) -> tuple[BaseException, int]:
    tracemalloc.start()
    try:
        with pytest.raises(CorruptStateError) as info:
            fn()
        return info.value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _read_all(out: Path) -> list:
    return list(StreamingDataset(str(out)))


def _refused_by_reader_and_verify(out: Path, chunk: str, *words: str) -> None:
    error, peak = _peak(lambda: _read_all(out))
    assert chunk in str(error) and all(w in str(error) for w in words), error
    assert peak < PEAK, f"reader peak {peak:,} bytes"
    tracemalloc.start()
    try:
        report = verify(out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [d.filename for d in report.damaged] == [chunk] and all(w in report.damaged[0].problem for w in words)
    assert peak < PEAK, f"verify peak {peak:,} bytes"


# --- the index ----------------------------------------------------------------------------------


def test_a_chunk_named_twice_is_refused_by_every_reader_and_by_verify(tmp_path):
    out = tmp_path / "ds"
    entries = write_dataset(out, _samples(40), chunk_size=10)
    index = json.loads((out / "index.json").read_text())
    index["chunks"].insert(2, dict(index["chunks"][0]))  # 50 items listed, 40 exist
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(CorruptStateError, match=f"chunk 2 names '{entries[0].filename}' again"):
        StreamingDataset(str(out))
    report = verify(out)
    assert [d.filename for d in report.damaged] == ["index.json"]
    assert entries[0].filename in report.damaged[0].problem


@pytest.mark.parametrize("key", ["chunk_size", "chunk_bytes"])
@pytest.mark.parametrize("value", [2**64, 2**40])
def test_chunk_sizes_that_overflow_are_corrupt_not_overflow_errors(tmp_path, key, value):
    out = tmp_path / "ds"
    entries = write_dataset(out, _samples(4))
    index = json.loads((out / "index.json").read_text())
    index["chunks"][0][key] = value
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(CorruptStateError, match=f"{entries[0].filename}.*{key} {value:,}, more than a litdata chunk"):
        StreamingDataset(str(out))
    assert [d.filename for d in verify(out).damaged] == ["index.json"]


def test_an_unknown_checksum_algorithm_is_an_error_naming_it_not_a_skipped_check(tmp_path):
    out = tmp_path / "ds"
    write_dataset(out, _samples(4))
    index = json.loads((out / "index.json").read_text())
    index["chunks"][0]["checksum"] = "sha999:00ff"
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(CorruptStateError, match="checksum algorithm 'sha999' is not one this version"):
        StreamingDataset(str(out))
    report = verify(out)
    assert not report.ok and "sha999" in report.damaged[0].problem


# --- zstd bombs -------------------------------------------------------------------------------


@pytest.mark.parametrize("content_size", [True, False])
def test_a_whole_file_zstd_bomb_is_refused_at_the_size_index_json_gives(tmp_path, content_size):
    classic = _classic()
    bomb = zstandard.ZstdCompressor(write_content_size=content_size).compress(classic + bytes(BOMB))
    assert len(bomb) < 64 << 10
    _write(tmp_path / "ds", bomb, 4, len(classic), compression="zstd", name="c-0.zstd.bin")
    _refused_by_reader_and_verify(tmp_path / "ds", "c-0.zstd.bin", "decodes to more than", "index.json says")


def test_an_honest_compressed_chunk_still_reads_and_verifies(tmp_path):
    classic = _classic()
    for content_size in (True, False):
        out = tmp_path / f"ds{content_size}"
        stored = zstandard.ZstdCompressor(write_content_size=content_size).compress(classic)
        _write(out, stored, 4, len(classic), compression="zstd", name="c-0.zstd.bin")
        assert [s["i"] for s in _read_all(out)] == [0, 1, 2, 3] and verify(out).ok
    out = tmp_path / "several-frames"
    stored = compress(classic[:10], "zstd") + compress(classic[10:], "zstd")  # a stream of two frames
    _write(out, stored, 4, len(classic), compression="zstd", name="c-0.zstd.bin")
    assert [s["i"] for s in _read_all(out)] == [0, 1, 2, 3] and verify(out).ok


def test_a_framed_zstd_frame_inflating_past_its_table_is_refused(tmp_path):
    classic = _classic()
    framed = bytearray(pack_framed(classic, "zstd"))
    # the frame table says what the frame holds; the frame itself announces 64 MiB
    n = struct.unpack_from("<I", framed, 12)[0]
    table_at = 24 + 4 * (n + 1)
    _first, _count, at, size, raw_len = struct.unpack_from("<IIQII", framed, table_at)
    body = zstandard.ZstdCompressor(write_content_size=True).compress(bytes(BOMB))
    framed = framed[:at] + body
    struct.pack_into("<IIQII", framed, table_at, _first, _count, at, len(body), raw_len)
    _write(tmp_path / "ds", bytes(framed), 4, len(framed), compression="zstd", level="batch")
    _refused_by_reader_and_verify(tmp_path / "ds", "c-0.bin", "frame 0", "decodes to more than")


def test_verify_reads_litdatas_framed_and_per_item_zstd_as_the_reader_does(tmp_path):
    classic = _classic()
    for level, stored in (("batch", pack_framed(classic, "zstd")), ("sample", pack_sample(classic, "zstd"))):
        out = tmp_path / level
        _write(out, stored, 4, len(stored), compression="zstd", level=level)
        assert [s["i"] for s in _read_all(out)] == [0, 1, 2, 3]
        assert verify(out).ok, verify(out).damaged


@pytest.mark.parametrize("content_size", [True, False])
def test_per_item_zstd_bombs_stop_at_shardwrights_limit(tmp_path, content_size):
    enc = ItemEncoder()
    items = [enc.encode(s, i) for i, s in enumerate(_samples(3))]
    frames = [
        zstandard.ZstdCompressor(write_content_size=content_size).compress(item + bytes(6 << 20)) for item in items
    ]
    stored = build_chunk(frames)
    _write(tmp_path / "ds", stored, 3, len(stored), compression="zstd", level="sample")
    set_limits(max_decoded_bytes=8 << 20)
    try:
        _refused_by_reader_and_verify(
            tmp_path / "ds", "c-0.bin", "item 1 of a sample-zstd chunk", "shardwright's limit"
        )
    finally:
        reset_limits()


# --- Arrow footers ----------------------------------------------------------------------------


def _arrow_chunk(table, n: int) -> bytes:
    pa = pytest.importorskip("pyarrow")
    sink = io.BytesIO()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    ipc = sink.getvalue()
    header = 4 + 4 * (n + 1)
    return struct.pack(f"<{n + 2}I", n, *([header] * (n + 1))) + ipc + struct.pack("<I", len(ipc)) + b"LDARW01\0"


def test_an_arrow_footer_announcing_a_million_rows_is_refused_before_they_are_converted(tmp_path):
    pa = pytest.importorskip("pyarrow")
    stored = _arrow_chunk(pa.table({"i": pa.nulls(1_000_000)}), 2)
    assert len(stored) < 4096
    _write(tmp_path / "ds", stored, 2, len(stored))
    _refused_by_reader_and_verify(tmp_path / "ds", "c-0.bin", "more than the 2 rows")


def test_verify_refuses_the_arrow_footers_the_reader_refuses_and_passes_good_ones(tmp_path):
    pa = pytest.importorskip("pyarrow")
    good = _arrow_chunk(pa.table({"i": [1, 2, 3]}), 3)
    _write(tmp_path / "good", good, 3, len(good))
    assert [s["i"] for s in _read_all(tmp_path / "good")] == [1, 2, 3] and verify(tmp_path / "good").ok
    short = _arrow_chunk(pa.table({"i": [1, 2]}), 3)  # sizes agree with the index; two rows for three items
    _write(tmp_path / "short", short, 3, len(short))
    _refused_by_reader_and_verify(tmp_path / "short", "c-0.bin", "holds 2 rows but its header 3")


def test_a_zstd_bomb_fetched_through_the_cache_is_refused_at_the_indexed_size(tmp_path):
    classic = _classic()
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(classic + bytes(BOMB))
    _write(tmp_path / "ds", bomb, 4, len(classic), compression="zstd", name="c-0.zstd.bin")
    url = f"memory://bomb-{uuid.uuid4().hex}"  # a remote dataset: read through the chunk cache
    storage = open_storage(url)
    for path in (tmp_path / "ds").iterdir():
        storage.write_bytes(path.name, path.read_bytes())
    error, peak = _peak(lambda: list(StreamingDataset(url, cache_dir=str(tmp_path / "cache"))))
    assert "c-0.zstd.bin" in str(error) and "index.json says" in str(error) and peak < PEAK
