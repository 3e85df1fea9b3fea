"""The CLI's POOR lines of issue 14: a broken pipe, a missing root, a huge history file and a
heartbeat from the future."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc

import pytest

from shardwright import FnError, optimize
from shardwright.cli.main import main
from shardwright.protocol.history import read_history
from shardwright.protocol.layout import HISTORY_PREFIX, lease_key
from shardwright.storage import LocalStorage


def plain(i: int) -> dict:
    return {"i": i}


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def test_status_into_a_closed_pipe_exits_quietly(tmp_path):
    out = tmp_path / "ds"
    optimize(plain, list(range(5)), str(out), num_workers=1, verbose=False)
    cmd = f"{sys.executable} -m shardwright.cli status {out} | head -c 1"
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, env=_env(), timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "BrokenPipe" not in done.stderr and "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def test_runs_of_a_missing_root_exits_2(tmp_path, capsys):
    assert main(["runs", str(tmp_path / "no" / "such" / "dir")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_history_never_reads_a_huge_file(tmp_path):
    out = tmp_path / "ds"
    optimize(plain, list(range(5)), str(out), num_workers=1, verbose=False)
    huge = out / f"{HISTORY_PREFIX}99999999999999999999-planted.json"
    with open(huge, "wb") as f:
        f.truncate(200 * 1024 * 1024)  # sparse: 200 MB that would be read into memory
    tracemalloc.start()
    try:
        attempts = read_history(LocalStorage(str(out)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(attempts) == 1
    assert peak < 20 * 1024 * 1024, f"read_history allocated {peak:,} bytes"


def failing(i: int) -> dict:
    if i == 3:
        raise ValueError("boom")
    return {"i": i}


def test_status_never_prints_a_negative_ago(tmp_path, capsys):
    out = tmp_path / "ds"
    with pytest.raises(FnError):
        optimize(failing, list(range(5)), str(out), num_workers=1, verbose=False)
    holder = {"owner": "x", "host": "elsewhere", "pid": 1, "heartbeat": time.time() + 300, "ttl": 60}
    (out / lease_key("node-0")).write_text(json.dumps(holder))
    assert main(["status", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "lease:" in printed and "s in the future" in printed, printed
    lease = next(line for line in printed.splitlines() if line.startswith("lease:"))
    assert "s ago" not in lease and " -" not in lease, lease
