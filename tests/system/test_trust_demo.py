"""Issue 33: the demo kills its child once a chunk is committed (never a fixed sleep that, on a
cold machine, lands before anything is written), so the rerun always resumes. The child here is
the demo's run whose workers stop after a few chunks until they are killed
(tests/support/demo_child.py): the kill lands mid-run at any load."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

from shardwright.protocol.status import read_status
from shardwright.storage import open_storage

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"


def test_the_demo_kills_its_child_after_the_first_committed_chunk(tmp_path):
    spec = importlib.util.spec_from_file_location("quickstart", EXAMPLE)
    assert spec is not None and spec.loader is not None
    quickstart = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quickstart)
    output_dir = str(tmp_path / "dataset")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = [sys.executable, "-c", "from support.demo_child import main; main()", output_dir]
    proc = subprocess.Popen(child, start_new_session=True, env=env)
    try:
        quickstart.wait_for_a_committed_chunk(output_dir, proc)
        assert proc.poll() is None  # killed mid-run, as the demo shows
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    status = read_status(open_storage(output_dir))
    assert status.items_committed > 0 and not os.path.exists(os.path.join(output_dir, "index.json"))
