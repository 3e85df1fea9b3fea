"""Start tests/support/inflight_child.py and read ``shardwright status`` of its output: shared by
the in-flight tests (tests/system/test_inflight.py, test_status_calls.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from .helpers import HERE, child_env

CHILD = str(HERE / "inflight_child.py")
CONCURRENCY = 4
WORKERS = 2
DURABLE_EVERY = 0.5


def start_inflight(
    out: str,
    url: str,
    mode: str,
    env: dict | None = None,
    concurrency: int = CONCURRENCY,
    durable_every: float = DURABLE_EVERY,
    stdout: int = subprocess.PIPE,
) -> subprocess.Popen:
    """The child in its own session (kill_group reaches it and its workers only)."""
    return subprocess.Popen(
        [sys.executable, CHILD, out, url, mode, str(concurrency), str(durable_every)],
        env=env if env is not None else child_env(),
        start_new_session=True,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
    )


def status(out: str, env: dict, *extra: str) -> subprocess.CompletedProcess:
    """``shardwright status OUT [extra]``, run by the real CLI."""
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", "status", out, *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def in_progress(out: str, env: dict) -> list[dict]:
    """The ``in_progress`` entries of ``status --json`` ([] while there is no status to read)."""
    result = status(out, env, "--json")
    return json.loads(result.stdout).get("in_progress") or [] if result.returncode == 0 else []
