"""Slurm-executor jobs on the single-host test cluster (tests/slurm_cluster.py): the service
submits through shardwright's sbatch helper and follows Slurm's state and the output's."""

from __future__ import annotations

import pytest

from shardwright.service.executor_slurm import find_submitted, job_name
from support.service_server import Server, assert_exactly_once

slurm = pytest.mark.slurm


@pytest.fixture
def slurm_server(slurm_cluster, tmp_path):
    srv = Server(tmp_path, "--retry-backoff", "0.2", env=slurm_cluster.env).start()
    yield srv
    srv.stop()


@slurm
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_slurm_array_job_runs_cancels_retries_and_writes_every_input_once(slurm_cluster, slurm_server, tmp_path):
    srv = slurm_server
    n, out = 60, tmp_path / "out"
    # inputs 30 on wait for the first gate, 45 on for the second too: the first attempt is still
    # running when it is canceled, the retry when the server is killed, at any load
    gates = [tmp_path / "gate1", tmp_path / "gate2"]
    with srv.client() as c:
        job = srv.submit(
            c,
            pipeline="square",
            inputs=list(range(n)),
            output_dir=str(out),
            config={"sleep": 0.1, "holds": {30: str(gates[0]), 45: str(gates[1])}},
            options={"chunk_size": 2, "num_workers": 1},
            executor={"kind": "slurm", "array": 2},
        )
        running = srv.wait(
            c,
            job["id"],
            lambda j: j["state"] == "RUNNING" and j["progress"]["inputs_done"] >= 6,
            timeout=60,
            what="the array to commit some chunks",
        )
        slurm_ids = running["attempt_history"][0]["slurm_job_ids"]
        assert len(slurm_ids) == 1
        tasks = slurm_cluster.job_states(slurm_ids[0])
        assert sorted(tasks) == [0, 1], tasks
        # how a restarted server finds a submission it could not record
        assert find_submitted(job_name(job["id"], 1), slurm_cluster.env) == slurm_ids
        assert find_submitted(job_name(job["id"], 7), slurm_cluster.env) == []

        assert c.post(f"/jobs/{job['id']}/cancel").status_code == 200
        canceled = srv.wait_state(c, job["id"], "CANCELED", "FAILED", "SUCCEEDED", timeout=60)
        assert canceled["state"] == "CANCELED", canceled
        assert all(t.state == "CANCELLED" for t in slurm_cluster.job_states(slurm_ids[0]).values())
        assert canceled["progress"]["inputs_done"] < n and not (out / "index.json").exists()

        gates[0].write_text("")
        c.post(f"/jobs/{job['id']}/retry")
        srv.wait(
            c,
            job["id"],
            lambda j: j["state"] == "RUNNING" and j["progress"]["inputs_done"] > canceled["progress"]["inputs_done"],
            timeout=60,
            what="the retry to commit more",
        )
    # the server is killed while Slurm runs the job: the restarted server follows the same Slurm job
    srv.kill()
    srv.start()
    gates[1].write_text("")
    with srv.client() as c:
        done = srv.wait_state(c, job["id"], "SUCCEEDED", "FAILED", timeout=120)
        assert done["state"] == "SUCCEEDED", done
        assert done["progress"] == {"inputs_done": n, "inputs_total": n, "items": n}
        assert done["attempts"] == 2, done  # no new submission after the server restart
        second = done["attempt_history"][1]["slurm_job_ids"]
        assert second and second != slurm_ids
        assert all(t.state == "COMPLETED" for t in slurm_cluster.job_states(second[0]).values())
        logs = c.get(f"/jobs/{job['id']}/logs").json()["text"]
        assert "(resumed)" in logs and f"sw-job-{job['id']}-a2-{second[0]}_1.log" in logs
    assert_exactly_once(out, n)


@slurm
@pytest.mark.slow
@pytest.mark.timeout(120)
def test_slurm_job_fn_error_is_a_user_failure(slurm_server, tmp_path):
    srv = slurm_server
    with srv.client() as c:
        job = srv.submit(
            c,
            pipeline="square",
            inputs=list(range(20)),
            output_dir=str(tmp_path / "out"),
            config={"fail_on": 13},
            options={"chunk_size": 2, "num_workers": 1},
            executor={"kind": "slurm", "array": 2},
        )
        failed = srv.wait_state(c, job["id"], "FAILED", "SUCCEEDED", timeout=90)
    assert failed["state"] == "FAILED", failed
    assert failed["error"]["kind"] == "user" and failed["error"]["type"] == "FnError"
    assert failed["error"]["input_index"] == 13 and failed["attempts"] == 1


@slurm
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_slurm_task_killed_without_reporting_is_retried_automatically(slurm_cluster, slurm_server, tmp_path):
    """The OOM killer's way: a task's job process SIGKILLed, so it writes no report and Slurm ends
    the task FAILED (no requeue). The service retries the job itself, like a killed local job."""
    srv = slurm_server
    n, out = 24, tmp_path / "out"
    with srv.client() as c:
        job = srv.submit(
            c,
            pipeline="square",
            inputs=list(range(n)),
            output_dir=str(out),
            config={"kill_runner_on": 9, "once_marker": str(tmp_path / "killed-once")},
            options={"chunk_size": 2, "num_workers": 1},
            executor={"kind": "slurm", "array": 2},
        )
        done = srv.wait_state(c, job["id"], "SUCCEEDED", "FAILED", "CANCELED", timeout=150)
    assert done["state"] == "SUCCEEDED", done
    first, second = done["attempt_history"]
    assert first["outcome"] == "failed" and first["error"]["type"] == "SlurmTaskDied", first
    assert first["error"]["kind"] == "system" and first["error"]["transient"]
    assert second["trigger"] == "auto-retry" and second["outcome"] == "succeeded"
    assert (tmp_path / "killed-once").exists()
    assert_exactly_once(out, n)
