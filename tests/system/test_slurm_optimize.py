"""optimize() over a real Slurm job array (tests/support/slurm_cluster.py, three emulated nodes).

Every array task runs tests/support/slurm_job.py, which calls optimize() without a node identity:
the engine reads SLURM_ARRAY_* (or the DATA_OPTIMIZER_* the generated script exports) itself.
The scripts are written by ``shardwright slurm`` / :func:`shardwright.cluster.slurm.write_sbatch_script`.

Checked each time: the dataset read back with shardwright.StreamingDataset holds every input
exactly once, in input order (or with retried inputs appended), index.json was written by
exactly one process (tests/support/slurm_job.py logs each ``protocol.publish.publish`` call), and no
orphan chunk or run state is left behind.

The tests without the ``slurm_cluster`` fixture (node identity, script text) need no Slurm.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardwright.cluster import slurm as sw_slurm
from shardwright.engine.planning import node_identity
from shardwright.errors import ShardwrightError
from shardwright.protocol.layout import FAILED_PREFIX, MANIFEST_KEY, RUN_RECORD_KEY, SHARDS_PREFIX
from shardwright.protocol.shards import shard_bounds, shards_of_node
from support import slurm_job

HERE = Path(__file__).resolve().parents[1]  # tests/
JOB = HERE / "support" / "slurm_job.py"
SRC = HERE.parent / "src"
RUNNING = ("RUNNING",)

slurm = pytest.mark.slurm


# --- helpers -------------------------------------------------------------------------------------


class Run:
    """Paths of one test's run: output dir, per-process reports, Slurm logs."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path
        self.out = tmp_path / "out"
        self.reports = tmp_path / "reports"
        self.logs = tmp_path / "logs"
        self.logs.mkdir()

    def command(self, inputs: int, **options) -> list[str]:
        cmd = [sys.executable, str(JOB), str(self.out), "--inputs", str(inputs), "--report-dir", str(self.reports)]
        for key, value in options.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        return cmd

    def script(self, command: list[str], array: int, **options) -> str:
        options.setdefault("log_dir", str(self.logs))
        options.setdefault("chdir", str(self.root))
        return sw_slurm.write_sbatch_script(command, array, **options)

    def task_reports(self) -> list[dict]:
        if not self.reports.exists():
            return []
        return [json.loads(p.read_text()) for p in sorted(self.reports.glob("task*.json"))]

    def publishes(self) -> list[dict]:
        path = self.reports / "publish.log"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def explain(self, cluster=None) -> str:
        parts = []
        for log in sorted(self.logs.glob("*.log")):
            text = log.read_text(errors="replace")
            parts.append(f"--- {log.name}\n{_strip_bars(text)[-3000:]}")
        for report in self.task_reports():
            brief = {k: v for k, v in report.items() if k != "traceback"}
            parts.append(f"--- report {json.dumps(brief, default=str)[:1500]}")
        if cluster is not None:
            parts.append(cluster.squeue())
        return "\n".join(parts)


def _strip_bars(text: str) -> str:
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.splitlines())


def cli_env(cluster) -> dict:
    env = cluster.env
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def shardwright_cli(cluster, *args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", *args],
        env=cli_env(cluster),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def wait_all_completed(cluster, job: str, run: Run, timeout: float = 60) -> dict:
    try:
        tasks = cluster.wait_job(job, timeout=timeout)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{run.explain(cluster)}") from None
    bad = {t: (s.state, s.exit_code) for t, s in tasks.items() if s.state != "COMPLETED" or s.exit_code != 0}
    assert not bad, f"tasks did not all complete: {bad}\n{run.explain()}"
    return tasks


def wait_for(predicate, timeout: float, what: str, run: Run | None = None, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{run.explain() if run else ''}")


def read_inputs(out: Path) -> list[int]:
    from shardwright import StreamingDataset

    return [int(item["i"]) for item in StreamingDataset(str(out))]


def assert_dataset(run: Run, expected: list[int], publishes: int = 1) -> None:
    """Exactly ``expected`` in order, published ``publishes`` times in all, nothing left over."""
    out = run.out
    assert (out / "index.json").exists(), f"not published\n{run.explain()}"
    got = read_inputs(out)
    assert len(got) == len(expected), f"{len(got)} items, expected {len(expected)}\n{run.explain()}"
    assert got == expected, f"items differ from the expected order\n{run.explain()}"
    index = json.loads((out / "index.json").read_text())
    names = [c["filename"] for c in index["chunks"]]
    assert len(names) == len(set(names)), "a chunk is listed twice in index.json"
    assert sorted(p.name for p in out.glob("chunk-*.bin")) == sorted(names), "orphan or missing chunk files"
    assert not (out / MANIFEST_KEY).exists()
    assert not (out / SHARDS_PREFIX).exists()
    assert len(run.publishes()) == publishes, f"index.json written {len(run.publishes())} times: {run.publishes()}"


def committed_inputs(out: Path, rank: int, count: int) -> int:
    """Inputs committed so far by node ``rank``, read with the engine's own record reader
    (0 while there is no run yet, or if a read races a write)."""
    try:
        return slurm_job.committed_inputs(str(out), rank, count)
    except Exception:
        return 0


def share(inputs: int, shards: int, rank: int, count: int) -> int:
    return sum(b - a for a, b in (shard_bounds(inputs, shards, s) for s in shards_of_node(shards, rank, count)))


def shard_of(i: int, inputs: int, shards: int) -> int:
    return next(
        s for s in range(shards) if shard_bounds(inputs, shards, s)[0] <= i < shard_bounds(inputs, shards, s)[1]
    )


def failed_ids(run_record: dict) -> list[int]:
    """run.json's failed inputs: ids, or [id, outputs already committed] pairs."""
    return sorted(p[0] if isinstance(p, (list, tuple)) else p for p in run_record["failed_inputs"])


def by_task(reports: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in sorted(reports, key=lambda r: (str(r["task"]), r["restart"], r["start"])):
        out.setdefault(str(r["task"]), []).append(r)
    return out


# --- the engine reads the array ---------------------------------------------------------------------


@slurm
def test_four_tasks_over_three_nodes_write_every_input_exactly_once(slurm_cluster, tmp_path):
    run = Run(tmp_path)
    inputs = 240
    script = run.script(run.command(inputs, sleep=0.02, chunk_size=4), 4, job_name="sw-basic")
    assert "#SBATCH --array=0-3\n" in script and "\nexec " in script
    job = sw_slurm.submit(script, env=slurm_cluster.env)
    tasks = wait_all_completed(slurm_cluster, job, run)

    assert sorted(tasks) == [0, 1, 2, 3]
    assert len({t.nodes for t in tasks.values()}) >= 2, f"the array did not spread: {tasks}"
    assert_dataset(run, list(range(inputs)))
    reports = run.task_reports()
    assert sorted((r["rank"], r["count"]) for r in reports) == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert all(r["source"] == "the Slurm job array" and r["ok"] for r in reports)
    assert all(r["items"] == share(inputs, 64, r["rank"], 4) for r in reports), reports
    assert sum(r["published"] for r in reports) >= 1
    record = json.loads((run.out / RUN_RECORD_KEY).read_text())
    assert record["items"] == inputs and failed_ids(record) == []


@slurm
def test_requeued_task_and_lost_node_resume_and_the_dataset_is_exact(slurm_cluster, tmp_path):
    """`scontrol requeue` of task 0 and node DOWN under task 1 once both committed some chunks."""
    run = Run(tmp_path)
    inputs, shards, nodes = 240, 64, 4
    # -c 2: one task per emulated node (2 CPUs each), so tasks 0 and 1 are on different nodes.
    script = run.script(run.command(inputs, sleep=0.1, chunk_size=2), nodes, cpus_per_task=2, job_name="sw-requeue")
    job = sw_slurm.submit(script, env=slurm_cluster.env)
    first = {t: slurm_cluster.wait_state(f"{job}_{t}", RUNNING, timeout=30) for t in (0, 1)}
    assert first[0].nodes != first[1].nodes
    wait_for(
        lambda: committed_inputs(run.out, 0, nodes) >= 6 and committed_inputs(run.out, 1, nodes) >= 4,
        30,
        "tasks 0 and 1 to commit some chunks",
        run,
    )
    lost = first[1].nodes
    slurm_cluster.requeue(f"{job}_0")
    slurm_cluster.set_node_state(lost, "DOWN", reason="node-loss test")
    try:

        def task1_off_the_node() -> bool:
            state = slurm_cluster.job_states(f"{job}_1").get(1)
            return state is not None and (state.state != "RUNNING" or state.restarts >= 1)

        wait_for(task1_off_the_node, 30, "task 1 to be killed by the node loss", run)
    finally:
        slurm_cluster.set_node_state(lost, "RESUME")
    slurm_cluster.wait_ready(30)
    tasks = wait_all_completed(slurm_cluster, job, run, timeout=90)

    assert tasks[0].restarts == 1 and tasks[1].restarts == 1, tasks
    assert_dataset(run, list(range(inputs)))
    reports = by_task(run.task_reports())
    for task in ("0", "1"):
        final = [r for r in reports[task] if r["restart"] == 1]
        assert len(final) == 1 and final[0]["ok"], reports[task]
        final = final[0]
        mine = share(inputs, shards, int(task), nodes)
        # it resumed: started with committed work and wrote only the rest, nothing twice
        assert 0 < final["committed_before"] < mine, final
        assert final["items"] == mine - final["committed_before"], final
    first_attempt = [r for r in reports["0"] if r["restart"] == 0]
    assert first_attempt and first_attempt[0]["error"] == "SystemExit", first_attempt  # SIGTERM: clean stop
    log = _strip_bars((run.logs / f"sw-requeue-{job}_0.log").read_text())
    assert "Interrupted:" in log and "restart 1" in log, log[-2000:]


@slurm
def test_two_tasks_over_eight_logical_shards_and_array_min_offset(slurm_cluster, tmp_path):
    """--array=5-6: SLURM_ARRAY_TASK_MIN=5 makes the tasks nodes 0 and 1 of 2."""
    run = Run(tmp_path)
    inputs = 80
    script = run.script(run.command(inputs, sleep=0.02, chunk_size=3, num_shards=8), 2, job_name="sw-8shards")
    job = sw_slurm.submit(script, args=["--array=5-6"], env=slurm_cluster.env)
    wait_all_completed(slurm_cluster, job, run)

    assert_dataset(run, list(range(inputs)))
    reports = run.task_reports()
    assert sorted((int(r["task"]), r["rank"], r["count"]) for r in reports) == [(5, 0, 2), (6, 1, 2)]
    assert all(r["items"] == inputs // 2 for r in reports)  # 4 shards of 10 each
    shards = {int(p.name.split("-")[2]) for p in run.out.glob("chunk-*.bin")}
    assert shards == set(range(8))
    record = json.loads((run.out / RUN_RECORD_KEY).read_text())
    assert record["settings"]["num_shards"] == 8


@slurm
def test_throttled_array_with_the_cli_submit_and_merge_job(slurm_cluster, tmp_path):
    """`shardwright slurm --array 4 --max-concurrent 2 --submit --merge-job`: --array=0-3%2."""
    run = Run(tmp_path)
    inputs = 120
    command = run.command(inputs, sleep=0.05, chunk_size=4)
    result = shardwright_cli(
        slurm_cluster,
        "slurm",
        "--array",
        "4",
        "--max-concurrent",
        "2",
        "--output-dir-for-logs",
        "logs",
        "--job-name",
        "sw-throttle",
        "--chdir",
        str(tmp_path),
        "--script-out",
        str(tmp_path / "job.sh"),
        "--submit",
        "--merge-job",
        "--output-dir",
        str(run.out),
        "--",
        *command,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and lines[0].split()[1:] == ["array", "--array=0-3%2"], result.stdout
    job, merge_job = lines[0].split()[0], lines[1].split()[0]
    assert "#SBATCH --array=0-3%2" in (tmp_path / "job.sh").read_text()
    wait_all_completed(slurm_cluster, job, run)
    merge = slurm_cluster.wait_job(merge_job, timeout=30)[None]
    assert merge.state == "COMPLETED" and merge.exit_code == 0, (merge, run.explain())
    assert "merged:" in (run.logs / f"sw-throttle-merge-{merge_job}.log").read_text()

    assert_dataset(run, list(range(inputs)))
    spans = [(r["start"], r["end"]) for r in run.task_reports()]
    assert len(spans) == 4
    most = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert most <= 2, f"{most} tasks ran at once with %2: {spans}"


@slurm
def test_failed_items_are_recorded_then_retried_by_a_second_submission(slurm_cluster, tmp_path):
    run = Run(tmp_path)
    inputs, shards, nodes = 120, 64, 3
    bad = [5, 17, 33, 60, 61]
    fixed = tmp_path / "fixed"
    command = run.command(
        inputs, sleep=0.01, chunk_size=4, on_error="skip", max_retries=1, fail=",".join(map(str, bad)), fixed_if=fixed
    )
    script = run.script(command, nodes, job_name="sw-retry")
    job = sw_slurm.submit(script, env=slurm_cluster.env)
    wait_all_completed(slurm_cluster, job, run)

    good = [i for i in range(inputs) if i not in bad]
    assert_dataset(run, good)
    assert sum(r["failed"] for r in run.task_reports()) == len(bad)
    failed_dir = run.out / FAILED_PREFIX
    records = sorted((json.loads(p.read_text()) for p in failed_dir.glob("*.json")), key=lambda r: r["input_index"])
    assert [r["input_index"] for r in records] == bad
    for rec in records:
        i = rec["input_index"]
        assert rec["input_repr"] == repr(i)
        assert rec["exception_type"] == "ValueError" and rec["message"] == f"input {i} is bad (test failure)"
        assert "ValueError: input" in rec["traceback"] and "make_sample" in rec["traceback"]
        assert rec["host"] and isinstance(rec["pid"], int) and rec["pid"] > 0
        assert rec["node"] == shard_of(i, inputs, shards) % nodes
        assert rec["attempts"] == 2  # max_retries=1
    record = json.loads((run.out / RUN_RECORD_KEY).read_text())
    assert failed_ids(record) == bad
    status = shardwright_cli(slurm_cluster, "status", str(run.out), "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["failed_records"] == len(bad)

    # the fix, then the same submission again: only the failed inputs run, appended in order
    fixed.touch()
    job2 = sw_slurm.submit(script, env=slurm_cluster.env)
    wait_all_completed(slurm_cluster, job2, run)
    assert_dataset(run, good + bad, publishes=2)
    second = [r for r in run.task_reports() if r["job"] == job2]
    assert sum(r["items"] for r in second) == len(bad) and all(r["failed"] == 0 for r in second)
    assert not list(failed_dir.glob("*.json")), "failure records of inputs that now succeeded remain"
    record = json.loads((run.out / RUN_RECORD_KEY).read_text())
    assert failed_ids(record) == [] and record["mode"] == "retry" and record["items"] == inputs


@slurm
def test_tasks_finishing_at_the_same_moment_publish_once(slurm_cluster, tmp_path):
    """Three tasks wait for each other at the start of publish_if_complete, then race."""
    run = Run(tmp_path)
    inputs = 90
    command = run.command(inputs, chunk_size=1, barrier_dir=tmp_path / "barrier", barrier_count=3)
    job = sw_slurm.submit(run.script(command, 3, job_name="sw-race"), env=slurm_cluster.env)
    wait_all_completed(slurm_cluster, job, run)

    assert_dataset(run, list(range(inputs)))
    assert len(list((tmp_path / "barrier").glob("ready-*"))) == 3
    reports = run.task_reports()
    assert all(r["ok"] and r["pending_shards"] == [] for r in reports), reports


@slurm
def test_a_task_reading_records_while_another_publishes_does_not_fail(slurm_cluster, tmp_path):
    """Node 1 lists the commit records, then (a slow listing, as on S3 with many records) reads
    them only after node 0 published and deleted them. Node 1 must see that the run was
    published, not fail with FileNotFoundError or report corruption."""
    run = Run(tmp_path)
    inputs = 60
    command = run.command(
        inputs, chunk_size=1, barrier_dir=tmp_path / "barrier", barrier_count=2, delay_listing_rank=1, delay_listing=3
    )
    job = sw_slurm.submit(run.script(command, 2, job_name="sw-slowlist"), env=slurm_cluster.env)
    wait_all_completed(slurm_cluster, job, run)
    assert_dataset(run, list(range(inputs)))
    assert [p["rank"] for p in run.publishes()] == [0]


@slurm
def test_a_shard_that_never_finishes_blocks_publishing_until_its_task_is_resubmitted(slurm_cluster, tmp_path):
    run = Run(tmp_path)
    inputs, shards, nodes, bad = 96, 64, 3, 50
    fixed = tmp_path / "fixed"
    command = run.command(inputs, sleep=0.01, chunk_size=1, fail=bad, fixed_if=fixed)  # on_error="raise"
    job = sw_slurm.submit(run.script(command, nodes, job_name="sw-stuck"), env=slurm_cluster.env)
    tasks = slurm_cluster.wait_job(job, timeout=60)
    stuck_shard = shard_of(bad, inputs, shards)
    rank = stuck_shard % nodes
    for t, state in tasks.items():
        expected = ("FAILED", 1) if t == rank else ("COMPLETED", 0)
        assert (state.state, state.exit_code) == expected, (tasks, run.explain())
    failing = next(r for r in run.task_reports() if r["rank"] == rank)
    assert failing["error"] == "FnError" and f"input {bad}" in failing["message"]
    assert not (run.out / "index.json").exists()

    missing = [s for s in shards_of_node(shards, rank, nodes) if s >= stuck_shard]
    merged = shardwright_cli(slurm_cluster, "merge", str(run.out))
    assert merged.returncode == 1, merged
    assert f"{len(missing)} shard(s) are not finished: {missing[:20]}" in merged.stderr, merged.stderr
    status = json.loads(shardwright_cli(slurm_cluster, "status", str(run.out), "--json").stdout)
    # the run is held up by the failed node's fn error: "failed", naming the input (#10)
    assert not status["published"] and status["state"] == "failed"
    assert status["stop_reason"] == f"user error: FnError on input {bad}", status["stop_reason"]
    assert sorted(status["shards_in_progress"] + status["shards_pending"]) == missing

    # fix, then resubmit only that task of the 3-task run
    fixed.touch()
    result = shardwright_cli(
        slurm_cluster,
        "slurm",
        "--array",
        str(nodes),
        "--only",
        str(rank),
        "--output-dir-for-logs",
        "logs",
        "--job-name",
        "sw-stuck-fix",
        "--chdir",
        str(tmp_path),
        "--submit",
        "--",
        *command,
    )
    assert result.returncode == 0, result.stderr
    job2 = result.stdout.split()[0]
    wait_all_completed(slurm_cluster, job2, run)
    assert_dataset(run, list(range(inputs)))
    again = [r for r in run.task_reports() if r["job"] == job2]
    assert len(again) == 1 and again[0]["rank"] == rank and again[0]["count"] == nodes
    assert again[0]["source"] == "litdata's DATA_OPTIMIZER_* variables"
    assert again[0]["committed_before"] > 0 and again[0]["published"]
    merged = shardwright_cli(slurm_cluster, "merge", str(run.out))
    assert merged.returncode == 0 and "merged:" in merged.stdout


@slurm
def test_a_run_split_over_several_submissions(slurm_cluster, tmp_path):
    """More tasks than MaxArraySize: `--max-array-size 2` splits a 4-task run into two arrays
    of 2 (ranks 0-1 and 2-3 via SHARDWRIGHT_RANK_OFFSET); the merge job waits for both."""
    run = Run(tmp_path)
    inputs = 80
    result = shardwright_cli(
        slurm_cluster,
        "slurm",
        "--array",
        "4",
        "--max-array-size",
        "2",
        "--output-dir-for-logs",
        "logs",
        "--job-name",
        "sw-split",
        "--chdir",
        str(tmp_path),
        "--submit",
        "--merge-job",
        "--output-dir",
        str(run.out),
        "--",
        *run.command(inputs, sleep=0.02, chunk_size=4),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and "ranks 0-1 of 4" in lines[0] and "ranks 2-3 of 4" in lines[1], result.stdout
    jobs = [line.split()[0] for line in lines]
    assert f"afterok:{jobs[0]}:{jobs[1]}" in lines[2]
    for job in jobs[:2]:
        wait_all_completed(slurm_cluster, job, run)
    merge = slurm_cluster.wait_job(jobs[2], timeout=30)[None]
    assert merge.state == "COMPLETED" and merge.exit_code == 0, (merge, run.explain())
    assert_dataset(run, list(range(inputs)))
    reports = run.task_reports()
    assert sorted((r["rank"], r["count"]) for r in reports) == [(0, 4), (1, 4), (2, 4), (3, 4)]


@slurm
def test_requeue_before_timeout_requeues_the_task_itself(slurm_cluster, tmp_path):
    """--requeue-before-timeout: Slurm's USR1 (sent here by hand, as --signal=B:USR1@S would
    near the time limit) makes the batch shell requeue its own task, which then resumes."""
    run = Run(tmp_path)
    inputs, nodes = 120, 2
    script = run.script(
        run.command(inputs, sleep=0.1, chunk_size=2),
        nodes,
        time="10:00",
        requeue_before_timeout=60,
        job_name="sw-selfrequeue",
    )
    assert "#SBATCH --signal=B:USR1@60" in script
    job = sw_slurm.submit(script, env=slurm_cluster.env)
    slurm_cluster.wait_state(f"{job}_0", RUNNING, timeout=30)
    wait_for(lambda: committed_inputs(run.out, 0, nodes) >= 6, 30, "task 0 to commit", run)
    slurm_cluster.cancel(f"{job}_0", "-b", "-s", "USR1")
    tasks = wait_all_completed(slurm_cluster, job, run, timeout=90)
    assert tasks[0].restarts == 1 and tasks[1].restarts == 0, tasks
    assert_dataset(run, list(range(inputs)))
    final = [r for r in run.task_reports() if r["task"] == "0" and r["restart"] == 1]
    assert len(final) == 1 and final[0]["committed_before"] > 0
    assert final[0]["items"] == share(inputs, 64, 0, nodes) - final[0]["committed_before"]
    log = (run.logs / f"sw-selfrequeue-{job}_0.log").read_text()
    assert "time limit near: requeueing" in log


@slurm
def test_a_plain_batch_job_runs_the_whole_dataset(slurm_cluster, tmp_path):
    """`sbatch prepare.sh` without an array: the batch shell has SLURM_PROCID=0 but no
    SLURM_NTASKS; that is one node, not an error."""
    run = Run(tmp_path)
    inputs = 40
    job = slurm_cluster.sbatch(
        "exec " + " ".join(run.command(inputs, chunk_size=4)) + "\n", "-o", str(run.logs / "plain-%j.log"), cwd=tmp_path
    )
    wait_all_completed(slurm_cluster, job, run, timeout=60)
    assert_dataset(run, list(range(inputs)))
    assert [r["count"] for r in run.task_reports()] == [1]


def test_a_run_whose_lease_a_requeue_took_over_stops(tmp_path):
    """After a node failure Slurm may requeue a task while the old process still runs (a node
    cut off from the controller but not from the storage). The rerun takes the old lease over
    at once (same array job and task id); the old process must then stop writing within a
    heartbeat or two, not keep computing and committing the same shards until it is done.
    Two local processes with the same Slurm identity stand in for the two attempts."""
    run = Run(tmp_path)
    inputs = 200
    env = dict(
        os.environ,
        SHARDWRIGHT_LEASE_TTL="4",
        SLURM_ARRAY_JOB_ID="4242",
        SLURM_ARRAY_TASK_ID="0",
        SLURM_ARRAY_TASK_COUNT="1",
        SLURM_RESTART_COUNT="0",
        PYTHONPATH=str(SRC),
    )
    command = run.command(inputs, sleep=0.05, chunk_size=2)
    # the old process's inputs from 40 on wait for a gate that opens only after the test: it
    # cannot finish its work, so it ends only if it sees the takeover, at any load
    gate = tmp_path / "gate"
    old = subprocess.Popen(
        command,
        env=dict(env, SW_TEST_GATE=str(gate), SW_TEST_HOLD_FROM="40"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: committed_inputs(run.out, 0, 1) >= 10, 60, "the first attempt to commit", run)
        assert old.poll() is None, old.communicate()[1][-2000:]
        new = subprocess.run(
            command, env=dict(env, SLURM_RESTART_COUNT="1"), capture_output=True, text=True, timeout=120
        )
        assert new.returncode == 0, new.stderr[-2000:]
        old.wait(timeout=60)  # its held inputs never go on: it stopped because it saw the takeover
    finally:
        gate.write_text("")
        if old.poll() is None:
            old.kill()
            old.wait()
    first = next(r for r in run.task_reports() if r["restart"] == 0)
    assert not first["ok"] and "taken over" in first["message"], first
    assert_dataset(run, list(range(inputs)))


# --- node identity from the environment (no Slurm needed) ----------------------------------------


def test_array_task_id_without_count_is_a_clear_error():
    with pytest.raises(ShardwrightError) as info:
        node_identity(None, None, env={"SLURM_ARRAY_TASK_ID": "3"})
    message = str(info.value)
    assert "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not" in message
    assert "num_nodes=" in message


def test_array_task_min_is_subtracted():
    node = node_identity(
        None, None, env={"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "5"}
    )
    assert (node.rank, node.count) == (2, 4)
    with pytest.raises(ShardwrightError, match="out of range"):  # --array=0-6:2: ids 0,2,4,6 of 4
        node_identity(
            None, None, env={"SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}
        )


def test_identity_precedence_arguments_then_litdata_then_array_then_srun():
    env = {
        "DATA_OPTIMIZER_NODE_RANK": "2",
        "DATA_OPTIMIZER_NUM_NODES": "5",
        "SLURM_ARRAY_TASK_ID": "1",
        "SLURM_ARRAY_TASK_COUNT": "2",
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
    }
    assert node_identity(3, 1, env=env).rank == 1  # num_nodes, node_rank
    assert (node_identity(None, None, env=env).rank, node_identity(None, None, env=env).count) == (2, 5)
    del env["DATA_OPTIMIZER_NODE_RANK"], env["DATA_OPTIMIZER_NUM_NODES"]
    assert node_identity(None, None, env=env).source == "the Slurm job array"
    srun = {
        "SLURM_JOB_ID": "9",
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "SLURM_STEP_NUM_TASKS": "2",
    }
    assert (node_identity(None, None, env=srun).rank, node_identity(None, None, env=srun).count) == (1, 2)


def test_batch_shell_without_array_is_a_single_node():
    """What a plain `sbatch` script sees (checked on Slurm 22.05): SLURM_PROCID=0, no SLURM_NTASKS
    (unless -n is given, then SLURM_NTASKS=N), no SLURM_STEP_ID. Only one process runs there,
    so it is the whole run; it must neither fail nor claim to be 'node 0 of N'."""
    plain = {"SLURM_JOB_ID": "12", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}
    assert node_identity(None, None, env=plain).count == 1
    with_ntasks = dict(plain, SLURM_NTASKS="2", SLURM_NPROCS="2")
    assert node_identity(None, None, env=with_ntasks).count == 1


# --- the script ----------------------------------------------------------------------------------------


def test_script_text_and_options(tmp_path):
    script = sw_slurm.write_sbatch_script(
        ["python", "prepare.py", "--out", "/data/my ds"],
        8,
        partition="cpu",
        time="4:00:00",
        cpus_per_task=4,
        mem="16G",
        max_concurrent=3,
        log_dir="logs",
        extra_sbatch="--account=abc --gres=gpu:1",
        chdir=str(tmp_path),
    )
    for line in (
        "#!/bin/bash",
        "#SBATCH --array=0-7%3",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        "#SBATCH --output=logs/%x-%A_%a.log",
        "#SBATCH --partition=cpu",
        "#SBATCH --time=4:00:00",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=16G",
        "#SBATCH --account=abc",
        "#SBATCH --gres=gpu:1",
        f"#SBATCH --chdir={tmp_path}",
        "exec python prepare.py --out '/data/my ds'",
    ):
        assert line in script.splitlines(), (line, script)
    body = script.split("\n\n", 1)[1]
    assert "#SBATCH" not in body  # sbatch stops reading directives at the first command
    assert "srun" not in script and "DATA_OPTIMIZER_NODE_RANK=" not in script
    no_requeue = sw_slurm.write_sbatch_script(["true"], 2, requeue=False)
    assert "#SBATCH --no-requeue" in no_requeue
    with pytest.raises(ShardwrightError, match="command"):
        sw_slurm.write_sbatch_script([], 2)
    with pytest.raises(ShardwrightError, match="--array"):
        sw_slurm.write_sbatch_script(["true"], 0)
    with pytest.raises(ShardwrightError, match="not a task"):
        sw_slurm.write_sbatch_script(["true"], 4, only="4")


def test_plan_submissions():
    subs, explicit = sw_slurm.plan_submissions(4, max_concurrent=2)
    assert not explicit and [s.array_spec for s in subs] == ["0-3%2"]
    subs, explicit = sw_slurm.plan_submissions(2500, max_array_size=1000)
    assert explicit and [(s.array_spec, s.rank_offset) for s in subs] == [
        ("0-999", 0),
        ("0-999", 1000),
        ("0-499", 2000),
    ]
    subs, explicit = sw_slurm.plan_submissions(2500, only="3,5-6,1999,2001", max_array_size=1000)
    assert explicit and [(s.array_spec, s.rank_offset) for s in subs] == [("3,5-6", 0), ("999", 1000), ("1", 2000)]
    assert subs[0].sbatch_args(True) == ["--array=3,5-6", "--export=ALL,SHARDWRIGHT_RANK_OFFSET=0"]


def test_cli_prints_the_script_and_checks_its_arguments(capsys):
    from shardwright.cli import main

    assert main(["slurm", "--array", "3", "--", "python", "prepare.py"]) == 0
    out = capsys.readouterr().out
    assert "#SBATCH --array=0-2" in out and out.rstrip().endswith("exec python prepare.py")
    assert main(["slurm", "--array", "3", "--submit", "--merge-job", "--", "python", "x.py"]) == 2
    assert "--merge-job needs --output-dir" in capsys.readouterr().err
    assert main(["slurm", "--array", "3"]) == 2
    assert main(["slurm", "--array", "3", "--only", "1", "--", "python", "x.py"]) == 0
    out = capsys.readouterr().out
    assert "export DATA_OPTIMIZER_NUM_NODES=3" in out and "#SBATCH --array=1" in out
