"""The Slurm test infrastructure itself works: arrays spread, requeue and node loss rerun tasks."""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.slurm


def _lines(path):
    return path.read_text().splitlines() if path.exists() else []


def test_array_spreads_over_nodes_and_completes(slurm_cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    job = slurm_cluster.sbatch(
        f'echo "$SLURM_ARRAY_TASK_ID $SLURMD_NODENAME" > {out}/task_$SLURM_ARRAY_TASK_ID.txt\nsleep 1\n',
        "--array=0-3",
        "-o",
        f"{out}/slurm-%A_%a.log",
    )
    tasks = slurm_cluster.wait_job(job, timeout=60)
    assert sorted(tasks) == [0, 1, 2, 3]
    assert all(t.state == "COMPLETED" and t.exit_code == 0 for t in tasks.values()), tasks
    nodes = {}
    for i in range(4):
        tid, node = (out / f"task_{i}.txt").read_text().split()
        assert tid == str(i)
        nodes[i] = node
    assert set(nodes.values()) <= {"n1", "n2", "n3"}
    assert len(set(nodes.values())) >= 2, nodes
    assert {t.nodes for t in tasks.values()} == set(nodes.values())


def test_failed_task_exit_code_is_reported(slurm_cluster):
    job = slurm_cluster.sbatch('if [ "$SLURM_ARRAY_TASK_ID" = 1 ]; then exit 3; fi\n', "--array=0-1", "-o", "/dev/null")
    tasks = slurm_cluster.wait_job(job, timeout=60)
    assert tasks[0].state == "COMPLETED" and tasks[0].exit_code == 0
    assert tasks[1].state == "FAILED" and tasks[1].exit_code == 3


@pytest.mark.slow
def test_requeue_and_node_loss_rerun_tasks(slurm_cluster, tmp_path):
    """`scontrol requeue` and a node going DOWN both rerun the task with SLURM_RESTART_COUNT=1."""
    log = tmp_path / "log"
    log.mkdir()
    script = f"""
echo "start node=$SLURMD_NODENAME restart=${{SLURM_RESTART_COUNT:-0}}" >> {log}/$SLURM_ARRAY_TASK_ID.txt
# the first run ends only by being killed: exec, so that a kill of the sleep that reaches it
# before the script's own SIGTERM cannot let the script go on to print "done" (seen at load 12)
if [ "${{SLURM_RESTART_COUNT:-0}}" = 0 ]; then exec sleep 600; fi
echo "done node=$SLURMD_NODENAME" >> {log}/$SLURM_ARRAY_TASK_ID.txt
"""
    # -c 2: one task fills a node, so the two tasks are on different nodes.
    job = slurm_cluster.sbatch(script, "--array=0-1", "-c", "2", "-o", "/dev/null")
    first = {t: slurm_cluster.wait_state(f"{job}_{t}", ["RUNNING"], timeout=60) for t in (0, 1)}
    deadline = time.monotonic() + 120  # the event: both first runs have started (any load)
    while not all(_lines(log / f"{t}.txt") for t in (0, 1)):
        assert time.monotonic() < deadline, "the array's tasks never started"
        time.sleep(0.1)
    lost_node = first[1].nodes
    assert first[0].nodes != lost_node
    try:
        slurm_cluster.requeue(f"{job}_0")
        slurm_cluster.set_node_state(lost_node, "DOWN", reason="node-loss test")
        tasks = slurm_cluster.wait_job(job, timeout=90)
    finally:
        slurm_cluster.set_node_state(lost_node, "RESUME")
        slurm_cluster.wait_ready(30)
    assert all(t.state == "COMPLETED" and t.restarts == 1 for t in tasks.values()), tasks
    assert tasks[1].nodes != lost_node
    for t in (0, 1):
        lines = _lines(log / f"{t}.txt")
        assert lines[0].endswith("restart=0")
        assert lines[1].endswith("restart=1")
        assert lines[-1].startswith("done")
