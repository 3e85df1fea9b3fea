"""Jobs of executor kind "ray": the job process is the driver of ``optimize(executor="ray")``
against the service's ``--ray-address`` (a real local 3-node Ray cluster); cancel and retry as
for local jobs, and every input exactly once."""

from __future__ import annotations

import pytest

from support.service_server import Server, assert_exactly_once

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_ray_job_runs_on_the_cluster_cancels_retries_and_writes_every_input_once(ray_cluster, tmp_path):
    srv = Server(tmp_path, "--ray-address", ray_cluster.address, "--retry-backoff", "0.2", env=ray_cluster.env)
    srv.start()
    n, out, gate = 60, tmp_path / "out", tmp_path / "gate"
    try:
        with srv.client() as c:
            r = c.post(
                "/jobs",
                json={
                    "pipeline": "echo",
                    "inputs": [1],
                    "output_dir": str(tmp_path / "x"),
                    "executor": {"kind": "local", "shared_output": True},
                },
            )
            assert r.status_code == 422 and r.json()["error"]["message"].startswith("executor.shared_output:")
            job = srv.submit(
                c,
                pipeline="square",
                inputs=list(range(n)),
                output_dir=str(out),
                # inputs 30 on wait for the gate: the job is still running when it is canceled, at any load
                config={"sleep": 0.2, "holds": {30: str(gate)}},
                options={"chunk_size": 2, "num_workers": 1},
                executor={"kind": "ray", "shared_output": True},
            )
            srv.wait(c, job["id"], lambda j: j["progress"]["inputs_done"] >= 6, timeout=120, what="commits on Ray")
            assert c.post(f"/jobs/{job['id']}/cancel").status_code == 200
            canceled = srv.wait_state(c, job["id"], "CANCELED", "FAILED", "SUCCEEDED", timeout=90)
            assert canceled["state"] == "CANCELED", canceled
            gate.write_text("")  # for the retry
            assert c.post(f"/jobs/{job['id']}/retry").status_code == 200
            done = srv.wait_state(c, job["id"], "SUCCEEDED", "FAILED", timeout=180)
            assert done["state"] == "SUCCEEDED", done
            assert [a["trigger"] for a in done["attempt_history"]] == ["submit", "retry"]
            assert done["executor"]["kind"] == "ray"
            logs = c.get(f"/jobs/{job['id']}/logs").json()["text"]
        assert "ray" in logs.lower()
        assert_exactly_once(out, n)
    finally:
        srv.stop()


def test_a_server_without_a_ray_cluster_refuses_ray_jobs(tmp_path):
    srv = Server(tmp_path).start()
    try:
        with srv.client() as c:
            r = c.post(
                "/jobs",
                json={
                    "pipeline": "echo",
                    "inputs": [1],
                    "output_dir": str(tmp_path / "o"),
                    "executor": {"kind": "ray"},
                },
            )
        assert r.status_code == 422 and "this server has no Ray cluster" in r.json()["error"]["message"]
    finally:
        srv.stop()
