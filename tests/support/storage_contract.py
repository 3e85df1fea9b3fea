"""The storage contract: one behaviour suite every :class:`~shardwright.storage.Storage`
backend passes (arrow's ``GenericFileSystemTest`` plays this part there).

A backend's test class subclasses :class:`StorageContract`, provides a ``make_storage``
fixture (a factory: ``make_storage(extra_options=None)`` opens a fresh, empty location; the
extra options use S3's part-size names, which a backend translates or ignores) and sets the
capability flags its backend has. Memory and local run in tests/unit
(test_storage_contract.py), S3, GCS and Azure in tests/system (test_storage.py).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import os
import pickle
import threading
import time
from collections.abc import Iterable

import pytest

from shardwright.storage import Storage

__all__ = ["MiB", "StorageContract"]

MiB = 1024 * 1024


def _race_create(storage, worker, keys, barrier, out):
    barrier.wait()
    won = [k for k in keys if storage.create_exclusive(k, f"worker-{worker}".encode())]
    out.put((worker, won))


def _race_cas(storage, worker, n, barrier, out):
    barrier.wait()
    done = 0
    conflicts = 0
    while done < n:
        data, version = storage.read_versioned("counter")
        if storage.replace_if_version("counter", str(int(data) + 1).encode(), version):
            done += 1
        else:
            conflicts += 1
    out.put((worker, conflicts))


def _run_procs(target, nprocs, *args):
    ctx = multiprocessing.get_context("fork")  # the engine forks too: clients must not be shared
    barrier = ctx.Barrier(nprocs)
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(args[0], w, *args[1:], barrier, out)) for w in range(nprocs)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return results


class StorageContract:
    """Every test of the contract; subclasses name their backend by fixture and flags."""

    #: keys are files on local disk (``local_path`` answers, the root is a directory)
    local_files: bool = False
    #: ``barrier()`` flushes deferred writes with fsync/syncfs (local disk)
    fsync_barrier: bool = False
    #: several processes may share one location (MemoryStorage is single-process)
    multi_process: bool = True
    #: an input view reads ``x//y`` as a distinct name, as it was stored (memory, AWS S3)
    keeps_raw_names: bool = False
    #: how many replaces the torn-read test races readers against (each is a round trip on a cloud)
    replace_rounds: int = 60
    #: ``delete_if_version`` is one conditional request (GCS, Azure), not left to the caller (None)
    conditional_delete: bool = False

    def secrets(self, storage: Storage) -> Iterable[str]:
        """Strings of this backend's options that its repr must never show."""
        return ()

    def check_multipart(self, storage: Storage, key: str) -> None:
        """Backend-specific proof that ``key`` went up in parts (nothing by default)."""

    @pytest.fixture
    def storage(self, make_storage) -> Storage:
        return make_storage()

    @pytest.fixture
    def shared_storage(self, make_storage) -> Storage:
        """A fresh location that several processes use at once."""
        if not self.multi_process:
            pytest.skip("this backend is single-process by design")
        return make_storage()

    def test_roundtrip_and_missing_keys(self, storage):
        storage.check()
        assert storage.list() == []
        storage.write_bytes("a/b/c.bin", b"hello")
        storage.write_bytes("top.json", b"{}")
        assert storage.read_bytes("a/b/c.bin") == b"hello"
        assert storage.exists("a/b/c.bin") and not storage.exists("a/b/nope")
        assert storage.size("a/b/c.bin") == 5
        storage.write_bytes("a/b/c.bin", b"replaced")
        assert storage.read_bytes("a/b/c.bin") == b"replaced"
        storage.write_bytes("empty", b"")
        assert storage.read_bytes("empty") == b"" and storage.size("empty") == 0
        assert storage.list() == ["a/b/c.bin", "empty", "top.json"]
        with pytest.raises(FileNotFoundError):
            storage.read_bytes("missing")
        with pytest.raises(FileNotFoundError):
            storage.size("missing")
        assert storage.read_versioned("missing") is None
        storage.delete("missing")  # fine
        storage.delete("top.json")
        assert not storage.exists("top.json")
        with pytest.raises(ValueError):
            storage.write_bytes("../escape", b"x")
        # copies for worker processes, without secrets in repr
        clone = pickle.loads(pickle.dumps(storage))
        assert clone.read_bytes("a/b/c.bin") == b"replaced"
        if self.local_files:
            assert open(storage.local_path("a/b/c.bin"), "rb").read() == b"replaced"
        else:
            assert storage.local_path("a/b/c.bin") is None
        for secret in self.secrets(storage):
            assert secret not in repr(storage)
        assert "AccountKey" not in repr(storage) and "AccountKey" not in str(vars(storage).get("url"))

    def test_write_parts_is_write_bytes_of_their_concatenation(self, storage):
        """The chunk writer's path for large items: parts of any bytes-like type, empty ones too,
        more than one writev takes (IOV_MAX 1024), deferred durability like write_bytes."""
        parts = [
            b"head",
            b"",
            memoryview(b"middle"),
            bytearray(b"!"),
            *(bytes([k % 256]) * (k % 7) for k in range(2500)),
        ]
        storage.write_parts("chunks/c.bin", parts, durable=False)
        storage.barrier()
        assert storage.read_bytes("chunks/c.bin") == b"".join(parts)
        storage.write_parts("chunks/c.bin", [b"replaced"])
        assert storage.read_bytes("chunks/c.bin") == b"replaced"
        storage.write_parts("chunks/none.bin", [])
        assert storage.read_bytes("chunks/none.bin") == b""
        with pytest.raises(ValueError):
            storage.write_parts("../escape", [b"x"])

    @pytest.mark.parametrize("has_syncfs", [True, False])
    def test_deferred_durability_and_barrier(self, storage, monkeypatch, has_syncfs):
        import shardwright.storage.local as local_module

        synced, syncfs_calls = [], []
        real_fsync, real_syncfs = os.fsync, local_module.syncfs
        monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
        monkeypatch.setattr(
            local_module,
            "syncfs",
            lambda path: (syncfs_calls.append(path), real_syncfs(path) if has_syncfs else False)[1],
        )
        many = local_module.SYNCFS_MIN_FILES + 1
        for i in range(many):
            storage.write_bytes(f"chunks/c{i}", b"x" * i, durable=False)
        assert synced == [] and syncfs_calls == []  # no flush per write...
        storage.barrier()
        if self.fsync_barrier and has_syncfs:
            assert len(syncfs_calls) == 1 and synced == []  # ...one syncfs for a batch of many files
        elif self.fsync_barrier:
            assert len(synced) == many + 1  # ...or one fsync per file plus their directory
        syncfs_calls.clear()
        synced.clear()
        storage.barrier()  # nothing pending
        assert synced == [] and syncfs_calls == []
        assert [storage.read_bytes(f"chunks/c{i}") for i in range(many)] == [b"x" * i for i in range(many)]
        # a batch of a few (large) files: an fsync each, never a flush of every writer's pages
        for i in range(3):
            storage.write_bytes(f"big/b{i}", b"y" * i, durable=False)
        storage.barrier()
        if self.fsync_barrier:
            assert syncfs_calls == [] and len(synced) == 3 + 1

    def test_append_bytes_where_the_backend_appends_else_refused(self, storage):
        """Record logs (protocol.record_log) append where ``APPENDS``; every other backend
        refuses, writing nothing, and an input view refuses on any backend."""
        with pytest.raises(PermissionError):
            storage.input_view().append_bytes("logs/a", b"x\n", create=True)
        if not storage.APPENDS:
            with pytest.raises(NotImplementedError):
                storage.append_bytes("logs/a", b"x\n", create=True)
            assert storage.list("logs/") == []
            return
        with pytest.raises(FileNotFoundError):
            storage.append_bytes("logs/a", b"x\n", create=False)  # appends go to a log created first
        storage.append_bytes("logs/a", b"one\n", create=True)
        with pytest.raises(FileExistsError):
            storage.append_bytes("logs/a", b"two\n", create=True)  # a created log is never another's
        storage.append_bytes("logs/a", b"two\n", create=False)
        storage.barrier()
        assert storage.read_bytes("logs/a") == b"one\ntwo\n" and storage.list("logs/") == ["logs/a"]

    def test_deferred_create_and_delete(self, storage, monkeypatch):
        """create_exclusive and delete with durable=False: exclusive and visible at once, no
        flush of their own (local disk: no fsync), made durable by the next barrier (the
        deletion's directory once, not once per deleted file)."""
        synced: list[int] = []
        real_fsync = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
        assert storage.create_exclusive("leases/a.json", b"one", durable=False)
        assert not storage.create_exclusive("leases/a.json", b"two", durable=False)
        assert not storage.create_exclusive("leases/a.json", b"three")
        assert storage.read_bytes("leases/a.json") == b"one"
        storage.create_exclusive("leases/b.json", b"b", durable=False)
        storage.delete("leases/a.json", durable=False)
        storage.delete("leases/b.json", durable=False)
        storage.delete("leases/missing.json", durable=False)
        assert storage.list("leases/") == []
        assert storage.create_exclusive("leases/a.json", b"again", durable=False)
        assert synced == []  # nothing flushed yet
        storage.barrier()
        if self.fsync_barrier:
            assert len(synced) == 2  # the one file left, and the directory once
        synced.clear()
        storage.barrier()
        assert synced == []
        assert storage.read_bytes("leases/a.json") == b"again"

    def test_download_to_is_atomic_copy(self, storage, tmp_path):
        data = os.urandom(3 * MiB + 7)
        storage.write_bytes("x/blob", data)
        dst = tmp_path / "cache" / "sub" / "blob"
        storage.download_to("x/blob", str(dst))
        assert dst.read_bytes() == data
        assert os.listdir(dst.parent) == ["blob"]  # no temp files left
        with pytest.raises(FileNotFoundError):
            storage.download_to("x/missing", str(tmp_path / "cache" / "m"))
        assert not (tmp_path / "cache" / "m").exists()

    def test_list_prefix_semantics_and_delete_prefix(self, storage):
        for k in [
            "chunks/chunk-1.bin",
            "chunks/chunk-10.bin",
            "chunks/chunk-2.bin",
            "chunks/sub/x",
            "index.json",
            "chunksfoo",
        ]:
            storage.write_bytes(k, k.encode())
        assert storage.list("chunks/") == [
            "chunks/chunk-1.bin",
            "chunks/chunk-10.bin",
            "chunks/chunk-2.bin",
            "chunks/sub/x",
        ]
        assert storage.list("chunks/chunk-1") == ["chunks/chunk-1.bin", "chunks/chunk-10.bin"]
        assert storage.list("chunks") == [
            "chunks/chunk-1.bin",
            "chunks/chunk-10.bin",
            "chunks/chunk-2.bin",
            "chunks/sub/x",
            "chunksfoo",
        ]
        assert storage.list("nothing/") == []
        storage.delete_prefix("chunks/")
        assert storage.list() == ["chunksfoo", "index.json"]
        storage.delete_prefix("")
        assert storage.list() == []
        if self.local_files:
            assert os.path.isdir(storage.root) and os.listdir(storage.root) == []

    def test_atomic_replace_readers_never_see_torn_data(self, storage):
        a, b = b"a" * (2 * MiB), b"b" * (2 * MiB)
        storage.write_bytes("obj", a)
        stop = threading.Event()
        bad = []

        def reader():
            while not stop.is_set():
                got = storage.read_bytes("obj")
                if got not in (a, b):
                    bad.append(len(got))

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            for i in range(self.replace_rounds):
                storage.write_bytes("obj", a if i % 2 else b)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert bad == []
        assert storage.list() == ["obj"]  # temp files are never listed

    def test_multipart_object_above_threshold(self, make_storage):
        storage = make_storage({"multipart_threshold": 5 * MiB, "multipart_chunksize": 5 * MiB})
        data = os.urandom(12 * MiB + 123)
        storage.write_bytes("big/one.bin", data)
        assert storage.size("big/one.bin") == len(data)
        assert storage.read_bytes("big/one.bin") == data
        self.check_multipart(storage, "big/one.bin")

    def test_list_paginates_beyond_1000(self, storage):
        keys = [f"many/k{i:05d}" for i in range(1105)]
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda k: storage.write_bytes(k, b"x"), keys))
        storage.write_bytes("other", b"y")
        assert storage.list("many/") == keys
        assert len(storage.list()) == 1106
        storage.delete_prefix("many/")  # more than one 1000-key batch on S3
        assert storage.list() == ["other"]

    # --------------------------------------------------------------------------------------
    # create_exclusive and compare-and-swap, raced by threads (every backend) and by real
    # processes (the backends processes can share)
    # --------------------------------------------------------------------------------------

    def test_create_exclusive_race_between_threads(self, storage):
        keys = [f"claims/{i}" for i in range(40)]
        nthreads = 8
        start = threading.Barrier(nthreads)

        def race(worker: int) -> list[str]:
            start.wait()
            return [k for k in keys if storage.create_exclusive(k, f"thread-{worker}".encode())]

        with concurrent.futures.ThreadPoolExecutor(nthreads) as ex:
            results = list(ex.map(race, range(nthreads)))
        winners = [(k, w) for w, won in enumerate(results) for k in won]
        assert sorted(k for k, _ in winners) == sorted(keys)  # every key won exactly once
        for k, w in winners:
            assert storage.read_bytes(k) == f"thread-{w}".encode()

    def test_compare_and_swap_race_between_threads_loses_no_update(self, storage):
        storage.write_bytes("counter", b"0")
        nthreads, n = 6, 10
        start = threading.Barrier(nthreads)

        def bump(_worker: int) -> int:
            start.wait()
            done = conflicts = 0
            while done < n:
                data, version = storage.read_versioned("counter")
                if storage.replace_if_version("counter", str(int(data) + 1).encode(), version):
                    done += 1
                else:
                    conflicts += 1
            return conflicts

        with concurrent.futures.ThreadPoolExecutor(nthreads) as ex:
            list(ex.map(bump, range(nthreads)))
        assert storage.read_bytes("counter") == str(nthreads * n).encode()

    def test_create_exclusive_race_exactly_one_winner(self, shared_storage):
        storage = shared_storage
        storage.check()  # the parent has a live client before forking
        keys = [f"claims/{i}" for i in range(60)]
        assert storage.create_exclusive("claims/pre", b"parent") is True
        assert storage.create_exclusive("claims/pre", b"again") is False
        assert storage.read_bytes("claims/pre") == b"parent"
        results = _run_procs(_race_create, 6, storage, keys)
        winners = {}
        for worker, won in results:
            for k in won:
                assert k not in winners, f"{k} won by {winners[k]} and {worker}"
                winners[k] = worker
        assert sorted(winners) == sorted(keys)
        for k, w in winners.items():
            assert storage.read_bytes(k) == f"worker-{w}".encode()
        assert sorted(storage.list("claims/")) == sorted(keys + ["claims/pre"])

    def test_compare_and_swap(self, storage):
        storage.write_bytes("lease", b"v1")
        data, v1 = storage.read_versioned("lease")
        assert data == b"v1"
        assert storage.replace_if_version("lease", b"v2", v1) is True
        assert storage.replace_if_version("lease", b"v3", v1) is False  # stale version refused
        data, v2 = storage.read_versioned("lease")
        assert data == b"v2" and v2 != v1
        storage.write_bytes("lease", b"v4")  # any replace changes the version
        assert storage.replace_if_version("lease", b"v5", v2) is False
        assert storage.read_bytes("lease") == b"v4"
        _, v4 = storage.read_versioned("lease")
        storage.delete("lease")
        assert storage.replace_if_version("lease", b"v6", v4) is False  # deleted: nothing to swap
        assert not storage.exists("lease")

    def test_compare_and_swap_race_loses_no_update(self, shared_storage):
        storage = shared_storage
        storage.write_bytes("counter", b"0")
        nprocs, n = 4, 8
        _run_procs(_race_cas, nprocs, storage, n)
        assert storage.read_bytes("counter") == str(nprocs * n).encode()

    # --------------------------------------------------------------------------------------
    # Input reads: ranged reads, listings with metadata, the read-only view
    # --------------------------------------------------------------------------------------

    def test_read_range_reads_exactly_the_range(self, storage):
        data = bytes(range(256)) * 40  # 10,240 bytes
        storage.write_bytes("d/blob.bin", data)
        assert storage.read_range("d/blob.bin", 0, 10) == data[:10]
        assert storage.read_range("d/blob.bin", 1000, 4096) == data[1000:5096]
        assert storage.read_range("d/blob.bin", 10_200, 100) == data[10_200:]  # cut at the end
        assert storage.read_range("d/blob.bin", 10_240, 5) == b""  # at the end
        assert storage.read_range("d/blob.bin", 50_000, 5) == b""  # past it
        assert storage.read_range("d/blob.bin", 7, 0) == b""
        with pytest.raises(FileNotFoundError):
            storage.read_range("d/missing.bin", 0, 1)
        with pytest.raises(ValueError):
            storage.read_range("d/blob.bin", -1, 5)
        with pytest.raises(ValueError):
            storage.read_range("d/blob.bin", 0, -5)

    def test_read_at_most_bounds_what_it_reads(self, storage):
        storage.write_bytes("d/state.json", b"x" * 1000)
        storage.write_bytes("d/empty.json", b"")
        assert storage.read_at_most("d/state.json", 1000) == b"x" * 1000
        assert storage.read_at_most("d/state.json", 5000) == b"x" * 1000
        assert storage.read_at_most("d/state.json", 999) is None  # too large: the caller refuses it
        storage.write_bytes("d/big.bin", b"y" * (65 << 20))  # refused by its size, not downloaded
        assert storage.read_at_most("d/big.bin", 64 << 20) is None
        assert storage.read_at_most("d/empty.json", 10) == b""
        with pytest.raises(FileNotFoundError):
            storage.read_at_most("d/missing.json", 10)

    def test_read_versioned_at_most_bounds_the_swap_path(self, storage):
        storage.write_bytes("d/lease.json", b"x" * 1000)
        storage.write_bytes("d/empty.json", b"")
        data, version = storage.read_versioned_at_most("d/lease.json", 1000)
        assert data == b"x" * 1000 and version
        assert storage.replace_if_version("d/lease.json", b"mine", version)  # the version swaps as ever
        storage.write_bytes("d/lease.json", b"y" * 1001)
        assert storage.read_versioned_at_most("d/lease.json", 1000)[0] is None  # too large: refused
        data, version = storage.read_versioned_at_most("d/empty.json", 10)
        assert data == b"" and version
        assert storage.replace_if_version("d/empty.json", b"mine", version)
        assert storage.read_versioned_at_most("d/missing.json", 10) is None

    def test_write_if_version_returns_the_version_it_wrote(self, storage):
        written, version = storage.write_if_version("d/lease.json", b"first", None)
        assert written and version == storage.read_versioned("d/lease.json")[1]
        assert storage.write_if_version("d/lease.json", b"other", None) == (False, None)  # exists
        written, renewed = storage.write_if_version("d/lease.json", b"second", version)
        assert written and renewed != version and renewed == storage.read_versioned("d/lease.json")[1]
        assert storage.write_if_version("d/lease.json", b"stale", version) == (False, None)  # fenced
        assert storage.read_bytes("d/lease.json") == b"second"
        storage.delete("d/lease.json")
        assert storage.write_if_version("d/lease.json", b"gone", renewed) == (False, None)

    def test_delete_if_version_deletes_only_that_version(self, storage):
        _, first = storage.write_if_version("d/lease.json", b"first", None)
        _, second = storage.write_if_version("d/lease.json", b"second", first)
        stale = storage.delete_if_version("d/lease.json", first)
        if stale is None:  # no conditional delete on this backend: callers compare, then delete
            assert self.conditional_delete is False
            return
        assert self.conditional_delete is True
        assert stale is False and storage.read_bytes("d/lease.json") == b"second"  # a takeover's file stays
        assert storage.delete_if_version("d/lease.json", second) is True
        assert not storage.exists("d/lease.json")
        assert storage.delete_if_version("d/lease.json", second) is False  # gone

    def test_list_info_sizes_versions_and_order(self, storage):
        from shardwright.storage.base import ObjectInfo

        storage.write_bytes("in/b.txt", b"bb")
        storage.write_bytes("in/a.txt", b"a")
        storage.write_bytes("in/sub/c.txt", b"ccc")
        storage.write_bytes("other.txt", b"o")
        infos = storage.list_info("in/")
        assert [i.key for i in infos] == ["in/a.txt", "in/b.txt", "in/sub/c.txt"] == storage.list("in/")
        assert [i.size for i in infos] == [1, 2, 3]
        assert all(isinstance(i, ObjectInfo) and i.version for i in infos)
        assert [i.key for i in storage.list_info()] == storage.list()
        before = {i.key: i.version for i in infos}
        time.sleep(0.01)  # a local version is size+mtime_ns
        storage.write_bytes("in/b.txt", b"BB")  # same size, new content
        after = {i.key: i.version for i in storage.list_info("in/")}
        assert after["in/b.txt"] != before["in/b.txt"]
        assert after["in/a.txt"] == before["in/a.txt"]  # unchanged objects keep their version
        # a listing of a prefix matching nothing is empty, not an error
        assert storage.list_info("nothing-here/") == []
        with pytest.raises(dataclasses.FrozenInstanceError):
            infos[0].size = 5  # type: ignore[misc]

    def test_input_view_reads_users_keys_and_never_writes(self, storage):
        storage.write_bytes("x/data.bin", b"0123456789")
        view = storage.input_view()
        assert view.is_input_view and not storage.is_input_view
        assert view.read_bytes("x/data.bin") == b"0123456789"
        assert view.read_range("x/data.bin", 2, 3) == b"234"
        assert [i.key for i in view.list_info("x/")] == ["x/data.bin"]
        for write in (
            lambda: view.write_bytes("x/new", b"1"),
            lambda: view.create_exclusive("x/new", b"1"),
            lambda: view.replace_if_version("x/data.bin", b"1", "v"),
            lambda: view.delete("x/data.bin"),
            lambda: view.delete_prefix("x/"),
        ):
            with pytest.raises(PermissionError):
                write()
        assert storage.read_bytes("x/data.bin") == b"0123456789"
        # still strict on the writing handle; the view takes keys as they are (S3, memory)
        with pytest.raises(ValueError):
            storage.read_bytes("x//data.bin")
        if self.local_files:
            with pytest.raises(ValueError):
                view.read_bytes("../outside")  # '..' is navigation on disk, never a name
        elif self.keeps_raw_names:
            with pytest.raises(FileNotFoundError):
                view.read_bytes("x//data.bin")  # a legal, distinct (absent) name
        clone = pickle.loads(pickle.dumps(view))
        assert clone.is_input_view and clone.read_range("x/data.bin", 0, 2) == b"01"
        with pytest.raises(PermissionError):
            clone.write_bytes("x/new", b"1")
