"""Issue 32 item 7 through the real jobs server (tests/support/service_server.py) running the
shipped SDG pipeline (examples/sdg_pipelines.py) against a loopback teacher LLM: a job with
another config over an interrupted run on the same output is refused (409, naming the key),
and a teacher's 503s are a transient system error retried by the service, not a user error."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from shardwright import StreamingDataset
from support.service_server import Server

pytestmark = pytest.mark.timeout(240)
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Teacher:
    """An OpenAI-compatible /chat/completions on loopback: 503 for the first ``fail_first``
    calls, then one answer per call (after ``delay`` seconds)."""

    def __init__(self, fail_first: int = 0, delay: float = 0.0):
        self.fail_first, self.delay, self.calls, self.lock = fail_first, delay, 0, threading.Lock()
        teacher = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with teacher.lock:
                    teacher.calls += 1
                    call = teacher.calls
                if call <= teacher.fail_first:
                    self.send_response(503)
                    self.end_headers()
                    return
                if teacher.delay:
                    threading.Event().wait(teacher.delay)  # the teacher's latency
                body = json.dumps({"choices": [{"message": {"content": f"answer {call}"}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("sdg")
    (root / "out").mkdir()
    mp = pytest.MonkeyPatch()
    mp.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")]))
    )  # its pipelines
    srv = Server(
        root,
        "--pipelines",
        "sdg_pipelines",
        "--output-root",
        str(root / "out"),
        "--auto-retries",
        "1",
        "--retry-backoff",
        "0.2",
        env={"SHARDWRIGHT_LEASE_TTL": "4"},  # heartbeats (which publish the inputs in progress) every second
    )
    srv.start()
    yield srv
    srv.stop()
    mp.undo()


def docs(n: int, pages: int = 2) -> list[dict]:
    return [{"doc": f"doc{d:03d}.txt", "pages": [f"page {p} of doc {d}" for p in range(pages)]} for d in range(n)]


def samples(out: str) -> list[tuple[str, int, int]]:
    return [(item["doc"], int(item["page"]), int(item["k"])) for item in StreamingDataset(out)]


def test_a_changed_config_over_an_interrupted_run_is_refused_naming_the_key(server):
    teacher = Teacher(delay=0.05)
    out = str(server.root / "out" / "changed")
    body = {
        "pipeline": "generate",
        "inputs": docs(30),
        "output_dir": out,
        "options": {"chunk_size": 2, "num_workers": 1},
    }
    config = {"teacher_url": teacher.url, "samples_per_page": 3}
    try:
        with server.client() as client:
            job = server.submit(client, **body, config=config)
            server.wait(client, job["id"], lambda j: j["progress"]["inputs_done"] >= 2, 120, "committed inputs")
            client.post(f"/jobs/{job['id']}/cancel")
            server.wait_state(client, job["id"], "CANCELED", "SUCCEEDED", timeout=120)
            refused = client.post("/jobs", json={**body, "config": {**config, "samples_per_page": 2}})
            assert refused.status_code == 409, refused.text
            answer = refused.json()
            assert answer["error"]["type"] == "ConfigChanged" and answer["detail"]["changed_keys"] == [
                "samples_per_page"
            ]
            assert job["id"] in answer["error"]["message"]
            # the same config resumes it: every sample exactly once
            again = server.submit(client, **body, config=config)
            server.wait_state(client, again["id"], "SUCCEEDED", "FAILED", timeout=180)
            assert server.job(client, again["id"])["state"] == "SUCCEEDED"
        got = samples(out)
        assert sorted(got) == sorted({(f"doc{d:03d}.txt", p, k) for d in range(30) for p in range(2) for k in range(3)})
        assert len(got) == len(set(got))
    finally:
        teacher.close()


def test_a_teachers_503_is_a_transient_system_error_retried_by_the_service(server):
    teacher = Teacher(fail_first=1)
    out = str(server.root / "out" / "transient")
    try:
        with server.client() as client:
            job = server.submit(
                client,
                pipeline="generate",
                inputs=docs(3),
                output_dir=out,
                config={"teacher_url": teacher.url, "samples_per_page": 2},
                options={"chunk_size": 2, "num_workers": 1},
            )
            done = server.wait_state(client, job["id"], "SUCCEEDED", "FAILED", timeout=180)
            assert done["state"] == "SUCCEEDED", json.dumps(done)[-2000:]
            first = done["attempt_history"][0]
            assert first["error"]["kind"] == "system" and first["error"]["transient"] is True
            assert first["error"]["type"] == "FnError" and "503" in first["error"]["message"]
            assert done["attempts"] == 2 and done["attempt_history"][1]["trigger"] == "auto-retry"
        assert len(samples(out)) == 3 * 2 * 2
    finally:
        teacher.close()


def test_the_jobs_api_lists_inputs_in_the_users_terms(server):
    teacher = Teacher(delay=0.2)
    out = str(server.root / "out" / "inputs")
    try:
        with server.client() as client:
            job = server.submit(
                client,
                pipeline="generate",
                inputs=docs(16, pages=3),
                output_dir=out,
                config={"teacher_url": teacher.url, "samples_per_page": 2},
                options={"chunk_size": 2, "num_workers": 2},
            )

            seen: dict = {}

            def busy(_job) -> bool:  # names are published with the claims' next heartbeat
                status = seen["status"] = client.get(f"/jobs/{job['id']}/inputs").json()
                named = all(not e["name"].startswith("input ") for e in status["in_progress"])
                return bool(status["in_progress"]) and named and status["counts"].get("in_progress", 0) > 0

            server.wait(client, job["id"], busy, 120, "an input in progress, by name")
            status = seen["status"]
            names = [e["name"] for e in status["in_progress"]]
            assert all("doc0" in name for name in names), names  # the documents, by their content's repr
            counts = status["counts"]
            assert sum(counts.values()) == 16 and set(counts) == {
                "done",
                "in_progress",
                "pending",
                "failed",
                "in_tails",
            }
            client.post(f"/jobs/{job['id']}/cancel")
            server.wait_state(client, job["id"], "CANCELED", "SUCCEEDED", timeout=120)
    finally:
        teacher.close()
