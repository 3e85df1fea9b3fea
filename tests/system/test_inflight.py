"""Inputs in flight against a real loopback teacher (tests/support/teacher.py), with real signals
(issue 32): documents -> pages -> one call per page, an async generator yielding a ResumePoint
after each page, an async def fn and a plain generator in threads.

- SIGINT or SIGTERM mid-run: the resume repeats 0 calls; the dataset holds every page once, in
  input order.
- SIGKILL once every answered call is in the durable progress snapshots (the test waits for
  them): the resume repeats at most the calls in flight at the kill, never an answered one.
- Transient teacher errors (429 with Retry-After, 500s) are retried per input from its last
  ResumePoint: every input finishes.

Each test waits on events (lines in the teacher's call log, calls the teacher holds, the child's
exit), never sleeps: the teacher holds every call past ``hold_after`` until the test releases it,
so the run is certainly mid-way when the test signals it or reads its status, at any load.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from support.helpers import child_env, kill_group, wait_for
from support.inflight_child import expected
from support.inflight_runs import CONCURRENCY, WORKERS, durable_outputs, in_progress, start_inflight
from support.teacher import Teacher, read_log, repeated_calls


def finish(out: str, url: str, mode: str) -> None:
    proc = start_inflight(out, url, mode)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr[-3000:]


def answered(log: str) -> int:
    return sum(1 for c in read_log(log) if c.status == "200") if os.path.exists(log) else 0


def read_pages(out: str) -> list[tuple[int, int]]:
    from shardwright import StreamingDataset

    ds = StreamingDataset(out)
    return [(ds[i]["doc"], ds[i]["page"]) for i in range(len(ds))]


def interrupt_after(out: str, teacher: Teacher, mode: str, log: str, sig: int, durable: bool = False) -> int:
    """Start the child; once the teacher answered its ``hold_after`` calls and holds the next
    ones (the run is blocked mid-way, at any load) and, with ``durable``, once the progress
    snapshots keep every answered call, send ``sig``, then let the held calls be answered.
    The child's exit code."""
    proc = start_inflight(out, teacher.url, mode)
    calls = teacher.hold_after or 0

    def held() -> bool:
        return (answered(log) >= calls and teacher.stats.held > 0) or proc.poll() is not None

    assert wait_for(held, 120), f"the teacher did not answer {calls} calls and hold the next"
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    if durable:  # the committer snapshots within durable_every of the last answer: an event to wait on
        assert wait_for(lambda: durable_outputs(out) >= calls or proc.poll() is not None, 120), (
            f"the progress snapshots never kept the {calls} answered calls (they keep {durable_outputs(out)})"
        )
        assert proc.poll() is None, proc.communicate()[1][-3000:]
    if sig == signal.SIGKILL:
        kill_group(proc)  # the main process and its workers, at once
        proc.wait(60)
    else:
        os.kill(proc.pid, sig)  # the main process only, as Ctrl-C in a terminal or a scheduler's SIGTERM
    teacher.release()  # the calls in flight at the signal are answered: a stopped run reaches its ResumePoints
    proc.communicate(timeout=120)
    return proc.returncode


@pytest.mark.parametrize(("mode", "sig"), [("asyncgen", signal.SIGINT), ("thread", signal.SIGTERM)])
def test_a_stop_mid_run_repeats_no_call(tmp_path, mode, sig):
    log, out = str(tmp_path / "calls.log"), str(tmp_path / "out")
    with Teacher(latency=0.05, log=log, hold_after=10) as teacher:
        code = interrupt_after(out, teacher, mode, log, sig)
        assert code in (130, 143)
        assert answered(log) < len(expected(mode))  # stopped mid-run: there is something to resume
        finish(out, teacher.url, mode)
    assert read_pages(out) == expected(mode)  # every page once, in input order
    assert repeated_calls(read_log(log)) == 0


@pytest.mark.parametrize("mode", ["asyncgen", "async"])
def test_sigkill_once_durable_repeats_only_the_calls_in_flight(tmp_path, mode):
    log, out = str(tmp_path / "calls.log"), str(tmp_path / "out")
    with Teacher(latency=0.05, log=log, hold_after=8) as teacher:
        interrupt_after(out, teacher, mode, log, signal.SIGKILL, durable=True)
        finish(out, teacher.url, mode)
    assert read_pages(out) == expected(mode)
    calls = read_log(log)
    in_flight = CONCURRENCY * WORKERS  # held by the teacher at the kill: answered after it, lost with the run
    assert repeated_calls(calls) <= in_flight
    first_answers = [c.key for c in calls if c.status == "200"][:8]  # the 8 answered before the kill
    assert all(sum(1 for c in calls if c.key == key and c.status == "200") == 1 for key in first_answers)


def test_transient_teacher_errors_are_retried_until_every_input_finishes(tmp_path):
    log, out = str(tmp_path / "calls.log"), str(tmp_path / "out")
    with Teacher(latency=0.02, p_429=0.1, p_500=0.05, retry_after=0.1, seed=3, log=log) as teacher:
        finish(out, teacher.url, "asyncgen")
    calls = read_log(log)
    assert {c.status for c in calls} >= {"200", "429"}
    assert read_pages(out) == expected("asyncgen")
    assert repeated_calls(calls) == 0  # a failed call's answer never reached fn: nothing done twice


def test_status_names_each_input_in_flight_with_its_page(tmp_path):
    log, out = str(tmp_path / "calls.log"), str(tmp_path / "out")
    env = child_env(SHARDWRIGHT_LEASE_TTL="2")  # claims heartbeat every 0.5 s
    # 8 calls answered (each a page 0 or 1), every later one held: the run waits mid-way, its
    # inputs in flight past a ResumePoint, until the test has read status
    with Teacher(latency=0.05, log=log, hold_after=8) as teacher:
        proc = start_inflight(out, teacher.url, "asyncgen", env=env, stdout=subprocess.DEVNULL)
        try:
            seen: list[dict] = []

            def paged() -> bool:
                seen[:] = [e for e in in_progress(out, env) if e.get("state")]
                return bool(seen) or proc.poll() is not None

            assert wait_for(paged, 120), "status never named an input in flight"
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert teacher.stats.held > 0  # still held: status was read mid-run
            entry = seen[0]
            assert json.loads(entry["state"])["page"] >= 1 and entry["name"].isdigit()
        finally:
            kill_group(proc)
            proc.communicate(timeout=60)
