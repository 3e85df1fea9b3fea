"""The training reader on the real S3 server: prefetch from the epoch plan under injected
latency, and ranks that download only their share of the chunks."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from shardwright import StreamingDataset, optimize

pytestmark = pytest.mark.s3

ROWS = 1000
CHUNKS = 40


def array_item(i: int) -> dict:
    return {"i": i, "a": np.full(ROWS, i % 251, dtype=np.uint8)}


@pytest.fixture(scope="module")
def remote(s3_server):
    bucket = s3_server.create_bucket()
    url = f"s3://{bucket}/train"
    optimize(
        array_item,
        list(range(CHUNKS * 20)),
        url,
        chunk_size=20,
        num_shards=4,
        num_workers=2,
        storage_options=s3_server.storage_options,
        verbose=False,
    )
    yield url
    try:
        s3_server.delete_bucket(bucket)
    except Exception:
        pass


def dir_bytes(root: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


def test_prefetch_from_the_plan_hides_latency(remote, fault_proxy, tmp_path):
    fault_proxy.configure(latency=0.05)  # every S3 request takes 50 ms more
    chunk = 20 * (ROWS + 100)
    limit = 16 * chunk
    ds = StreamingDataset(
        remote,
        storage_options=fault_proxy.storage_options,
        cache_dir=tmp_path / "cache",
        max_cache_bytes=limit,
        shuffle=True,
        seed=2,
        shuffle_window=4,
        prefetch=4,
        iterable=True,
    )
    seen = []
    for item in ds:
        seen.append(item["i"])
        time.sleep(0.003)  # a training step: the downloads of the next window overlap it
    assert sorted(seen) == list(range(CHUNKS * 20))
    waits = ds._source.cache.reader_waits
    # Warm-up: the first window's chunks (4) are waited for; after that, reads find their chunk.
    assert waits <= 6, f"{waits} reads waited for a download"
    assert dir_bytes(tmp_path / "cache") <= limit + 2 * chunk


def test_without_prefetch_every_chunk_is_waited_for(remote, fault_proxy, tmp_path):
    """The control: the test above could not pass without the prefetcher."""
    ds = StreamingDataset(
        remote,
        storage_options=fault_proxy.storage_options,
        cache_dir=tmp_path / "cache",
        shuffle=True,
        seed=2,
        prefetch=False,
        iterable=True,
    )
    assert len(list(ds)) == CHUNKS * 20
    assert ds._source.cache.reader_waits == CHUNKS


def test_each_rank_downloads_its_share(remote, fault_proxy, tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    downloaded = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        before = fault_proxy.stats["requests"]
        ds = StreamingDataset(
            remote, storage_options=fault_proxy.storage_options, cache_dir=tmp_path / f"c{rank}", shuffle=True, seed=5
        )
        items = [x["i"] for x in ds]
        assert len(items) == CHUNKS * 10
        downloaded.append(fault_proxy.stats["requests"] - before - 1)  # minus index.json
    assert all(n <= CHUNKS // 2 + 1 for n in downloaded), downloaded


KILLED_READER = """
import os, sys, time
from shardwright import StreamingDataset
url, endpoint, key, secret, cache, limit, seed, hold, held = sys.argv[1:10]
opts = {"endpoint_url": endpoint, "aws_access_key_id": key, "aws_secret_access_key": secret}
ds = StreamingDataset(url, storage_options=opts, cache_dir=cache, max_cache_bytes=int(limit), shuffle=True,
                      seed=int(seed), iterable=True)
n = 0
for item in ds:
    n += 1
    time.sleep(0.002)
    if n == int(hold):  # mid-read, its next downloads in flight: held until the test kills it
        open(held, "w").close()
        while True:
            time.sleep(0.05)
print(n)
"""


@pytest.mark.slow
def test_cache_bound_holds_for_readers_killed_at_random(remote, s3_server, fault_proxy, tmp_path):
    """Three readers share one small cache (latency makes downloads overlap the kills); two are
    SIGKILLed mid-read, with no cleanup. The survivors and a later reader read everything and
    the cache stays within its bound (temp files of the killed count against it)."""
    import random
    import signal
    import subprocess
    import sys

    from support.helpers import child_env, kill_group, wait_for

    fault_proxy.configure(latency=0.02)
    chunk = 20 * (ROWS + 100)
    limit = 8 * chunk
    cache = tmp_path / "cache"
    script = tmp_path / "reader.py"
    script.write_text(KILLED_READER)
    opts = fault_proxy.storage_options

    def start(seed: int, hold: int = 0) -> subprocess.Popen:
        """A reader; with ``hold``, it holds after that many items (``held-SEED`` appears)."""
        args = [
            remote,
            opts["endpoint_url"],
            opts["aws_access_key_id"],
            opts["aws_secret_access_key"],
            str(cache),
            str(limit),
            str(seed),
            str(hold),
            str(tmp_path / f"held-{seed}"),
        ]
        return subprocess.Popen(
            [sys.executable, str(script), *args],
            env=child_env(),
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    rng = random.Random(3)
    # the two to kill hold at a random moment mid-read (the kill lands then, at any load)
    procs = [start(seed, rng.randint(50, CHUNKS * 20 - 100)) for seed in range(2)] + [start(2)]
    for seed, proc in enumerate(procs[:2]):
        assert wait_for(
            lambda seed=seed, proc=proc: proc.poll() is not None or (tmp_path / f"held-{seed}").exists(), 120
        )
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        kill_group(proc, signal.SIGKILL)
        proc.communicate()
    out, err = procs[2].communicate(timeout=120)
    assert procs[2].returncode == 0 and out.strip() == str(CHUNKS * 20), err[-2000:]
    later = start(7)
    out, err = later.communicate(timeout=120)
    assert later.returncode == 0 and out.strip() == str(CHUNKS * 20), err[-2000:]
    assert dir_bytes(cache) <= limit + 3 * chunk, f"{dir_bytes(cache)} bytes cached for a bound of {limit}"


def test_a_reader_exits_while_a_prefetch_thread_holds_its_lock(tmp_path):
    """A daemon prefetch thread frozen at exit while holding the prefetcher's lock must not
    hang the process in the source's __del__ (it did, about 1 run in 10 of a CI test)."""
    import subprocess
    import sys
    import textwrap

    from shardwright import optimize

    out = tmp_path / "ds"
    optimize(_small_item, list(range(10)), str(out), num_workers=1, verbose=False)
    script = textwrap.dedent(f"""
        import threading, time
        from shardwright import StreamingDataset
        from shardwright.reader.prefetch import Prefetcher
        ds = StreamingDataset({str(out)!r})
        state = ds._source.state()
        state.prefetcher = Prefetcher(None, 1, 1)
        held = threading.Event()
        def hold():
            with state.prefetcher._lock:
                held.set()
                time.sleep(3600)
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        print(len(ds))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "10"


def _small_item(i: int) -> dict:
    return {"i": i}
