"""Storage.map_requests: the one place that decides whether many small requests are worth a
thread pool (object stores: yes; local disk and memory: not for a few dozen)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from shardwright.storage import LocalStorage, MemoryStorage, S3Storage, Storage


def test_each_backend_says_when_threads_pay_off():
    assert S3Storage.PARALLEL_FROM == Storage.PARALLEL_FROM == 2
    assert LocalStorage.PARALLEL_FROM == MemoryStorage.PARALLEL_FROM == 64


@pytest.mark.parametrize("count", [0, 1, 5, 63])
def test_below_the_threshold_calls_run_in_the_callers_thread_in_order(tmp_path, count):
    storage = LocalStorage(tmp_path)
    threads = set()

    def call(x: int) -> int:
        threads.add(threading.get_ident())
        return x * x

    assert storage.map_requests(call, range(count)) == [x * x for x in range(count)]
    assert threads <= {threading.get_ident()}


class _NoSerialStart(LocalStorage):
    SERIAL_FIRST = 0.0  # the first call uses up the budget: the rest go to threads


class _LongSerialStart(LocalStorage):
    SERIAL_FIRST = 3600.0  # quick calls never use it up (the real budget is 2 ms of calls)


def test_local_disk_starts_in_the_callers_thread():
    # issue 36: publish read 80 record files through 16 threads, 8.8 ms against 0.6 ms in one
    assert LocalStorage.SERIAL_FIRST is not None and 0 < LocalStorage.SERIAL_FIRST <= 0.01
    assert S3Storage.SERIAL_FIRST is None  # an object store's round trips overlap from the first


def test_quick_calls_past_the_threshold_stay_in_the_callers_thread(tmp_path):
    storage = _LongSerialStart(tmp_path)
    threads = set()

    def call(x: int) -> int:
        threads.add(threading.get_ident())
        return x + 1

    assert storage.map_requests(call, range(500)) == [x + 1 for x in range(500)]
    assert threads == {threading.get_ident()}


def test_from_the_threshold_on_calls_overlap_and_keep_their_order(tmp_path):
    storage = _NoSerialStart(tmp_path)
    threads = set()
    lock = threading.Lock()
    in_flight = [0, 0]  # now, the most at once
    both = threading.Barrier(2)  # two calls in flight together: the event, not a time bound

    def call(x: int) -> int:
        threads.add(threading.get_ident())
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
        if x in (1, 2):  # 0 ran in the caller's thread and used up the serial budget
            both.wait(timeout=60)  # only returns once another thread runs a call at the same time
        time.sleep(0.002)  # a network file system's round trip
        with lock:
            in_flight[0] -= 1
        return -x

    assert storage.map_requests(call, iter(range(160))) == [-x for x in range(160)]
    assert len(threads - {threading.get_ident()}) > 1
    assert in_flight[1] > 1  # overlapped, not one after the other


@pytest.mark.parametrize("kind", [LocalStorage, _NoSerialStart])
def test_an_error_of_one_call_reaches_the_caller(tmp_path, kind):
    storage = kind(tmp_path)

    def call(x: int) -> int:
        if x == 70:
            raise FileNotFoundError("gone")
        return x

    with pytest.raises(FileNotFoundError, match="gone"):
        storage.map_requests(call, range(100))


def test_local_delete_prefix_unlinks_through_map_requests(tmp_path):
    """Cleanup deletes a run's record files with one delete_prefix: on this machine's ext4 an
    unlink of a file already flushed took 0.2-3 ms, so they go through map_requests (threads
    once they are slow; issue 36: 80 records, 13-90 ms one by one, 5-17 ms from threads)."""
    handed: list[list[str]] = []

    class Watched(_NoSerialStart):
        def map_requests(self, fn, items):
            todo = list(items)
            handed.append(todo)
            return super().map_requests(fn, todo)

    storage = Watched(tmp_path)
    keys = [f"state/shards/{i:05d}.json" for i in range(100)]
    for key in keys:
        storage.write_bytes(key, b"{}", durable=False)
    storage.write_bytes("state/keep.json", b"{}")
    storage.delete_prefix("state/shards/")
    assert sorted(os.path.basename(p) for p in handed[-1]) == [k.rsplit("/", 1)[1] for k in keys]
    assert storage.list("state/") == ["state/keep.json"] and not (tmp_path / "state" / "shards").exists()
