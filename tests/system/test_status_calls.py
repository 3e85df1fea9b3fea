"""``shardwright status`` during a run in flight names each document, its page and its calls in
flight (``3: page 1, 1 call in flight``) when fn makes its calls under a Limiter (issue 32 item 6):
a real run against the loopback teacher, read by the real CLI. Waits on events (a status naming
a call in flight, the child's exit), never sleeps."""

from __future__ import annotations

import json
import subprocess
import sys

from support.helpers import HERE, child_env, kill_group, wait_for
from support.teacher import Teacher

CHILD = str(HERE / "inflight_child.py")


def test_status_counts_each_documents_calls_in_flight(tmp_path):
    out = str(tmp_path / "out")
    env = child_env(SHARDWRIGHT_LEASE_TTL="2")  # claims heartbeat every 0.5 s

    def status(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "shardwright.cli", "status", out, *extra],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def calling() -> list[dict]:
        result = status("--json")
        entries = json.loads(result.stdout).get("in_progress") or [] if result.returncode == 0 else []
        return [e for e in entries if e.get("calls") and e.get("state")]

    with Teacher(latency=1.0) as teacher:  # slow answers: calls stay in flight between heartbeats
        proc = subprocess.Popen(
            [sys.executable, CHILD, out, teacher.url, "limited", "4", "0.5"],
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            seen: list[dict] = []

            def counted() -> bool:
                seen[:] = calling()
                return bool(seen) or proc.poll() is not None

            assert wait_for(counted, 120), "status never counted a call in flight"
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert all(e["calls"] == 1 for e in seen)  # one call per page at a time
            lines: list[str] = []

            def printed() -> bool:
                lines[:] = [x for x in status().stdout.splitlines() if "call in flight" in x]
                return bool(lines)

            assert wait_for(printed, 60), "status printed no call in flight"
            assert "page " in lines[0] and "now:" in lines[0], lines[0]
        finally:
            kill_group(proc)
            proc.communicate(timeout=60)
