"""A real notebook, run by a real Jupyter kernel: ``fn`` is defined in the notebook itself, so
the worker processes can only get it by fork (it is not importable). The notebook checks the
dataset it wrote; the test checks the notebook ran cleanly and printed the expected count."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from shardwright.protocol.layout import MANIFEST_KEY, SHARDS_PREFIX

pytestmark = pytest.mark.slow  # real Jupyter kernels

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quick.ipynb"
KERNEL_NAME = "shardwright-test"
N = 500
EXPECTED_COUNT = sum(1 for i in range(N) if i % 10)  # the notebook's fn drops every 10th input


@pytest.fixture
def kernel_name(tmp_path, monkeypatch) -> str:
    """A kernelspec that starts ipykernel with this very interpreter (the venv's), found through
    JUPYTER_PATH, so the test never depends on kernels installed for the user or system-wide."""
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "shardwright test (venv python)",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    # The kernel imports shardwright from src/ whether or not it is installed in the venv.
    src = str(Path(__file__).resolve().parents[2] / "src")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))
    return KERNEL_NAME


def _set_parameters(nb, **values) -> None:
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    cell.source = "\n".join(f"{name} = {value!r}" for name, value in values.items())


def _text_outputs(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                parts.append(out.get("text", ""))
            elif out.get("output_type") in ("execute_result", "display_data"):
                parts.append(out.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def _errors(nb) -> list[str]:
    return [
        f"{o.get('ename')}: {o.get('evalue')}\n" + "\n".join(o.get("traceback", []))
        for c in nb.cells
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]


def _run(nb, kernel_name: str, cwd: Path):
    client = nbclient.NotebookClient(
        nb, kernel_name=kernel_name, timeout=120, allow_errors=True, resources={"metadata": {"path": str(cwd)}}
    )
    client.execute()
    return nb


def test_notebook_with_fn_defined_in_it(tmp_path, kernel_name):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    out = tmp_path / "dataset"
    _set_parameters(nb, OUTPUT_DIR=str(out), N=N)
    _run(nb, kernel_name, tmp_path)
    assert not _errors(nb), "the notebook raised:\n" + "\n".join(_errors(nb))
    text = _text_outputs(nb)
    assert f"count={EXPECTED_COUNT}" in text, text[-3000:]
    assert (out / "index.json").exists()
    assert not (out / MANIFEST_KEY).exists()

    # Rerunning the notebook (same call) is a no-op, not an error, and adds nothing.
    nb2 = nbformat.read(NOTEBOOK, as_version=4)
    _set_parameters(nb2, OUTPUT_DIR=str(out), N=N)
    _run(nb2, kernel_name, tmp_path)
    assert not _errors(nb2), "the rerun raised:\n" + "\n".join(_errors(nb2))
    assert f"count={EXPECTED_COUNT}" in _text_outputs(nb2)


# Each 100 inputs, the last 80 wait for the gate file (the test creates it once it has
# interrupted the kernel): the run commits its first chunks, then is certainly still going
# when the interrupt lands, at any load. The wait polls, so the workers still see the stop.
INTERRUPTED_CELL = """
import os, time
from shardwright import optimize

def slow(i):
    while i % 100 >= 20 and not os.path.exists(OUTPUT_DIR + ".gate"):
        time.sleep(0.05)
    time.sleep(0.005)
    return {"i": i}

try:
    optimize(slow, list(range(1500)), OUTPUT_DIR, chunk_size=5, num_workers=2, verbose=False)
except KeyboardInterrupt as exc:
    print("caught KeyboardInterrupt:", exc)
"""


def _stream_text_of(kc, msg_id: str, timeout: float = 60) -> str:
    """Stream output of one execution, read from iopub until the kernel is idle for it."""
    import time

    texts, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            texts.append(msg["content"]["text"])
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(texts)
    raise TimeoutError("the cell did not finish")


def test_interrupting_the_kernel_raises_keyboardinterrupt_and_resumes(tmp_path, kernel_name):
    """Jupyter's interrupt button sends SIGINT to the kernel: optimize stops, commits, and raises
    KeyboardInterrupt in the notebook (no SystemExit killing the kernel); the same cell resumes."""
    import time

    from jupyter_client.manager import start_new_kernel

    out = tmp_path / "dataset"
    km, kc = start_new_kernel(kernel_name=kernel_name, cwd=str(tmp_path))
    try:
        kc.execute_interactive(f"OUTPUT_DIR = {str(out)!r}", timeout=60)
        msg_id = kc.execute(INTERRUPTED_CELL)
        shards = out / SHARDS_PREFIX
        deadline = time.monotonic() + 60
        while not (shards.exists() and any(shards.iterdir())):
            assert time.monotonic() < deadline, "nothing was committed"
            time.sleep(0.05)
        km.interrupt_kernel()
        (tmp_path / "dataset.gate").write_text("")  # the held inputs go on, to the stop
        text = _stream_text_of(kc, msg_id)
        assert "caught KeyboardInterrupt: Interrupted:" in text and "Rerun the same call to resume." in text, text
        assert km.is_alive() and not (out / "index.json").exists()
        msg_id = kc.execute(
            INTERRUPTED_CELL + "\nfrom shardwright import StreamingDataset\n"
            "print('count=%d' % len(StreamingDataset(OUTPUT_DIR)))"
        )
        assert "count=1500" in _stream_text_of(kc, msg_id, timeout=120)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
