"""Trust round 6 (docs/trust-round6.md): a FIFO put where index.json, a chunk or a state file
is expected blocked the reader, verify and a run for ever; verify read a chunk file whole
whatever its size (4 GiB for a 148-byte entry). Each read now refuses in one line, at once."""

from __future__ import annotations

import os
import threading
import tracemalloc

import pytest

from shardwright import StreamingDataset
from shardwright.errors import CorruptStateError
from shardwright.protocol.manifest import read_manifest
from shardwright.reader.verify import verify
from shardwright.storage import open_storage
from support.datasets import write_dataset


def finishes(call, seconds: float = 20.0):
    """``call()``'s outcome (its result or exception), failing the test when it blocks: the
    call runs in a daemon thread, and a blocked one is left behind (a FIFO never opened for
    writing blocks its reader's open for ever)."""
    outcome: list = []

    def run():
        try:
            outcome.append(call())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"blocked for {seconds:.0f} s"
    return outcome[0]


def dataset(tmp_path):
    out = tmp_path / "d"
    entries = write_dataset(out, [{"i": i} for i in range(8)], chunk_size=4)
    return out, entries


def test_a_fifo_in_a_chunks_place_is_refused_by_the_reader_and_verify(tmp_path):
    out, entries = dataset(tmp_path)
    chunk = out / entries[0].filename
    os.remove(chunk)
    os.mkfifo(chunk)
    said = finishes(lambda: StreamingDataset(str(out))[0])
    assert isinstance(said, CorruptStateError) and "not a regular file" in str(said), said
    report = finishes(lambda: verify(str(out)))
    assert not report.ok and "not a regular file" in report.damaged[0].problem


@pytest.mark.parametrize("call", [lambda d: StreamingDataset(d), lambda d: verify(d)], ids=["reader", "verify"])
def test_a_fifo_as_index_json_is_refused(tmp_path, call):
    out, _ = dataset(tmp_path)
    os.remove(out / "index.json")
    os.mkfifo(out / "index.json")
    said = finishes(lambda: call(str(out)))
    assert isinstance(said, CorruptStateError) and "index.json is not a regular file" in str(said), said


def test_a_fifo_as_a_state_file_is_refused(tmp_path):
    storage = open_storage(str(tmp_path))
    os.makedirs(tmp_path / ".shardwright")
    os.mkfifo(tmp_path / ".shardwright" / "manifest.json")
    said = finishes(lambda: read_manifest(storage))
    assert isinstance(said, CorruptStateError) and "manifest.json is not a regular file" in str(said), said


def test_verify_never_reads_more_of_a_chunk_than_its_entry_says(tmp_path):
    out, entries = dataset(tmp_path)
    with open(out / entries[0].filename, "r+b") as f:
        f.truncate(4 << 30)  # sparse: the size a reader would believe, no disk
    tracemalloc.start()
    try:
        report = verify(str(out))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, f"{peak:,} bytes allocated to check a {entries[0].chunk_bytes}-byte chunk"
    assert not report.ok and "4,294,967,296 bytes but index.json says" in report.damaged[0].problem


def test_an_index_entry_copied_under_another_name_is_refused_by_the_reader(tmp_path):
    """Round 4's duplicate chunk name, varied: chunk 0 copied under another name with a second
    entry. verify said the digest no longer matched; the reader yielded its items twice."""
    import json
    import shutil

    out, entries = dataset(tmp_path)
    index = json.loads((out / "index.json").read_text())
    copy = dict(index["chunks"][0], filename=entries[0].filename.replace("-00000-", "-00099-"))
    shutil.copy(out / entries[0].filename, out / copy["filename"])
    index["chunks"].append(copy)
    (out / "index.json").write_text(json.dumps(index))
    with pytest.raises(CorruptStateError, match="do not give the digest it records"):
        StreamingDataset(str(out))


def test_verify_refuses_a_content_name_that_disagrees_with_the_checksum(tmp_path):
    """Protocol 6 names a chunk by its checksum; a chunk renamed by hand (the index's
    filename edited to match, its checksum still true) was reported intact."""
    import json

    from shardwright.protocol.layout import chunk_filename

    out, entries = dataset(tmp_path)
    index = json.loads((out / "index.json").read_text())
    checksum = index["chunks"][0]["checksum"].partition(":")[2]
    named = chunk_filename(0, 0, 0, None, content=checksum)
    renamed = chunk_filename(0, 0, 0, None, content="0" * len(checksum))
    os.rename(out / entries[0].filename, out / named)  # support.datasets names chunks its own way
    index["chunks"][0]["filename"] = named
    (out / "index.json").write_text(json.dumps(index))
    assert verify(str(out)).ok
    os.rename(out / named, out / renamed)
    index["chunks"][0]["filename"] = renamed
    (out / "index.json").write_text(json.dumps(index))
    report = verify(str(out))
    assert not report.ok and "its name says checksum 000" in report.damaged[0].problem


def test_a_gzipped_jsonl_cut_short_is_named(tmp_path):
    """A .jsonl.gz cut short was a raw EOFError from gzip."""
    import gzip

    from shardwright import sources
    from shardwright.errors import InputsError

    path = tmp_path / "rows.jsonl.gz"
    packed = gzip.compress(b"".join(b'{"v":%d}\n' % i for i in range(1000)))
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(InputsError, match=r"rows\.jsonl\.gz is not a complete compressed file"):
        len(sources.jsonl(str(path)))


@pytest.mark.parametrize("cut", [0.5, 0.999, "checksum"])
def test_a_zstd_jsonl_cut_short_is_refused_not_read_as_fewer_rows(tmp_path, cut):
    """Case 37: a .jsonl.zst cut short was read as the rows before the cut, silently (zstandard's
    stream_reader ends at the file's end even inside a frame); the frames are now walked as
    they are read (sources.zstd_frames)."""
    zstandard = pytest.importorskip("zstandard")
    from shardwright import sources
    from shardwright.errors import InputsError

    rows = b"".join(b'{"v":%d}\n' % i for i in range(100_000))
    packed = zstandard.ZstdCompressor(write_checksum=True).compress(rows)
    end = len(packed) - 2 if cut == "checksum" else int(len(packed) * cut)
    path = tmp_path / "rows.jsonl.zst"
    path.write_bytes(packed[:end])
    with pytest.raises(InputsError, match=r"rows\.jsonl\.zst is not a complete compressed file.*cut short"):
        len(sources.jsonl(str(path)))


def test_complete_zstd_jsonl_of_several_frames_reads_every_row(tmp_path):
    """Frames with and without checksums and content sizes, a skippable frame between them,
    an empty frame, and a frame of RLE blocks: every row once (the walk must not refuse them)."""
    zstandard = pytest.importorskip("zstandard")
    from shardwright import sources

    first = b"".join(b'{"v":%d}\n' % i for i in range(50_000))
    second = b'{"v":"x"}\n' * 20_000  # long runs: RLE and repeat-heavy blocks
    skippable = (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"12345"
    parts = [
        zstandard.ZstdCompressor(write_checksum=True).compress(first),
        skippable,
        zstandard.ZstdCompressor(write_content_size=False).compress(b""),
        zstandard.ZstdCompressor(level=19, write_checksum=False).compress(second),
    ]
    chunker = zstandard.ZstdCompressor().chunker(chunk_size=4096)  # a frame of several blocks, streamed
    streamed = b"".join(chunker.compress(b'{"v":"s"}\n' * 10_000)) + b"".join(chunker.finish())
    path = tmp_path / "rows.jsonl.zst"
    path.write_bytes(b"".join(parts) + streamed)
    rows = list(sources.jsonl(str(path)))
    assert len(rows) == 80_000


def test_an_index_replaced_by_a_link_to_another_datasets_is_refused(tmp_path):
    """Case 25: index.json replaced by a symbolic link to another dataset's index was followed
    (40 items of the other dataset read, verify "intact"); the local backend now reads none of
    its keys through a link, as chunks already were not."""
    from shardwright import StreamingDataset, optimize, verify
    from shardwright.errors import CorruptStateError

    for name, n in (("a", 10), ("b", 40)):
        optimize(lambda i: {"i": i}, list(range(n)), str(tmp_path / name), num_workers=1, verbose=False)
    index = tmp_path / "a" / "index.json"
    index.unlink()
    index.symlink_to(tmp_path / "b" / "index.json")
    with pytest.raises(CorruptStateError, match=r"index\.json is a symbolic link; shardwright never reads"):
        StreamingDataset(str(tmp_path / "a"))
    with pytest.raises(CorruptStateError, match="symbolic link"):  # verify refuses it as a bad index
        verify(str(tmp_path / "a"))
