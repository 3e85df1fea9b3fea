"""Slurm executor: a job with ``{"executor": {"kind": "slurm", "array": N}}`` is one sbatch
array (written and submitted by shardwright's own sbatch helper). Every task runs the runner
with ``--slurm``; optimize() takes the task's share of the shards from the array variables
and the task that finishes last publishes. The service follows Slurm's state
(``scontrol``, then ``sacct`` once the job left the controller's memory) and the output's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from ..cluster import slurm as sbatch_helper
from ..errors import ShardwrightError

# Slurm job states after which a task will not run again by itself.
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
# NODE_FAIL / PREEMPTED are followed by a requeue (the helper's scripts use --requeue).


def job_name(job_id: str, attempt: int) -> str:
    """The Slurm job name of one attempt: how a restarted server finds a submission it did not record."""
    return f"sw-job-{job_id}-a{attempt}"


def find_submitted(name: str, env: dict) -> list[str]:
    """Array job ids Slurm knows under ``name`` (pending, running or recently ended)."""
    r = _run(["squeue", "-h", "-t", "all", "--name", name, "-o", "%F"], env)
    if r is None or r.returncode != 0:
        raise SlurmUnavailable(f"squeue --name {name}: {r.stderr.strip() if r else 'no answer'}")
    return sorted({line.strip() for line in r.stdout.splitlines() if line.strip()})


def submit(job_dir: str, job_id: str, attempt: int, array: int, env: dict) -> list[str]:
    command = [sys.executable, "-m", "shardwright.service.runner", job_dir, "--attempt", str(attempt), "--slurm"]
    log_dir = os.path.join(job_dir, "slurm-logs")
    script = sbatch_helper.write_sbatch_script(
        command, array, log_dir=log_dir, chdir=job_dir, job_name=job_name(job_id, attempt)
    )
    submissions, explicit = sbatch_helper.plan_submissions(array)
    return sbatch_helper.submit_run(script, submissions, explicit, env=env, cwd=job_dir)


def _run(argv: list[str], env: dict) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _expand(spec: str) -> list[str]:
    """ArrayTaskId '0-3%2' / '1,4' -> ['0','1','2','3']."""
    out: list[str] = []
    for part in spec.split("%")[0].split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?(?::\d+)?", part)
        if m:
            first, last = int(m.group(1)), int(m.group(2) or m.group(1))
            out += [str(i) for i in range(first, last + 1)]
    return out


class SlurmUnavailable(Exception):
    """Slurm could not be asked (controller down, command failed): ask again later."""


def task_states(job_ids: list[str], env: dict) -> dict[str, str] | None:
    """{"JOB_TASK": STATE} of every task of the submissions, or None if Slurm does not know them
    any more (purged from the controller, no accounting). Raises SlurmUnavailable when Slurm
    cannot answer now."""
    states: dict[str, str] = {}
    for job_id in job_ids:
        r = _run(["scontrol", "-o", "show", "job", job_id], env)
        if r is None:
            raise SlurmUnavailable("scontrol did not answer")
        if r.returncode != 0 and "invalid job id" not in r.stderr.lower():
            raise SlurmUnavailable(f"scontrol show job {job_id}: {r.stderr.strip()}")
        if r.returncode == 0 and r.stdout.strip():
            for line in r.stdout.splitlines():
                state = re.search(r"\bJobState=(\S+)", line)
                task = re.search(r"\bArrayTaskId=(\S+)", line)
                if state:
                    for t in _expand(task.group(1)) if task else ["-"]:
                        states[f"{job_id}_{t}"] = state.group(1)
            continue
        r = _run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State"], env)
        rows = [line.split("|") for line in (r.stdout.splitlines() if r is not None and r.returncode == 0 else [])]
        rows = [row for row in rows if len(row) == 2]
        if not rows:
            return None
        for jid, state in rows:
            states[jid] = state.split()[0]
    return states


def all_final(states: dict[str, str]) -> bool:
    return bool(states) and all(s in FINAL for s in states.values())


def cancel(job_ids: list[str], env: dict) -> None:
    """scancel: Slurm sends SIGTERM; optimize() commits what is done and stops."""
    for job_id in job_ids:
        r = _run(["scancel", job_id], env)
        if r is None or r.returncode != 0:
            raise ShardwrightError(f"scancel {job_id} failed: {r.stderr.strip() if r else 'scancel not found'}")
