"""optimize() and StreamingDataset against a real S3 server (SeaweedFS), with real kills and a
fault-injecting proxy.

Every run must end with every sample exactly once, in input order; a checkpoint never names
an object that is not in the bucket; errors name bucket and endpoint, never the secret; and
the reader's local cache stays bounded and safe to share between processes.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from shardwright import (
    ConcurrentRunError,
    CorruptStateError,
    IncompleteDatasetError,
    StorageError,
    StreamingDataset,
    optimize,
)
from shardwright.protocol.layout import HISTORY_PREFIX, INPUTS_PREFIX, RUN_RECORD_KEY, STATE_DIR, lease_key
from shardwright.storage import open_storage
from support.crash_child import expected, generator, plain
from support.helpers import (
    CHILD,
    assert_exactly_once,
    child_env,
    chunks_named_but_missing,
    committed_chunk_names,
    committed_records,
    counted_store_requests,
    errors_of_threads,
    finish,
    group_pids,
    kill_group,
    kill_loop,
    start_child,
    wait_for,
)


@pytest.fixture(autouse=True)
def private_reader_cache(tmp_path, monkeypatch):
    """Readers (ours, in this process and in children) cache under tmp_path, not ~/.cache."""
    monkeypatch.setenv("SHARDWRIGHT_CACHE_DIR", str(tmp_path / "reader-cache"))


def assert_clean_finish(url: str, storage_options: dict) -> None:
    """Published, no run state left, and no chunk object that index.json does not name."""
    storage = open_storage(url, storage_options)
    keys = storage.list("")
    index = json.loads(storage.read_bytes("index.json"))
    named = {c["filename"] for c in index["chunks"]}
    chunks = {k for k in keys if k.startswith("chunk-")}
    assert chunks == named, f"orphan chunks {sorted(chunks - named)[:5]}, missing {sorted(named - chunks)[:5]}"
    # what a finished run keeps: run.json, its input identities, and the (informational) history of its attempts
    kept = (HISTORY_PREFIX, INPUTS_PREFIX)
    state = [k for k in keys if k.startswith(STATE_DIR + "/") and k != RUN_RECORD_KEY and not k.startswith(kept)]
    assert state == [], state


def assert_checkpoint_names_only_existing(url: str, storage_options: dict) -> int:
    records, missing = chunks_named_but_missing(url, storage_options)
    assert missing == [], f"commit records name chunks missing from the bucket: {missing[:5]}"
    return records


# --- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind,compression", [("plain", None), ("generator", None), ("plain", "zstd")])
def test_optimize_roundtrip(s3_url, s3_storage_options, kind, compression):
    fn = {"plain": plain, "generator": generator}[kind]
    n = 300
    result = optimize(
        fn,
        list(range(n)),
        s3_url,
        chunk_size=9,
        compression=compression,
        num_workers=2,
        storage_options=s3_storage_options,
        verbose=False,
    )
    assert result.published and result.items == len(expected(kind, n))
    ds = StreamingDataset(s3_url, storage_options=s3_storage_options)
    assert [(x["i"], x.get("j", 0)) for x in ds] == expected(kind, n)
    assert_clean_finish(s3_url, s3_storage_options)
    if compression:
        assert all(c.filename.endswith(".zstd.bin") for c in ds.chunks)
    # Rerunning the same call is a no-op, not an error.
    again = optimize(
        fn,
        list(range(n)),
        s3_url,
        chunk_size=9,
        compression=compression,
        num_workers=2,
        storage_options=s3_storage_options,
        verbose=False,
    )
    assert again.items == 0 and again.published


LITDATA_READER = textwrap.dedent("""
    import json, sys
    import litdata
    import litdata.streaming.downloader as downloader
    # litdata 0.2.76 takes storage_options as boto3 client arguments (endpoint_url, keys,
    # region) and hands the endpoint to obstore for chunk GETs, but builds its obstore store
    # without allow_http: a plain-http endpoint such as our loopback server fails with
    # "builder error: BadScheme". An https endpoint needs no such line.
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = True
    url, storage_options, cache_dir = json.loads(sys.argv[1])
    ds = litdata.StreamingDataset(url, storage_options=storage_options, cache_dir=cache_dir)
    pairs = [[int(x["i"]), int(x.get("j", 0))] for x in ds]
    print(json.dumps({"len": len(ds), "pairs": pairs}))
""")


@pytest.mark.parametrize("kind,compression", [("generator", None), ("plain", "zstd")])
def test_litdata_reads_our_s3_output(s3_server, s3_url, s3_storage_options, tmp_path, kind, compression):
    pytest.importorskip("litdata")
    if compression:
        pytest.importorskip("zstd", reason="litdata decompresses with the 'zstd' package")
    fn = {"plain": plain, "generator": generator}[kind]
    n = 200
    optimize(
        fn,
        list(range(n)),
        s3_url,
        chunk_size=7,
        compression=compression,
        num_workers=2,
        storage_options=s3_storage_options,
        verbose=False,
    )
    # litdata runs in its own process: it starts obstore's tokio runtime, which must not be
    # inherited by the forks of later tests.
    env = child_env(
        AWS_ACCESS_KEY_ID=s3_server.access_key,
        AWS_SECRET_ACCESS_KEY=s3_server.secret_key,
        AWS_DEFAULT_REGION="us-east-1",
    )
    arg = json.dumps([s3_url, s3_storage_options, str(tmp_path / "litdata-cache")])
    done = subprocess.run(
        [sys.executable, "-c", LITDATA_READER, arg], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    want = expected(kind, n)
    assert got["len"] == len(want)
    assert [tuple(p) for p in got["pairs"]] == want


# --- kills ---------------------------------------------------------------------------------------


def test_random_sigkill_loop_on_s3(s3_url, s3_storage_options):
    """SIGKILL the whole process group at random moments; every resume continues on S3."""
    rng = random.Random("s3-kill-loop")
    config = {
        "kind": "generator",
        "n": 1200,
        "chunk_size": 7,
        "sleep": 0.002,
        "output_dir": s3_url,
        "storage_options": s3_storage_options,
    }
    checked = []

    def check():
        checked.append(assert_checkpoint_names_only_existing(s3_url, s3_storage_options))

    kills = kill_loop(config, rng, kills_wanted=9, check=check)
    assert kills >= 6, f"only {kills} kills landed: the workload is too small to test anything"
    assert max(checked) > 0, "no kill landed after a commit: the loop tested nothing on S3"
    config["num_workers"] = 2
    finish(config)
    assert_exactly_once(config, s3_storage_options)
    assert_clean_finish(s3_url, s3_storage_options)


def test_sigkill_loop_through_faulty_network(s3_server, s3_url, fault_proxy):
    """Kills while requests fail (503, resets before and after the server applied them,
    truncated responses): still exactly once."""
    rng = random.Random("s3-fault-kill-loop")
    opts = dict(fault_proxy.storage_options)  # the default client: our one retry loop
    fault_proxy.configure(p_503=0.04, p_reset=0.04, p_truncate=0.03)
    config = {
        "kind": "plain",
        "n": 1500,
        "chunk_size": 12,
        "sleep": 0.003,
        "output_dir": s3_url,
        "storage_options": opts,
    }
    direct = s3_server.storage_options
    checked = []

    def check():
        checked.append(assert_checkpoint_names_only_existing(s3_url, direct))

    kills = kill_loop(config, rng, kills_wanted=4, check=check, records_options=direct)
    assert kills >= 3, f"only {kills} kills landed"
    assert max(checked) > 0, "no kill landed after a commit: the loop tested nothing on S3"
    config["num_workers"] = 2
    finish(config)
    stats = dict(fault_proxy.stats)
    assert stats.get("503", 0) and stats.get("truncate", 0) and stats.get("reset", 0) + stats.get("reset_after", 0), (
        stats
    )
    assert_exactly_once(config, direct)
    assert_clean_finish(s3_url, direct)


def test_persistent_503_fails_clearly_then_resumes(s3_server, s3_bucket, s3_url, fault_proxy, tmp_path):
    opts = dict(fault_proxy.storage_options, retry_timeout=3)
    config = {
        "kind": "plain",
        "n": 1200,
        "chunk_size": 10,
        "sleep": 0.003,
        "output_dir": s3_url,
        "storage_options": opts,
        "num_workers": 2,
    }
    # inputs from 600 on wait for the gate: still running when the store starts failing, at any load
    config |= {"gate": str(tmp_path / "gate"), "gate_period": config["n"], "gate_after": 600}
    direct = s3_server.storage_options
    proc = start_child(config)
    assert wait_for(lambda: proc.poll() is not None or committed_records(s3_url, direct) >= 3, 120)
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    fault_proxy.configure(p_503=1.0)
    Path(config["gate"]).write_text("")  # the next commits meet the failing store
    _, err = proc.communicate(timeout=300)  # a hang guard only: what bounds giving up is the attempts
    assert proc.returncode not in (0, None)
    assert "StorageError" in err and "SlowDown" in err and "rerun the same call to resume" in err, err[-3000:]
    assert s3_bucket in err and fault_proxy.endpoint in err
    assert s3_server.secret_key not in err
    # the one retry budget gave up, counted not timed (a loaded machine makes fewer attempts, never
    # more): backoff delays of at least 0.05, 0.1, 0.2, 0.4, 0.8, 1.6 s fit 5 retries in 3 s
    tries = [int(n) for n in re.findall(r"kept failing for \d+ s \((\d+) attempts?,", err)]
    assert tries and all(1 <= n <= 6 for n in tries), err[-3000:]
    assert wait_for(lambda: not group_pids(proc.pid), 5)
    assert assert_checkpoint_names_only_existing(s3_url, direct) >= 3  # committed work was kept
    fault_proxy.clear()
    finish(config)
    assert_exactly_once(config, direct)
    assert_clean_finish(s3_url, direct)


# --- errors --------------------------------------------------------------------------------------


def test_bad_credentials_clear_error(s3_server, s3_bucket, s3_url, tmp_path):
    secret = "wrong-secret-" + "q" * 24
    opts = dict(s3_server.storage_options, aws_secret_access_key=secret)
    with counted_store_requests(tmp_path / "counts") as counts:
        with pytest.raises(StorageError) as err:
            optimize(plain, list(range(10)), s3_url, chunk_size=5, storage_options=opts, verbose=False)
        assert counts() == {"rejected": 1}, counts()  # refused at once: not retried for the 60 s budget
    message = str(err.value)
    assert "credentials rejected" in message and s3_bucket in message and s3_server.endpoint in message, message
    assert secret not in message and s3_server.secret_key not in message
    with pytest.raises(StorageError, match="credentials rejected") as err:
        StreamingDataset(s3_url, storage_options=opts)
    assert secret not in str(err.value)


def test_missing_bucket_clear_error(s3_server):
    url = "s3://sw-no-such-bucket-7311/data"
    with pytest.raises(StorageError, match=f"bucket sw-no-such-bucket-7311 does not exist at {s3_server.endpoint}"):
        optimize(plain, list(range(10)), url, chunk_size=5, storage_options=s3_server.storage_options, verbose=False)
    with pytest.raises(StorageError, match="bucket sw-no-such-bucket-7311 does not exist"):
        StreamingDataset(url, storage_options=s3_server.storage_options)


def test_unreachable_endpoint_fails_without_retrying(s3_server, s3_url, tmp_path):
    port = __import__("support.s3server", fromlist=["free_ports"]).free_ports(1)[0]  # nothing listens there
    endpoint = f"http://127.0.0.1:{port}"
    opts = dict(s3_server.storage_options, endpoint_url=endpoint)
    # counted, not timed: a service never reached is tried once more, then named (2 requests),
    # where retrying it for the default 60 s budget would make 20 and more
    with counted_store_requests(tmp_path / "optimize") as counts:
        with pytest.raises(StorageError, match=f"cannot reach the S3 endpoint {endpoint}"):
            optimize(plain, list(range(10)), s3_url, chunk_size=5, storage_options=opts, verbose=False)
        assert counts() == {"unreachable": 2}, counts()
    with counted_store_requests(tmp_path / "reader") as counts:
        with pytest.raises(StorageError, match=f"cannot reach the S3 endpoint {endpoint}"):
            StreamingDataset(s3_url, storage_options=opts)
        assert counts() == {"unreachable": 2}, counts()


# --- two runs on one prefix ----------------------------------------------------------------------


def test_concurrent_run_refused_then_takeover_after_kill(s3_url, s3_storage_options, tmp_path):
    config = {
        "kind": "plain",
        "n": 2000,
        "chunk_size": 10,
        "sleep": 0.003,
        "output_dir": s3_url,
        "storage_options": s3_storage_options,
        "num_workers": 2,
        # inputs from 700 on wait for the gate: the first run is still running when the second
        # call comes, at any load (the call in this process has no gate)
        "gate": str(tmp_path / "gate"),
        "gate_period": 2000,
        "gate_after": 700,
    }
    # A day's TTL: the takeover below can only come from the holder's pid being gone. A run
    # refuses a live lease at once (ConcurrentRunError, above) and never waits one out.
    ttl = "86400"
    proc = start_child(config, SHARDWRIGHT_LEASE_TTL=ttl)
    try:
        assert wait_for(lambda: proc.poll() is not None or committed_records(s3_url, s3_storage_options) >= 2, 120)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        with pytest.raises(ConcurrentRunError) as err:
            optimize(
                plain,
                list(range(config["n"])),
                s3_url,
                chunk_size=10,
                num_workers=2,
                storage_options=s3_storage_options,
                verbose=False,
            )
        message = str(err.value)
        assert "another run is already writing" in message and f"pid {proc.pid}" in message, message
        assert proc.poll() is None, "the first run must not be disturbed by the refused one"
    finally:
        kill_group(proc)
        proc.wait()
    assert wait_for(lambda: not group_pids(proc.pid), 5)
    assert_checkpoint_names_only_existing(s3_url, s3_storage_options)
    Path(config["gate"]).write_text("")
    holder = json.loads(open_storage(s3_url, s3_storage_options).read_bytes(lease_key("node-0")))
    assert holder["pid"] == proc.pid and holder["ttl"] == float(ttl)  # the killed run's, live by its heartbeat
    # same host, dead pid: taken over at once (exit 0), not refused as live, and not waited out
    # (a day): run_child's outer timeout only stops a run that hangs
    finish(config, SHARDWRIGHT_LEASE_TTL=ttl)
    assert_exactly_once(config, s3_storage_options)
    assert_clean_finish(s3_url, s3_storage_options)


# --- local temp space ------------------------------------------------------------------------------


def _all_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_optimize_to_s3_leaves_no_local_files(s3_url, s3_storage_options, tmp_path):
    """Chunks are built and uploaded from memory: no temp files, even after a SIGKILL."""
    tmpdir, cwd = tmp_path / "tmp", tmp_path / "cwd"
    tmpdir.mkdir()
    cwd.mkdir()
    config = {
        "kind": "plain",
        "n": 800,
        "chunk_size": 10,
        "sleep": 0.003,
        "output_dir": s3_url,
        "storage_options": s3_storage_options,
        "num_workers": 2,
    }
    env = child_env(TMPDIR=str(tmpdir), TEMP=str(tmpdir), TMP=str(tmpdir))

    def start():
        return subprocess.Popen(
            [sys.executable, CHILD, json.dumps(config)],
            env=env,
            cwd=cwd,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    proc = start()
    assert wait_for(lambda: committed_records(s3_url, s3_storage_options) >= 3, 120)
    kill_group(proc)
    proc.communicate()
    assert wait_for(lambda: not group_pids(proc.pid), 5)
    assert _all_files(tmpdir) == [] and _all_files(cwd) == []
    proc = start()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert _all_files(tmpdir) == [] and _all_files(cwd) == []
    assert_exactly_once(config, s3_storage_options)


# --- the reader ------------------------------------------------------------------------------------

ROWS = 1000  # bytes of array per item


def array_item(i: int) -> dict:
    return {"i": i, "a": np.full(ROWS, i % 251, dtype=np.uint8)}


@pytest.fixture(scope="module")
def remote_dataset(s3_server):
    """A published dataset on S3: 800 items in 32 chunks of ~25 KB, plus its options."""
    bucket = s3_server.create_bucket()
    url = f"s3://{bucket}/reader"
    optimize(
        array_item,
        list(range(800)),
        url,
        chunk_size=25,
        num_shards=8,
        num_workers=2,
        storage_options=s3_server.storage_options,
        verbose=False,
    )
    yield url, dict(s3_server.storage_options)
    try:
        s3_server.delete_bucket(bucket)
    except Exception:
        pass


def check_item(item: dict, i: int) -> None:
    assert item["i"] == i
    a = np.asarray(item["a"])
    assert a.shape == (ROWS,) and a.dtype == np.uint8 and int(a[0]) == int(a[-1]) == i % 251


def dir_bytes(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                pass
    return total


def test_reader_access_patterns(remote_dataset, tmp_path):
    url, opts = remote_dataset
    ds = StreamingDataset(url, storage_options=opts, cache_dir=tmp_path / "cache")
    assert len(ds) == 800 and len(ds.chunks) == 32
    assert ds.cache_dir.startswith(str(tmp_path / "cache"))
    check_item(ds[0], 0)
    check_item(ds[-1], 799)
    check_item(ds[np.int64(413)], 413)
    assert [x["i"] for x in ds[10:700:97]] == list(range(10, 700, 97))
    assert [x["i"] for x in ds[::-150]] == [799, 649, 499, 349, 199, 49]
    for bad in (800, -801):
        with pytest.raises(IndexError):
            ds[bad]
    with pytest.raises(KeyError, match="keys/ sidecar"):  # litdata's look-up by key: a KeyError there too
        ds["0"]
    for i, item in enumerate(ds):
        check_item(item, i)
    order = random.Random(5).sample(range(800), 60)
    assert [ds[i]["i"] for i in order] == order
    assert "s3://" in repr(ds)


def test_reader_default_cache_dir_from_environment(remote_dataset, tmp_path, monkeypatch):
    url, opts = remote_dataset
    monkeypatch.setenv("SHARDWRIGHT_CACHE_DIR", str(tmp_path / "envcache"))
    ds = StreamingDataset(url, storage_options=opts)
    check_item(ds[30], 30)
    assert ds.cache_dir.startswith(str(tmp_path / "envcache") + os.sep)
    assert any(name.startswith("chunk-") for name in os.listdir(ds.cache_dir))


def test_litdatas_r2_url_and_dir_object_read_an_s3_compatible_store(remote_dataset, tmp_path):
    """litdata's ``r2://bucket/prefix`` is an S3-compatible store at the endpoint given (here the
    S3 server standing in for R2); a ``Dir(path=, url=)`` reads its url, caching under its path."""
    url, opts = remote_dataset
    r2 = StreamingDataset("r2://" + url[len("s3://") :], storage_options=opts, cache_dir=tmp_path / "r2cache")
    check_item(r2[30], 30)

    class Dir:  # litdata.streaming.resolver.Dir's shape
        def __init__(self, path=None, url=None):
            self.path, self.url = path, url

    ds = StreamingDataset(Dir(path=str(tmp_path / "copy"), url=url), storage_options=opts)
    check_item(ds[30], 30)
    assert ds.cache_dir.startswith(str(tmp_path / "copy") + os.sep)
    assert any(name.startswith("chunk-") for name in os.listdir(ds.cache_dir))


def test_reader_cache_is_bounded(remote_dataset, tmp_path):
    url, opts = remote_dataset
    root = tmp_path / "cache"
    limit = 120_000  # about 4.5 of the 32 chunks
    ds = StreamingDataset(url, storage_options=opts, cache_dir=root, max_cache_bytes=limit)
    largest = max(c.chunk_bytes for c in ds.chunks)
    assert largest * 4 < limit < sum(c.chunk_bytes for c in ds.chunks) / 4
    peak = 0
    for _round in range(2):
        for i, item in enumerate(ds):
            check_item(item, i)
            peak = max(peak, dir_bytes(root))
    assert peak <= limit + largest, f"cache grew to {peak} bytes, bound {limit} (+ one chunk {largest})"
    check_item(ds[0], 0)  # evicted long ago: downloaded again
    assert dir_bytes(root) <= limit + largest
    # Another reader on the same cache respects the same bound once this one is gone (while
    # it lives, the chunks it has open are never evicted).
    del ds, item
    other = StreamingDataset(url, storage_options=opts, cache_dir=root, max_cache_bytes=limit, prefetch=False)
    for i in range(799, -1, -37):
        check_item(other[i], i)
        assert dir_bytes(root) <= limit + largest


def test_reader_threads_share_a_small_cache(remote_dataset, tmp_path):
    url, opts = remote_dataset
    ds = StreamingDataset(url, storage_options=opts, cache_dir=tmp_path / "cache", max_cache_bytes=100_000)

    def read(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(150):
            i = rng.randrange(800)
            check_item(ds[i], i)

    assert errors_of_threads(read, range(4)) == []


def test_bucket_root_url(s3_server, s3_bucket, s3_storage_options, tmp_path):
    url = f"s3://{s3_bucket}"
    optimize(
        plain, list(range(50)), url, chunk_size=8, num_workers=2, storage_options=s3_storage_options, verbose=False
    )
    ds = StreamingDataset(url + "/", storage_options=s3_storage_options, cache_dir=tmp_path / "cache")
    assert ds.output_dir == url and [x["i"] for x in ds] == list(range(50))


def test_reader_dataloader_workers_fork(remote_dataset, tmp_path):
    torch = pytest.importorskip("torch")
    url, opts = remote_dataset
    ds = StreamingDataset(url, storage_options=opts, cache_dir=tmp_path / "cache")
    check_item(ds[5], 5)  # the parent has a client and an open chunk before the fork
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    seen = []
    for item in loader:
        assert int(item["a"][0]) == item["i"] % 251
        seen.append(item["i"])
    assert sorted(seen) == list(range(800))


def collate_ids(batch: list) -> list:
    return [int(x["i"]) for x in batch]


def test_reader_dataloader_workers_spawn(remote_dataset, tmp_path):
    torch = pytest.importorskip("torch")
    url, opts = remote_dataset
    ds = StreamingDataset(url, storage_options=opts, cache_dir=tmp_path / "cache", max_cache_bytes=200_000)
    check_item(ds[0], 0)
    sampler = torch.utils.data.RandomSampler(range(800), generator=torch.Generator().manual_seed(3))
    loader = torch.utils.data.DataLoader(
        ds, batch_size=16, num_workers=2, sampler=sampler, collate_fn=collate_ids, multiprocessing_context="spawn"
    )
    seen = [i for batch in loader for i in batch]
    assert sorted(seen) == list(range(800))


READER_PROCESS = textwrap.dedent("""
    import faulthandler, json, signal, sys
    import numpy as np
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # run_readers asks for stacks on a hang
    from shardwright import StreamingDataset
    url, opts, cache_dir, limit, reverse = json.loads(sys.argv[1])
    ds = StreamingDataset(url, storage_options=opts, cache_dir=cache_dir, max_cache_bytes=limit)
    order = range(len(ds) - 1, -1, -1) if reverse else range(len(ds))
    for i in order:
        item = ds[i]
        assert item["i"] == i and int(item["a"][0]) == i % 251, (i, item["i"])
    print(len(ds))
""")


def run_readers(args: list[list], timeout: float = 120) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", READER_PROCESS, json.dumps(a)],
            env=child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a in args
    ]
    deadline = time.monotonic() + timeout
    try:
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                # a hang (seen once in CI): every thread's stack, from each reader still running
                stacks = []
                for other in procs:
                    if other.poll() is None:
                        other.send_signal(signal.SIGUSR1)
                time.sleep(2)
                for other in procs:
                    if other.poll() is None:
                        other.kill()
                    stacks.append(other.communicate()[1][-6000:])
                pytest.fail(f"a reader hung past {timeout} s; their stderr:\n" + "\n---\n".join(stacks))
            assert proc.returncode == 0, err[-3000:]
            assert out.strip() == "800"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def test_two_processes_share_a_cache_without_double_downloads(remote_dataset, s3_server, fault_proxy, tmp_path):
    url, _ = remote_dataset
    opts = dict(fault_proxy.storage_options)  # no faults: the proxy just counts requests
    cache = str(tmp_path / "cache")
    before = fault_proxy.stats["requests"]
    run_readers([[url, opts, cache, 10**9, False], [url, opts, cache, 10**9, False]])
    requests = fault_proxy.stats["requests"] - before
    # index.json: one GET per process (its size bounded by the reply's Content-Length before the
    # body is read, no HEAD first); then each of the 32 chunks exactly once
    assert requests == 2 * 1 + 32, requests


def test_two_processes_share_a_small_cache(remote_dataset, tmp_path):
    url, opts = remote_dataset
    root = tmp_path / "cache"
    limit = 150_000
    run_readers([[url, opts, str(root), limit, False], [url, opts, str(root), limit, True]])
    largest = 25 * (ROWS + 200) + 4 * 27
    assert dir_bytes(root) <= limit + 2 * largest


def test_reader_through_faulty_network(remote_dataset, fault_proxy, tmp_path):
    url, _ = remote_dataset
    opts = dict(fault_proxy.storage_options)  # the default client: our one retry loop
    ds = StreamingDataset(url, storage_options=opts, cache_dir=tmp_path / "cache")
    fault_proxy.configure(p_503=0.1, p_reset=0.05, p_truncate=0.15, next_faults=["truncate"])  # one at least
    for i, item in enumerate(ds):
        check_item(item, i)
    assert fault_proxy.stats["truncate"] > 0


def test_reader_damaged_cache_file_is_fetched_again(remote_dataset, tmp_path):
    url, opts = remote_dataset
    ds = StreamingDataset(url, storage_options=opts, cache_dir=tmp_path / "cache")
    check_item(ds[60], 60)  # chunk 2
    path = Path(ds.cache_dir) / ds.chunks[2].filename
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])  # e.g. a disk problem after the download
    fresh = StreamingDataset(url, storage_options=opts, cache_dir=tmp_path / "cache")
    for i in range(50, 75):
        check_item(fresh[i], i)
    assert path.read_bytes() == good


def test_reader_damaged_or_missing_remote_chunk(s3_server, s3_url, s3_storage_options, tmp_path):
    optimize(
        array_item,
        list(range(100)),
        s3_url,
        chunk_size=25,
        num_shards=4,
        num_workers=1,
        storage_options=s3_storage_options,
        verbose=False,
    )
    storage = open_storage(s3_url, s3_storage_options)
    ds = StreamingDataset(s3_url, storage_options=s3_storage_options, cache_dir=tmp_path / "cache", prefetch=False)
    victim = ds.chunks[1].filename
    data = storage.read_bytes(victim)
    storage.write_bytes(victim, data[:-10])
    check_item(ds[10], 10)
    with pytest.raises(CorruptStateError, match=f"{s3_url}/{victim} is {len(data) - 10} bytes but index.json says"):
        ds[30]
    storage.delete(victim)
    with pytest.raises(CorruptStateError, match=f"chunk {s3_url}/{victim} named in {s3_url}/index.json is missing"):
        ds[30]
    check_item(ds[99], 99)  # the other chunks still read


def test_reader_zstd_validates_decompressed_size(s3_url, s3_storage_options, tmp_path):
    optimize(
        array_item,
        list(range(100)),
        s3_url,
        chunk_size=25,
        num_shards=4,
        compression="zstd",
        num_workers=1,
        storage_options=s3_storage_options,
        verbose=False,
    )
    ds = StreamingDataset(s3_url, storage_options=s3_storage_options, cache_dir=tmp_path / "cache")
    for i, item in enumerate(ds):
        check_item(item, i)
    # A compressed chunk replaced by a valid zstd frame of other (shorter) content.
    import zstandard

    storage = open_storage(s3_url, s3_storage_options)
    victim = ds.chunks[3].filename
    raw = zstandard.ZstdDecompressor().decompress(storage.read_bytes(victim))
    storage.write_bytes(victim, zstandard.ZstdCompressor(write_content_size=True).compress(raw[:-ROWS]))
    # check_checksums=False: the size check on its own (with it, the checksum finds it first)
    fresh = StreamingDataset(
        s3_url, storage_options=s3_storage_options, cache_dir=tmp_path / "cache2", check_checksums=False
    )
    with pytest.raises(CorruptStateError, match="decompresses to .* bytes but index.json says"):
        fresh[80]


def test_reader_missing_index_is_incomplete(s3_url, s3_storage_options, tmp_path):
    config = {
        "kind": "plain",
        "n": 4000,
        "chunk_size": 10,
        "sleep": 0.003,
        "output_dir": s3_url,
        "storage_options": s3_storage_options,
        "num_workers": 2,
        # inputs from 1000 on wait for a gate that never opens: the run cannot publish before
        # the kill, at any load
        "gate": str(tmp_path / "gate"),
        "gate_period": 4000,
        "gate_after": 1000,
    }
    proc = start_child(config)
    try:
        assert wait_for(lambda: proc.poll() is not None or committed_records(s3_url, s3_storage_options) >= 2, 120)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
    finally:
        kill_group(proc)
        proc.wait()
    assert wait_for(lambda: not group_pids(proc.pid), 5)
    records = sum(len(names) for names in committed_chunk_names(s3_url, s3_storage_options).values())
    assert records > 0
    with pytest.raises(IncompleteDatasetError) as err:
        StreamingDataset(s3_url, storage_options=s3_storage_options)
    assert str(err.value) == (
        f"{s3_url} has no index.json: the optimize run writing it has not finished ({records} checkpointed "
        "chunks found under .shardwright/); rerun the same optimize call to finish it"
    )
    with pytest.raises(IncompleteDatasetError, match="nothing at all is stored under .*: check the URL"):
        StreamingDataset(s3_url + "-typo", storage_options=s3_storage_options)


def test_reader_pickles_without_clients(remote_dataset, tmp_path):
    import pickle

    url, opts = remote_dataset
    ds = StreamingDataset(url, storage_options=opts, cache_dir=tmp_path / "cache")
    check_item(ds[100], 100)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone._storage._client is None
    for i in range(95, 130):
        check_item(clone[i], i)


def test_reader_unsupported_url():
    with pytest.raises(ValueError, match="unsupported URL"):
        StreamingDataset("hdfs://bucket/data")
