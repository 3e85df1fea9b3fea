"""``shardwright status`` during a run in flight names each document, its page and its calls in
flight (``3: page 1, 1 call in flight``) when fn makes its calls under a Limiter (issue 32 item 6):
a real run against the loopback teacher, read by the real CLI. The teacher answers 8 calls and
holds every later one until the test releases it, so the calls are in flight (and the run
mid-way) for as long as the test reads status, at any load. Waits on events (a status naming a
call in flight, the child's exit), never sleeps."""

from __future__ import annotations

import subprocess

from support.helpers import child_env, kill_group, wait_for
from support.inflight_runs import in_progress, start_inflight, status
from support.teacher import Teacher


def test_status_counts_each_documents_calls_in_flight(tmp_path):
    out = str(tmp_path / "out")
    env = child_env(SHARDWRIGHT_LEASE_TTL="2")  # claims heartbeat every 0.5 s

    def calling() -> list[dict]:
        return [e for e in in_progress(out, env) if e.get("calls") and e.get("state")]

    with Teacher(latency=0.05, hold_after=8) as teacher:  # later calls stay in flight until released
        proc = start_inflight(out, teacher.url, "limited", env=env, stdout=subprocess.DEVNULL)
        try:
            seen: list[dict] = []

            def counted() -> bool:
                seen[:] = calling()
                return bool(seen) or proc.poll() is not None

            assert wait_for(counted, 120), "status never counted a call in flight"
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert all(e["calls"] == 1 for e in seen)  # one call per page at a time
            text: list[str] = []

            def printed() -> bool:  # a document past a ResumePoint, its next call held
                text[:] = [status(out, env).stdout]
                return any("call in flight" in x and "page " in x for x in text[0].splitlines())

            assert wait_for(printed, 60), f"status printed no page with a call in flight: {text}"
            assert "now:" in text[0], text[0]
            assert teacher.stats.held > 0  # still held: status was read mid-run
        finally:
            kill_group(proc)
            proc.communicate(timeout=60)
