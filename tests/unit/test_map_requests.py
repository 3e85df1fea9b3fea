"""Storage.map_requests: the one place that decides whether many small requests are worth a
thread pool (object stores: yes; local disk and memory: not for a few dozen)."""

from __future__ import annotations

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


def test_from_the_threshold_on_calls_overlap_and_keep_their_order(tmp_path):
    storage = LocalStorage(tmp_path)
    threads = set()
    lock = threading.Lock()
    in_flight = [0, 0]  # now, the most at once
    both = threading.Barrier(2)  # two calls in flight together: the event, not a time bound

    def call(x: int) -> int:
        threads.add(threading.get_ident())
        with lock:
            in_flight[0] += 1
            in_flight[1] = max(in_flight)
        if x < 2:
            both.wait(timeout=60)  # only returns once another thread runs a call at the same time
        time.sleep(0.002)  # a network file system's round trip
        with lock:
            in_flight[0] -= 1
        return -x

    assert storage.map_requests(call, iter(range(160))) == [-x for x in range(160)]
    assert len(threads) > 1 and threading.get_ident() not in threads
    assert in_flight[1] > 1  # overlapped, not one after the other


def test_an_error_of_one_call_reaches_the_caller(tmp_path):
    storage = LocalStorage(tmp_path)

    def call(x: int) -> int:
        if x == 70:
            raise FileNotFoundError("gone")
        return x

    with pytest.raises(FileNotFoundError, match="gone"):
        storage.map_requests(call, range(100))
