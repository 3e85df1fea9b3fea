"""engine.limits: parsing budgets, the node's shared budget (across processes, by a real fork),
the AIMD concurrency limit, and the Limiter's asyncio and thread entry points."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import pickle
import threading
import time

import pytest

from shardwright.engine.limits import AdaptiveLimit, Limiter, Rate, SharedBudget, node_rate, parse_rate
from shardwright.errors import ArgumentTypeError, UsageError


class Throttled(Exception):
    status_code = 429


@pytest.mark.parametrize(
    "text, per_second",
    [("10/s", 10), ("600/min", 10), ("2.5/s", 2.5), ("36000/h", 10), (" 120 / minute ", 2), ("5/SEC", 5)],
)
def test_parse_rate(text, per_second):
    assert parse_rate(text).per_second == pytest.approx(per_second)


@pytest.mark.parametrize("bad", ["10", "10/d", "ten/s", "0/s", "-1/s", "1e3/s", "", "10/s/s", "2000000/s"])
def test_parse_rate_is_strict(bad):
    with pytest.raises(UsageError, match="rate_limit"):
        parse_rate(bad)


@pytest.mark.parametrize("bad", [10, 10.0, True, None, b"10/s"])
def test_parse_rate_refuses_non_strings(bad):
    with pytest.raises(ArgumentTypeError, match='such as "10/s"'):
        parse_rate(bad)


def test_budget_is_split_evenly_across_nodes():
    assert node_rate("600/min", 4).per_second == pytest.approx(2.5)
    assert node_rate("10/s", 1) == Rate(10.0, "10/s")
    with pytest.raises(UsageError, match="num_nodes"):
        node_rate("10/s", 0)


def test_shared_budget_spaces_calls_and_allows_a_burst(tmp_path):
    budget = SharedBudget("10/s", path=str(tmp_path / "b"))
    now = time.monotonic()
    waits = [budget.reserve(now) for _ in range(5)]
    assert waits == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4])
    bursty = SharedBudget("10/s", path=str(tmp_path / "c"), burst=3)
    waits = [bursty.reserve(now) for _ in range(5)]
    assert waits == pytest.approx([0.0, 0.0, 0.0, 0.1, 0.2])
    assert bursty.reserve(now + 10) == 0.0  # idle: the reservation does not pile up


def test_shared_budget_is_shared_through_the_file_and_pickles(tmp_path):
    path = str(tmp_path / "b")
    one, two = SharedBudget("10/s", path=path), SharedBudget("10/s", path=path)
    now = time.monotonic()
    assert one.reserve(now) == 0.0
    assert two.reserve(now) == pytest.approx(0.1)
    three = pickle.loads(pickle.dumps(one))
    assert three.reserve(now) == pytest.approx(0.2)


def test_shared_budget_resets_a_stale_or_foreign_file(tmp_path):
    path = tmp_path / "b"
    path.write_bytes((b"garbage" * 20)[:64])
    os.chmod(path, 0o600)
    assert SharedBudget("1/s", path=str(path)).reserve() == 0.0
    other = tmp_path / "notes.json"  # path= naming some other file by mistake: never overwritten
    other.write_bytes(b"garbage" * 20)
    os.chmod(other, 0o600)
    with pytest.raises(UsageError, match="holds 140 bytes, not 64"):
        SharedBudget("1/s", path=str(other))
    assert other.read_bytes() == b"garbage" * 20


def test_shared_budget_needs_one_place():
    with pytest.raises(UsageError, match="exactly one of name="):
        SharedBudget("1/s")
    with pytest.raises(UsageError, match="budget name"):
        SharedBudget("1/s", name="../etc")
    with pytest.raises(UsageError, match="burst"):
        SharedBudget("1/s", name="x", burst=0)


def _reserve_many(path: str, count: int, queue) -> None:
    budget = SharedBudget("1000/s", path=path)
    starts = []
    for _ in range(count):
        now = time.monotonic()
        starts.append(now + budget.reserve(now))  # the start it was given
    queue.put(starts)


def test_shared_budget_across_forked_processes_never_hands_out_the_same_start(tmp_path):
    path = str(tmp_path / "b")
    parent = SharedBudget("1000/s", path=path)
    parent.reserve()  # the parent's descriptor is open before the fork: children must reopen
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    children = [context.Process(target=_reserve_many, args=(path, 200, queue)) for _ in range(3)]
    for child in children:
        child.start()
    starts = sorted(t for _ in children for t in queue.get(timeout=60))
    for child in children:
        child.join(60)
    assert len(starts) == 600
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert min(gaps) >= 0.001 - 1e-6  # 1000/s: every start 1 ms after the previous, whoever took it


def test_adaptive_limit_validates():
    with pytest.raises(UsageError, match="initial"):
        AdaptiveLimit(0)
    with pytest.raises(UsageError, match="minimum <= initial <= maximum"):
        AdaptiveLimit(10, maximum=5)
    with pytest.raises(UsageError, match="decrease"):
        AdaptiveLimit(decrease=1.5)
    with pytest.raises(UsageError, match="initial"):
        AdaptiveLimit(True)  # type: ignore[arg-type]


def test_adaptive_limit_halves_on_throttling_once_per_generation_and_recovers():
    limit = AdaptiveLimit(32, maximum=64, tolerance=0.0)
    tickets = [limit.acquire_sync() for _ in range(32)]
    assert limit.in_flight == 32
    limit.release(tickets[0], "throttled")
    assert limit.limit == 16
    for ticket in tickets[1:]:  # the others started under the old limit: their 429s do not count again
        limit.release(ticket, "throttled")
    assert limit.limit == 16 and limit.in_flight == 0
    for _ in range(16 * 8):
        limit.release(limit.acquire_sync(), "ok")
    assert 22 <= limit.limit <= 26  # about +1 per window of `limit` calls
    for _ in range(10_000):
        limit.release(limit.acquire_sync(), "ok")
    assert limit.limit == 64


def test_adaptive_limit_tolerates_scattered_429s():
    limit = AdaptiveLimit(32, maximum=64)  # tolerance 10 %: a provider's 3 % of 429s is not overload
    for i in range(3000):
        limit.release(limit.acquire_sync(), "throttled" if i % 33 == 0 else "ok")
    assert limit.limit >= 32


def test_adaptive_limit_caps_threads_in_flight():
    limit = AdaptiveLimit(3, maximum=3)
    peak, lock, active = [0], threading.Lock(), [0]

    def work():
        ticket = limit.acquire_sync()
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.01)
        with lock:
            active[0] -= 1
        limit.release(ticket)

    threads = [threading.Thread(target=work) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak[0] == 3 and limit.in_flight == 0


def test_limiter_async_slots_cap_concurrency_count_429s_and_survive_cancellation(tmp_path):
    limiter = Limiter("1000/s", path=str(tmp_path / "b"), concurrency=AdaptiveLimit(4, maximum=4, tolerance=0.0))
    active, peak = [0], [0]

    async def call(i: int) -> None:
        async with limiter.slot():
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            await asyncio.sleep(0.005)
            active[0] -= 1
            if i == 5:
                raise Throttled()

    async def main() -> None:
        results = await asyncio.gather(*(call(i) for i in range(20)), return_exceptions=True)
        assert sum(isinstance(r, Throttled) for r in results) == 1
        waiting = [asyncio.create_task(call(100 + i)) for i in range(10)]
        await asyncio.sleep(0)
        for task in waiting:
            task.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)

    asyncio.run(main())
    assert peak[0] == 4
    assert limiter.concurrency is not None and limiter.concurrency.in_flight == 0
    assert limiter.concurrency.decreases == 1  # the one 429 halved it (and the successes after grew it back)


def test_limiter_sync_slot_and_pickling(tmp_path):
    limiter = Limiter("200/s", path=str(tmp_path / "b"), num_nodes=2, concurrency=AdaptiveLimit(2))
    assert limiter.budget is not None and limiter.budget.rate.per_second == 100
    started = time.monotonic()
    for _ in range(6):
        with limiter.slot_sync() as slot:
            pass
    assert time.monotonic() - started >= 0.05 - 0.005  # 100/s: 6 calls span at least 50 ms
    with limiter.slot_sync() as slot:
        slot.throttled()
    clone = pickle.loads(pickle.dumps(limiter))
    assert clone.budget is not None and clone.budget.path == limiter.budget.path
    assert clone.concurrency is not None and clone.concurrency.in_flight == 0
    with pytest.raises(ArgumentTypeError, match="AdaptiveLimit"):
        Limiter("1/s", name="x", concurrency=4)  # type: ignore[arg-type]
    limiter.close()
    assert os.path.exists(limiter.budget.path)
