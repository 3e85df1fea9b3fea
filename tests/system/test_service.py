"""The jobs service (`shardwright serve`), started for real on a free loopback port.

Auth, the pipelines' schemas and request validation, the whole lifecycle with cancel and
retry, user and system failures (a worker SIGKILLed), the CLI client. Every dataset is read
back with shardwright.StreamingDataset: each input's sample appears exactly once.
The server-restart, dashboard and Slurm tests are in test_service_{restart,dashboard,slurm}.py.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardwright import errors
from shardwright.service.classify import http_status
from shardwright.service.model import JobError
from support.helpers import child_env
from support.service_server import TOKEN, Server, assert_exactly_once, pid_alive

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("service")
    (root / "out").mkdir()
    srv = Server(
        root,
        "--output-root",
        str(root / "out"),
        "--max-inputs",
        "500",
        "--max-body-bytes",
        "100000",
        "--auto-retries",
        "1",
        "--retry-backoff",
        "0.2",
        "--max-running",
        "2",
    )
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    with server.client() as c:
        yield c


def out_dir(server, name: str) -> str:
    return str(server.root / "out" / name)


# --- the error table ------------------------------------------------------------------------------


def test_every_error_class_is_classified_and_transient_ones_are_system_errors():
    classes = [
        c
        for _, c in inspect.getmembers(errors, inspect.isclass)
        if issubclass(c, errors.ShardwrightError) and c.__module__ == errors.__name__
    ]
    assert len(classes) >= 14
    for cls in classes:
        assert cls in errors.ERROR_CLASSIFICATION, f"{cls.__name__} is missing from errors.ERROR_CLASSIFICATION"
        row = errors.classify(cls)
        assert row.kind in ("user", "system") and 400 <= http_status(cls) < 600
        assert row.kind == "system" or not row.transient, f"{cls.__name__}: only system errors are transient"
    assert errors.classify(errors.FnError).kind == "user" and not errors.classify(errors.FnError).transient
    assert errors.classify(errors.WorkerDiedError).transient and http_status(errors.StorageError) == 503
    assert not errors.classify(errors.CorruptStateError).transient
    assert errors.classify(KeyError("x")).kind == "system" and not errors.classify(KeyError("x")).transient
    assert http_status(KeyError("x")) == 500 and http_status(errors.FnError) == 422
    error = JobError.from_exception(
        errors.FnError(
            "fn raised on input 3\n--- worker traceback ---\nTraceback...",
            input_index=3,
            input_repr="3",
            worker_traceback="...",
        )
    )
    assert error.to_json() == {
        "kind": "user",
        "type": "FnError",
        "message": "fn raised on input 3",
        "input_index": 3,
        "transient": False,
    }


# --- auth -----------------------------------------------------------------------------------------


def test_requests_without_the_token_get_401_and_a_generated_token_is_owner_only(tmp_path):
    srv = Server(tmp_path, token=None).start()
    try:
        token_file = srv.db.parent / "api-token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert len(token) >= 32
        log = srv.log.read_text()
        assert str(token_file) in log and token not in log
        assert stat.S_IMODE(srv.db.stat().st_mode) == 0o600
        import httpx

        for headers in ({}, {"Authorization": "Bearer wrong-token-123456789"}, {"Authorization": token}):
            for method, path in (
                ("GET", "/api/v1/jobs"),
                ("GET", "/api/v1/pipelines"),
                ("POST", "/api/v1/jobs"),
                ("GET", "/openapi.json"),
                ("POST", "/api/v1/jobs/x/cancel"),
            ):
                r = httpx.request(method, srv.url + path, headers=headers, json={})
                assert r.status_code == 401, (method, path, headers, r.text)
                assert r.json()["error"]["type"] == "Unauthorized" and r.headers["www-authenticate"] == "Bearer"
        with srv.client(token) as c:
            assert c.get("/jobs").json() == {"jobs": []}
        spec = httpx.get(srv.url + "/openapi.json", headers={"Authorization": f"Bearer {token}"}).json()
        assert {"/api/v1/jobs", "/api/v1/jobs/{job_id}/retry", "/api/v1/pipelines"} <= set(spec["paths"])
        page = httpx.get(srv.url + "/")  # the dashboard page itself holds no data: it asks for the token
        assert page.status_code == 200 and "sessionStorage" in page.text and "Bearer" in page.text
    finally:
        srv.stop()
    # restarted: the same token is read back
    srv.start()
    try:
        with srv.client(token) as c:
            assert c.get("/jobs").status_code == 200
    finally:
        srv.stop()


def test_a_second_server_on_the_same_store_is_refused(server, tmp_path):
    second = Server(server.root)
    second.db = server.db
    with pytest.raises(AssertionError, match="another server"):
        second.start(timeout=20)
    assert second.proc.returncode == 2
    lines = [line for line in second.log.read_text().splitlines() if line.startswith("shardwright serve: error")]
    assert lines == [
        f"shardwright serve: error: another server (pid {server.proc.pid}) uses the job store "
        f"{server.db}; stop it first or give this one another --db"
    ]


def test_a_port_in_use_is_one_clear_line(server, tmp_path):
    env = child_env(PYTHONPATH=str(Path(__file__).parents[1]), SHARDWRIGHT_API_TOKEN=TOKEN)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[2] / "src"), str(Path(__file__).parents[1])])
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardwright.cli",
            "serve",
            "--pipelines",
            "support.service_pipelines",
            "--db",
            str(tmp_path / "jobs.db"),
            "--port",
            str(server.port),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert (
        r.stderr.strip() == f"shardwright serve: error: cannot listen on 127.0.0.1:{server.port} (Address already "
        "in use); choose another --port or stop what uses it"
    )


def test_kill_stale_kills_only_the_recorded_process(tmp_path):
    """What a restarted server does with a job process a previous server left running."""
    from shardwright.service import executor_local as local

    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        start = local.process_start(proc.pid)
        assert start and local.is_same_process(proc.pid, start)
        assert local.kill_stale(proc.pid, str(int(start) + 1))  # another process with that pid: left alone
        assert proc.poll() is None
        assert local.kill_stale(proc.pid, start)
        assert proc.wait(5) == -signal.SIGKILL
        assert not local.is_same_process(proc.pid, start)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- pipelines and validation ---------------------------------------------------------------------


def test_pipelines_list_their_config_schema(client):
    pipelines = {p["name"]: p for p in client.get("/pipelines").json()["pipelines"]}
    assert set(pipelines) == {"square", "echo"}  # _helper and two_args are not pipelines
    square = pipelines["square"]
    assert square["description"].startswith("Square an int")
    props = square["config_schema"]["properties"]
    assert props["factor"]["minimum"] == 1 and props["factor"]["type"] == "integer"
    assert pipelines["echo"]["config_schema"] is None


@pytest.mark.parametrize(
    "body, status, field",
    [
        ({"config": {"factor": 0}}, 422, "config.factor"),
        ({"config": {"factor": "many"}}, 422, "config.factor"),
        ({"pipeline": "nope"}, 404, "pipeline"),
        ({"options": {"chunk_size": 0}}, 422, "options.chunk_size"),
        ({"options": {"compression": "gzip"}}, 422, "options.compression"),
        ({"options": {"bogus": 1}}, 422, "options.bogus"),
        ({"options": {"chunk_bytes": "64XB"}}, 400, "options"),
        ({"inputs": []}, 422, "inputs"),
        ({"output_dir": "relative/dir"}, 422, "output_dir"),
        ({"output_dir": "/etc/elsewhere"}, 403, "output_dir"),
        ({"output_dir": "ftp://bucket/x"}, 422, "output_dir"),
        ({"output_dir": "gs://bucket/x"}, 403, "output_dir"),  # a supported store, outside the roots
        ({"inputs": list(range(501))}, 413, "inputs"),
        ({"pipeline": "echo", "config": {"factor": 2}}, 422, "config"),
        ({"executor": {"kind": "k8s"}}, 422, "executor.kind"),
        (
            {"executor": {"kind": "slurm", "array": 2}, "storage_options": {"aws_secret_access_key": "abcd1234"}},
            422,
            "storage_options",
        ),
    ],
)
def test_bad_requests_are_refused_naming_the_field(server, client, body, status, field):
    request = {"pipeline": "square", "inputs": [1, 2, 3], "output_dir": out_dir(server, "bad")}
    request.update(body)
    r = client.post("/jobs", json=request)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["kind"] == "user"
    assert error["message"].startswith(field + ":") or f"; {field}:" in error["message"], error["message"]
    assert "\n" not in error["message"]


def test_a_body_over_the_limit_is_refused_with_413(server, client):
    big = {"pipeline": "echo", "inputs": ["x" * 1000] * 150, "output_dir": out_dir(server, "big")}
    r = client.post("/jobs", json=big)
    error = r.json()["error"]
    assert r.status_code == 413 and error["type"] == "BodyTooLarge"
    assert error["message"].startswith("body: request body over the limit of 100,000 bytes")
    r = client.post(
        "/jobs",
        content=b"[" + b"1," * 60000 + b"1]",
        headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
    )
    assert r.status_code == 413
    assert client.get("/jobs/nope").status_code == 404
    assert client.get("/jobs", params={"state": "DONE"}).status_code == 422


# --- lifecycle ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cancel_then_retry_resumes_and_writes_every_input_exactly_once(server, client):
    n, out = 80, out_dir(server, "lifecycle")
    # inputs 10 on wait for the first gate, 30 on for the second too (16 shards of 5 inputs, two
    # at a time): the job stands at exactly 10, then 30 inputs done, and is still running when it
    # is canceled, at any load
    gates = [out + ".gate1", out + ".gate2"]
    job = server.submit(
        client,
        pipeline="square",
        inputs=list(range(n)),
        output_dir=out,
        config={"factor": 3, "sleep": 0.1, "holds": {10: gates[0], 30: gates[1]}},
        options={"chunk_size": 2, "num_workers": 2},
    )
    assert job["state"] == "PENDING" and job["progress"] == {"inputs_done": 0, "inputs_total": n, "items": 0}
    assert job["attempts"] == 0 and job["error"] is None and job["created_at"]
    # progress moves while it runs: seen at each held step
    j = server.wait(client, job["id"], lambda j: j["progress"]["inputs_done"] >= 10, what="the first held step")
    assert j["state"] == "RUNNING" and j["progress"]["inputs_done"] == 10, j
    open(gates[0], "w").close()
    j = server.wait(client, job["id"], lambda j: j["progress"]["inputs_done"] >= 30, what="the second held step")
    assert j["state"] == "RUNNING" and j["progress"]["inputs_done"] == 30, j
    r = client.post("/jobs", json={"pipeline": "echo", "inputs": [1], "output_dir": out})
    assert r.status_code == 409 and r.json()["error"]["message"].startswith(
        f"output_dir: job {job['id']} (RUNNING) already writes {out}; "
    )
    r = client.post(f"/jobs/{job['id']}/cancel")
    assert r.status_code == 200 and r.json()["cancel_requested"]
    # the held workers never reach their next input: the engine stops them after its stop grace
    canceled = server.wait_state(client, job["id"], "CANCELED", "SUCCEEDED", "FAILED")
    assert canceled["state"] == "CANCELED", canceled
    assert canceled["progress"]["inputs_done"] == 30
    open(gates[1], "w").close()  # for the retry
    assert canceled["attempt_history"][0]["outcome"] == "canceled"
    assert not os.path.exists(os.path.join(out, "index.json"))
    assert client.post(f"/jobs/{job['id']}/cancel").status_code == 409

    r = client.post(f"/jobs/{job['id']}/retry")
    assert r.status_code == 200 and r.json()["state"] == "PENDING" and r.json()["error"] is None
    done = server.wait_state(client, job["id"], "SUCCEEDED", "FAILED", "CANCELED")
    assert done["state"] == "SUCCEEDED", done
    assert done["progress"] == {"inputs_done": n, "inputs_total": n, "items": n}
    assert done["attempts"] == 2 and [a["trigger"] for a in done["attempt_history"]] == ["submit", "retry"]
    assert [a["outcome"] for a in done["attempt_history"]] == ["canceled", "succeeded"]
    assert done["finished_at"] >= done["started_at"] >= done["created_at"]
    assert_exactly_once(out, n, factor=3)
    logs = client.get(f"/jobs/{job['id']}/logs").json()["text"]
    assert "stopped by" in logs and "(resumed)" in logs and "=== attempt 2 (retry)" in logs

    assert job["id"] in [j["id"] for j in client.get("/jobs", params={"state": "SUCCEEDED"}).json()["jobs"]]
    assert job["id"] not in [j["id"] for j in client.get("/jobs", params={"state": "RUNNING"}).json()["jobs"]]
    assert client.post(f"/jobs/{job['id']}/retry").status_code == 409
    assert client.delete(f"/jobs/{job['id']}").status_code == 204
    assert client.get(f"/jobs/{job['id']}").status_code == 404
    assert_exactly_once(out, n, factor=3)  # the record is gone, never the data


@pytest.mark.slow
def test_cancel_a_pending_job_and_jobs_start_in_fifo_order(server, client, tmp_path):
    gate = tmp_path / "gate"  # every input waits for it: no job ends before the fourth is canceled, at any load
    jobs = [
        server.submit(
            client,
            pipeline="square",
            inputs=list(range(8)),
            output_dir=out_dir(server, f"fifo{k}"),
            config={"sleep": 0.1, "holds": {0: str(gate)}},
            options={"chunk_size": 4, "num_workers": 1},
        )
        for k in range(4)
    ]
    r = client.post(f"/jobs/{jobs[3]['id']}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "CANCELED"
    gate.write_text("")
    for job in jobs[:3]:
        assert server.wait_state(client, job["id"], *("SUCCEEDED", "FAILED"))["state"] == "SUCCEEDED"
    started = [server.job(client, j["id"])["started_at"] for j in jobs[:3]]
    assert started == sorted(started)
    # at most 2 at a time: the third started after one of the first two finished
    finished = sorted(server.job(client, j["id"])["finished_at"] for j in jobs[:2])
    assert started[2] >= finished[0]
    assert server.job(client, jobs[3]["id"])["attempts"] == 0
    for k in range(3):
        assert_exactly_once(out_dir(server, f"fifo{k}"), 8)


def test_fn_error_is_a_user_failure_with_the_input_then_fixed_and_retried(server, client, tmp_path):
    n, out, fix = 30, out_dir(server, "user-error"), tmp_path / "fixed"
    job = server.submit(
        client,
        pipeline="square",
        inputs=list(range(n)),
        output_dir=out,
        config={"fail_on": 21, "unless_exists": str(fix)},
        options={"chunk_size": 3, "num_workers": 1},
    )
    failed = server.wait_state(client, job["id"], "FAILED", "SUCCEEDED")
    assert failed["state"] == "FAILED"
    error = failed["error"]
    assert error["kind"] == "user" and error["type"] == "FnError" and error["input_index"] == 21
    assert "input 21 is bad" in error["message"] and "Traceback" not in error["message"]
    assert failed["attempts"] == 1  # a user error is not retried automatically
    logs = client.get(f"/jobs/{job['id']}/logs").json()["text"]
    assert "ValueError: input 21 is bad" in logs

    fix.touch()
    server.wait_state(client, client.post(f"/jobs/{job['id']}/retry").json()["id"], "SUCCEEDED", "FAILED")
    done = server.job(client, job["id"])
    assert done["state"] == "SUCCEEDED" and done["error"] is None and done["attempts"] == 2
    assert_exactly_once(out, n)


def _kill_a_worker(pid_dir, killed: set, timeout: float = 30) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in os.listdir(pid_dir):
            pid = int(name)
            if pid not in killed and pid_alive(pid):  # not a worker of an earlier attempt (gone or a zombie)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue
                killed.add(pid)
                return pid
        time.sleep(0.05)
    raise AssertionError("no worker wrote its pid")


@pytest.mark.slow
def test_a_killed_worker_is_a_system_failure_retried_automatically_then_failed(server, client, tmp_path):
    n, out = 40, out_dir(server, "system-error")
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    job = server.submit(
        client,
        pipeline="square",
        inputs=list(range(n)),
        output_dir=out,
        config={"sleep": 0.1, "pid_dir": str(pid_dir)},
        options={"chunk_size": 2, "num_workers": 2},
    )
    killed: set = set()
    server.wait(client, job["id"], lambda j: j["progress"]["inputs_done"] >= 4, what="some commits")
    _kill_a_worker(pid_dir, killed)
    # the server retries it by itself (auto-retries 1): a second attempt runs, then we kill again
    second = server.wait(
        client, job["id"], lambda j: j["attempts"] == 2 and j["state"] == "RUNNING", what="the automatic retry"
    )
    first = second["attempt_history"][0]
    assert first["outcome"] == "failed" and first["error"]["kind"] == "system"
    assert first["error"]["type"] == "WorkerDiedError" and "SIGKILL" in first["error"]["message"]
    assert second["attempt_history"][1]["trigger"] == "auto-retry"
    _kill_a_worker(pid_dir, killed)
    failed = server.wait_state(client, job["id"], "FAILED", "SUCCEEDED")
    assert failed["state"] == "FAILED" and failed["attempts"] == 2, failed
    assert failed["error"]["kind"] == "system" and failed["error"]["type"] == "WorkerDiedError"

    client.post(f"/jobs/{job['id']}/retry")
    # the job process itself SIGKILLed (the OOM killer's way): a system failure too, retried automatically
    third = server.wait(
        client,
        job["id"],
        lambda j: j["attempts"] == 3 and j["state"] == "RUNNING" and j["progress"]["inputs_done"] >= 4,
        what="the third attempt to commit",
    )
    os.kill(third["attempt_history"][2]["pid"], signal.SIGKILL)
    done = server.wait_state(client, job["id"], "SUCCEEDED", "FAILED")
    assert done["state"] == "SUCCEEDED" and done["attempts"] == 4, done
    died = done["attempt_history"][2]["error"]
    assert (died["kind"], died["type"]) == ("system", "JobProcessDied") and "SIGKILL" in died["message"]
    assert [a["trigger"] for a in done["attempt_history"]] == ["submit", "auto-retry", "retry", "auto-retry"]
    assert_exactly_once(out, n)


# --- the CLI client -------------------------------------------------------------------------------


def _cli(server, *args, token=TOKEN):
    env = child_env(SHARDWRIGHT_URL=server.url)
    env.pop("SHARDWRIGHT_API_TOKEN", None)
    if token:
        env["SHARDWRIGHT_API_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "jobs", *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.slow
def test_cli_submit_wait_list_show_logs_cancel_retry(server, tmp_path):
    out = out_dir(server, "cli")
    r = _cli(
        server,
        "submit",
        "square",
        "--range",
        "12",
        "--output-dir",
        out,
        "--config",
        '{"factor": 2}',
        "--options",
        '{"chunk_size": 5}',
        "--wait",
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.split()[0]
    assert "SUCCEEDED" in r.stdout and "12/12 inputs" in r.stdout
    assert_exactly_once(out, 12, factor=2)
    r = _cli(server, "list", "--state", "SUCCEEDED")
    assert r.returncode == 0 and job_id in r.stdout
    r = _cli(server, "show", job_id)
    assert r.returncode == 0 and "attempt 1 (submit): succeeded" in r.stdout
    assert json.loads(_cli(server, "show", job_id, "--json").stdout)["id"] == job_id
    r = _cli(server, "logs", job_id)
    assert r.returncode == 0 and "dataset published" in r.stdout
    r = _cli(server, "cancel", job_id)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"shardwright jobs: error: 409: job {job_id} is SUCCEEDED: only PENDING or RUNNING jobs can be canceled"
    )
    r = _cli(server, "retry", job_id)
    assert r.returncode == 2 and "only FAILED or CANCELED jobs can be retried" in r.stderr

    gate = tmp_path / "gate"
    slow = _cli(
        server,
        "submit",
        "square",
        "--inputs",
        json.dumps(list(range(30))),
        "--output-dir",
        out_dir(server, "cli2"),
        "--config",
        json.dumps({"sleep": 0.1, "holds": {10: str(gate)}}),  # running or pending at the cancel, at any load
        "--options",
        '{"chunk_size": 2}',
    )
    slow_id = slow.stdout.strip()
    r = _cli(server, "cancel", slow_id)
    assert r.returncode == 0 and slow_id in r.stdout
    with server.client() as c:
        server.wait_state(c, slow_id, "CANCELED")  # held workers: stopped after the engine's stop grace
    gate.write_text("")  # for the retry
    r = _cli(server, "retry", slow_id)
    assert r.returncode == 0 and "PENDING" in r.stdout
    with server.client() as c:
        assert server.wait_state(c, slow_id, "SUCCEEDED", "FAILED")["state"] == "SUCCEEDED"
    assert_exactly_once(out_dir(server, "cli2"), 30)

    r = _cli(server, "list", token="wrong-token-0123456789")
    assert r.returncode == 2 and "401: missing or wrong bearer token" in r.stderr
    r = _cli(server, "submit", "square", "--range", "3", "--output-dir", out, "--config", "{oops")
    assert r.returncode == 2 and "--config is not JSON" in r.stderr
