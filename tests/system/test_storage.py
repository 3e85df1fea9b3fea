"""The storage contract (tests/support/storage_contract.py) on the object stores (a real S3
server, the GCS and Azure emulators; memory and local run it in tests/unit), plus what only
one backend has: the memory backend's fault hooks, local and S3 errors, the scheme registry,
the shared file helpers and the layering of the storage package.

The S3 half runs against SeaweedFS (tests/support/s3server.py), with the fault-injecting proxy
(tests/faultproxy.py) for the flaky-network cases.
"""

from __future__ import annotations

import ast
import concurrent.futures
import errno
import itertools
import multiprocessing
import os
import pickle
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import shardwright.storage as storage_package
from shardwright.errors import OutputDirError, StorageError
from shardwright.storage import LocalStorage, MemoryStorage, S3Storage, Storage, open_storage, register_backend
from shardwright.storage.files import TMP_NAME_RE, disk_full_error, raising_disk_full, tmp_name
from support.helpers import assert_attempts_are_the_failed_requests, counted_store_requests
from support.storage_contract import StorageContract

MiB = 1024 * 1024
_memory_names = itertools.count()


class _CloudContract(StorageContract):
    """The object stores: shared by processes, each replace a round trip."""

    replace_rounds = 20
    #: S3's part-size option names -> this backend's (None: its SDK picks, nothing to pass)
    part_options: dict[str, str] | None = None

    def open(self, request, url: str, options: dict, extra_options: dict | None) -> Storage:
        extra = dict(extra_options or {})
        if self.part_options is not None:
            extra = {self.part_options[k]: v for k, v in extra.items() if k in self.part_options}
        return open_storage(url, dict(options, **extra))

    @staticmethod
    def requests_of(fn, tmp_path, monkeypatch) -> dict:
        """The store requests ``fn()`` makes, by (operation, outcome), from the run counters
        every request goes through."""
        from shardwright import tally, telemetry

        where = str(tmp_path / "counters")
        monkeypatch.setenv(tally.COUNTERS_DIR_ENV, where)
        telemetry.reset()
        try:
            fn()
            telemetry.get().flush()
        finally:
            monkeypatch.delenv(tally.COUNTERS_DIR_ENV)
            telemetry.reset()
        return tally.read_counters(where).store_requests

    def test_bounded_reads_are_one_get_each(self, storage, tmp_path, monkeypatch):
        """read_at_most and read_versioned_at_most judge the size from the reply's headers: one
        GET each at any limit, never a HEAD first (issue 36: one request per reader start and
        per lease or claim read)."""
        storage.write_bytes("d/state.json", b"x" * 1000)

        def reads():
            assert storage.read_at_most("d/state.json", 1 << 30) == b"x" * 1000  # a limit past 64 MiB
            assert storage.read_at_most("d/state.json", 999) is None
            assert storage.read_versioned_at_most("d/state.json", 1000)[0] == b"x" * 1000
            assert storage.read_versioned_at_most("d/state.json", 999)[0] is None

        assert self.requests_of(reads, tmp_path, monkeypatch) == {("GET", "ok"): 4}

    def test_conditional_writes_name_their_version_without_a_read_back(self, storage, tmp_path, monkeypatch):
        """A lease taken or renewed learns its new version from the write's reply (issue 36: a
        read-back per claim taken, per renewal), and that version fences as a read one does."""
        got = {}

        def writes():
            got["taken"] = storage.write_if_version("d/lease.json", b"mine", None)
            got["renewed"] = storage.write_if_version("d/lease.json", b"mine again", got["taken"][1])

        counts = self.requests_of(writes, tmp_path, monkeypatch)
        assert set(counts) <= {("PUT If-None-Match", "ok"), ("PUT If-None-Match: *", "ok"),
                               ("PUT ifGenerationMatch=0", "ok"), ("PUT If-Match", "ok"),
                               ("PUT ifGenerationMatch", "ok")} and sum(counts.values()) == 2, counts  # fmt: skip
        assert got["renewed"][1] == storage.read_versioned("d/lease.json")[1]
        assert not storage.replace_if_version("d/lease.json", b"stale", got["taken"][1])


class TestS3Storage(_CloudContract):
    part_options = {"multipart_threshold": "multipart_threshold", "multipart_chunksize": "multipart_chunksize"}

    @pytest.fixture
    def make_storage(self, request, s3_server):
        def make(extra_options: dict | None = None) -> Storage:
            bucket = s3_server.create_bucket()
            request.addfinalizer(lambda: _quiet(s3_server.delete_bucket, bucket))
            return self.open(request, f"s3://{bucket}/data", s3_server.storage_options, extra_options)

        return make

    def secrets(self, storage):
        return [storage._client_kwargs["aws_secret_access_key"]]

    def check_multipart(self, storage, key):
        head = storage.client().head_object(Bucket=storage.bucket, Key=storage._key(key))
        assert head["ETag"].strip('"').endswith("-3"), head["ETag"]  # really 3 parts
        assert storage.list("big/") == ["big/one.bin"]
        mpu = storage.client().list_multipart_uploads(Bucket=storage.bucket)
        assert not mpu.get("Uploads")  # nothing left dangling


class TestGCSStorage(_CloudContract):
    part_options = {}  # every write is one multipart request, at any size

    @pytest.fixture
    def make_storage(self, request, gcs_server):
        def make(extra_options: dict | None = None) -> Storage:
            bucket = gcs_server.create_bucket()
            request.addfinalizer(lambda: _quiet(gcs_server.delete_bucket, bucket))
            return self.open(request, f"gs://{bucket}/data", {}, extra_options)

        return make


class TestAzureStorage(_CloudContract):
    conditional_delete = True
    part_options = {"multipart_threshold": "max_single_put_size", "multipart_chunksize": "max_block_size"}

    @pytest.fixture
    def make_storage(self, request, azure_server):
        def make(extra_options: dict | None = None) -> Storage:
            container = azure_server.create_container()
            request.addfinalizer(lambda: _quiet(azure_server.delete_container, container))
            return self.open(request, f"az://{container}/data", azure_server.storage_options, extra_options)

        return make


def _quiet(fn, *args) -> None:
    try:
        fn(*args)
    except Exception:
        pass


@pytest.fixture
def memory(request) -> MemoryStorage:
    name = f"test-{os.getpid()}-{next(_memory_names)}"
    request.addfinalizer(lambda: MemoryStorage.drop(name))
    storage = open_storage(f"memory://{name}")
    assert isinstance(storage, MemoryStorage)
    return storage


# --------------------------------------------------------------------------------------
# Local errors
# --------------------------------------------------------------------------------------


def test_local_output_dir_is_a_file(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    for create in (True, False):
        with pytest.raises(OutputDirError, match="is a file") as ei:
            open_storage(f, create=create)
        assert str(f) in str(ei.value)
    with pytest.raises(OutputDirError, match="parent path is a file") as ei:
        open_storage(f / "sub" / "dir", create=True)
    assert str(f / "sub" / "dir") in str(ei.value)


def test_local_output_dir_not_writable(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    if os.geteuid() != 0:
        d.chmod(0o555)
        undo = ["chmod", "755", str(d)]
    else:  # root ignores permission bits; an immutable directory stops even root
        if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode:
            pytest.skip("cannot make a directory unwritable here (root without chattr +i support)")
        undo = ["chattr", "-i", str(d)]
    try:
        with pytest.raises(OutputDirError, match="not writable") as ei:
            open_storage(d, create=True)
        assert str(d) in str(ei.value)
        with pytest.raises(OutputDirError, match="cannot create output_dir"):
            open_storage(d / "child", create=True)
        s = open_storage(d)  # readers may open it; writes fail clearly
        with pytest.raises(OutputDirError, match=re.escape(str(d))):
            s.write_bytes("k", b"x")
    finally:
        subprocess.run(undo, check=True)


def test_local_disk_full_removes_temp_file(tmp_path, monkeypatch):
    s = open_storage(tmp_path / "out", create=True)
    s.write_bytes("chunk", b"old")
    real_write = os.write

    def full(fd, data):  # the device fills after 10 bytes (a short write, then ENOSPC)
        parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
        real_write(fd, b"".join(bytes(part) for part in parts)[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    monkeypatch.setattr(os, "writev", full)  # write_all's path (chunks written as parts)
    with pytest.raises(StorageError, match="disk full while writing .*chunk: free space and rerun"):
        s.write_bytes("chunk", b"new" * 100)
    with pytest.raises(StorageError, match="disk full"):
        s.create_exclusive("other", b"x" * 100)
    monkeypatch.undo()
    assert s.read_bytes("chunk") == b"old"  # nothing committed was lost
    assert sorted(os.listdir(tmp_path / "out")) == ["chunk"]  # temp files removed


def test_local_list_ignores_foreign_temp_files(tmp_path):
    s = open_storage(tmp_path / "out", create=True)
    s.write_bytes("d/k", b"1")
    (tmp_path / "out" / "d" / ".k.tmp-123-456-abcdef0123").write_bytes(b"crash leftover")
    assert s.list() == ["d/k"]
    s.delete_prefix("d/")
    assert os.listdir(tmp_path / "out") == []


# --------------------------------------------------------------------------------------
# S3 errors: messages name bucket + endpoint + fix, never the secret
# --------------------------------------------------------------------------------------


@pytest.mark.s3
def test_s3_bad_credentials(s3_server, s3_bucket, tmp_path):
    secret = "not-the-right-secret-" + "z" * 20
    opts = dict(s3_server.storage_options, aws_secret_access_key=secret)
    s = open_storage(f"s3://{s3_bucket}/p", opts)
    for n, call in enumerate((s.check, lambda: s.write_bytes("k", b"x"), lambda: s.read_bytes("k"), s.list)):
        # not retried under the default 60 s budget: one request, counted (not timed)
        with counted_store_requests(tmp_path / f"counts-{n}") as counts:
            with pytest.raises(StorageError) as ei:
                call()
            assert counts() == {"rejected": 1}, counts()
        msg = str(ei.value)
        assert "credentials rejected" in msg and s3_bucket in msg and s3_server.endpoint in msg, msg
        assert secret not in msg and s3_server.secret_key not in msg
    opts = dict(s3_server.storage_options, aws_access_key_id="NOSUCHKEY")
    with pytest.raises(StorageError, match="credentials rejected"):
        open_storage(f"s3://{s3_bucket}/p", opts).list()


@pytest.mark.s3
def test_s3_missing_bucket(s3_server):
    s = open_storage("s3://sw-no-such-bucket-4242/p", s3_server.storage_options)
    for call in (s.check, lambda: s.write_bytes("k", b"x"), lambda: s.read_bytes("k")):
        with pytest.raises(StorageError) as ei:
            call()
        msg = str(ei.value)
        assert "bucket sw-no-such-bucket-4242 does not exist at " + s3_server.endpoint in msg, msg
        assert "create it or fix the URL" in msg


@pytest.mark.s3
def test_s3_unreachable_endpoint_fails_fast(s3_server, s3_bucket, tmp_path):
    port = __import__("support.s3server", fromlist=["free_ports"]).free_ports(1)[0]  # nothing listens there
    endpoint = f"http://127.0.0.1:{port}"
    s = open_storage(f"s3://{s3_bucket}/p", dict(s3_server.storage_options, endpoint_url=endpoint))
    for n, call in enumerate((s.check, lambda: s.write_bytes("k", b"x"))):
        # a service never reached is tried once more, then named: 2 attempts, not the 60 s budget's
        with counted_store_requests(tmp_path / f"counts-{n}") as counts:
            with pytest.raises(StorageError, match=f"cannot reach the S3 endpoint {endpoint}"):
                call()
            assert counts() == {"unreachable": 2}, counts()


@pytest.mark.s3
def test_s3_endpoint_from_environment(s3_server, s3_bucket, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s = open_storage(f"s3://{s3_bucket}/env")
    s.check()
    s.write_bytes("k", b"v")
    assert s.read_bytes("k") == b"v"
    assert s.endpoint == s3_server.endpoint


# --------------------------------------------------------------------------------------
# S3 through a flaky network
# --------------------------------------------------------------------------------------


@pytest.mark.s3
def test_s3_through_faults_completes_with_correct_bytes(fault_proxy, s3_bucket, s3_server):
    # Default client settings: our one retry loop, botocore's own retries off. Each kind of
    # fault is forced once: with ~26 requests, chance alone left one out in ~7 % of runs.
    fault_proxy.configure(
        p_503=0.2, p_reset=0.1, p_truncate=0.1, next_faults=["503", "reset", "truncate", "reset_after"]
    )
    s = open_storage(f"s3://{s3_bucket}/flaky", fault_proxy.storage_options)
    blobs = {f"d/k{i}": os.urandom(50_000 + i) for i in range(4)}

    def work(item):
        k, v = item
        s.write_bytes(k, v)
        assert s.create_exclusive(k + ".claim", k.encode()) is True
        assert s.create_exclusive(k + ".claim", b"other") is False
        return s.read_bytes(k) == v

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        assert all(ex.map(work, blobs.items()))
    data, ver = s.read_versioned("d/k0")
    assert s.replace_if_version("d/k0", b"new", ver) is True
    assert s.replace_if_version("d/k0", b"newer", ver) is False
    assert s.list("d/") == sorted(list(blobs) + [k + ".claim" for k in blobs])
    s.delete_prefix("d/")
    assert s.list() == []
    st = fault_proxy.stats
    assert st["503"] and st["truncate"] and (st["reset"] + st["reset_after"]), dict(st)


@pytest.mark.s3
def test_s3_lost_response_of_conditional_put_is_not_a_lost_race(fault_proxy, s3_bucket):
    """The server applies our create but the reply is lost: the retry's 412 must count as a win."""
    s = open_storage(f"s3://{s3_bucket}/p", fault_proxy.storage_options)
    fault_proxy.configure(next_faults=["reset_after"])
    assert s.create_exclusive("claim", b"run-1") is True
    assert fault_proxy.stats["reset_after"] == 1
    _, ver = s.read_versioned("claim")
    fault_proxy.configure(next_faults=["reset_after"])
    assert s.replace_if_version("claim", b"run-1 renewed", ver) is True
    assert s.create_exclusive("claim", b"run-2") is False


@pytest.mark.s3
def test_s3_truncated_body_and_hang_are_retried(fault_proxy, s3_bucket):
    opts = dict(fault_proxy.storage_options, config={"read_timeout": 1})
    s = open_storage(f"s3://{s3_bucket}/p", opts)
    data = os.urandom(MiB)
    s.write_bytes("blob", data)
    fault_proxy.configure(methods={"GET"}, next_faults=["truncate", "truncate", "hang"])
    assert s.read_bytes("blob") == data
    assert fault_proxy.stats["truncate"] == 2 and fault_proxy.stats["hang"] == 1


@pytest.mark.s3
def test_s3_gives_up_with_clear_error_when_server_keeps_failing(fault_proxy, s3_bucket):
    opts = dict(fault_proxy.storage_options, retry_timeout=2)  # the whole budget: no nested retries
    s = open_storage(f"s3://{s3_bucket}/p", opts)
    s.check()
    fault_proxy.configure(p_503=1.0, methods={"PUT"})  # the write's requests only
    with pytest.raises(StorageError) as ei:
        s.write_bytes("k", b"x")
    msg = str(ei.value)
    assert "SlowDown" in msg and s3_bucket in msg and fault_proxy.endpoint in msg and "rerun" in msg, msg
    # the PUTs of this object only (the fault proxy is this test's alone; the path makes sure)
    assert_attempts_are_the_failed_requests(msg, fault_proxy.failed("503", "PUT", f"/{s3_bucket}/p/k"))


# --------------------------------------------------------------------------------------
# Memory backend: durability model and fault hooks
# --------------------------------------------------------------------------------------


def test_memory_crash_loses_writes_without_a_later_barrier(memory):
    memory.write_bytes("durable", b"d1")
    memory.write_bytes("replaced", b"old")  # durable content the crash falls back to
    memory.write_bytes("replaced", b"new", durable=False)
    memory.write_bytes("fresh", b"f", durable=False)
    memory.write_bytes("flushed", b"x", durable=False)
    assert memory.read_bytes("replaced") == b"new" and memory.exists("fresh")  # visible at once
    memory.barrier()
    memory.write_bytes("late", b"l", durable=False)  # after the barrier: not covered by it
    assert memory.crash() == ["late"]
    assert memory.list() == ["durable", "flushed", "fresh", "replaced"]
    assert memory.read_bytes("replaced") == b"new" and memory.read_bytes("flushed") == b"x"

    memory.write_bytes("replaced", b"newer", durable=False)
    memory.write_bytes("gone", b"g", durable=False)
    assert memory.crash() == ["gone", "replaced"]
    assert memory.read_bytes("replaced") == b"new" and not memory.exists("gone")


def test_memory_barrier_covers_only_its_own_handles_writes(memory):
    other = open_storage(memory.url)  # same store, another handle (another "process's" writes)
    assert isinstance(other, MemoryStorage) and other is not memory
    memory.write_bytes("mine", b"1", durable=False)
    other.write_bytes("theirs", b"2", durable=False)
    assert other.read_bytes("mine") == b"1"  # one store: each handle sees the other's writes
    memory.barrier()
    assert memory.crash() == ["theirs"]
    assert memory.list() == ["mine"]


def test_memory_versions_are_never_reused_and_deletes_are_durable(memory):
    memory.write_bytes("lease", b"a")
    _, v1 = memory.read_versioned("lease")
    memory.write_bytes("lease", b"b", durable=False)
    _, lost_version = memory.read_versioned("lease")
    memory.crash()  # back to b"a" under its own version: a holder of v1 may still swap
    data, v2 = memory.read_versioned("lease")
    assert data == b"a" and v2 == v1 != lost_version
    assert memory.replace_if_version("lease", b"c", v1) is True  # CAS writes are durable
    memory.crash()
    assert memory.read_bytes("lease") == b"c"
    memory.write_bytes("x", b"x", durable=False)
    memory.delete("x")
    memory.delete_prefix("lease")
    assert memory.crash() == [] and memory.list() == []
    memory.write_bytes("lease", b"d")  # a version lost in the crash is not handed out again
    assert memory.read_versioned("lease")[1] not in (v1, lost_version)


def test_memory_fail_next_before_and_after_taking_effect(memory):
    memory.fail_next("write_bytes", OSError(errno.EIO, "injected"))
    with pytest.raises(OSError, match="injected"):
        memory.write_bytes("k", b"1")
    assert not memory.exists("k")  # failed before taking effect
    memory.write_bytes("k", b"1")  # only the next call failed

    memory.fail_next("create_exclusive", after=True)  # applied, then the reply is "lost"
    with pytest.raises(StorageError, match="injected failure of create_exclusive on memory://"):
        memory.create_exclusive("claim", b"run-1")
    assert memory.read_bytes("claim") == b"run-1"
    assert memory.create_exclusive("claim", b"run-2") is False

    memory.fail_next("read_bytes", times=2)
    for _ in range(2):
        with pytest.raises(StorageError):
            memory.read_bytes("k")
    assert memory.read_bytes("k") == b"1"
    with pytest.raises(ValueError, match="unknown operation 'write'"):
        memory.fail_next("write")


def test_memory_fail_when_predicate_and_clear(memory):
    seen: list[tuple[str, str | None]] = []

    def manifest_deletes_fail(op: str, key: str | None) -> BaseException | None:
        seen.append((op, key))
        return StorageError("no deleting the manifest") if op == "delete" and key == "manifest" else None

    memory.write_bytes("manifest", b"m")
    memory.write_bytes("chunk", b"c")
    memory.fail_when(manifest_deletes_fail)
    memory.delete("chunk")
    with pytest.raises(StorageError, match="no deleting the manifest"):
        memory.delete("manifest")
    assert memory.list() == ["manifest"]
    assert ("delete", "chunk") in seen and ("delete", "manifest") in seen
    assert memory.list("ma") == ["manifest"] and seen[-1] == ("list", "ma")  # prefix is the key
    memory.clear_faults()
    memory.delete("manifest")
    assert memory.operations() == [
        ("write_bytes", "manifest"),
        ("write_bytes", "chunk"),
        ("delete", "chunk"),
        ("delete", "manifest"),
    ]


def _use_inherited_memory_store(storage: MemoryStorage, out) -> None:
    try:
        storage.write_bytes("from-child", b"x")
        out.put("no error")
    except StorageError as e:
        out.put(str(e))


def test_memory_is_single_process(memory):
    memory.write_bytes("k", b"v")
    clone = pickle.loads(pickle.dumps(memory))  # same process: the same store
    assert clone.read_bytes("k") == b"v" and clone.url == memory.url
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_use_inherited_memory_store, args=(memory, out))
    child.start()
    message = out.get(timeout=30)
    child.join(30)
    assert "MemoryStorage is single-process; use a local directory" in message, message
    assert memory.list() == ["k"]


# --------------------------------------------------------------------------------------
# Registry: scheme -> backend, and clear errors for everything else
# --------------------------------------------------------------------------------------


def test_registry_chooses_backend_by_scheme(tmp_path):
    assert isinstance(open_storage(tmp_path / "a"), LocalStorage)
    local = open_storage(f"file://{tmp_path}/b", create=True)
    assert isinstance(local, LocalStorage) and local.root == str(tmp_path / "b") and (tmp_path / "b").is_dir()
    s3 = open_storage("S3://bucket/some/prefix/")  # scheme is case-insensitive; nothing is contacted
    assert isinstance(s3, S3Storage) and s3.url == "s3://bucket/some/prefix"
    memory = open_storage("memory://registry-test")
    try:
        assert isinstance(memory, MemoryStorage) and memory.url == "memory://registry-test"
    finally:
        MemoryStorage.drop("registry-test")
    assert isinstance(open_storage(tmp_path / "data:v1"), LocalStorage)  # a colon in a local name


@pytest.mark.parametrize(
    "location, message",
    [
        ("", "output_dir is empty: pass a local directory or a URL such as s3://bucket/prefix"),
        ("   ", "output_dir is empty"),
        ("s3:/bucket/p", "malformed URL 's3:/bucket/p': write s3://bucket/p (two slashes), or ./s3:/bucket/p"),
        ("s3:bucket", "malformed URL 's3:bucket': write s3://bucket"),
        (
            "hdfs://bucket/p",
            "unsupported URL scheme 'hdfs' in 'hdfs://bucket/p': use a local path or one of abfs://, abfss://, az://, "
            "file://, gcs://, gs://, memory://, s3://",
        ),
        ("https://user:hunter2@example.com/x", "unsupported URL scheme 'https'"),
        ("s3://", "invalid S3 URL 's3://': use s3://bucket/prefix"),
        ("memory://", "invalid memory URL"),
    ],
)
def test_registry_rejects_bad_locations_with_the_fix(location, message):
    with pytest.raises(OutputDirError) as info:
        open_storage(location)
    text = str(info.value)
    assert message in text and "\n" not in text and "hunter2" not in text, text


def test_register_backend_adds_a_scheme():
    opened: list[tuple[str, dict | None, bool]] = []

    def factory(url: str, storage_options: dict | None, *, create: bool) -> Storage:
        opened.append((url, storage_options, create))
        return MemoryStorage("custom-scheme-test")

    register_backend("sw-test", factory)
    try:
        s = open_storage("SW-TEST://anything", {"opt": 1}, create=True)
        assert isinstance(s, MemoryStorage) and opened == [("sw-test://anything", {"opt": 1}, True)]
        assert "sw-test" in storage_package.registered_schemes()
        with pytest.raises(ValueError, match="already registered"):
            register_backend("sw-test", lambda url, opts, *, create: MemoryStorage())
    finally:
        from shardwright.storage import registry

        registry._BACKENDS.pop("sw-test", None)
        MemoryStorage.drop("custom-scheme-test")


# --------------------------------------------------------------------------------------
# Shared file helpers and the package's layering
# --------------------------------------------------------------------------------------


def test_disk_full_mapping_carries_each_callers_fix(tmp_path):
    full = OSError(errno.ENOSPC, "No space left on device")
    err = disk_full_error(full, "caching x in /c", "lower max_cache_bytes or pass another cache_dir")
    assert isinstance(err, StorageError)
    assert str(err) == "disk full while caching x in /c: lower max_cache_bytes or pass another cache_dir"
    with (
        pytest.raises(StorageError, match="^disk full while writing y: rerun$") as info,
        raising_disk_full("writing y", "rerun"),
    ):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")
    assert info.value.__cause__.errno == errno.EDQUOT
    with pytest.raises(PermissionError), raising_disk_full("writing y", "rerun"):  # others pass unchanged
        raise PermissionError(errno.EACCES, "denied")
    name = os.path.basename(tmp_name(str(tmp_path / ("n" * 300))))
    m = TMP_NAME_RE.match(name)
    assert m and int(m.group("pid")) == os.getpid() and len(name) < 255


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names imported) of every import in ``path``, relative ones resolved."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "shardwright.storage" if node.level == 1 else "shardwright" if node.level == 2 else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            found.append((module, [a.name for a in node.names]))
    return found


def test_storage_package_layering():
    """storage is a low layer: it imports only the bottom layer (errors, secrets, process, telemetry) from the rest of shardwright,
    no module imports another's underscore names, the imports inside form no cycle, and no
    file is over 600 lines."""
    package = Path(storage_package.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in sorted(package.glob("*.py")):
        assert len(path.read_text().splitlines()) <= 600, path
        me = "shardwright.storage" + ("" if path.stem == "__init__" else f".{path.stem}")
        graph[me] = set()
        for module, names in _imports(path):
            if not module.startswith("shardwright"):
                continue
            bottom = ("shardwright.errors", "shardwright.secrets", "shardwright.process", "shardwright.telemetry")
            assert module in bottom or module.startswith("shardwright.storage"), (me, module)
            assert not [n for n in names if n.startswith("_")], (me, module, names)
            if module.startswith("shardwright.storage.") and path.stem != "__init__":
                graph[me].add(module)

    def visit(node: str, stack: tuple[str, ...]) -> None:
        assert node not in stack, f"import cycle: {' -> '.join(stack + (node,))}"
        for nxt in graph.get(node, ()):
            visit(nxt, stack + (node,))

    for module in graph:
        visit(module, ())
    assert graph["shardwright.storage.base"] == set() and graph["shardwright.storage.files"] == set()


# --------------------------------------------------------------------------------------
# The reader cache's own disk-full message (a real, small tmpfs as cache_dir)
# --------------------------------------------------------------------------------------


def _big_item(i: int) -> dict:
    return {"i": i, "b": bytes([i]) * (3 * MiB)}


@pytest.mark.s3
def test_reader_cache_disk_full_names_the_cache_fix(tmp_path, s3_url, s3_storage_options):
    from shardwright import StreamingDataset, optimize

    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run as root: this test mounts a tmpfs")
        pytest.skip("mounting a small tmpfs needs root")
    optimize(
        _big_item, [0, 1], s3_url, chunk_size=1, num_workers=1, storage_options=s3_storage_options, verbose=False
    )  # two chunks of 3 MB each: neither fits in the 2 MB cache
    cache = tmp_path / "cache"
    cache.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(cache)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"mount -t tmpfs failed: {done.stderr.strip()}")
        pytest.skip(f"mount -t tmpfs is not permitted here: {done.stderr.strip()}")
    try:
        os.chmod(cache, 0o700)  # a fresh tmpfs is world-writable (1777), which the reader refuses as a cache
        ds = StreamingDataset(s3_url, storage_options=s3_storage_options, cache_dir=cache, prefetch=False)
        with pytest.raises(StorageError) as info:
            ds[0]
        message = str(info.value)
        assert message.startswith("disk full while caching ") and str(cache) in message, message
        assert "lower max_cache_bytes or pass another cache_dir" in message, message
        assert "rerun the same call" not in message, message
        assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
        leftovers = [p.name for p in cache.rglob("*") if TMP_NAME_RE.match(p.name)]
        assert leftovers == [], leftovers  # the failed download's temp file was removed
    finally:
        import gc

        gc.collect()
        if subprocess.run(["umount", str(cache)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(cache)], capture_output=True, check=False)


def test_memory_input_view_takes_dots_and_double_slashes_as_names(memory):
    # An object store holds such names as distinct objects (SeaweedFS, our S3 test server,
    # normalises them, so the raw-name case is shown on the memory store, which keeps keys
    # exactly as given, as AWS S3 does).
    odd = ["odd//double.txt", "odd/./dot.txt", "odd/../up.txt"]
    store = memory._store()
    for i, key in enumerate(odd):
        store.objects[key] = store.new_object(b"x" * (i + 1))
    view = memory.input_view()
    assert [i.key for i in view.list_info("odd/")] == sorted(odd)
    for i, key in enumerate(odd):
        assert view.read_bytes(key) == b"x" * (i + 1)
        assert view.read_range(key, 1, 5) == b"x" * i
    with pytest.raises(ValueError):
        memory.read_bytes("odd//double.txt")  # the output handle stays strict


def test_s3_input_view_reads_listed_keys(s3_url, s3_storage_options):
    import boto3

    writer = open_storage(s3_url, s3_storage_options)
    assert isinstance(writer, S3Storage)
    raw = boto3.client("s3", **s3_storage_options)
    raw.put_object(Bucket=writer.bucket, Key=f"{writer.prefix}/in/a..b/c.txt", Body=b"abc")
    view = writer.input_view()
    [info] = view.list_info("in/")
    assert (info.key, info.size) == ("in/a..b/c.txt", 3) and info.mtime is not None
    head = raw.head_object(Bucket=writer.bucket, Key=f"{writer.prefix}/in/a..b/c.txt")
    assert info.version == head["ETag"].strip('"')
    assert view.read_range(info.key, 1, 10) == b"bc"
