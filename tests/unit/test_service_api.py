"""The jobs API in-process: ``TestClient(create_app(...))`` with a fake executor; the scheduler's
loop is driven by hand (``tick()``). The same routes run on a real server in
tests/test_service*.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient

from shardwright.service.app import create_app
from shardwright.service.model import JobError, Progress, ReportState, RunnerReport, RunResult
from shardwright.service.pipelines import load_pipelines
from shardwright.service.scheduler import Scheduler, ServiceConfig
from shardwright.service.store import SqliteJobStore
from support.fake_executor import FakeExecutor

TOKEN = "unit-token-" + "y" * 20
SNAPSHOT = Path(__file__).parent / "openapi_snapshot.json"


class Service:
    def __init__(self, root: Path, **config):
        (root / "out").mkdir(exist_ok=True)
        self.root = root
        self.config = ServiceConfig(
            db_path=str(root / "state" / "jobs.db"),
            state_dir=str(root / "state" / "jobs-files"),
            module="support.service_pipelines",
            retry_backoff=0.0,
            **config,
        )
        os.makedirs(self.config.state_dir)
        self.store = SqliteJobStore(self.config.db_path)
        self.fake = FakeExecutor()
        self.scheduler = Scheduler(self.store, self.config, {"local": self.fake})
        app = create_app(
            self.config, load_pipelines("support.service_pipelines"), self.scheduler, TOKEN, run_loop=False
        )
        self.http = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"})

    def submit(self, expect: int = 201, **body):
        body.setdefault("pipeline", "square")
        body.setdefault("inputs", [1, 2, 3])
        body.setdefault("output_dir", str(self.root / "out" / "ds"))
        r = self.http.post("/api/v1/jobs", json=body)
        assert r.status_code == expect, r.text
        return r.json()

    def job(self, job_id: str) -> dict:
        return self.http.get(f"/api/v1/jobs/{job_id}").json()


@pytest.fixture
def svc(tmp_path):
    return Service(tmp_path, output_roots=(str(tmp_path / "out"),), max_running=1, auto_retries=1)


def done(progress=Progress(3, 3, 3)):
    return RunnerReport(attempt=1, state=ReportState.SUCCEEDED, progress=progress, result=RunResult(True, 3, False))


def test_submit_start_succeed_in_fifo_order_one_at_a_time(svc):
    a = svc.submit(storage_options={"aws_secret_access_key": "s3cr3t-value"})
    b = svc.submit(output_dir=str(svc.root / "out" / "b"))
    assert a["state"] == "PENDING" and a["storage_options"] == {"aws_secret_access_key": "***"}
    svc.scheduler.tick()
    assert svc.fake.started == [(a["id"], 1)] and svc.fake.secrets[a["id"]] == {"aws_secret_access_key": "s3cr3t-value"}
    assert svc.job(a["id"])["state"] == "RUNNING" and svc.job(b["id"])["state"] == "PENDING"
    svc.fake.progress[a["id"]] = Progress(2, 3, 2)
    svc.scheduler.tick()
    assert svc.job(a["id"])["progress"] == {"inputs_done": 2, "inputs_total": 3, "items": 2}
    svc.fake.end(a["id"], done())
    svc.scheduler.tick()
    got = svc.job(a["id"])
    assert got["state"] == "SUCCEEDED" and got["attempt_history"][0]["outcome"] == "succeeded"
    assert a["id"] not in svc.scheduler.secrets  # forgotten once no attempt needs them
    assert svc.fake.started == [(a["id"], 1), (b["id"], 1)]
    assert svc.http.post(f"/api/v1/jobs/{a['id']}/retry").status_code == 409  # SUCCEEDED is final


def test_a_job_without_output_yet_has_an_empty_history_saying_why(svc):
    a = svc.submit()
    h = svc.http.get(f"/api/v1/jobs/{a['id']}/history").json()
    assert h["runs"] == [] and h["note"] and h["output_dir"] == a["output_dir"]
    assert svc.http.get("/api/v1/jobs/nope/history").status_code == 404


def test_a_job_being_launched_is_never_launched_twice_and_cancel_waits_for_it(svc):
    a = svc.submit()
    (launch,) = svc.scheduler.choose()  # chosen under the lock, not yet started
    assert svc.scheduler.choose() == []  # marked launching: not chosen again
    r = svc.http.post(f"/api/v1/jobs/{a['id']}/cancel")
    assert r.status_code == 200 and r.json()["state"] == "PENDING" and r.json()["cancel_requested"]
    svc.scheduler.launch(launch)
    assert svc.job(a["id"])["state"] == "RUNNING"
    svc.scheduler.tick()
    assert svc.fake.canceled == [a["id"]]  # the executor was asked to stop it
    svc.fake.end(a["id"], RunnerReport(attempt=1, state=ReportState.INTERRUPTED, signal="SIGTERM"))
    svc.scheduler.tick()
    assert svc.job(a["id"])["state"] == "CANCELED" and svc.fake.started == [(a["id"], 1)]


def test_one_job_that_cannot_be_followed_does_not_stop_the_others(tmp_path):
    svc = Service(tmp_path, max_running=2)
    a = svc.submit(output_dir=str(tmp_path / "out" / "a"))
    b = svc.submit(output_dir=str(tmp_path / "out" / "b"))
    svc.scheduler.tick()
    svc.fake.broken.add(a["id"])
    svc.fake.end(b["id"], done())
    c = svc.submit(output_dir=str(tmp_path / "out" / "c"))
    svc.scheduler.tick()
    assert svc.job(b["id"])["state"] == "SUCCEEDED" and svc.job(a["id"])["state"] == "RUNNING"
    assert (c["id"], 1) in svc.fake.started  # the queue moved on too


def test_a_transient_failure_is_retried_automatically_then_fails(svc):
    a = svc.submit()
    svc.scheduler.tick()
    svc.fake.end(a["id"], None)  # the job process died without a word
    svc.scheduler.tick()
    svc.scheduler.tick()
    got = svc.job(a["id"])
    assert got["state"] == "RUNNING" and [x["trigger"] for x in got["attempt_history"]] == ["submit", "auto-retry"]
    assert got["attempt_history"][0]["error"]["type"] == "JobProcessDied"
    svc.fake.end(
        a["id"],
        RunnerReport(attempt=2, state=ReportState.FAILED, error=JobError("system", "StorageError", "down", None, True)),
    )
    svc.scheduler.tick()
    got = svc.job(a["id"])
    assert got["state"] == "FAILED" and got["error"]["type"] == "StorageError" and got["error"]["transient"]
    assert svc.http.post(f"/api/v1/jobs/{a['id']}/retry").json()["state"] == "PENDING"


def test_a_run_that_returns_unpublished_is_never_succeeded(svc):
    a = svc.submit()
    svc.scheduler.tick()
    unpublished = RunnerReport(
        attempt=1, state=ReportState.SUCCEEDED, progress=Progress(0, 3, 0), result=RunResult(False, 0, False)
    )
    svc.fake.end(a["id"], unpublished)
    svc.scheduler.tick()
    got = svc.job(a["id"])
    assert got["state"] == "FAILED" and got["error"]["type"] == "NotPublished", got


@pytest.mark.parametrize(
    "body, status, field",
    [
        ({"output_dir": "s3://"}, 422, "output_dir"),
        ({"output_dir": "s3:///x"}, 422, "output_dir"),
        ({"output_dir": "s3://bucket/a//x"}, 422, "output_dir"),
        ({"output_dir": "s3://bucket/a/../x"}, 422, "output_dir"),
        ({"output_dir": "/tmp/a/../b"}, 422, "output_dir"),
        ({"output_dir": "/tmp/a//b"}, 422, "output_dir"),
        ({"output_dir": "/tmp/a\x00b"}, 422, "output_dir"),
        ({"storage_options": {"key": "AKIA", "secret": "x"}}, 422, "storage_options"),
        ({"output_dir": "gs://bucket/a//x"}, 422, "output_dir"),
        ({"output_dir": "gcp://bucket/x"}, 422, "output_dir"),
        ({"config": {"factr": 2}}, 422, "config.factr"),
        ({"options": {"num_workers": "4"}}, 422, "options.num_workers"),
        ({"options": {"timeout": 0}}, 422, "options.timeout"),
        ({"options": {"frobnicate": True}}, 422, "options.frobnicate"),
    ],
)
def test_what_the_job_would_fail_on_is_refused_at_submit(svc, body, status, field):
    r = svc.http.post(
        "/api/v1/jobs", json={"pipeline": "square", "inputs": [1], "output_dir": str(svc.root / "out" / "x"), **body}
    )
    assert r.status_code == status, r.text
    message = r.json()["error"]["message"]
    assert message.startswith(field + ":") and "\n" not in message, message
    assert os.listdir(svc.config.state_dir + "/jobs") == []  # nothing queued, no job directory


def test_cloud_roots_and_each_clouds_option_names_at_submit(tmp_path):
    """gcs:// is gs:// under a gs:// root; gcsfs/adlfs option names are refused at submit with
    the right key of that cloud (not boto3's)."""
    svc = Service(tmp_path, output_roots=("gs://bucket", "az://data"))
    for output_dir, options, fix in [
        ("gcs://bucket/x", {"token": "/key.json"}, "'token' -> 'credentials'"),
        ("az://data/x", {"account_host": "a"}, "'account_host' -> 'account_url'"),
    ]:
        r = svc.http.post(
            "/api/v1/jobs",
            json={"pipeline": "square", "inputs": [1], "output_dir": output_dir, "storage_options": options},
        )
        assert r.status_code == 422, r.text
        message = r.json()["error"]["message"]
        assert message.startswith("storage_options:") and fix in message, message
    r = svc.http.post("/api/v1/jobs", json={"pipeline": "square", "inputs": [1], "output_dir": "gs://other/x"})
    assert r.status_code == 403 and "outside the allowed output roots" in r.text
    r = svc.http.post("/api/v1/jobs", json={"pipeline": "square", "inputs": [1], "output_dir": "gcs://bucket/y"})
    assert r.status_code == 201 and r.json()["output_dir"] == "gs://bucket/y", r.text


def test_invalid_json_too_deep_and_too_big_answer_in_the_api_error_shape(tmp_path):
    svc = Service(tmp_path, max_body_bytes=2000)
    r = svc.http.post("/api/v1/jobs", content=b'{"pipeline": "square",', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "InvalidJSON"
    assert r.json()["error"]["message"].startswith("body: invalid JSON")
    deep = b'{"pipeline": "square", "output_dir": "/x", "inputs": [' + b"[" * 40 + b"]" * 40 + b"]}"
    r = svc.http.post("/api/v1/jobs", content=deep, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["type"] == "TooDeep"
    assert "over the limit of 32" in r.json()["error"]["message"]
    r = svc.http.post("/api/v1/jobs", json={"pipeline": "square", "inputs": list(range(1000)), "output_dir": "/x"})
    assert r.status_code == 413 and "over the limit of 2,000 bytes" in r.json()["error"]["message"]


def test_without_output_roots_the_home_system_and_state_directories_are_refused(tmp_path):
    svc = Service(tmp_path)
    for where in ("/", os.path.expanduser("~"), "/etc/ds", "/usr", str(tmp_path / "state"), str(tmp_path)):
        r = svc.http.post("/api/v1/jobs", json={"pipeline": "echo", "inputs": [1], "output_dir": where})
        assert r.status_code == 403, (where, r.text)
        assert r.json()["error"]["message"].startswith("output_dir:")
    svc.submit(pipeline="echo", output_dir=str(tmp_path / "out" / "fine"))


def test_a_full_disk_under_the_store_answers_507_once_and_leaves_no_job_dir(svc):
    svc.store._db.execute("PRAGMA max_page_count = 1")  # the disk is full now
    r = svc.http.post(
        "/api/v1/jobs", json={"pipeline": "echo", "inputs": ["x" * 5000] * 3, "output_dir": str(svc.root / "out" / "f")}
    )
    assert r.status_code == 507 and r.json()["error"]["type"] == "StoreFullError", r.text
    assert os.listdir(svc.config.state_dir + "/jobs") == []


def _flat(schema: dict) -> list[dict]:
    """A JSON Schema's alternatives (nested anyOf flattened)."""
    return [k for alt in schema.get("anyOf", []) for k in _flat(alt)] if "anyOf" in schema else [schema]


def test_the_openapi_document_matches_its_snapshot(svc):
    """The API's contract. After an intended change: SHARDWRIGHT_UPDATE_SNAPSHOT=1 pytest this test.
    JobOptions is generated from the engine's JOB_OPTIONS (a row added there is the whole change):
    it is checked against that table instead of the snapshot."""
    from shardwright.engine.options import JOB_OPTIONS

    spec = svc.http.get("/openapi.json").json()
    options = spec["components"]["schemas"].pop("JobOptions")
    text = json.dumps(spec, indent=1, sort_keys=True) + "\n"
    if os.environ.get("SHARDWRIGHT_UPDATE_SNAPSHOT"):
        SNAPSHOT.write_text(text)
    assert text == SNAPSHOT.read_text(), "the API changed: review the diff, then update the snapshot"
    assert options["additionalProperties"] is False
    assert sorted(options["properties"]) == sorted(s.name for s in JOB_OPTIONS)
    for row in JOB_OPTIONS:
        prop = options["properties"][row.name]
        kinds = _flat(prop)
        if row.minimum is not None:
            assert any(k.get("minimum") == row.minimum for k in kinds), row.name
        if row.maximum is not None:
            assert any(k.get("maximum") == row.maximum for k in kinds), row.name
        if row.choices:
            assert any(set(k.get("enum", [k.get("const")])) == set(row.choices) for k in kinds), row.name
        assert prop.get("default") == row.default and prop["description"] == row.help
