"""``shardwright slurm``: write (and optionally submit) an sbatch script that runs one
``optimize()`` over a Slurm job array.

    shardwright slurm --array 8 --cpus-per-task 4 --time 4:00:00 --output-dir-for-logs logs \\
        --submit -- python prepare.py --out /shared/ds

Every array task runs the same command. Nothing is passed to it: ``optimize()`` reads
``SLURM_ARRAY_TASK_ID`` / ``SLURM_ARRAY_TASK_COUNT`` / ``SLURM_ARRAY_TASK_MIN`` itself, takes
its round-robin share of the run's logical shards, resumes from its own checkpoints when
the task is requeued, and the task that finishes last publishes ``index.json``. The command
is ``exec``-ed by the batch shell (no ``srun``), so Slurm's signals (requeue, preemption,
``scancel``) reach Python directly and it stops at a commit point.

Two cases where Slurm's own numbering does not describe the run, so the script exports
``DATA_OPTIMIZER_NUM_NODES`` / ``DATA_OPTIMIZER_NODE_RANK`` (which optimize() reads first):

* ``--only 2,5``: resubmit some tasks of the run (a task that failed). As a separate array
  ``--array=2,5`` would say COUNT=2, MIN=2.
* an array larger than the cluster's ``MaxArraySize``: several submissions, each with
  ``SHARDWRIGHT_RANK_OFFSET`` exported, ranks ``SLURM_ARRAY_TASK_ID + offset``.

The Python API is :func:`write_sbatch_script`, :func:`plan_submissions`, :func:`submit`
and :func:`submit_merge`; see docs/slurm.md for the whole tutorial.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass

from ..errors import UsageError
from ..secrets import public_options
from ..storage.options import parse_storage_options

DEFAULT_JOB_NAME = "shardwright"
DEFAULT_MAX_ARRAY_SIZE = 1001  # Slurm's default MaxArraySize: task ids 0..1000
RANK_OFFSET_VAR = "SHARDWRIGHT_RANK_OFFSET"


# --- planning the submissions ------------------------------------------------------------------


def parse_ranks(spec: str) -> list[int]:
    """``"2"``, ``"1,3"``, ``"4-7"``, ``"0-3,9"`` -> sorted unique ranks."""
    ranks: set[int] = set()
    for part in str(spec).replace(" ", "").split(","):
        if not part:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise UsageError(f"cannot read task ids {spec!r}: use a list like 2 or 1,3 or 4-7")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise UsageError(f"cannot read task ids {spec!r}: {part} is an empty range")
        ranks.update(range(first, last + 1))
    if not ranks:
        raise UsageError(f"no task ids in {spec!r}")
    return sorted(ranks)


def task_ranges(ids: list[int]) -> str:
    """[0,1,2,5,7,8] -> '0-2,5,7-8' (Slurm's --array syntax)."""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"{first}-{last}" if last > first else str(first) for first, last in runs)


@dataclass(frozen=True)
class Submission:
    """One ``sbatch`` of the run: Slurm array ids ``array_spec``; rank = id + ``rank_offset``."""

    array_spec: str  # e.g. "0-999%50"
    rank_offset: int
    ranks: tuple  # the run's node ranks this submission covers

    def sbatch_args(self, explicit: bool) -> list[str]:
        args = [f"--array={self.array_spec}"]
        if explicit:
            args.append(f"--export=ALL,{RANK_OFFSET_VAR}={self.rank_offset}")
        return args


def plan_submissions(
    array: int, *, only=None, max_concurrent: int | None = None, max_array_size: int | None = None
) -> tuple[list[Submission], bool]:
    """How to submit an ``array``-task run: (submissions, explicit), where ``explicit`` says
    the script must export the node identity itself (a subset, or several submissions)."""
    if not isinstance(array, int) or isinstance(array, bool) or array < 1:
        raise UsageError(f"--array must be a positive number of tasks; got {array!r}")
    if max_concurrent is not None and (not isinstance(max_concurrent, int) or max_concurrent < 1):
        raise UsageError(f"--max-concurrent must be a positive int; got {max_concurrent!r}")
    limit = max_array_size or DEFAULT_MAX_ARRAY_SIZE
    if limit < 1:
        raise UsageError(f"--max-array-size must be positive; got {max_array_size!r}")
    if only is not None:
        ranks = parse_ranks(only) if isinstance(only, str) else sorted(set(int(r) for r in only))
        bad = [r for r in ranks if not 0 <= r < array]
        if bad:
            raise UsageError(f"--only {bad[0]} is not a task of a {array}-task run (0..{array - 1})")
    else:
        ranks = list(range(array))
    explicit = only is not None or array > limit
    throttle = f"%{max_concurrent}" if max_concurrent else ""
    if not explicit:
        return [Submission(f"0-{array - 1}{throttle}", 0, tuple(ranks))], False
    blocks: dict[int, list[int]] = {}
    for rank in ranks:  # ranks of one submission must map to array ids < limit
        blocks.setdefault(rank // limit * limit, []).append(rank)
    subs = [
        Submission(task_ranges([r - offset for r in rs]) + throttle, offset, tuple(rs))
        for offset, rs in sorted(blocks.items())
    ]
    return subs, True


# --- the script ----------------------------------------------------------------------------------


def _directive_value(name: str, value) -> str:
    text = str(value)
    if not text or any(c.isspace() for c in text):
        raise UsageError(f"--{name} {text!r}: #SBATCH values cannot contain spaces")
    return text


def write_sbatch_script(
    command: list[str],
    array: int,
    *,
    partition: str | None = None,
    time: str | None = None,
    cpus_per_task: int | None = None,
    mem: str | None = None,
    max_concurrent: int | None = None,
    log_dir: str | None = None,
    requeue: bool = True,
    job_name: str = DEFAULT_JOB_NAME,
    extra_sbatch=None,
    only=None,
    max_array_size: int | None = None,
    chdir: str | None = None,
    requeue_before_timeout: int | None = None,
) -> str:
    """The text of an sbatch script running ``command`` on every task of an ``array``-task run.

    ``command``: argv list (``["python", "prepare.py", "--out", "/shared/ds"]``), exec-ed as is.
    ``max_concurrent``: Slurm's ``%K`` throttle. ``log_dir``: ``--output=DIR/%x-%A_%a.log``
    (appended to across requeues). ``only``: resubmit only these task ids of the run.
    ``max_array_size``: split into several submissions above it (see :func:`plan_submissions`).
    ``extra_sbatch``: more ``#SBATCH`` options (a string split like a shell line, or a list).
    ``requeue_before_timeout``: seconds before ``--time`` runs out at which the task requeues
    itself (``--signal=B:USR1@S``): it stops at a commit point and resumes when rerun.
    """
    command = [str(c) for c in command]
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise UsageError("give the command each task runs after `--`, e.g. -- python prepare.py")
    submissions, explicit = plan_submissions(
        array, only=only, max_concurrent=max_concurrent, max_array_size=max_array_size
    )
    if requeue_before_timeout is not None:
        if not requeue:
            raise UsageError("--requeue-before-timeout needs --requeue (the task requeues itself)")
        if int(requeue_before_timeout) < 1:
            raise UsageError("--requeue-before-timeout must be a positive number of seconds")
    if isinstance(extra_sbatch, str):
        extra = shlex.split(extra_sbatch)
    else:
        extra = [str(x) for x in (extra_sbatch or [])]
    for option in extra:
        if any(c in option for c in "\n\r\0"):
            # each option becomes one "#SBATCH" line: a newline would start a shell line of its own
            raise UsageError(f"--extra-sbatch {option!r}: an sbatch option cannot contain a line break")
        if not option.startswith("-"):
            raise UsageError(f'--extra-sbatch {option!r}: give sbatch options, e.g. "--gres=gpu:1 --account=x"')

    chdir = os.path.abspath(chdir or os.getcwd())
    lines = [
        "#!/bin/bash",
        "# Generated by `shardwright slurm`: one shardwright optimize() over a Slurm job array.",
        "# Each task runs the command at the end; optimize() picks its share of the shards from",
        "# the array variables, resumes from its own checkpoints after a requeue, and the task",
        "# that finishes last publishes index.json (see docs/slurm.md).",
        "#",
    ]
    if len(submissions) == 1 and not explicit:
        lines.append("# Submit with:  sbatch THIS_SCRIPT")
    else:
        lines.append(f"# This run has {array} tasks; submit every line below (`shardwright slurm --submit` does):")
        for sub in submissions:
            lines.append("#   sbatch " + " ".join(sub.sbatch_args(explicit)) + " THIS_SCRIPT")
    lines.append(f"#SBATCH --job-name={_directive_value('job-name', job_name)}")
    lines.append(f"#SBATCH --array={submissions[0].array_spec}")
    lines.append("#SBATCH --requeue" if requeue else "#SBATCH --no-requeue")
    lines.append("#SBATCH --open-mode=append")
    lines.append(f"#SBATCH --chdir={_directive_value('chdir', chdir)}")
    if log_dir:
        lines.append(f"#SBATCH --output={_directive_value('output-dir-for-logs', log_dir.rstrip('/'))}/%x-%A_%a.log")
    if partition:
        lines.append(f"#SBATCH --partition={_directive_value('partition', partition)}")
    if time:
        lines.append(f"#SBATCH --time={_directive_value('time', time)}")
    if cpus_per_task:
        lines.append(f"#SBATCH --cpus-per-task={int(cpus_per_task)}")
    if mem:
        lines.append(f"#SBATCH --mem={_directive_value('mem', mem)}")
    if requeue_before_timeout is not None:
        lines.append(f"#SBATCH --signal=B:USR1@{int(requeue_before_timeout)}")
    for option in extra:
        lines.append(f"#SBATCH {option}")
    lines += [
        "",
        (
            'echo "[shardwright] array task ${SLURM_ARRAY_TASK_ID:-?} of job ${SLURM_ARRAY_JOB_ID:-${SLURM_JOB_ID:-?}}'
            ' on ${SLURMD_NODENAME:-$(hostname)}, restart ${SLURM_RESTART_COUNT:-0}, $(date -u +%FT%TZ)" >&2'
        ),
    ]
    if not explicit:
        lines += [
            "",
            "# optimize() reads DATA_OPTIMIZER_* before the array variables: don't let a stray",
            "# setting inherited from the submitting shell override them.",
            "unset DATA_OPTIMIZER_NUM_NODES DATA_OPTIMIZER_NODE_RANK",
        ]
    else:
        lines += [
            "",
            f"# This submission covers part of a {array}-task run, so Slurm's array count/min do not",
            "# describe the run: say which node this is (optimize() reads these first).",
            f"export DATA_OPTIMIZER_NUM_NODES={array}",
            f"export DATA_OPTIMIZER_NODE_RANK=$(( SLURM_ARRAY_TASK_ID + ${{{RANK_OFFSET_VAR}:-0}} ))",
        ]
    cmd = shlex.join(command)
    if requeue_before_timeout is None:
        lines += ["", "# exec: Slurm's signals (requeue, preemption, scancel) reach Python directly.", f"exec {cmd}"]
    else:
        lines += [
            "",
            f"# {int(requeue_before_timeout)} s before --time runs out Slurm sends USR1 to this shell: requeue the",
            "# task; scontrol's SIGTERM then stops Python at a commit point and the rerun resumes.",
            "requeue_self() {",
            '    echo "[shardwright] time limit near: requeueing ${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}" >&2',
            '    scontrol requeue "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"',
            "}",
            "trap requeue_self USR1",
            "trap ':' TERM  # Slurm signals Python itself; this shell waits for it to commit and exit",
            f"{cmd} &",
            "child=$!",
            "while true; do",
            '    wait "$child"; rc=$?',
            '    kill -0 "$child" 2>/dev/null || break  # wait was interrupted by a signal: keep waiting',
            "done",
            'exit "$rc"',
        ]
    return "\n".join(lines) + "\n"


# --- submitting ----------------------------------------------------------------------------------


def _run_sbatch(args: list[str], script_text: str | None, env, cwd) -> str:
    try:
        result = subprocess.run(
            ["sbatch", "--parsable", *args],
            input=script_text,
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=120,
        )
    except FileNotFoundError:
        raise UsageError(
            "sbatch not found: run this on a Slurm login node (or write the script "
            "with --script-out and submit it there)"
        ) from None
    if result.returncode != 0:
        raise UsageError(f"sbatch {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout.strip().split(";")[0]


def _log_dir_of(script_text: str) -> str | None:
    match = re.search(r"^#SBATCH --output=(\S+)/[^/\n]*$", script_text, re.M)
    return match.group(1) if match else None


def _chdir_of(script_text: str) -> str | None:
    match = re.search(r"^#SBATCH --chdir=(\S+)$", script_text, re.M)
    return match.group(1) if match else None


def submit(script_text: str, *, args=(), env: dict | None = None, cwd: str | None = None) -> str:
    """``sbatch`` the script (from stdin); returns the job id. ``args`` are extra sbatch options
    (they override the script's ``#SBATCH`` lines, e.g. ``--array=3``). The log directory named
    by ``--output`` is created first (Slurm does not create it, and a job whose log can't be
    opened fails without a word)."""
    log_dir = _log_dir_of(script_text)
    if log_dir:
        base = _chdir_of(script_text) or cwd or os.getcwd()
        os.makedirs(os.path.join(base, log_dir), exist_ok=True)
    return _run_sbatch(list(args), script_text, env, cwd)


def submit_run(
    script_text: str, submissions: list[Submission], explicit: bool, *, env: dict | None = None, cwd: str | None = None
) -> list[str]:
    """Submit every part of a run planned by :func:`plan_submissions`; returns the job ids."""
    return [submit(script_text, args=sub.sbatch_args(explicit), env=env, cwd=cwd) for sub in submissions]


def public_storage_options(storage_options: str | None) -> str | None:
    """The ``--storage-options`` JSON without credentials, for a command line that ends up in
    Slurm's job record (``scontrol show job``, sacct) and logs: secret keys are dropped and a
    ``user:password@`` part of a URL is removed. The merge job then finds credentials the way
    boto3 does: the environment sbatch exports (AWS_ACCESS_KEY_ID, ...), ~/.aws, a role."""
    options = parse_storage_options(storage_options)
    if options is None:
        return None
    public = public_options(options)
    return json.dumps(public) if public else None


def merge_command(output_dir: str, storage_options: str | None = None) -> list[str]:
    """The merge job's command; ``storage_options`` only with :func:`public_storage_options`."""
    cmd = [sys.executable, "-m", "shardwright.cli", "merge", output_dir]
    public = public_storage_options(storage_options)
    if public:
        cmd += ["--storage-options", public]
    return cmd


def submit_merge(
    output_dir: str,
    after: list[str],
    *,
    storage_options: str | None = None,
    partition: str | None = None,
    log_dir: str | None = None,
    job_name: str = DEFAULT_JOB_NAME,
    chdir: str | None = None,
    env: dict | None = None,
    dependency: str = "afterok",
) -> str:
    """Submit ``shardwright merge OUTPUT_DIR`` to run once the jobs ``after`` ended (``afterok``:
    all their tasks succeeded; the job is cancelled if one failed). The last task already
    publishes: this job is the check (exit 1 naming unfinished shards) and a hook to chain on."""
    chdir = os.path.abspath(chdir or os.getcwd())
    args = [
        f"--dependency={dependency}:" + ":".join(after),
        "--kill-on-invalid-dep=yes",
        f"--job-name={job_name}-merge",
        f"--chdir={chdir}",
        "--open-mode=append",
    ]
    if partition:
        args.append(f"--partition={partition}")
    if log_dir:
        os.makedirs(os.path.join(chdir, log_dir), exist_ok=True)
        args.append(f"--output={log_dir.rstrip('/')}/%x-%j.log")
    args.append("--wrap=exec " + shlex.join(merge_command(output_dir, storage_options)))
    return _run_sbatch(args, None, env, chdir)


def cluster_max_array_size(env: dict | None = None) -> int | None:
    """MaxArraySize from ``scontrol show config`` (None when it can't be asked)."""
    try:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, env=env, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"^MaxArraySize\s*=\s*(\d+)", out, re.M)
    return int(match.group(1)) if match else None


# --- following submitted jobs ---------------------------------------------------------------------


class SlurmUnavailable(Exception):
    """Slurm could not be asked (controller down, command failed): ask again later."""


def _ask(argv: list[str], env: dict | None) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None


def find_jobs_by_name(name: str, env: dict | None = None) -> list[str]:
    """Array job ids Slurm knows under ``name`` (pending, running or recently ended)."""
    r = _ask(["squeue", "-h", "-t", "all", "--name", name, "-o", "%F"], env)
    if r is None or r.returncode != 0:
        raise SlurmUnavailable(f"squeue --name {name}: {r.stderr.strip() if r else 'no answer'}")
    return sorted({line.strip() for line in r.stdout.splitlines() if line.strip()})


def expand_task_ids(spec: str) -> list[str]:
    """ArrayTaskId '0-3%2' / '1,4' -> ['0','1','2','3'] / ['1','4']."""
    out: list[str] = []
    for part in spec.split("%")[0].split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?(?::\d+)?", part)
        if m:
            first, last = int(m.group(1)), int(m.group(2) or m.group(1))
            out += [str(i) for i in range(first, min(last, first + 1_000_000) + 1)]
    return out


def task_states(job_ids: list[str], env: dict | None = None) -> dict[str, str] | None:
    """{"JOB_TASK": STATE} of every task of the submissions (``scontrol``, then ``sacct`` once the
    job left the controller's memory), or None if Slurm does not know them any more (purged, no
    accounting). Raises SlurmUnavailable when Slurm cannot answer now."""
    states: dict[str, str] = {}
    for job_id in job_ids:
        r = _ask(["scontrol", "-o", "show", "job", job_id], env)
        if r is None:
            raise SlurmUnavailable("scontrol did not answer")
        if r.returncode != 0 and "invalid job id" not in r.stderr.lower():
            raise SlurmUnavailable(f"scontrol show job {job_id}: {r.stderr.strip()}")
        if r.returncode == 0 and r.stdout.strip():
            for line in r.stdout.splitlines():
                state = re.search(r"\bJobState=(\S+)", line)
                task = re.search(r"\bArrayTaskId=(\S+)", line)
                if state:
                    for t in expand_task_ids(task.group(1)) if task else ["-"]:
                        states[f"{job_id}_{t}"] = state.group(1)
            continue
        r = _ask(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State"], env)
        rows = [line.split("|") for line in (r.stdout.splitlines() if r is not None and r.returncode == 0 else [])]
        rows = [row for row in rows if len(row) == 2 and row[1].strip()]
        if not rows:
            return None
        for jid, state in rows:
            states[jid] = state.split()[0]
    return states


def cancel_jobs(job_ids: list[str], env: dict | None = None) -> None:
    """scancel: Slurm sends SIGTERM; optimize() commits what is done and stops."""
    for job_id in job_ids:
        r = _ask(["scancel", job_id], env)
        if r is None or r.returncode != 0:
            raise SlurmUnavailable(f"scancel {job_id} failed: {r.stderr.strip() if r else 'scancel not found'}")
