"""optimize(executor="ray") on a real local 3-node Ray cluster (tests/support/ray_fixtures.py).

Each run is a real driver process (tests/support/crash_child.py) connected through
RAY_ADDRESS; nodes are really removed (raylet and workers killed), drivers really SIGKILLed.
Every emulated node has its own host identity (the Ray task sets it from its node id), so a
dead node's claims are taken over because Ray reports the node dead, never by a local pid
check; the lease TTL is 120 s in the cluster, so a run that finishes soon after a node loss
did not wait for it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

from support.crash_child import expected
from support.helpers import committed_records, fork_pool_map, kill_group, read_pairs, wait_for
from support.ray_fixtures import start_driver

pytestmark = pytest.mark.slow


def run_driver(ray_cluster, config: dict, timeout: float = 150) -> tuple[int, str, str]:
    proc = start_driver(ray_cluster, config)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        raise AssertionError(f"the Ray driver did not finish in {timeout} s:\n{err[-4000:]}") from None
    return proc.returncode, out, err


def ray_config(output_dir: str, n: int, **extra) -> dict:
    config = {
        "kind": "located",
        "n": n,
        "chunk_size": 10,
        "num_workers": 1,
        "num_shards": 12,
        "output_dir": output_dir,
        "extra": {"executor": "ray", "shared_output": True},
    }
    config.update(extra)
    return config


def hosts_of(output_dir: str, options: dict | None = None) -> set[str]:
    from shardwright import StreamingDataset

    return {item["host"] for item in StreamingDataset(output_dir, storage_options=options)}


def check_exactly_once(config: dict, options: dict | None = None) -> None:
    assert read_pairs(config["output_dir"], options) == expected(config["kind"], config["n"])


def test_ray_run_spreads_over_the_nodes_and_writes_once(ray_cluster, tmp_path):
    ray_cluster.restore()
    # every call waits until the three nodes' tasks have each started one (an event, not a
    # per-input delay): the shards run on all three nodes at any load
    (tmp_path / "hosts").mkdir()
    config = ray_config(str(tmp_path / "out"), 600, hosts_dir=str(tmp_path / "hosts"), hosts_wanted=3)
    code, out, err = run_driver(ray_cluster, config)
    assert code == 0, err[-4000:]
    check_exactly_once(config)
    hosts = hosts_of(config["output_dir"])
    assert len(hosts) == 3, f"the shards should run on all 3 nodes, ran on {hosts}"
    assert all("/ray-" in h for h in hosts)
    assert json.loads(out.strip().splitlines()[-1])["items"] == 600
    # the same call again is a no-op
    code, out, err = run_driver(ray_cluster, config)
    assert code == 0, err[-4000:]
    assert json.loads(out.strip().splitlines()[-1])["items"] == 0
    check_exactly_once(config)


def test_a_local_output_dir_needs_shared_output(ray_cluster, tmp_path):
    ray_cluster.restore()
    config = ray_config(str(tmp_path / "out"), 20, extra={"executor": "ray"})
    code, _, err = run_driver(ray_cluster, config)
    assert code != 0
    assert "shared_output=True" in err and "local path" in err, err[-3000:]
    assert not (tmp_path / "out" / ".shardwright" / "manifest.json").exists(), "refused before writing"


def test_node_lost_mid_run_the_driver_finishes_without_waiting(ray_cluster, tmp_path):
    """A worker node is killed while its task writes: Ray retries the task on a live node,
    which takes the dead node's claims over at once and resumes them from their commits."""
    ray_cluster.restore()
    # Each shard (125 inputs) commits its first 60 inputs, then its step waits for the gate
    # file: the run is still going while the test looks at it and removes a node, at any load.
    gate = tmp_path / "gate"
    config = ray_config(str(tmp_path / "out"), 1500, sleep=0.01, gate=str(gate), gate_period=125, gate_after=60)
    driver = start_driver(ray_cluster, config)
    try:
        assert wait_for(lambda: driver.poll() is not None or committed_records(config["output_dir"]) >= 3, 300)
        assert driver.poll() is None, driver.communicate()[1][-4000:]
        shown: list[str] = []

        def status_names_a_ray_node() -> bool:  # which Ray node holds which shard
            done = subprocess.run(
                [sys.executable, "-m", "shardwright.cli", "status", config["output_dir"]],
                env=ray_cluster.env,
                capture_output=True,
                text=True,
            )
            shown[:] = [done.stdout + done.stderr]
            return "held by ray node" in done.stdout

        assert wait_for(status_names_a_ray_node, 120, interval=0.5), shown
        ray_cluster.remove_worker_node()
        gate.write_text("")  # the held steps go on; the dead node's tasks are retried elsewhere
        # the dead node's claims waited out would take the fixture's lease TTL (600 s): longer
        # than this wait, at any load
        out, err = driver.communicate(timeout=240)
    finally:
        kill_group(driver)
        ray_cluster.restore()
    assert driver.returncode == 0, err[-4000:]
    check_exactly_once(config)
    # the result counts what the dead node's task committed too (it never returned its counts)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["items"] == 1500, result


def test_driver_sigkilled_then_the_same_call_resumes(ray_cluster, tmp_path):
    ray_cluster.restore()
    gate = tmp_path / "gate"  # each shard (75 inputs) holds after its first 30 until it exists
    config = ray_config(str(tmp_path / "out"), 900, sleep=0.01, gate=str(gate), gate_period=75, gate_after=30)
    driver = start_driver(ray_cluster, config)
    try:
        assert wait_for(lambda: driver.poll() is not None or committed_records(config["output_dir"]) >= 3, 300)
        assert driver.poll() is None, driver.communicate()[1][-4000:]
    finally:
        kill_group(driver, signal.SIGKILL)
        driver.communicate()
    gate.write_text("")
    # the killed job's claims waited out would take the fixture's lease TTL (600 s): longer than
    # this run may take, at any load
    code, out, err = run_driver(ray_cluster, config, timeout=240)
    assert code == 0, err[-4000:]
    assert json.loads(out.strip().splitlines()[-1])["resumed"] is True
    check_exactly_once(config)


def test_ray_run_on_s3(ray_cluster, s3_url, s3_storage_options):
    ray_cluster.restore()
    config = ray_config(s3_url, 300, extra={"executor": "ray"})
    config["storage_options"] = s3_storage_options
    code, _, err = run_driver(ray_cluster, config)
    assert code == 0, err[-4000:]
    check_exactly_once(config, s3_storage_options)
    assert len(hosts_of(s3_url, s3_storage_options)) == 3


def test_a_retried_task_that_had_finished_writes_nothing_again(ray_cluster, tmp_path):
    """Ray may run a finished task again (its result was lost with its node): the share task,
    run twice over the same shards, commits them once; after publishing it returns at once."""
    import ray

    from shardwright.cluster.ray import ShareCall, remote_share_task
    from shardwright.engine.identity import fn_identity
    from shardwright.engine.inputs import run_inputs
    from shardwright.engine.opening import make_request, open_output, open_run
    from shardwright.engine.options import OptimizeOptions
    from shardwright.protocol.publish import publish_if_complete

    ray_cluster.restore()
    if not ray.is_initialized():
        ray.init(address=ray_cluster.address)

    def fn(i: int) -> dict:  # a closure: Ray pickles it by value (this test module is not importable there)
        return {"i": i}

    inputs = run_inputs(list(range(40)))
    options = OptimizeOptions.validate(fn, chunk_size=5, num_workers=1, num_shards=4, verbose=False)
    storage = open_output(str(tmp_path / "out"), options)
    manifest, _ = open_run(storage, make_request(fn_identity(fn), inputs, options))
    task = remote_share_task(ray).options(num_cpus=1)
    call = ShareCall(storage.url, options, manifest, 1, None, 0)
    first = ray.get(task.remote(fn, inputs, call, [0, 1, 2, 3]))
    again = ray.get(task.remote(fn, inputs, call, [0, 1, 2, 3]))
    assert first["items"] == 40 and again["items"] == 0
    published, missing = publish_if_complete(storage, manifest, {})
    assert published and not missing
    assert ray.get(task.remote(fn, inputs, call, [0, 1, 2, 3])) == {}, "after publishing: nothing to do"
    from shardwright import StreamingDataset

    assert [item["i"] for item in StreamingDataset(str(tmp_path / "out"))] == list(inputs.values)


def test_a_source_is_planned_by_range_and_read_by_the_tasks(ray_cluster, tmp_path):
    """A parquet source goes to the tasks as a description (files and row counts), not its
    rows; each task reads its shards' row groups. Driven from this process (ray.init)."""
    import pickle

    import pyarrow as pa
    import pyarrow.parquet as pq
    import ray

    from shardwright import StreamingDataset, optimize, sources

    ray_cluster.restore()
    if not ray.is_initialized():
        ray.init(address=ray_cluster.address)
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in range(3):
        first = f * 400
        table = pa.table({"id": list(range(first, first + 400)), "text": ["x" * 200] * 400})
        pq.write_table(table, str(raw / f"part-{f}.parquet"), row_group_size=50)
    source = sources.parquet(raw)
    assert len(pickle.dumps(source)) < 20_000, "the source must travel as a description, not its rows"

    hosts = tmp_path / "hosts"  # one file per node whose task has started a row
    hosts.mkdir()
    hosts_dir = str(hosts)

    def fn(row):  # a closure: Ray pickles it by value
        import hashlib
        import os
        import time

        from shardwright.process import host_identity

        # Every row waits until the three nodes' tasks have each started one: the tasks that
        # start first cannot finish every shard before the last node's task has started, at
        # any load (an event, not a per-row delay). 300 s only stops a hang.
        host = host_identity()
        open(os.path.join(hosts_dir, hashlib.sha256(host.encode()).hexdigest()[:16]), "w").close()
        give_up = time.monotonic() + 300
        while len(os.listdir(hosts_dir)) < 3 and time.monotonic() < give_up:
            time.sleep(0.05)
        return {"id": row["id"], "host": host}

    out = tmp_path / "out"
    result = optimize(fn, source, out, executor="ray", shared_output=True, num_workers=1, chunk_size=20, verbose=False)
    assert result.published and result.items == 1200
    items = list(StreamingDataset(str(out)))
    assert [item["id"] for item in items] == list(range(1200))
    assert len({item["host"] for item in items}) == 3


def test_a_task_that_could_never_start_is_refused_before_writing(ray_cluster, tmp_path):
    ray_cluster.restore()
    config = ray_config(
        str(tmp_path / "out"), 20, extra={"executor": "ray", "shared_output": True, "ray_remote_args": {"num_cpus": 8}}
    )
    code, _, err = run_driver(ray_cluster, config)
    assert code != 0 and "could never start" in err, err[-3000:]
    assert not (tmp_path / "out" / ".shardwright" / "manifest.json").exists()


def _ray_threads() -> list[str]:
    import threading

    return sorted(t.name for t in threading.enumerate() if t.name.startswith(("ray_", "PythonGCThread")))


def _square(i: int) -> int:
    return i * i


def test_a_connection_optimize_opened_is_closed_and_a_fork_afterwards_works(ray_cluster, tmp_path, monkeypatch):
    """optimize(executor="ray") connects through RAY_ADDRESS and disconnects when it returns:
    no Ray driver thread is left in the caller's process, so forking there (a DataLoader's
    workers, a process pool) cannot hang on a lock one held. A connection the caller opened
    stays open."""
    import ray

    from shardwright import optimize

    ray_cluster.restore()
    ray.shutdown()
    monkeypatch.setenv("RAY_ADDRESS", ray_cluster.address)

    def fn(i: int) -> dict:  # a closure: Ray pickles it by value
        return {"i": i}

    result = optimize(fn, list(range(30)), str(tmp_path / "a"), executor="ray", shared_output=True, num_workers=1)
    assert result.published and result.items == 30
    assert not ray.is_initialized() and _ray_threads() == [], _ray_threads()
    assert fork_pool_map(_square, list(range(8)), 2, timeout=60) == [i * i for i in range(8)]

    ray.init(address=ray_cluster.address)
    result = optimize(fn, list(range(30)), str(tmp_path / "b"), executor="ray", shared_output=True, num_workers=1)
    assert result.published and ray.is_initialized(), "the caller's own connection stays open"
