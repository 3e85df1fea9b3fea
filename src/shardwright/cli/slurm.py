"""``shardwright slurm``: write (and submit) the sbatch script of an array run."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..cluster.slurm import (
    DEFAULT_JOB_NAME,
    cluster_max_array_size,
    plan_submissions,
    submit,
    submit_merge,
    task_ranges,
    write_sbatch_script,
)
from ..errors import UsageError
from .options import command_after_dashes


def add_slurm_command(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "slurm",
        help="write (and submit) an sbatch script running one optimize() over a job array",
        description="Write an sbatch script that runs COMMAND on every task of a job array; optimize() in "
        "COMMAND takes its share of the shards from the array variables. Prints the script, "
        "or submits it with --submit.",
        usage="shardwright slurm --array N [options] -- COMMAND [ARGS...]",
    )
    p.add_argument("--array", type=int, required=True, metavar="N", help="number of array tasks (nodes) of the run")
    p.add_argument("--partition")
    p.add_argument("--time", help="time limit per task, e.g. 4:00:00")
    p.add_argument("--cpus-per-task", type=int, metavar="C")
    p.add_argument("--mem", metavar="M", help="memory per node, e.g. 16G")
    p.add_argument(
        "--max-concurrent",
        type=int,
        metavar="K",
        help="at most K tasks at once (--array=0-(N-1)%%K; per submission when split)",
    )
    p.add_argument(
        "--output-dir-for-logs",
        metavar="D",
        help="task logs go to D/NAME-JOB_TASK.log (appended to across requeues); created at submission",
    )
    p.add_argument(
        "--requeue",
        dest="requeue",
        action="store_true",
        default=True,
        help="let Slurm requeue tasks after preemption or node failure (default)",
    )
    p.add_argument("--no-requeue", dest="requeue", action="store_false")
    p.add_argument(
        "--requeue-before-timeout",
        type=int,
        metavar="S",
        help="S seconds before --time runs out, requeue the task (it resumes where it stopped)",
    )
    p.add_argument("--job-name", default=DEFAULT_JOB_NAME)
    p.add_argument("--chdir", help="working directory of the tasks (default: the current directory)")
    p.add_argument(
        "--only",
        metavar="IDS",
        help="submit only these task ids of the N-task run, e.g. 2 or 1,3 (resubmitting tasks that failed)",
    )
    p.add_argument(
        "--max-array-size",
        type=int,
        metavar="L",
        help="split the run into submissions of at most L "
        "tasks (default: the cluster's MaxArraySize when submitting, else 1001)",
    )
    p.add_argument("--extra-sbatch", metavar="OPTS", help='more sbatch options, e.g. "--gres=gpu:1 --account=x"')
    p.add_argument("--script-out", metavar="FILE", help="write the script to FILE instead of printing it")
    p.add_argument("--submit", action="store_true", help="submit the script with sbatch and print the job id(s)")
    p.add_argument(
        "--merge-job",
        action="store_true",
        help="also submit `shardwright merge OUTPUT_DIR` to run after every task succeeded "
        "(--dependency=afterok); needs --output-dir and --submit",
    )
    p.add_argument("--output-dir", help="the optimize() output_dir (for --merge-job)")
    p.add_argument(
        "--storage-options",
        help="JSON dict of storage options for an s3://, gs:// or az:// --output-dir; "
        "credentials in it are NOT passed to the merge job (they would be visible in Slurm's job "
        "record): it reads them from the environment sbatch exports (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, "
        "AZURE_STORAGE_CONNECTION_STRING), ~/.aws, gcloud's ADC or an instance role",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command each task runs")
    p.set_defaults(func=run_slurm_command)


def run_slurm_command(args: argparse.Namespace) -> int:
    command = command_after_dashes(args.command)
    if not command:
        raise UsageError(
            "give the command each task runs after `--`, e.g. shardwright slurm --array 4 -- python prepare.py"
        )
    if args.merge_job and not args.output_dir:
        raise UsageError("--merge-job needs --output-dir (the output_dir your command passes to optimize())")
    if args.merge_job and not args.submit:
        raise UsageError("--merge-job needs --submit (it depends on the array's job id)")
    max_array_size = args.max_array_size
    if max_array_size is None and args.submit:
        max_array_size = cluster_max_array_size()
    options = dict(
        partition=args.partition,
        time=args.time,
        cpus_per_task=args.cpus_per_task,
        mem=args.mem,
        max_concurrent=args.max_concurrent,
        log_dir=args.output_dir_for_logs,
        requeue=args.requeue,
        job_name=args.job_name,
        extra_sbatch=args.extra_sbatch,
        only=args.only,
        max_array_size=max_array_size,
        chdir=args.chdir,
        requeue_before_timeout=args.requeue_before_timeout,
    )
    script = write_sbatch_script(command, args.array, **options)
    if args.script_out:
        with open(args.script_out, "w") as f:
            f.write(script)
        os.chmod(args.script_out, 0o755)
        print(f"wrote {args.script_out}", file=sys.stderr)
    elif not args.submit:
        sys.stdout.write(script)
    if not args.submit:
        return 0
    submissions, explicit = plan_submissions(
        args.array, only=args.only, max_concurrent=args.max_concurrent, max_array_size=max_array_size
    )
    job_ids = []
    for sub in submissions:
        job_id = submit(script, args=sub.sbatch_args(explicit))
        job_ids.append(job_id)
        print(
            f"{job_id} array --array={sub.array_spec}"
            + (f" ranks {task_ranges(list(sub.ranks))} of {args.array}" if explicit else "")
        )
    if args.merge_job:
        merge_id = submit_merge(
            args.output_dir,
            job_ids,
            storage_options=args.storage_options,
            partition=args.partition,
            log_dir=args.output_dir_for_logs,
            job_name=args.job_name,
            chdir=args.chdir,
        )
        print(f"{merge_id} merge --dependency=afterok:{':'.join(job_ids)}")
    return 0
