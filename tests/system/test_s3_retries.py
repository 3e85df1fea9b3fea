"""The S3 backend's one retry budget, against a real HTTP server on loopback that answers as an
overloaded S3 does (429 / 503 with S3's XML error body): every attempt is one request of
ours (botocore's own retries are off), throttling is retried, and ``retry_timeout`` bounds
the whole operation."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from shardwright.errors import StorageError
from shardwright.storage import open_storage

BODY = b"the object's bytes"


class Overloaded(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, failures: int, status: int, code: str):
        self.failures, self.status, self.code = failures, status, code
        self.requests = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    server: Overloaded

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.requests += 1
            failing = self.server.requests <= self.server.failures
        if failing:
            error = f"<Error><Code>{self.server.code}</Code><Message>slow down</Message></Error>".encode()
            self.send_response(self.server.status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(error)))
            self.end_headers()
            self.wfile.write(error)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.send_header("ETag", '"e"')
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def overloaded(request):
    server = Overloaded(*request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _storage(server: Overloaded, retry_timeout: float):
    options = {
        "endpoint_url": f"http://127.0.0.1:{server.server_address[1]}",
        "aws_access_key_id": "k" * 8,
        "aws_secret_access_key": "s" * 8,
        "region_name": "us-east-1",
        "retry_timeout": retry_timeout,
    }
    return open_storage("s3://bucket/prefix", options)


@pytest.mark.parametrize(
    "overloaded", [(3, 429, "TooManyRequests"), (3, 503, "SlowDown")], indirect=True, ids=["429", "503"]
)
def test_throttling_is_retried_one_request_an_attempt(overloaded):
    assert _storage(overloaded, 30).read_bytes("k") == BODY
    assert overloaded.requests == 4, f"3 refusals and 1 answer, each one request: {overloaded.requests}"


@pytest.mark.parametrize("overloaded", [(10**9, 503, "SlowDown")], indirect=True, ids=["always-503"])
def test_retry_timeout_bounds_the_whole_operation(overloaded):
    storage = _storage(overloaded, 1.5)
    started = time.monotonic()
    with pytest.raises(StorageError) as info:
        storage.read_bytes("k")
    elapsed = time.monotonic() - started
    assert elapsed < 6, f"retry_timeout=1.5 took {elapsed:.1f} s"
    assert "SlowDown" in str(info.value) and "rerun" in str(info.value), info.value
