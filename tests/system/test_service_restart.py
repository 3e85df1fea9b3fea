"""The server SIGKILLed mid-job and restarted on the same store, twice, and stopped gracefully.

Checked: the job's processes die with the server (no orphan keeps writing), the restarted
server resumes the job and it finishes with every input exactly once, no two job processes
ever run for one job at the same time (sampled from /proc all along), and a job whose
credentials were in the dead server's memory says so and runs once they are given again.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from support.helpers import wait_for
from support.service_server import Server, assert_exactly_once, pid_alive

SECRET = "TOPSECRETvalue-123456"


class RunnerWatch(threading.Thread):
    """Samples /proc every 20 ms: the most attempts (process sessions) seen alive at once for one job."""

    def __init__(self, job_dir_part: str):
        super().__init__(daemon=True)
        self.part, self.most, self.stop = job_dir_part, 0, threading.Event()

    def run(self):
        while not self.stop.is_set():
            sessions = set()  # the session of every live process of this job's runner (workers share it)
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().split(b"\0")
                    with open(f"/proc/{pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if (
                    b"shardwright.service.runner" in cmd
                    and any(self.part.encode() in a for a in cmd)
                    and fields[0] not in ("Z", "X")
                ):
                    # each attempt's runner leads a session of its own; its workers stay in it even
                    # for the instant they outlive it (orphaned, before their own death signal)
                    sessions.add(int(fields[3]))
            self.most = max(self.most, len(sessions))
            time.sleep(0.02)


def _live_pids(pid_dir) -> list[int]:
    return [int(p) for p in os.listdir(pid_dir) if pid_alive(int(p))]


def _chunks(out) -> int:
    return len([p for p in os.listdir(out) if p.endswith(".bin")]) if os.path.isdir(out) else 0


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_server_sigkilled_twice_mid_job_resumes_and_finishes_exactly_once(tmp_path):
    srv = Server(tmp_path, "--max-running", "1", "--retry-backoff", "0.2")
    srv.start()
    n, out, pid_dir = 100, tmp_path / "out-a", tmp_path / "pids"
    gates = {k: tmp_path / f"gate-{k}" for k in (1, 2)}
    pid_dir.mkdir()
    watch = None
    try:
        with srv.client() as c:
            a = srv.submit(
                c,
                pipeline="square",
                inputs=list(range(n)),
                output_dir=str(out),
                # inputs 30 on wait for gate 1, 60 on for gate 2 too: running at each kill, at any load
                config={"sleep": 0.1, "pid_dir": str(pid_dir), "holds": {30: str(gates[1]), 60: str(gates[2])}},
                options={"chunk_size": 2, "num_workers": 2},
            )
            b = srv.submit(
                c,
                pipeline="echo",
                inputs=list(range(20)),
                output_dir=str(tmp_path / "out-b"),
                storage_options={"aws_secret_access_key": SECRET},
            )
            assert b["storage_options"] == {"aws_secret_access_key": "***"} and SECRET not in str(b)
        watch = RunnerWatch(f"/jobs/{a['id']}")
        watch.start()
        for round_ in (1, 2):
            with srv.client() as c:
                least = 12 * round_
                job = srv.wait(
                    c,
                    a["id"],
                    lambda j, least=least: j["state"] == "RUNNING" and j["progress"]["inputs_done"] >= least,
                    what=f"progress before kill {round_}",
                )
            runner = job["attempt_history"][-1]["pid"]
            workers = _live_pids(pid_dir)
            assert pid_alive(runner) and workers
            srv.kill()
            assert wait_for(lambda runner=runner: not pid_alive(runner) and not _live_pids(pid_dir), 10), (
                f"job processes outlived the server: runner {runner} {pid_alive(runner)}, {_live_pids(pid_dir)}"
            )
            before = _chunks(out)
            gates[round_].write_text("")  # a held worker that survived would now write on
            time.sleep(1.0)  # a window for a write that must not come (nothing to wait for)
            assert _chunks(out) == before, "something still writes the output after the server died"
            srv.start()

        with srv.client() as c:
            done = srv.wait_state(c, a["id"], "SUCCEEDED", "FAILED", "CANCELED", timeout=90)
            assert done["state"] == "SUCCEEDED", done
            assert [x["trigger"] for x in done["attempt_history"]] == ["submit", "server-restart", "server-restart"]
            assert [x["outcome"] for x in done["attempt_history"]] == ["interrupted", "interrupted", "succeeded"]
            assert all(x["error"]["type"] == "ServerStopped" for x in done["attempt_history"][:2])
            assert_exactly_once(out, n)

            lost = srv.wait_state(c, b["id"], "FAILED", "SUCCEEDED")
            assert lost["state"] == "FAILED" and not lost["secrets_available"], lost
            assert lost["error"]["type"] == "SecretsLost" and lost["error"]["kind"] == "system"
            assert "aws_secret_access_key" in lost["error"]["message"] and "/retry" in lost["error"]["message"]
            r = c.post(f"/jobs/{b['id']}/retry", json={"storage_options": {"aws_secret_access_key": SECRET}})
            assert r.status_code == 200 and r.json()["secrets_available"]
            assert srv.wait_state(c, b["id"], "SUCCEEDED", "FAILED")["state"] == "SUCCEEDED"
            assert_exactly_once(tmp_path / "out-b", 20)
            assert SECRET not in c.get(f"/jobs/{b['id']}/logs").text
        watch.stop.set()
        watch.join()
        assert watch.most == 1, f"{watch.most} job processes ran at once for one job"
        # the secret is nowhere on disk: store, job files, logs, server log
        for root, _, files in os.walk(srv.db.parent):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    assert SECRET.encode() not in f.read(), f"the secret is in {os.path.join(root, name)}"
        assert SECRET not in srv.log.read_text()
    finally:
        if watch is not None:
            watch.stop.set()
        srv.stop()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_server_stopped_gracefully_commits_and_resumes_the_job_on_start(tmp_path):
    srv = Server(tmp_path)
    srv.start()
    n, out, gate = 40, tmp_path / "out", tmp_path / "gate"
    try:
        with srv.client() as c:
            job = srv.submit(
                c,
                pipeline="square",
                inputs=list(range(n)),
                output_dir=str(out),
                # inputs 20 on wait for the gate: the job is still running when the server stops, at any load
                config={"sleep": 0.1, "holds": {20: str(gate)}},
                options={"chunk_size": 2, "num_workers": 2},
            )
            srv.wait(c, job["id"], lambda j: j["progress"]["inputs_done"] >= 6, what="some progress")
        # SIGTERM: uvicorn shuts down, the job gets SIGTERM, commits and goes back to PENDING (its
        # workers held on the gate are stopped after the engine's stop grace)
        srv.stop()
        assert srv.proc.returncode in (0, -15), srv.log.read_text()  # uvicorn re-raises SIGTERM after shutdown
        gate.write_text("")
        srv.start()
        with srv.client() as c:
            done = srv.wait_state(c, job["id"], "SUCCEEDED", "FAILED", timeout=60)
            assert done["state"] == "SUCCEEDED", done
            assert [x["outcome"] for x in done["attempt_history"]] == ["interrupted", "succeeded"]
            assert "stopped by SIGTERM" in done["attempt_history"][0]["error"]["message"]
            assert "(resumed)" in c.get(f"/jobs/{job['id']}/logs").json()["text"]
        assert_exactly_once(out, n)
    finally:
        srv.stop()
