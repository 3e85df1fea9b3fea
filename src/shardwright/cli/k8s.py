"""``shardwright k8s manifest``: print a Kubernetes Indexed Job running one optimize() over N pods."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..cluster.kubernetes import JobSpec, job_manifest
from ..errors import UsageError
from .options import command_after_dashes


def add_k8s_command(subparsers: Any) -> None:
    k8s = subparsers.add_parser("k8s", help="Kubernetes: an Indexed Job running one optimize() over N pods")
    sub = k8s.add_subparsers(dest="k8s_command", required=True)
    p = sub.add_parser(
        "manifest",
        help="print the Indexed Job (JSON, for kubectl apply -f)",
        description="Print an Indexed Job whose N pods each run COMMAND; optimize() in COMMAND takes its share "
        "of the shards from JOB_COMPLETION_INDEX and SHARDWRIGHT_NUM_NODES. See docs/kubernetes.md.",
        usage="shardwright k8s manifest --completions N --image IMAGE [options] -- COMMAND [ARGS...]",
    )
    p.add_argument("--completions", type=int, required=True, metavar="N", help="number of pods (indexes) of the run")
    p.add_argument("--image", required=True, help="container image with your script and shardwright installed")
    p.add_argument("--name", default="shardwright", help="the Job's name (also the pods' identity prefix)")
    p.add_argument("--parallelism", type=int, metavar="P", help="pods running at once (default: N)")
    p.add_argument("--backoff-limit-per-index", type=int, default=3, metavar="B", help="retries of a failing index")
    p.add_argument("--max-failed-indexes", type=int, metavar="F", help="fail the Job once F indexes failed")
    p.add_argument("--cpu", help="CPU request per pod, e.g. 4 or 500m")
    p.add_argument("--memory", help="memory request and limit per pod, e.g. 16Gi")
    p.add_argument("--secret", help="a Secret whose keys become the pods' env (e.g. AWS_ACCESS_KEY_ID): by reference")
    p.add_argument("--output-dir", help="the optimize() output_dir (a bucket URL); exported as SHARDWRIGHT_OUTPUT_DIR")
    p.add_argument(
        "--shared-output",
        action="store_true",
        help="--output-dir is a local path every pod mounts (a shared volume); pass shared_output=True to optimize()",
    )
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="more environment for the pods")
    p.add_argument("--service-account")
    p.add_argument("--namespace")
    p.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command each pod runs")
    p.set_defaults(func=run_manifest_command)


def run_manifest_command(args: argparse.Namespace) -> int:
    command = command_after_dashes(args.command)
    env = {}
    for item in args.env:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--env {item!r} is not K=V")
        env[key] = value
    spec = JobSpec(
        name=args.name,
        image=args.image,
        command=command,
        completions=args.completions,
        parallelism=args.parallelism,
        backoff_limit_per_index=args.backoff_limit_per_index,
        max_failed_indexes=args.max_failed_indexes,
        cpu=args.cpu,
        memory=args.memory,
        secret=args.secret,
        output_dir=args.output_dir,
        shared_output=args.shared_output,
        env=env,
        service_account=args.service_account,
        namespace=args.namespace,
    )
    json.dump(job_manifest(spec), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0
