"""engine.calls and engine.limits against the real loopback teacher: two forked worker processes
share one node budget through its file, each with many calls in flight (aiohttp), the
teacher's 429s (with Retry-After) and 500s retried per call. No call starts over the budget,
the budget is used, every key is answered once. "Used" is read from the budget's own
reservations (a call that waited starts exactly one interval after the one before it), not
from calls per wall-clock second, which a loaded machine lowers however right the budget is."""

from __future__ import annotations

import asyncio
import multiprocessing
import time

import pytest

from shardwright.engine.calls import RetryPolicy, retry_async
from shardwright.engine.limits import AdaptiveLimit, Limiter, SharedBudget
from support.teacher import Teacher, over_budget_calls, read_log, repeated_calls

aiohttp = pytest.importorskip("aiohttp")


class StatusError(Exception):
    def __init__(self, status: int, headers: dict):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = headers


class RecordingBudget(SharedBudget):
    """The real shared budget, each reservation appended to ``log`` as ``start wait`` (the
    monotonic clock is the machine's: lines from both processes compare)."""

    def __init__(self, rate: str, path: str, log: str):
        super().__init__(rate, path=path)
        self.log = log

    def reserve(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        wait = super().reserve(now)
        with open(self.log, "a") as file:  # one short O_APPEND write per line: whole lines
            file.write(f"{now + wait:.9f} {wait:.9f}\n")
        return wait


def _worker(url: str, keys: list[str], limiter: Limiter, done) -> None:
    async def one(session, key: str) -> None:
        async def call() -> str:
            async with limiter.slot():
                body = {"model": "t", "user": key, "messages": [{"role": "user", "content": key}]}
                async with session.post(f"{url}/chat/completions", json=body) as response:
                    if response.status != 200:
                        raise StatusError(response.status, dict(response.headers))
                    reply = await response.json()
                    return reply["choices"][0]["message"]["content"]

        await retry_async(call, RetryPolicy(base_delay=0.05, max_delay=0.5))

    async def main() -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:
            await asyncio.gather(*(one(session, key) for key in keys))

    asyncio.run(main())
    done.put(len(keys))


def test_two_processes_share_the_node_budget_and_retry_per_call(tmp_path):
    log = tmp_path / "calls.log"
    rate = 60.0
    keys = [f"doc{d}/p{p}/c{c}" for d in range(4) for p in range(20) for c in range(3)]  # 240 calls
    with Teacher(latency=0.05, p_429=0.03, p_500=0.01, retry_after=0.2, rps=rate, seed=3, log=str(log)) as teacher:
        limiter = Limiter(concurrency=AdaptiveLimit(32, maximum=64))
        reservations = str(tmp_path / "reservations")
        limiter.budget = RecordingBudget(f"{rate:g}/s", str(tmp_path / "budget"), reservations)
        context = multiprocessing.get_context("fork")  # the workers inherit the recording budget
        done = context.Queue()
        halves = [keys[0::2], keys[1::2]]
        workers = [context.Process(target=_worker, args=(teacher.url, half, limiter, done)) for half in halves]
        for worker in workers:
            worker.start()
        assert sum(done.get(timeout=600) for _ in workers) == len(keys)
        for worker in workers:
            worker.join(60)
            assert worker.exitcode == 0
    calls = read_log(str(log))
    answered = {c.key for c in calls if c.status == "200"}
    assert answered == set(keys) and repeated_calls(calls) == 0
    assert over_budget_calls(calls) == 0
    assert any(c.status in ("429", "500") for c in calls)  # the faults happened and were retried
    with open(reservations) as file:
        reserved = sorted(tuple(map(float, line.split())) for line in file)
    assert len(reserved) == len(calls)  # each attempt reserved once: no double wait, none unreserved
    interval = 1.0 / rate
    gaps = [(b[0] - a[0], b[1]) for a, b in zip(reserved, reserved[1:])]
    assert all(gap >= interval - 1e-6 for gap, _ in gaps)  # shared by both processes: never over it
    waited = [gap for gap, wait in gaps if wait > 0]
    # the budget, not the concurrency limit, held the calls back (a collapsed limit reserves
    # only once a call ended: no call would wait) ...
    assert len(waited) >= len(gaps) / 2, f"{len(waited)} of {len(gaps)} calls waited for the budget"
    # ... and it is used: a call that waited starts one interval after the one before, not later
    assert all(gap <= interval + 1e-6 for gap in waited), max(waited)


def test_adaptive_limit_backs_off_when_the_teacher_throttles_and_recovers(tmp_path):
    """No client budget: the teacher's own (40/s) answers 429 to most of 64 calls in flight;
    the AIMD limit comes down, and grows back once the teacher stops refusing."""
    adaptive = AdaptiveLimit(64, maximum=64)
    limiter = Limiter(concurrency=adaptive)

    async def main(url: str, keys: list[str]) -> None:
        async with aiohttp.ClientSession() as session:

            async def one(key: str) -> None:
                async def call() -> None:
                    async with limiter.slot():
                        body = {"model": "t", "user": key, "messages": [{"role": "user", "content": key}]}
                        async with session.post(f"{url}/chat/completions", json=body) as response:
                            if response.status != 200:
                                raise StatusError(response.status, dict(response.headers))

                await retry_async(call, RetryPolicy(max_retries=50, base_delay=0.01, max_delay=0.05))

            await asyncio.gather(*(one(key) for key in keys))

    with Teacher(latency=0.05, rps=40, burst=5, log=str(tmp_path / "calls.log")) as teacher:
        asyncio.run(main(teacher.url, [f"a{i}" for i in range(120)]))
        assert adaptive.decreases >= 1 and adaptive.limit < 64
        low = adaptive.limit
    with Teacher(latency=0.01) as teacher:
        asyncio.run(main(teacher.url, [f"b{i}" for i in range(2000)]))
    assert adaptive.limit > low and adaptive.in_flight == 0
