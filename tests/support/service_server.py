"""A real `shardwright serve` in a subprocess on a free loopback port, for the service tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from support.helpers import child_env

HERE = Path(__file__).resolve().parent
TOKEN = "test-token-" + "x" * 24
FINAL = ("SUCCEEDED", "FAILED", "CANCELED")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(
        self, root: Path, *args: str, token: str | None = TOKEN, env: dict | None = None, default_db: bool = False
    ):
        self.root = root
        self.db: Path | None = None if default_db else root / "state" / "jobs.db"  # None: serve's default
        self.port = free_port()
        self.args = list(args)
        self.token = token
        self.base_env = env
        self.proc: subprocess.Popen | None = None
        self.log = root / "server.log"
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> Server:
        extra = {"PYTHONPATH": str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env = child_env(**extra)
        if self.base_env:
            env.update({k: v for k, v in self.base_env.items() if k != "PYTHONPATH"})
        env.pop("SHARDWRIGHT_API_TOKEN", None)
        if self.token:
            env["SHARDWRIGHT_API_TOKEN"] = self.token
        self.starts += 1
        with open(self.log, "a") as log:
            log.write(f"--- start {self.starts}\n")
            log.flush()
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "shardwright.cli",
                    "serve",
                    "--pipelines",
                    "support.service_pipelines",
                    *(["--db", str(self.db)] if self.db else []),
                    "--port",
                    str(self.port),
                    *self.args,
                ],
                env=env,
                cwd=str(self.root),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited ({self.proc.returncode}):\n{self.log.read_text()}")
            try:
                httpx.get(f"{self.url}/api/v1/pipelines", timeout=1)
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise AssertionError(f"server did not answer in {timeout}s:\n{self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL the server process only (its job processes must die with it by themselves)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def client(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/api/v1", timeout=30, headers={"Authorization": f"Bearer {token or self.token}"}
        )

    # -- conveniences ------------------------------------------------------------------------------

    def submit(self, client: httpx.Client, **body) -> dict:
        r = client.post("/jobs", json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def job(self, client: httpx.Client, job_id: str) -> dict:
        r = client.get(f"/jobs/{job_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def wait(self, client: httpx.Client, job_id: str, predicate, timeout: float = 60, what: str = "") -> dict:
        deadline = time.monotonic() + timeout
        job = None
        while time.monotonic() < deadline:
            job = self.job(client, job_id)
            if predicate(job):
                return job
            time.sleep(0.1)
        logs = client.get(f"/jobs/{job_id}/logs").json().get("text", "")
        raise AssertionError(
            f"timed out after {timeout}s waiting for {what or 'a job state'}: "
            f"{json.dumps(job, indent=1)[-3000:]}\n--- job log\n{logs[-3000:]}\n--- server log\n"
            f"{self.log.read_text()[-3000:]}"
        )

    def wait_state(self, client, job_id: str, *states: str, timeout: float = 60) -> dict:
        return self.wait(client, job_id, lambda j: j["state"] in states, timeout, f"state in {states}")


def read_ids(output_dir) -> list[int]:
    """Every sample's input, read back with shardwright's reader, in dataset order."""
    from shardwright import StreamingDataset

    return [int(item["i"]) for item in StreamingDataset(str(output_dir))]


def assert_exactly_once(output_dir, n: int, factor: int = 1) -> None:
    from shardwright import StreamingDataset

    items = list(StreamingDataset(str(output_dir)))
    ids = [int(item["i"]) for item in items]
    assert sorted(ids) == list(range(n)), (
        f"not every input exactly once: {len(ids)} items, "
        f"duplicates {sorted({i for i in ids if ids.count(i) > 1})[:10]}, missing {sorted(set(range(n)) - set(ids))[:10]}"
    )
    for item in items:
        if "sq" in item:
            assert int(item["sq"]) == int(item["i"]) ** 2 * factor


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False
