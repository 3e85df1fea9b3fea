"""The same dataset whatever the executor (issue 35): the same inputs and fn written locally on
one worker, through a real 3-node Ray cluster, and through a 3-task Slurm array over three
emulated nodes -- each cleanly and after its driver (Ray) or every task (Slurm) was SIGKILLed
three times mid-run and the same call run again -- give the same digest, the same bytes in
every file, the same file names and the same index.json (but its timestamp).

Kept to seconds in CI: 3,000 inputs (about 6,000 items, 16 shards of the default cut, 128
chunks). The issue's 200k inputs: SHARDWRIGHT_DIGEST_INPUTS=200000 (minutes per executor and
kill schedule, too long for CI).

The kills are SIGKILLs, and graceful stops: SIGTERM and Ctrl-C (SIGINT) to the Ray driver, a
plain ``scancel`` of the Slurm array (SIGTERM, as preemption sends), ``scontrol requeue`` of it (SIGTERM, then Slurm runs each task again),
and Kubernetes pods (local processes with the environment of an Indexed Job's pods) one
deleted (SIGTERM) and one lost (SIGKILL), each restarted with its index. A graceful stop keeps each worker's chunk in progress as a pending tail that the resume
reopens, so the chunks after it are cut where a run never stopped cuts them (docs/design.md,
"The same bytes after a stop")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shardwright.cluster import slurm as sw_slurm
from shardwright.protocol.status import read_status
from shardwright.storage import open_storage
from support.crash_child import calls_per_input
from support.digests import every_file
from support.helpers import (
    CHILD,
    assert_exactly_once,
    committed_records,
    finish,
    kill_group,
    start_child,
    wait_for,
)
from support.ray_fixtures import start_driver

pytestmark = pytest.mark.slow

SRC = Path(__file__).resolve().parents[2] / "src"
# the 200k inputs: SHARDWRIGHT_DIGEST_INPUTS=200000 (minutes per executor, not in CI)
INPUTS = int(os.environ.get("SHARDWRIGHT_DIGEST_INPUTS", "3000"))
BASE = {"kind": "generator", "n": INPUTS, "chunk_size": 50}  # the default num_shards: from the inputs
SLEEP = 0.001 if INPUTS <= 10_000 else 0.0  # a few seconds of work, so the kills land mid-run
KILLS = 3


def local_reference(tmp_path: Path) -> tuple[dict, dict]:
    config = {**BASE, "num_workers": 1, "output_dir": str(tmp_path / "local")}
    finish(config)
    assert_exactly_once(config)
    return same_as(config)


def same_as(config: dict) -> tuple[dict, dict]:
    """What must be equal: every file's name and sha256, and index.json (but its timestamp).
    Chunk names come from their content (protocol 6), so they are compared as they are."""
    return every_file(Path(config["output_dir"]))


def kill_rounds(start, stop, output_dir: str) -> int:
    """Start a run, SIGKILL it once it committed something new (an event, not a delay), ``KILLS``
    times; returns the kills that landed (a round whose run finished first lands none)."""
    landed = 0
    for _ in range(KILLS):
        before = committed_records(output_dir)
        running = start()
        assert wait_for(lambda: running.finished() or committed_records(output_dir) > before, 120)  # noqa: B023
        landed += stop(running)
    return landed


# --- Ray -----------------------------------------------------------------------------------------


class RayDriver:
    def __init__(self, ray_cluster, config: dict):
        self.proc = start_driver(ray_cluster, config)

    def finished(self) -> bool:
        return self.proc.poll() is not None

    def kill(self) -> int:
        landed = int(self.proc.poll() is None)
        kill_group(self.proc)  # the driver and its process group: Ray ends the job's tasks
        self.proc.communicate()
        return landed

    def stop(self, signum: int) -> int:
        """``signum`` to the driver alone (a Ctrl-C, a SIGTERM of the process that called
        optimize): it must stop its tasks gracefully, so each keeps its chunk in progress as
        a pending tail, then exit."""
        landed = int(self.proc.poll() is None)
        self.proc.send_signal(signum)
        try:
            _out, err = self.proc.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the Ray driver did not stop in 150 s after signal {signum}") from None
        # 143 for SIGTERM, as a local run; Ctrl-C ends the process by SIGINT once it is handled
        assert not landed or self.proc.returncode in (128 + signum, -signum), (self.proc.returncode, err[-2000:])
        return landed

    def wait(self, timeout: float = 150) -> None:
        try:
            _out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the Ray driver did not finish in {timeout} s") from None
        assert self.proc.returncode == 0, err[-4000:]


def ray_config(output_dir: Path) -> dict:
    # one worker process per Ray task: each node of the fixture has one CPU
    return {
        **BASE,
        "num_workers": 1,
        "output_dir": str(output_dir),
        "extra": {"executor": "ray", "shared_output": True},
    }


@pytest.mark.ray
def test_ray_clean_and_killed_runs_equal_the_local_dataset(ray_cluster, tmp_path):
    ray_cluster.restore()
    reference = local_reference(tmp_path)
    clean = ray_config(tmp_path / "ray")
    RayDriver(ray_cluster, clean).wait()
    killed = {**ray_config(tmp_path / "ray-killed"), "sleep": SLEEP}
    landed = kill_rounds(lambda: RayDriver(ray_cluster, killed), RayDriver.kill, killed["output_dir"])
    assert landed >= 1, "no kill landed mid-run"
    RayDriver(ray_cluster, killed).wait()
    for config in (clean, killed):
        assert_exactly_once(config)
        assert same_as(config) == reference, config["output_dir"]


# --- Slurm ---------------------------------------------------------------------------------------


class SlurmArray:
    """One submission of the run: a 3-task array, each task running the same optimize() call
    (its node identity read from SLURM_ARRAY_*), two worker processes per task."""

    def __init__(self, cluster, config: dict, logs: Path, requeue: bool = False):
        self.cluster = cluster
        script = sw_slurm.write_sbatch_script(
            [sys.executable, CHILD, json.dumps(config)], 3, log_dir=str(logs), chdir=str(logs.parent), requeue=requeue
        )
        env = cluster.env
        env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
        self.job = sw_slurm.submit(script, env=env)
        self.logs = logs

    def finished(self) -> bool:
        states = self.cluster.job_states(self.job)
        return bool(states) and all(s.finished for s in states.values())

    def kill(self) -> int:
        landed = int(not self.finished())
        # SIGKILL to each task's batch process (the exec'ed Python); its workers die with it
        # (PR_SET_PDEATHSIG). Not a plain scancel: that is SIGTERM, a graceful stop, which
        # commits the chunk in progress and so cuts the later chunks elsewhere (docs/design.md)
        self.cluster.cancel(self.job, "--batch", "--signal=KILL")
        self.cluster.wait_job(self.job, timeout=60)
        return landed

    def scancel(self) -> int:
        """A plain ``scancel``: SIGTERM to every task (what requeue and preemption send too),
        a graceful stop; Slurm SIGKILLs what still runs KillWait (5 s here) later."""
        landed = int(not self.finished())
        self.cluster.cancel(self.job)
        self.cluster.wait_job(self.job, timeout=60)
        return landed

    def wait(self) -> None:
        tasks = self.cluster.wait_job(self.job, timeout=120)
        bad = {t: (s.state, s.exit_code) for t, s in tasks.items() if s.state != "COMPLETED" or s.exit_code != 0}
        logs = "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(self.logs.glob("*.log")))
        assert not bad, f"tasks did not all complete: {bad}\n{logs}"


@pytest.mark.slurm
def test_slurm_array_clean_and_killed_runs_equal_the_local_dataset(slurm_cluster, tmp_path):
    reference = local_reference(tmp_path)
    clean = {**BASE, "num_workers": 2, "output_dir": str(tmp_path / "slurm")}
    SlurmArray(slurm_cluster, clean, tmp_path / "logs-clean").wait()
    killed = {**BASE, "num_workers": 2, "sleep": SLEEP, "output_dir": str(tmp_path / "slurm-killed")}
    logs = tmp_path / "logs-killed"
    landed = kill_rounds(lambda: SlurmArray(slurm_cluster, killed, logs), SlurmArray.kill, killed["output_dir"])
    assert landed >= 1, "no kill landed mid-run"
    SlurmArray(slurm_cluster, killed, logs).wait()
    for config in (clean, killed):
        assert_exactly_once(config)
        assert same_as(config) == reference, config["output_dir"]


@pytest.mark.slurm
def test_slurm_array_scancelled_runs_equal_the_local_dataset(slurm_cluster, tmp_path):
    """Three plain scancels (graceful stops) used to give 140 chunks where a clean run has 128:
    each task committed its chunks in progress partly filled. Now they are pending tails."""
    reference = local_reference(tmp_path)
    stopped = {**BASE, "num_workers": 2, "sleep": SLEEP, "output_dir": str(tmp_path / "slurm-stopped")}
    stopped["calls"] = str(tmp_path / "calls")
    logs = tmp_path / "logs-stopped"
    landed = kill_rounds(lambda: SlurmArray(slurm_cluster, stopped, logs), SlurmArray.scancel, stopped["output_dir"])
    assert landed >= 1, "no scancel landed mid-run"
    SlurmArray(slurm_cluster, stopped, logs).wait()
    assert_exactly_once(stopped)
    assert same_as(stopped) == reference
    calls = calls_per_input(stopped["calls"])
    assert sorted(calls) == list(range(INPUTS)), "fn never ran on some inputs"
    again = [i for i, n in calls.items() if n > 1]
    # only a generator stopped between two of its outputs is called again (it skips those kept)
    assert len(again) <= KILLS * 3 * 2, again


@pytest.mark.slurm
def test_slurm_array_requeued_mid_run_equals_the_local_dataset(slurm_cluster, tmp_path):
    """``scontrol requeue`` of the whole array once it committed something: every running task
    gets SIGTERM (a graceful stop, its chunks in progress kept as pending tails), Slurm runs it
    again with SLURM_RESTART_COUNT=1, and the dataset equals the one written locally."""
    reference = local_reference(tmp_path)
    config = {**BASE, "num_workers": 2, "sleep": SLEEP, "output_dir": str(tmp_path / "slurm-requeued")}
    array = SlurmArray(slurm_cluster, config, tmp_path / "logs-requeued", requeue=True)
    assert wait_for(lambda: array.finished() or committed_records(config["output_dir"]) > 0, 120)
    assert not array.finished(), "the array finished before its requeue"
    slurm_cluster.requeue(array.job)
    tasks = slurm_cluster.wait_job(array.job, timeout=180)  # a requeued task reruns after cred_expire (~11 s)
    assert all(t.state == "COMPLETED" and t.exit_code == 0 for t in tasks.values()), tasks
    assert any(t.restarts >= 1 for t in tasks.values()), f"no task was requeued: {tasks}"
    assert_exactly_once(config)
    assert same_as(config) == reference


# --- Kubernetes without a cluster ----------------------------------------------------------------

PODS = 3


def pod_env(index: int) -> dict:
    """What an Indexed Job's pod gets (see tests/system/test_k8s_pods.py): its index, and from
    the generated manifest the pod count and the job's name; a long TTL, so that a restarted
    pod that waited for it would time out the test instead of passing."""
    return {
        "JOB_COMPLETION_INDEX": str(index),
        "SHARDWRIGHT_NUM_NODES": str(PODS),
        "SHARDWRIGHT_JOB_NAME": "digest",
        "SHARDWRIGHT_LEASE_TTL": "120",
    }


def test_kubernetes_pods_deleted_and_lost_then_restarted_equal_the_local_dataset(tmp_path):
    """Three pods of an Indexed Job write one dataset; once pods 1 and 2 each hold a shard
    (held there by a gate file, so both are certainly mid-run at any load), pod 1 is deleted
    (SIGTERM to its main process, as the kubelet sends: a graceful stop) and pod 2 is lost
    (SIGKILL); both are restarted with their index, as the Job controller does. The dataset
    equals the one written locally on one worker: every file's name and bytes, the digest."""
    reference = local_reference(tmp_path)
    gate = tmp_path / "gate"
    config = {
        **BASE,
        "num_workers": 1,
        "sleep": SLEEP,  # pod 1 sees its stop a few inputs after the gate opens, mid-chunk
        "output_dir": str(tmp_path / "pods"),
        "extra": {"shared_output": True},
        "gate": str(gate),
        "gate_period": 100,
        "gate_after": 40,  # inputs 40-99, 140-199, ... wait for the gate
    }
    storage = open_storage(config["output_dir"])
    pods = {i: start_child(config, **pod_env(i)) for i in range(PODS)}

    def writing(index: int) -> bool:
        return any(
            lease.shard is not None and lease.host == f"k8s:digest/{index}" for lease in read_status(storage).leases
        )

    try:
        assert wait_for(lambda: committed_records(config["output_dir"]) >= 1 and writing(1) and writing(2), 120), (
            "pods 1 and 2 never both held a shard while the run went on"
        )
        kill_group(pods[2], signal.SIGKILL)  # a node lost
        pods[2].communicate()
        os.kill(pods[1].pid, signal.SIGTERM)  # a pod deleted: the kubelet's SIGTERM to its main process
        gate.write_text("")  # the held pods go on; pod 1 stops at its next input
        _, err = pods[1].communicate(timeout=120)
        assert pods[1].returncode == 143, err[-3000:]
        for index in (1, 2):
            pods[index] = start_child(config, **pod_env(index))  # the Job controller's replacements
        for index, pod in pods.items():
            _, err = pod.communicate(timeout=110)  # < the 120 s TTL: a takeover must not wait for it
            assert pod.returncode == 0, f"pod {index}: {err[-3000:]}"
    finally:
        for pod in pods.values():
            kill_group(pod)
    assert_exactly_once(config)
    assert same_as(config) == reference


@pytest.mark.ray
def test_ray_driver_stopped_by_signals_keeps_tails_and_equals_the_local_dataset(ray_cluster, tmp_path):
    """SIGTERM, then Ctrl-C (SIGINT), then SIGTERM to the Ray driver once a record is committed:
    its tasks stop gracefully and keep their chunks in progress as pending tails (status counts
    them, and names the signal that stopped the run), and the rerun gives the local run's files,
    bytes and digest, exactly once."""
    ray_cluster.restore()
    reference = local_reference(tmp_path)
    config = {**ray_config(tmp_path / "ray-stopped"), "sleep": SLEEP}
    out = config["output_dir"]
    signals = iter([signal.SIGTERM, signal.SIGINT, signal.SIGTERM])
    tails: list[int] = []

    def stop(driver: RayDriver) -> int:
        signum = next(signals)
        landed = driver.stop(signum)
        if landed:
            report = read_status(open_storage(out))
            assert (report.state, report.stop_reason) == ("interrupted", f"interrupted ({signum.name})")
            assert report.last_attempt is not None and report.last_attempt.inputs_done_after == report.inputs_done
            tails.append(report.inputs_in_tails)
        return landed

    landed = kill_rounds(lambda: RayDriver(ray_cluster, config), stop, out)
    assert landed >= 1, "no stop landed mid-run"
    # a force-killed task keeps no tail: some stopped shard's chunk in progress must be in one
    assert max(tails) > 0, f"no pending tail was kept by {landed} graceful stops: {tails}"
    RayDriver(ray_cluster, config).wait()
    assert_exactly_once(config)
    assert same_as(config) == reference
