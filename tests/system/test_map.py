"""shardwright.map: fn's files appear exactly once, also after real SIGKILLs of a running map,
on local disk and on the S3 server."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import shardwright as sw
from shardwright.engine.map_run import MAP_DIR
from shardwright.errors import FnError, UsageError

CHILD = Path(__file__).resolve().parents[1] / "support" / "map_child.py"


def run_child(config: dict, **extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHILD.parents[2] / "src"), str(CHILD.parents[1])])}
    env.update(extra)
    return subprocess.Popen([sys.executable, str(CHILD), json.dumps(config)], env=env, start_new_session=True)


def visible(out: Path) -> dict[str, bytes]:
    """The files a user sees: everything outside shardwright's own folder."""
    found = {}
    for folder, dirs, files in os.walk(out):
        dirs[:] = [d for d in dirs if d != ".shardwright"]
        for name in files:
            path = Path(folder) / name
            found[str(path.relative_to(out))] = path.read_bytes()
    return found


def expected(n: int) -> dict[str, bytes]:
    files = {}
    for i in range(n):
        files[f"labels/{i:04d}.txt"] = f"label {i}\n".encode()
        files[f"blob-{i:04d}.bin"] = bytes([i % 256]) * 65536 * 8
    return files


def calls(log: Path) -> Counter:
    return Counter(int(name.split("-")[0]) for name in os.listdir(log))


def sample_fn(i, out):
    with open(os.path.join(out, f"{i}.txt"), "w") as handle:
        handle.write(str(i))


def failing_fn(i, out):
    if i == 3:
        raise ValueError("bad input 3")
    sample_fn(i, out)


def test_map_writes_each_inputs_files_once(tmp_path):
    out = tmp_path / "out"
    result = sw.map(sample_fn, list(range(12)), str(out), num_workers=2, verbose=False)
    assert result.published
    assert visible(out) == {f"{i}.txt": str(i).encode() for i in range(12)}
    manifest = sw.StreamingDataset(str(out / MAP_DIR))
    assert [json.loads(item["files"]) for item in manifest] == [[f"{i}.txt"] for i in range(12)]
    again = sw.map(sample_fn, list(range(12)), str(out), num_workers=2, verbose=False)
    assert again.items == 0 and visible(out) == {f"{i}.txt": str(i).encode() for i in range(12)}


def test_map_on_error_and_refusals(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(FnError, match="bad input 3"):
        sw.map(failing_fn, list(range(8)), str(out), num_workers=1, verbose=False)
    assert visible(out) == {}  # nothing of an unfinished map is visible
    result = sw.map(failing_fn, list(range(8)), str(tmp_path / "skip"), num_workers=1, verbose=False, on_error="skip")
    assert result.failed == 1 and set(visible(tmp_path / "skip")) == {f"{i}.txt" for i in range(8) if i != 3}
    with pytest.raises(UsageError, match="map takes no chunk_size"):
        sw.map(sample_fn, [1], str(tmp_path / "x"), chunk_size=4)


@pytest.mark.slow
def test_map_survives_sigkill_of_the_whole_run(tmp_path):
    from support.helpers import committed_records, wait_for

    n, out, log = 40, tmp_path / "out", tmp_path / "log"
    log.mkdir()
    config = {"n": n, "out": str(out), "log": str(log), "sleep": 0.5, "workers": 2}  # about 10 s undisturbed
    rng = random.Random(5)
    for round_, hold_from in enumerate((10, 20, 30)):
        # inputs from hold_from on wait for a gate that never opens: each run commits more
        # inputs than the last, then is certainly still running when it is killed, at any load
        child = run_child(config, MAP_GATE=str(tmp_path / f"gate-{round_}"), MAP_HOLD_FROM=str(hold_from))
        before = committed_records(str(out / MAP_DIR)) if (out / MAP_DIR).exists() else 0
        try:
            assert wait_for(
                lambda c=child, b=before: c.poll() is not None or committed_records(str(out / MAP_DIR)) > b, 120
            )
            assert child.poll() is None, f"run {round_} ended with {child.returncode} before it was killed"
            time.sleep(rng.uniform(0.0, 0.5))  # a worker may be mid-write (nothing is asserted on it)
        finally:
            os.killpg(child.pid, signal.SIGKILL)  # the map process and its workers
            child.wait()
        assert visible(out) == {}  # nothing before the publish
    child = run_child(config)
    assert child.wait(timeout=300) == 0
    assert visible(out) == expected(n)  # every file, complete, once
    done_before_last_run = calls(log)
    # Committed inputs are not redone: some input ran only once across all the runs.
    assert min(done_before_last_run.values()) == 1 and sum(done_before_last_run.values()) < n * 4


@pytest.mark.parametrize(
    "backend",
    [pytest.param("s3", marks=pytest.mark.s3), pytest.param("gcs", marks=pytest.mark.gcs),
     pytest.param("azure", marks=pytest.mark.azure)],
)  # fmt: skip
def test_map_to_object_stores(tmp_path, request, backend):
    from shardwright.storage import open_storage

    url = request.getfixturevalue(f"{backend}_url")
    options = request.getfixturevalue(f"{backend}_storage_options")
    log = tmp_path / "log"
    log.mkdir()
    config = {"n": 6, "out": url, "log": str(log), "workers": 2, "storage_options": options}
    assert run_child(config).wait(timeout=300) == 0
    out = open_storage(url, options)
    keys = out.list()
    assert {k for k in keys if not k.startswith(".shardwright/")} == set(expected(6))
    assert out.read_bytes("labels/0005.txt") == b"label 5\n"
    assert not [k for k in keys if "/staged/" in k]  # staged copies are gone once moved
    assert sw.StreamingDataset(f"{url}/{MAP_DIR}", storage_options=options, cache_dir=str(tmp_path / "c"))[5]


def test_map_over_two_nodes(tmp_path):
    # Two nodes of one map (as a Slurm array's tasks would run it): the node that publishes moves the files.
    out = tmp_path / "out"
    first = sw.map(sample_fn, list(range(10)), str(out), num_workers=1, verbose=False, num_nodes=2, node_rank=0)
    assert not first.published and visible(out) == {}
    second = sw.map(sample_fn, list(range(10)), str(out), num_workers=1, verbose=False, num_nodes=2, node_rank=1)
    assert second.published
    assert visible(out) == {f"{i}.txt": str(i).encode() for i in range(10)}


def device_fn(i, out, device):
    with open(os.path.join(out, f"{i}.txt"), "w") as handle:
        handle.write(device)


def last_fn(i, out, is_last):
    pass


def test_map_passes_device_and_refuses_is_last(tmp_path):
    sw.map(device_fn, [0, 1], str(tmp_path / "out"), num_workers=1, verbose=False)
    assert visible(tmp_path / "out") == {"0.txt": b"cpu", "1.txt": b"cpu"}  # no GPU here
    with pytest.raises(UsageError, match="is_last"):
        sw.map(last_fn, [0], str(tmp_path / "x"))
