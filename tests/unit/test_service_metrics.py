"""GET /metrics (issue 35 §2, the service): Prometheus text that agrees with the job store,
behind the API token unless --metrics-public."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("prometheus_client")

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from test_service_api import Service, done

from shardwright.service.model import JobError, ReportState, RunnerReport


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def svc(tmp_path):
    return Service(tmp_path, output_roots=(str(tmp_path / "out"),), max_running=1, auto_retries=1)


def test_metrics_agree_with_the_store_and_need_the_token(svc):
    a = svc.submit()
    b = svc.submit(output_dir=str(svc.root / "out" / "b"))
    svc.scheduler.tick()
    svc.fake.end(a["id"], None)  # the job process died: one failed attempt, then an auto-retry
    svc.scheduler.tick()
    svc.scheduler.tick()
    svc.fake.end(a["id"], done())
    svc.scheduler.tick()
    svc.scheduler.tick()  # b starts
    assert svc.http.get("/api/v1/jobs").status_code == 200
    got = svc.http.get("/metrics")
    assert got.status_code == 200 and got.headers["content-type"].startswith("text/plain")
    m = samples(got.text)
    assert m[("shardwright_jobs", (("state", "SUCCEEDED"),))] == 1
    assert m[("shardwright_jobs", (("state", "RUNNING"),))] == 1
    assert m[("shardwright_jobs", (("state", "FAILED"),))] == 0
    assert m[("shardwright_job_attempts_total", (("error_kind", "system"), ("outcome", "failed")))] == 1
    assert m[("shardwright_job_attempts_total", (("error_kind", ""), ("outcome", "succeeded")))] == 1
    assert m[("shardwright_job_attempts_started_total", (("trigger", "auto-retry"),))] == 1
    assert m[("shardwright_job_attempts_started_total", (("trigger", "submit"),))] == 2
    assert m[("shardwright_items_total", ())] == 3
    live = [k for k in m if k[0] == "shardwright_job_inputs_total"]
    assert live == [("shardwright_job_inputs_total", (("job", b["id"]), ("pipeline", "square"), ("state", "RUNNING")))]
    submits = ("route", "/api/v1/jobs"), ("method", "POST"), ("status", "201")
    assert m[("shardwright_api_request_seconds_count", tuple(sorted(submits)))] == 2
    anonymous = TestClient(svc.http.app)
    refused = anonymous.get("/metrics")
    assert refused.status_code == 401 and "bearer token" in refused.json()["error"]["message"]


def test_metrics_public_needs_no_token(tmp_path):
    svc = Service(tmp_path, output_roots=(str(tmp_path / "out"),), metrics_public=True)
    got = TestClient(svc.http.app).get("/metrics")
    assert got.status_code == 200 and "shardwright_jobs" in got.text


def test_a_failed_users_error_is_counted_by_kind(svc):
    a = svc.submit()
    svc.scheduler.tick()
    svc.fake.end(a["id"], RunnerReport(attempt=1, state=ReportState.FAILED, error=JobError("user", "FnError", "x")))
    svc.scheduler.tick()
    m = samples(svc.http.get("/metrics").text)
    assert m[("shardwright_job_attempts_total", (("error_kind", "user"), ("outcome", "failed")))] == 1
    assert m[("shardwright_jobs", (("state", "FAILED"),))] == 1


def test_invented_http_methods_never_add_series(svc):
    """HTTP lets a client invent methods; each one was a new latency series, recorded before the
    token was checked: 300 unauthenticated requests made 300 series, without bound (trust
    round 7). Any method besides the standard ones is counted as "other"."""
    for i in range(50):
        svc.http.request(f"M{i:05d}X", f"/api/v1/x{i}", headers={"Authorization": ""})
    m = samples(svc.http.get("/metrics").text)
    methods = {dict(labels)["method"] for (name, labels) in m if name == "shardwright_api_request_seconds_count"}
    assert methods <= {"GET", "other"}, methods
    assert (
        m[("shardwright_api_request_seconds_count", (("method", "other"), ("route", "unmatched"), ("status", "404")))]
        == 50
    )


def test_jobs_waiting_past_max_queued_are_answered_429(tmp_path):
    """A token holder could queue jobs without end, each a store row and a /metrics series per
    gauge (trust round 7, case 10). Past --max-queued waiting jobs a submit is 429."""
    svc = Service(tmp_path, output_roots=(str(tmp_path / "out"),), max_running=1, max_queued=2)
    for name in ("a", "b"):
        svc.submit(output_dir=str(tmp_path / "out" / name))
    r = svc.http.post(
        "/api/v1/jobs", json={"pipeline": "square", "inputs": [1], "output_dir": str(tmp_path / "out" / "c")}
    )
    assert r.status_code == 429 and "--max-queued" in r.text, r.text
    svc.scheduler.tick()  # one starts: there is room again
    svc.submit(output_dir=str(tmp_path / "out" / "c"))
    live = samples(svc.http.get("/metrics").text)
    assert sum(1 for (name, _) in live if name == "shardwright_job_items") == 3


def test_a_retry_past_max_queued_is_answered_429(tmp_path):
    """Trust round 8: a retry puts a CANCELED or FAILED job back to PENDING, and did so without
    the --max-queued check: submit N, cancel them, submit N more, retry the first N, and 2N
    jobs waited (each a store row and a /metrics series), without bound."""
    svc = Service(tmp_path, output_roots=(str(tmp_path / "out"),), max_running=1, max_queued=2)
    a = svc.submit(output_dir=str(tmp_path / "out" / "a"))
    assert svc.http.post(f"/api/v1/jobs/{a['id']}/cancel").status_code == 200
    for name in ("b", "c"):
        svc.submit(output_dir=str(tmp_path / "out" / name))
    r = svc.http.post(f"/api/v1/jobs/{a['id']}/retry")
    assert r.status_code == 429 and "--max-queued" in r.text, r.text
    assert svc.job(a["id"])["state"] == "CANCELED"
    svc.scheduler.tick()  # one starts: there is room again
    assert svc.http.post(f"/api/v1/jobs/{a['id']}/retry").status_code == 200
