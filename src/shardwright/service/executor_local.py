"""Local executor: each attempt is a ``python -m shardwright.service.runner`` process.

The process runs in a session of its own (so its optimize() workers can be signalled as a
group) and dies with the server (the runner sets PR_SET_PDEATHSIG; the workers do the same
with the runner). Its pid and start time are recorded, so a restarted server can tell a
stale job process from a pid the kernel reused, and kill only the former.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..process import describe_exit as describe_process_exit
from ..process import is_same_process, kill_group, kill_stale, process_start, terminate

__all__ = [
    "describe_exit",
    "is_same_process",
    "kill_group",
    "kill_stale",
    "process_start",
    "start_runner",
    "terminate",
]


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


def describe_exit(returncode: int | None) -> str:
    """How a job process ended; None: it ended while the server was down (no exit status)."""
    return "ended while the server was down" if returncode is None else describe_process_exit(returncode)
