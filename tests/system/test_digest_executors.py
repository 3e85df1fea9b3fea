"""The same dataset whatever the executor (issue 35): the same inputs and fn written locally on
one worker, through a real 3-node Ray cluster, and through a 3-task Slurm array over three
emulated nodes -- each cleanly and after its driver (Ray) or every task (Slurm) was SIGKILLed
three times mid-run and the same call run again -- give the same digest, the same bytes in
every file, the same file names and the same index.json (but its timestamp).

Kept to seconds in CI: 3,000 inputs (about 6,000 items, 16 shards of the default cut, 128
chunks). The issue's 200k inputs: SHARDWRIGHT_DIGEST_INPUTS=200000 (minutes per executor and
kill schedule, too long for CI).

The kills are SIGKILLs. A graceful stop (SIGTERM: plain ``scancel``, requeue, preemption;
Ctrl-C) commits each worker's chunk in progress, partly filled, so the chunks after it are cut
elsewhere: the items and their order are the same, the chunk bytes and digest are not
(docs/design.md, "The same bytes after a stop")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardwright.cluster import slurm as sw_slurm
from support.digests import every_file
from support.helpers import CHILD, assert_exactly_once, committed_records, finish, kill_group, wait_for
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

    def __init__(self, cluster, config: dict, logs: Path):
        self.cluster = cluster
        script = sw_slurm.write_sbatch_script(
            [sys.executable, CHILD, json.dumps(config)], 3, log_dir=str(logs), chdir=str(logs.parent), requeue=False
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
