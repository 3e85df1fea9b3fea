"""Local executor: each attempt is a ``python -m shardwright.service.runner`` process.

The process runs in a session of its own (so its optimize() workers can be signalled as a
group) and dies with the server (the runner sets PR_SET_PDEATHSIG; the workers do the same
with the runner). Its pid and start time are recorded, so a restarted server can tell a
stale job process from a pid the kernel reused, and kill only the former.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from ..engine.pool import describe_exit as describe_process_exit


def process_start(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return fields[19]


def is_same_process(pid: int | None, start: str | None) -> bool:
    if not pid or start is None:
        return False
    return process_start(pid) == start


def start_runner(
    job_dir: str, attempt: int, storage_options: dict | None, log_path: str, env: dict
) -> subprocess.Popen:
    """Start one attempt; storage_options reach it on stdin only."""
    argv = [
        sys.executable,
        "-m",
        "shardwright.service.runner",
        job_dir,
        "--attempt",
        str(attempt),
        "--parent-pid",
        str(os.getpid()),
    ]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=job_dir,
            start_new_session=True,
        )
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps(storage_options).encode() if storage_options else b"")
        proc.stdin.close()
    except BrokenPipeError:
        pass
    return proc


def terminate(pid: int) -> None:
    """Ask the job process to stop at a commit point (optimize() handles SIGTERM)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def kill_group(pid: int) -> None:
    """SIGKILL the job process and its workers (its session's process group)."""
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except (ProcessLookupError, PermissionError):
            pass


def kill_stale(pid: int | None, start: str | None, timeout: float = 15.0) -> bool:
    """Kill a job process a previous server left behind (only if it is still that process).
    Returns True once it is gone."""
    if pid is None or not is_same_process(pid, start):
        return True
    kill_group(pid)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_same_process(pid, start):
            return True
        time.sleep(0.05)
    return False


def describe_exit(returncode: int | None) -> str:
    """How a job process ended; None: it ended while the server was down (no exit status)."""
    return "ended while the server was down" if returncode is None else describe_process_exit(returncode)
