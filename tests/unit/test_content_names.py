"""Chunks named by their content (protocol 6, issue 35): the same call writes the same names,
and on local disk a content-named write never replaces a complete copy already there (the
copy a durable record may name), while a torn leftover under that name is replaced."""

from __future__ import annotations

import os

import pytest

from shardwright.format import build_chunk, chunk_checksum
from shardwright.protocol.commit import PendingChunk, RoundSettings, commit_round
from shardwright.protocol.layout import chunk_filename, is_our_chunk_name
from shardwright.storage import open_storage
from shardwright.storage.files import TMP_NAME_RE
from shardwright.storage.local import LocalStorage

DIGEST = "0123456789abcdef0123456789abcdef"


def test_names_carry_the_content_digest_and_older_names_stay_ours():
    assert chunk_filename(0, 3, 12, None, content=DIGEST) == f"chunk-0-00003-000012-{DIGEST}.bin"
    assert chunk_filename(2, 0, 0, "zstd", content=DIGEST) == f"chunk-2-00000-000000-{DIGEST}.zstd.bin"
    assert is_our_chunk_name(f"chunk-0-00003-000012-{DIGEST}.bin")
    assert is_our_chunk_name("chunk-0-00013-000000-1796440638407.bin"), "protocol 5's epoch names"
    assert not is_our_chunk_name("chunk-0-00003-000012-notahexdigest.bin")
    with pytest.raises(ValueError, match="hex"):
        chunk_filename(0, 0, 0, None, content="../x")


def _round(storage, items: list[bytes], epoch: int) -> str:
    settings = RoundSettings("run", 0, None, False, epoch=epoch)
    (record,) = commit_round(storage, [PendingChunk(0, 0, items, 0, 1, 0, True, prev_epoch=None)], settings)
    return record.chunk.filename


def test_two_writers_of_the_same_chunk_write_one_name_whatever_their_epochs(tmp_path):
    storage = open_storage(str(tmp_path), create=True)
    first = _round(storage, [b"a", b"bc"], epoch=111)
    again = _round(storage, [b"a", b"bc"], epoch=222)  # a later holder (or run) cutting the same chunk
    other = _round(storage, [b"a", b"bd"], epoch=333)  # a writer that cut other items
    digest = chunk_checksum(build_chunk([b"a", b"bc"])).partition(":")[2]
    assert first == again == chunk_filename(0, 0, 0, None, content=digest)
    assert other != first
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted({first, other})


@pytest.mark.parametrize("pinned", [False, True], ids=["by-path", "pinned"])
def test_local_disk_keeps_a_complete_copy_and_replaces_a_torn_one(tmp_path, monkeypatch, pinned):
    if pinned:  # a service job's held output: written through the directory's descriptor
        from shardwright.storage.pin import PIN_ENV, pin_directory

        monkeypatch.delenv(PIN_ENV, raising=False)
        pin_directory(os.path.realpath(tmp_path))
        monkeypatch.setenv(PIN_ENV, os.environ[PIN_ENV])  # undone after the test
    from shardwright.storage.pin import pin_for

    assert (pin_for(os.path.realpath(tmp_path)) is not None) is pinned  # which path this test takes
    storage = open_storage(str(tmp_path), create=True)
    data = build_chunk([b"x" * 100, b"y" * 50])
    name = chunk_filename(0, 0, 0, None, content=chunk_checksum(data).partition(":")[2])
    storage.write_content_named(name, [data], durable=True)
    inode = os.stat(tmp_path / name).st_ino
    # a late writer with the same bytes: the file (the inode a barrier made durable) stays
    storage.write_content_named(name, [data[:10], data[10:]], durable=False)
    storage.barrier()
    assert os.stat(tmp_path / name).st_ino == inode
    assert (tmp_path / name).read_bytes() == data
    # what a power cut leaves of a file whose barrier never completed: NUL bytes, or less
    for torn in (b"\0" * len(data), data[:7]):
        (tmp_path / name).write_bytes(torn)
        storage.write_content_named(name, [data], durable=False)
        storage.barrier()
        assert (tmp_path / name).read_bytes() == data
    assert not [p.name for p in tmp_path.iterdir() if TMP_NAME_RE.match(p.name)], "no temp file left"


def test_the_object_store_default_replaces_with_identical_bytes():
    storage = open_storage("memory://content-names", create=True)
    storage.write_content_named("chunk-0-00000-000000-" + DIGEST + ".bin", [b"ab", b"c"], durable=False)
    storage.write_content_named("chunk-0-00000-000000-" + DIGEST + ".bin", [b"abc"], durable=False)
    assert storage.read_bytes("chunk-0-00000-000000-" + DIGEST + ".bin") == b"abc"


def test_cleanup_removes_the_temp_files_of_killed_chunk_writers(tmp_path):
    """A writer SIGKILLed between creating its temp file and placing it leaves a hidden file in
    the dataset's folder; the run's cleanup (after publishing) removes those of its generation."""
    from shardwright.protocol.publish import discard_run_state

    storage = open_storage(str(tmp_path), create=True)
    # the side lock that replacing a torn leftover took (storage.keep_same)
    lock = os.path.basename(
        LocalStorage(str(tmp_path))._cas_lock(str(tmp_path / f"chunk-0-00003-000000-{DIGEST}.bin")).path
    )
    leftovers = [
        lock,
        f".chunk-0-00001-000135-{DIGEST}.bin.tmp-32725-140294534198976-d9868e8d9e",
        ".chunk-0-00002-000000.bin.tmp-1-2-00000000ab",
    ]
    kept = [f".chunk-10-00000-000000-{DIGEST}.bin.tmp-5-6-00000000cd", ".notes.tmp-1-2-00000000ab", ".hidden"]
    for name in leftovers + kept:
        (tmp_path / name).write_bytes(b"")
    discard_run_state(storage, 0)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(kept)
