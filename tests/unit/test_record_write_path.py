"""The checks and writes a worker makes before and for each commit record (issue 36): the lease
and claim checks read the lease with one read, take its owner as :class:`LeaseHolder` reads it,
and still ask storage every time."""

from __future__ import annotations

import json
import os

import pytest

from shardwright.errors import CorruptStateError, LeaseLostError
from shardwright.protocol.lease import LeaseHolder, check_still_held, lease_owner
from shardwright.storage.local import LocalStorage

KEY = "leases/node-0.json"


def _reads_of_this_thread() -> int:
    with open("/proc/thread-self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("syscr:"))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"owner":"run-a","host":"h","pid":1}',
        b'{"owner":"' + b"o" * 1500 + b'"}',  # read as its first 1,000 characters
        b'{"owner":7}',
        b'{"owner":null}',
        b'{"host":"h"}',
        b'["owner","run-a"]',
        b'"run-a"',
        b"{not json",
        b"[" * 100_000 + b"]" * 100_000,  # deeper than json goes
        b'{"owner":"run-a","epoch":"x","current_inputs":{"a":1},"ttl":1e400}',
    ],
)
def test_the_owner_a_check_reads_is_the_one_a_lease_holder_reads(tmp_path, raw):
    storage = LocalStorage(tmp_path)
    storage.write_bytes(KEY, raw)
    holder = LeaseHolder.parse(raw, "where")
    assert lease_owner(storage, KEY) == (holder.owner if holder is not None else None)


def test_every_check_asks_storage_again(tmp_path):
    """Fencing: nothing of the lease is kept between checks, so a takeover between two record
    writes stops the second."""
    storage = LocalStorage(tmp_path)
    storage.write_bytes(KEY, json.dumps({"owner": "run-a"}).encode())
    check_still_held(storage, KEY, "run-a")
    storage.write_bytes(KEY, json.dumps({"owner": "run-b"}).encode())
    with pytest.raises(LeaseLostError, match="taken over"):
        check_still_held(storage, KEY, "run-a")
    storage.delete(KEY)
    with pytest.raises(LeaseLostError):
        check_still_held(storage, KEY, "run-b")


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/io"), reason="needs Linux's per-thread I/O counts")
def test_a_lease_check_reads_the_file_with_one_read(tmp_path):
    """It was two (a buffered read asks again at the end of the file) after two more fstats
    and an ioctl; a worker checks its lease and each claim before every record write."""
    storage = LocalStorage(tmp_path)
    storage.write_bytes(KEY, json.dumps({"owner": "run-a", "host": "h" * 300}).encode())
    check_still_held(storage, KEY, "run-a")
    before = _reads_of_this_thread()
    own = _reads_of_this_thread() - before  # the reads of the count itself
    check_still_held(storage, KEY, "run-a")
    assert _reads_of_this_thread() - before - 2 * own == 1


def test_a_bounded_read_keeps_its_bounds_and_refusals(tmp_path):
    storage = LocalStorage(tmp_path)
    storage.write_bytes("a.json", b"x" * 100)
    assert storage.read_at_most("a.json", 100) == b"x" * 100
    assert storage.read_at_most("a.json", 99) is None
    storage.write_bytes("empty.json", b"")
    assert storage.read_at_most("empty.json", 0) == b""
    with pytest.raises(FileNotFoundError):
        storage.read_at_most("missing.json", 100)
    os.symlink(tmp_path / "a.json", tmp_path / "link.json")
    with pytest.raises(CorruptStateError, match="symbolic link"):
        storage.read_at_most("link.json", 100)
    os.mkfifo(tmp_path / "fifo.json")  # never blocks
    with pytest.raises(CorruptStateError, match="not a regular file"):
        storage.read_at_most("fifo.json", 100)
    os.mkdir(tmp_path / "dir.json")
    with pytest.raises(IsADirectoryError):
        storage.read_at_most("dir.json", 100)
