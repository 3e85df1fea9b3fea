"""The ``serve`` and ``jobs`` subcommands, registered by ``shardwright``'s CLI."""

from __future__ import annotations

import os
import sys

from .client import add_jobs_command
from .server import DEFAULT_DB, DEFAULT_PORT


def add_service_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the jobs service (REST API + dashboard); see docs/jobs.md",
        description="Run the jobs service: a REST API under /api/v1 and a dashboard at /.",
    )
    p.add_argument(
        "--pipelines",
        required=True,
        metavar="MODULE[:FN,...]",
        help="module whose public top-level functions fn(input[, config]) are the pipelines "
        "(or only the functions listed after ':'; required for installed modules)",
    )
    p.add_argument(
        "--db",
        default=None,
        help=f"SQLite job store (default {DEFAULT_DB}); the API token file and job files are kept next to it",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--max-running", type=int, default=2, metavar="N", help="jobs running at a time (FIFO)")
    p.add_argument(
        "--auto-retries",
        type=int,
        default=2,
        metavar="N",
        help="automatic retries of a job after a transient system failure",
    )
    p.add_argument(
        "--retry-backoff",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds before the first automatic retry (doubling)",
    )
    p.add_argument(
        "--cancel-grace",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds a canceled job gets to commit and stop before it is killed",
    )
    p.add_argument(
        "--output-root",
        action="append",
        default=[],
        metavar="ROOT",
        help="allow outputs only under ROOT (a directory, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix); repeatable",
    )
    p.add_argument(
        "--input-root",
        action="append",
        default=[],
        metavar="ROOT",
        help="let jobs read sources (parquet, jsonl, files) under ROOT; repeatable (none: no sources)",
    )
    p.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help='Ray cluster for jobs of executor kind "ray" (e.g. ray://head:10001 or auto); without it they are refused',
    )
    p.add_argument(
        "--metrics-public",
        action="store_true",
        help="serve GET /metrics (Prometheus) without the API token (default: the token is required)",
    )
    p.add_argument("--max-inputs", type=int, default=100_000, help="most inputs one job may list")
    p.add_argument(
        "--max-queued", type=int, default=1000, metavar="N", help="most jobs waiting to run; more are answered 429"
    )
    p.add_argument("--max-body-bytes", type=int, default=16 * 1024 * 1024, help="largest request body")
    p.set_defaults(func=_serve)
    add_jobs_command(subparsers)


def _serve(args) -> int:
    from .server import serve

    for name in ("max_running", "max_inputs", "max_body_bytes", "max_queued"):
        if getattr(args, name) < 1:
            print(f"shardwright serve: error: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    if args.max_queued > 100_000:
        print("shardwright serve: error: --max-queued must be at most 100000", file=sys.stderr)
        return 2
    return serve(
        args.pipelines,
        args.db,
        args.host,
        args.port,
        max_running=args.max_running,
        auto_retries=max(0, args.auto_retries),
        output_roots=[os.path.expanduser(r) for r in args.output_root],
        input_roots=[os.path.expanduser(r) for r in args.input_root],
        max_inputs=args.max_inputs,
        max_queued=args.max_queued,
        max_body_bytes=args.max_body_bytes,
        cancel_grace=args.cancel_grace,
        retry_backoff=args.retry_backoff,
        ray_address=args.ray_address,
        metrics_public=args.metrics_public,
    )
