"""Quickstart: optimize a dataset, get killed halfway, resume, read it back.

Run with `bash scripts/run-demo.sh` (or `.venv/bin/python examples/quickstart.py`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from shardwright import StreamingDataset, optimize

NUM_INPUTS = 2_000


def make_sample(i: int) -> dict:
    """One input -> one sample: any pytree of ints, floats, str, bytes, numpy arrays, tensors."""
    time.sleep(0.002)  # pretend this is real work (decoding an image, tokenizing a file...)
    return {"index": i, "square": i * i, "name": f"sample-{i}", "vector": np.full(16, i, dtype=np.float32)}


def run(output_dir: str, fn=make_sample) -> None:
    optimize(fn, list(range(NUM_INPUTS)), output_dir, chunk_size=50, num_workers=2)  # prints a summary


def wait_for_a_committed_chunk(output_dir: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until the child's run has committed items (its commit records say so), or it ended."""
    from shardwright.protocol.status import read_status  # what `shardwright status` reads
    from shardwright.storage import open_storage

    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if read_status(open_storage(output_dir)).items_committed > 0:
                return
        except Exception:  # nothing written yet (or a record being replaced): look again
            pass
        time.sleep(0.01)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        run(sys.argv[2])
        return
    output_dir = str(Path(tempfile.mkdtemp(prefix="shardwright-demo-")) / "dataset")
    child = [sys.executable, __file__, "--child", output_dir]

    print(
        f"1. optimize {NUM_INPUTS:,} inputs into {output_dir} in a child process, SIGKILL it once a chunk is committed"
    )
    proc = subprocess.Popen(child, start_new_session=True)
    wait_for_a_committed_chunk(output_dir, proc)  # not a fixed sleep: a cold machine starts slowly
    os.killpg(proc.pid, signal.SIGKILL)  # the whole process group, like a preempted node
    proc.wait()
    print(
        f"   killed (exit {proc.returncode}); index.json exists: {os.path.exists(os.path.join(output_dir, 'index.json'))}"
    )
    subprocess.run([sys.executable, "-m", "shardwright.cli", "status", output_dir], check=False)

    print("2. rerun the same call: it resumes where the killed run stopped")
    subprocess.run(child, check=True)

    print("3. read it back")
    ds = StreamingDataset(output_dir)
    indices = [item["index"] for item in ds]
    assert indices == list(range(NUM_INPUTS)), "every input exactly once, in order"
    print(f"   {len(ds):,} items, every input exactly once and in order; ds[7] = {ds[7]}")
    try:
        import litdata

        lit = litdata.StreamingDataset(output_dir)
        print(f"   litdata {litdata.__version__} reads it too: {len(lit):,} items, item 7 index = {lit[7]['index']}")
    except ImportError:
        pass
    subprocess.run([sys.executable, "-m", "shardwright.cli", "status", output_dir], check=False)


if __name__ == "__main__":
    main()
