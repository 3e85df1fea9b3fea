"""The loopback teacher (tests/support/teacher.py) itself: its OpenAI response shape, the seeded
429s (with Retry-After) and 500s, the requests-per-second budget, the call log and its
counters, in-thread and as a subprocess stopped by pid."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from support.helpers import wait_for
from support.teacher import (
    Call,
    Teacher,
    TeacherProcess,
    budget_replay,
    over_budget_calls,
    read_log,
    repeated_calls,
)


def _post(url: str, key: str) -> tuple[int, dict, dict]:
    body = json.dumps({"model": "t", "user": key, "messages": [{"role": "user", "content": key}]}).encode()
    request = urllib.request.Request(f"{url}/chat/completions", body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read()), dict(exc.headers)


def test_answers_in_openai_shape_and_logs_every_call(tmp_path):
    log = tmp_path / "calls.log"
    with Teacher(latency=0.01, log=str(log)) as teacher:
        status, reply, _ = _post(teacher.url, "doc1/p0/c0")
        _post(teacher.url, "doc1/p0/c0")
    assert status == 200
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"]["content"].startswith("answer to doc1/p0/c0")
    calls = read_log(str(log))
    assert [(c.status, c.key) for c in calls] == [("200", "doc1/p0/c0")] * 2
    assert repeated_calls(calls) == 1


def test_seeded_faults_carry_retry_after_and_do_not_depend_on_order(tmp_path):
    def statuses(keys):
        with Teacher(latency=0.0, p_429=0.2, p_500=0.1, retry_after=2, seed=7) as teacher:
            out = {}
            for key in keys:
                status, body, headers = _post(teacher.url, key)
                out[key] = status
                if status == 429:
                    assert headers["Retry-After"] == "2" and body["error"]["code"] == "rate_limit_exceeded"
            return out

    keys = [f"k{i}" for i in range(200)]
    first, second = statuses(keys), statuses(list(reversed(keys)))
    assert first == second
    counts = {s: list(first.values()).count(s) for s in (200, 429, 500)}
    assert 20 <= counts[429] <= 60 and 5 <= counts[500] <= 35, counts


def test_budget_refuses_calls_over_it_and_the_log_counts_them(tmp_path):
    log = tmp_path / "calls.log"
    rps, burst = 0.5, 3
    with Teacher(latency=0.0, rps=rps, burst=burst, log=str(log)) as teacher:
        started = time.monotonic()
        results = [_post(teacher.url, f"k{i}") for i in range(10)]
        elapsed = time.monotonic() - started
    refused = [r for r in results if r[0] == 429]
    # the burst is answered, then a call per refilled token (the calls' own duration counted,
    # however slow the machine): the rest refused at once
    refilled = int(rps * elapsed)
    assert 10 - burst - refilled <= len(refused) <= 10 - burst, (len(refused), elapsed)
    assert int(refused[0][2]["retry-after-ms"]) > 0
    calls = read_log(str(log))
    assert over_budget_calls(calls) == len(refused)
    assert repeated_calls(calls) == 0


def test_budget_replay_counts_calls_over_a_bucket():
    calls = [Call("200", f"k{i}", 100.0 + i * 0.1) for i in range(20)]  # 10/s
    assert budget_replay(calls, rps=10) == 0
    assert budget_replay(calls, rps=5, burst=1) == 10  # half of them over a 5/s budget
    assert budget_replay(calls, rps=5) == pytest.approx(5, abs=1)  # a 5-call burst absorbs some


def test_runs_as_a_subprocess_stopped_by_pid(tmp_path):
    log = tmp_path / "calls.log"
    with TeacherProcess(latency=0.01, p_500=0.0, log=str(log)) as teacher:
        assert _post(teacher.url, "x")[0] == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{teacher.port}/stats", timeout=10) as response:
            assert json.loads(response.read())["calls"] == 1
    assert teacher.proc is not None and teacher.proc.returncode == 0
    assert [c.status for c in read_log(str(log))] == ["200"]


def test_serves_a_thousand_concurrent_keep_alive_connections():
    aiohttp = pytest.importorskip("aiohttp")
    import asyncio

    async def main(url: str) -> list[int]:
        connector = aiohttp.TCPConnector(limit=1000)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def one(i: int) -> int:
                body = {"model": "t", "user": f"k{i}", "messages": [{"role": "user", "content": "x"}]}
                async with session.post(f"{url}/chat/completions", json=body) as response:
                    await response.read()
                    return response.status

            return await asyncio.gather(*(one(i) for i in range(1000)))

    # every call is held until all 1000 are in flight at once (at any load), then answered
    with Teacher(latency=0.0, hold_after=0) as teacher:
        statuses: list[int] = []
        client = threading.Thread(target=lambda: statuses.extend(asyncio.run(main(teacher.url))))
        client.start()
        try:
            assert wait_for(lambda: teacher.stats.held >= 1000 or not client.is_alive(), 300), teacher.stats.held
            assert teacher.stats.held == 1000 and teacher.stats.peak_in_flight == 1000
        finally:
            teacher.release()
            client.join(300)
    assert statuses == [200] * 1000
