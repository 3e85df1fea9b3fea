"""The ``shardwright`` command: ``status``, ``merge`` and ``slurm``.

Every command exits 0 on success, 1 when it ran but the answer is "not yet" (merge with
unfinished shards), and 2 with one ``shardwright: error: ...`` line for a mistake or a
failure (never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import IncompleteRunError, ShardwrightError, UsageError
from ..protocol.layout import FAILED_PREFIX
from ..protocol.status import RunStatus, merge, read_status
from ..storage import open_storage
from .slurm import add_slurm_command


def parse_storage_options(text: str | None) -> dict | None:
    """``--storage-options`` JSON as a dict; a mistake is one clear UsageError."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--storage-options is not valid JSON ({exc.args[0]}); pass a JSON object, e.g. "
                         "'{\"endpoint_url\": \"http://127.0.0.1:8333\"}'") from None
    if not isinstance(value, dict):
        raise UsageError(f"--storage-options must be a JSON object of boto3 client arguments; got {type(value).__name__}")
    return value


def status_report(output_dir: str, storage_options: dict | None = None) -> dict:
    """What is done, in progress, pending and failed, as a JSON-ready dict (``status --json``).

    Args:
        output_dir: a local directory or ``s3://bucket/prefix``.
        storage_options: boto3 client arguments for S3.

    Returns:
        :meth:`shardwright.protocol.status.RunStatus.to_json`.

    Raises:
        DatasetNotFoundError: the directory does not exist.
        StorageError: the storage cannot be read.
        CorruptStateError: the run state is damaged.
    """
    return read_status(open_storage(output_dir, storage_options)).to_json()


def print_status(report: RunStatus) -> None:
    """The human-readable form of a status report."""
    print(f"output:   {report.output_dir}")
    if report.state in ("complete", "empty"):
        print(f"state:    {report.state}" + (" (index.json published)" if report.published else " (nothing written yet)"))
        last = report.last_run
        if last:
            print(f"last run: {last.get('items_added', 0):,} items added in {last.get('chunks_added', 0):,} chunks, "
                  f"{last.get('seconds', 0):.1f} s; dataset has {last.get('items', 0):,} items in "
                  f"{last.get('chunks', 0):,} chunks")
    else:
        total = report.inputs
        pct = 100.0 * report.inputs_done / total if total else 100.0
        print(f"state:    {report.state} (run {(report.run_id or '')[:8]}, {report.mode}, fn {report.fn})")
        print(f"inputs:   {report.inputs_done:,} of {total:,} done ({pct:.1f}%), "
              f"{report.items_committed:,} items in {report.chunks_committed:,} chunks committed")
        print(f"shards:   {len(report.shards_done)} done, {len(report.shards_in_progress)} in progress, "
              f"{len(report.shards_pending)} pending (of {report.shards})")
        for lease in report.leases:
            print(f"lease:    {lease.name} held by {lease.host} pid {lease.pid}, heartbeat "
                  f"{lease.heartbeat_age_s} s ago ({'live' if lease.live else 'stale'})")
        if report.state == "interrupted":
            print("resume:   rerun the same optimize() call")
    if report.failed_records:
        print(f"failed:   {report.failed_records} failure record(s) under {report.output_dir}/{FAILED_PREFIX}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shardwright", description="Inspect and finish shardwright outputs.")
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="what is done, in progress, pending and failed")
    status.add_argument("output_dir")
    status.add_argument("--json", action="store_true", help="print the report as JSON")
    status.add_argument("--storage-options", help="JSON dict of boto3 client arguments for s3:// outputs")
    merge_cmd = sub.add_parser("merge", help="publish index.json once every shard is done")
    merge_cmd.add_argument("output_dir")
    merge_cmd.add_argument("--storage-options", help="JSON dict of boto3 client arguments for s3:// outputs")
    add_slurm_command(sub)
    from ..service.commands import add_service_commands  # serve, jobs (running them needs the service extra)

    add_service_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``shardwright`` command with ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "status":
            report = read_status(open_storage(args.output_dir, parse_storage_options(args.storage_options)))
            if args.json:
                print(json.dumps(report.to_json(), indent=1, default=str))
            else:
                print_status(report)
            return 0
        if args.command == "merge":
            try:
                merge(open_storage(args.output_dir, parse_storage_options(args.storage_options)))
            except IncompleteRunError as exc:
                print(str(exc), file=sys.stderr)
                return 1
            print(f"merged: {args.output_dir}/index.json is published")
            return 0
        return int(args.func(args))
    except ShardwrightError as exc:
        print(f"shardwright: error: {exc}", file=sys.stderr)
        return 2
